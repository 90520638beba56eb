"""Installing the hook, calling the callback once per new code object, cache hits, skip marks,
and which frames the callback sees (not its own, nested and recursive ones).

See conftest.py and frame_callbacks.py in this folder."""

from __future__ import annotations

import pytest
from frame_callbacks import Compiler, capturing, no_guards

import torch_plugin._C as C

# --- installing the hook ------------------------------------------------------------


def test_hook_installed_while_a_callback_is_set():
    assert not C.is_hook_installed()
    cb = Compiler()
    assert C.set_eval_frame_callback(cb) is None
    assert C.is_hook_installed()
    assert C.get_eval_frame_callback() is cb
    other = Compiler()
    assert C.set_eval_frame_callback(other) is cb
    assert C.is_hook_installed()
    assert C.set_eval_frame_callback(None) is other
    assert not C.is_hook_installed()
    assert C.get_eval_frame_callback() is None


def test_callback_must_be_callable():
    with pytest.raises(TypeError, match="callable or None"):
        C.set_eval_frame_callback(42)
    assert not C.is_hook_installed()


def test_code_nargs_counts_every_argument_slot():
    def f(a, b, /, c, *args, d, e=1, **kwargs):
        pass

    def g():
        pass

    assert C.code_nargs(f.__code__) == 7
    assert C.code_nargs(g.__code__) == 0
    with pytest.raises(TypeError):
        C.code_nargs(f)


# --- callback, cache hits, skip marks ----------------------------------------------


def test_callback_called_once_per_new_code_object_then_cache_hits():
    def original(x, y):
        return ("original", x, y)

    def transformed(x, y):
        return ("transformed", x, y)

    cb = Compiler().add(original, transformed)
    with capturing(cb):
        first = original(1, 2)
        second = original(3, y=4)
    assert first == ("transformed", 1, 2)
    assert second == ("transformed", 3, 4)
    assert cb.calls == [original.__code__]
    entries = C.cache_entries(original.__code__)
    assert len(entries) == 1 and entries[0][0] is transformed.__code__
    assert isinstance(entries[0][1], C.RootGuardManager)
    # Capture off: the original runs again.
    assert original(1, 2) == ("original", 1, 2)


def test_frame_info_describes_the_frame():
    k = 7

    def original(a, b=2, *args, c, d=4, **kwargs):
        return a + b + c + d + k

    def transformed(a, b, c, d, args, kwargs):
        return ("transformed", a, b, c, d, args, kwargs, k)

    cb = Compiler().add(original, transformed)
    with capturing(cb):
        result = original(1, 5, 6, c=3, z=9)
    assert result == ("transformed", 1, 5, 3, 4, (6,), {"z": 9}, 7)
    (frame,) = cb.frames
    assert frame.f_code is original.__code__
    assert frame.f_func is original
    assert frame.f_globals is globals()
    assert frame.f_builtins["len"] is len
    assert frame.closure is original.__closure__
    assert frame.arg_values == [1, 5, 3, 4, (6,), {"z": 9}]
    assert frame.f_locals == {
        "a": 1,
        "b": 5,
        "c": 3,
        "d": 4,
        "args": (6,),
        "kwargs": {"z": 9},
        "k": 7,
    }
    assert len(frame.arg_values) == C.code_nargs(original.__code__)


def test_none_marks_the_code_object_skipped():
    calls = []

    def skip_everything(frame):
        calls.append(frame.f_code)

    def plain(x):
        return x + 1

    C.reset_code(plain.__code__)
    with capturing(skip_everything):
        assert plain(1) == 2
        assert plain(2) == 3
    assert calls.count(plain.__code__) == 1
    assert C.is_code_skipped(plain.__code__)
    assert C.cache_entries(plain.__code__) == []
    C.reset_code(plain.__code__)
    assert not C.is_code_skipped(plain.__code__)


def test_skip_code_and_reset_code():
    def original(x):
        return "original"

    def transformed(x):
        return "transformed"

    cb = Compiler().add(original, transformed)
    C.skip_code(original.__code__)
    assert C.is_code_skipped(original.__code__)
    with capturing(cb):
        assert original(1) == "original"
    assert cb.calls == []
    C.reset_code(original.__code__)
    with capturing(cb):
        assert original(1) == "transformed"
    assert cb.calls == [original.__code__]
    C.reset_code(original.__code__)
    assert C.cache_entries(original.__code__) == []
    with pytest.raises(TypeError, match="code object"):
        C.skip_code(original)


def test_entries_are_tied_to_the_callback_that_made_them():
    def original(x):
        return "original"

    def transformed_a(x):
        return "a"

    def transformed_b(x):
        return "b"

    cb_a = Compiler().add(original, transformed_a)
    cb_b = Compiler()
    cb_b.table[original.__code__] = (transformed_b.__code__, no_guards)
    with capturing(cb_a):
        assert original(1) == "a"
    with capturing(cb_b):
        assert original(1) == "b"
    with capturing(cb_a):
        assert original(1) == "a"
    assert cb_a.calls == [original.__code__]
    assert cb_b.calls == [original.__code__]
    assert len(C.cache_entries(original.__code__)) == 2


def test_callback_runs_with_the_hook_busy():
    seen = []

    def helper():
        return 1

    def callback(frame):
        seen.append(frame.f_code.co_name)
        helper()  # a frame started by the callback is not captured

    def outer():
        return inner() + 1

    def inner():
        return 1

    for f in (helper, outer, inner):
        C.reset_code(f.__code__)
    with capturing(callback):
        assert outer() == 2
    assert "helper" not in seen
    assert seen.count("outer") == 1 and seen.count("inner") == 1


def test_nested_frames_inside_transformed_code_are_captured():
    def inner(x):
        return ("inner original", x)

    def inner_t(x):
        return ("inner transformed", x)

    def outer(x):
        return ("outer original", inner(x))

    def outer_t(x):
        return ("outer transformed", inner(x))

    cb = Compiler().add(outer, outer_t).add(inner, inner_t)
    with capturing(cb):
        assert outer(1) == ("outer transformed", ("inner transformed", 1))
    assert cb.calls == [outer.__code__, inner.__code__]


def test_recursion_through_transformed_code():
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1)

    def fact_t(n):
        return 1 if n <= 1 else n * fact(n - 1)

    cb = Compiler(keep_frames=False).add(fact, fact_t)
    with capturing(cb):
        assert fact(200) == fact_t(200)
    assert cb.calls == [fact.__code__]
