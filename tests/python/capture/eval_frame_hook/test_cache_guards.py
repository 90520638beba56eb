"""Guards of cache entries on the hook path: a failing guard calls back and adds an entry; a
guard that raises (a property, ``__eq__``) fails instead of raising.

See conftest.py and frame_callbacks.py in this folder."""

from __future__ import annotations

import sys
from typing import Any

import torch
from frame_callbacks import Compiler, GuardFactory, capturing

import torch_plugin._C as C


def type_guard(slot_types: dict[int, type]) -> GuardFactory:
    def make(frame: Any) -> C.RootGuardManager:
        root = C.RootGuardManager()
        for slot, t in slot_types.items():
            root.local(slot, f"arg{slot}").add_type_match(t, f"L['arg{slot}'] type")
        return root

    return make


def test_guard_failure_calls_back_and_adds_an_entry_most_recent_first():
    def original(x):
        return "original"

    def transformed(x):
        return ("transformed", type(x).__name__)

    def by_type(frame):
        return type_guard({0: type(frame.arg_values[0])})(frame)

    cb = Compiler().add(original, transformed, by_type)
    with capturing(cb):
        assert original(1) == ("transformed", "int")
        assert original(2.0) == ("transformed", "float")
        assert original(3) == ("transformed", "int")  # hit on the older entry
        assert original(4.0) == ("transformed", "float")
    assert cb.calls == [original.__code__] * 2
    entries = C.cache_entries(original.__code__)
    assert len(entries) == 2
    # Most recently used first: the float entry ran last.
    assert entries[0][1].check([1.0], {}, {}, None)
    assert entries[1][1].check([1], {}, {}, None)


SCALE = 1  # a global read by transformed code in the test below


def test_guards_on_globals_and_tensors_on_the_hook_path():
    def original(t):
        return "original"

    def transformed(t):
        return ("transformed", tuple(t.shape), SCALE)

    def guard(frame):
        root = C.RootGuardManager()
        root.local(0, "t").add_tensor_match(frame.arg_values[0], "L['t'] tensor")
        root.global_("SCALE").add_equals_match(frame.f_globals["SCALE"], "G['SCALE'] value")
        root.add_global_state_match()
        return root

    cb = Compiler().add(original, transformed, guard)
    global SCALE
    saved, SCALE = SCALE, 2
    try:
        with capturing(cb):
            assert original(torch.zeros(2, 3)) == ("transformed", (2, 3), 2)
            assert original(torch.ones(2, 3)) == ("transformed", (2, 3), 2)
            assert len(cb.calls) == 1
            original(torch.zeros(3, 3))  # size changed
            assert len(cb.calls) == 2
            SCALE = 3  # global changed
            assert original(torch.zeros(2, 3)) == ("transformed", (2, 3), 3)
            assert len(cb.calls) == 3
            with torch.no_grad():  # grad mode changed
                original(torch.zeros(2, 3))
            assert len(cb.calls) == 4
            original(torch.zeros(2, 3, dtype=torch.float64))  # dtype changed
            assert len(cb.calls) == 5
    finally:
        SCALE = saved


def test_guard_that_raises_fails_instead_of_raising():
    class Flaky:
        fail = False

        @property
        def value(self):
            if Flaky.fail:
                raise RuntimeError("property raised")
            return 1

    def original(obj):
        return "original"

    def transformed(obj):
        return "transformed"

    def guard(frame):
        root = C.RootGuardManager()
        root.local(0, "obj").attr("value").add_equals_match(1, "L['obj'].value == 1")
        return root

    cb = Compiler().add(original, transformed, guard)
    obj = Flaky()
    with capturing(cb):
        assert original(obj) == "transformed"
        Flaky.fail = True
        assert original(obj) == "transformed"  # guard failed -> callback again
    assert len(cb.calls) == 2
    assert "property raised" in C.cache_entries(original.__code__)[1][1].failure_reason(
        [obj], {}, {}, None
    )


# --- raising guards (issue 4) ---------------------------------------------------------


def test_raising_eq_fails_the_guard_not_the_call():
    class Key:
        def __init__(self, tag):
            self.tag = tag

        def __eq__(self, other):
            if self is other:
                return True
            raise ValueError("no comparing keys")

        __hash__ = object.__hash__

    def original(k):
        return "original"

    def transformed(k):
        return "transformed"

    first = Key(1)

    def guard(frame):
        root = C.RootGuardManager()
        root.local(0, "L['k']").add_type_match(Key, "type(L['k']) is Key")
        root.local(0, "L['k']").add_equals_match(frame.arg_values[0], "L['k'] == <Key>")
        return root

    cb = Compiler().add(original, transformed, guard)
    with capturing(cb):
        assert original(first) == "transformed"
        assert original(Key(2)) == "transformed"  # __eq__ raised: guard failed, recompiled
        assert original(first) == "transformed"
    assert len(cb.calls) == 2
    older = C.cache_entries(original.__code__)[1][1]
    assert "no comparing keys" in older.failure_reason([Key(3)], {}, {}, None)
    assert sys.exc_info() == (None, None, None)
