"""Tests of the C++ PEP 523 hook in ``torch_plugin._C`` (csrc/capture/eval_frame.cpp).

Only ``torch_plugin._C`` is used. "Transformed code" is the code of a hand-written
function whose signature is the original's flattened argument slots (positional,
keyword-only, ``*args``, ``**kwargs``, in slot order) and whose free variables match.

Key pieces: ``Compiler`` (a callback mapping original code objects to transformed ones)
and ``capturing`` (sets a callback for the duration of a ``with`` block).
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
import traceback
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch

import torch_plugin._C as C

GuardFactory = Callable[[Any], "C.RootGuardManager"]


def no_guards(frame: Any) -> C.RootGuardManager:
    return C.RootGuardManager()


class Compiler:
    """Eval-frame callback: returns (transformed code, guard) for registered code objects
    and None (skip) for everything else."""

    def __init__(self, keep_frames: bool = True) -> None:
        self.table: dict[Any, tuple[Any, GuardFactory]] = {}
        self.calls: list[Any] = []  # code objects called back for, in order
        self.frames: list[Any] = []
        self.keep_frames = keep_frames

    def add(self, original: Callable, transformed: Callable, guard: GuardFactory = no_guards):
        self.table[original.__code__] = (transformed.__code__, guard)
        C.reset_code(original.__code__)
        return self

    def __call__(self, frame: Any) -> tuple | None:
        entry = self.table.get(frame.f_code)
        if entry is None:
            return None
        self.calls.append(frame.f_code)
        if self.keep_frames:
            self.frames.append(frame)
        code, make_guard = entry
        return code, make_guard(frame)


@contextlib.contextmanager
def capturing(callback: Callable | None):
    previous = C.set_eval_frame_callback(callback)
    try:
        yield callback
    finally:
        C.set_eval_frame_callback(previous)


@pytest.fixture(autouse=True)
def no_callback_left():
    assert C.get_eval_frame_callback() is None
    yield
    C.set_eval_frame_callback(None)
    assert not C.is_hook_installed()


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


# --- arguments, closures, cells, globals --------------------------------------------


def test_varargs_kwargs_kwonly_and_defaults():
    def original(a, /, b, c=3, *rest, d, e=5, **extra):
        raise AssertionError("not run")

    def transformed(a, /, b, c, d, e, rest, extra):  # positional-only is allowed
        return (a, b, c, d, e, rest, extra)

    cb = Compiler().add(original, transformed)
    with capturing(cb):
        assert original(1, 2, d=4) == (1, 2, 3, 4, 5, (), {})
        assert original(1, 2, 30, 40, 50, d=4, e=6, f=7) == (1, 2, 30, 4, 6, (40, 50), {"f": 7})
        assert original(1, b=2, d=4, g=8) == (1, 2, 3, 4, 5, (), {"g": 8})
    assert cb.calls == [original.__code__]


def make_closure_pair(k):
    def original(x):
        return ("original", x, k)

    def transformed(x):
        return ("transformed", x, k)

    return original, transformed


def test_closures_each_run_with_their_own_cells():
    orig_1, trans_1 = make_closure_pair(10)
    orig_2, _ = make_closure_pair(20)
    assert orig_1.__code__ is orig_2.__code__
    cb = Compiler().add(orig_1, trans_1)
    with capturing(cb):
        assert orig_1(1) == ("transformed", 1, 10)
        assert orig_2(1) == ("transformed", 1, 20)  # same entry, other closure
        assert orig_1(2) == ("transformed", 2, 10)
    assert cb.calls == [orig_1.__code__]


def test_cell_arguments_and_cell_contents_changes():
    def original(a, b):
        def get():
            return a + b

        return ("original", get())

    def transformed(a, b):
        def get():
            return a + b

        a = a * 10
        return ("transformed", get())

    counter = 0

    def original_reads_free(x):
        return ("original", x + counter)

    def transformed_reads_free(x):
        return ("transformed", x + counter)

    cb = Compiler().add(original, transformed).add(original_reads_free, transformed_reads_free)
    with capturing(cb):
        assert original(1, 2) == ("transformed", 12)
        assert original_reads_free(1) == ("transformed", 1)
        counter = 5
        assert original_reads_free(1) == ("transformed", 6)


def test_transformed_code_runs_with_the_frames_globals():
    namespace = {"K": 5}
    exec("def original(x):\n    return ('original', x, K)\n", namespace)  # noqa: S102
    original = namespace["original"]

    def transformed(x):
        return ("transformed", x, K)  # noqa: F821 -- resolved in the frame's globals

    cb = Compiler().add(original, transformed)
    with capturing(cb):
        assert original(1) == ("transformed", 1, 5)
        namespace["K"] = 6
        assert original(1) == ("transformed", 1, 6)
    fn = C.cache_entries(original.__code__)
    assert len(fn) == 1


def test_methods_and_name_of_the_running_function():
    class Model:
        def forward(self, x):
            return ("original", x)

    def forward_t(self, x):
        return ("transformed", x, sys._getframe().f_code.co_name, type(self).__name__)

    cb = Compiler().add(Model.forward, forward_t)
    with capturing(cb):
        assert Model().forward(1) == ("transformed", 1, "forward_t", "Model")


# --- exceptions ----------------------------------------------------------------------


def test_exception_from_transformed_code_keeps_type_and_traceback():
    def original(x):
        return x

    def transformed(x):
        raise KeyError(f"from transformed {x}")

    cb = Compiler().add(original, transformed)
    with capturing(cb), pytest.raises(KeyError, match="from transformed 1") as info:
        original(1)
    names = [entry.name for entry in traceback.extract_tb(info.value.__traceback__)]
    assert names == ["test_exception_from_transformed_code_keeps_type_and_traceback", "transformed"]


def test_exception_from_callback_propagates_and_frame_does_not_run():
    ran = []

    def original(x):
        ran.append(x)

    class Boom(Exception):
        pass

    def callback(frame):
        if frame.f_code is original.__code__:
            raise Boom("from callback")

    C.reset_code(original.__code__)
    with capturing(callback), pytest.raises(Boom, match="from callback") as info:
        original(1)
    assert ran == []
    names = [entry.name for entry in traceback.extract_tb(info.value.__traceback__)]
    assert names == ["test_exception_from_callback_propagates_and_frame_does_not_run", "callback"]
    assert C.cache_entries(original.__code__) == []
    assert not C.is_code_skipped(original.__code__)


@pytest.mark.parametrize(
    "result, message",
    [
        (42, "must return None or a"),
        ((1, 2, 3), "must return None or a"),
        (("not code", None), "not a code object"),
        ((None, "guard"), "not a code object"),
        ("code-with-bad-guard", "not a RootGuardManager"),
        ("wrong-signature", "exactly 1 plain positional parameters"),
        ("generator", "plain function's code"),
        ("wrong-freevars", "free variables"),
    ],
)
def test_bad_callback_results_raise_type_error(result, message):
    ran = []

    def original(x):
        ran.append(x)

    def two_args(x, y):
        pass

    def gen(x):
        yield x

    z = 1

    def with_freevar(x):
        return z

    choices = {
        "code-with-bad-guard": (original.__code__, object()),
        "wrong-signature": (two_args.__code__, C.RootGuardManager()),
        "generator": (gen.__code__, C.RootGuardManager()),
        "wrong-freevars": (with_freevar.__code__, C.RootGuardManager()),
    }

    def callback(frame):
        if frame.f_code is original.__code__:
            return choices.get(result, result) if isinstance(result, str) else result
        return None

    C.reset_code(original.__code__)
    with capturing(callback), pytest.raises(TypeError, match=message):
        original(1)
    assert ran == []
    assert C.cache_entries(original.__code__) == []


# --- frame cleanup --------------------------------------------------------------------


class Payload:
    pass


def call_and_swallow(fn, *args):
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 -- the test checks references, not the error
        return None


def test_replaced_frames_release_their_arguments():
    def original(obj):
        return "original"

    def ok(obj):
        return "transformed"

    def raising(obj):
        raise ValueError("transformed raised")

    def callback_raising(frame):
        if frame.f_code is original.__code__:
            raise ValueError("callback raised")

    for transformed in (ok, raising):
        cb = Compiler(keep_frames=False).add(original, transformed)
        payload = Payload()
        ref = weakref.ref(payload)
        before = sys.getrefcount(payload)
        with capturing(cb):
            for _ in range(1000):
                call_and_swallow(original, payload)
        assert sys.getrefcount(payload) == before
        del payload
        assert ref() is None
    C.reset_code(original.__code__)
    payload = Payload()
    before = sys.getrefcount(payload)
    with capturing(callback_raising):
        for _ in range(100):
            call_and_swallow(original, payload)
    assert sys.getrefcount(payload) == before


def test_many_calls_do_not_grow_the_frame_stack():
    def original(x):
        return x

    def transformed(x):
        return x + 1

    def deep(n):
        return 0 if n == 0 else 1 + deep(n - 1)

    cb = Compiler(keep_frames=False).add(original, transformed)
    with capturing(cb):
        total = 0
        for i in range(20000):
            total += original(i)
        assert deep(500) == 500
    assert total == sum(range(20000)) + 20000


# --- what runs unmodified -------------------------------------------------------------


def test_generators_and_coroutines_are_left_alone():
    calls = []

    def callback(frame):
        calls.append(frame.f_code.co_name)

    def gen(n):
        yield from range(n)

    async def coro():
        return 5

    def consume():
        return list(gen(3))

    for f in (gen, coro, consume):
        C.reset_code(f.__code__)
    with capturing(callback):
        assert consume() == [0, 1, 2]
        c = coro()
        try:
            c.send(None)
        except StopIteration as stop:
            assert stop.value == 5
        g = gen(2)
        next(g)
        with pytest.raises(ValueError):
            g.throw(ValueError("thrown"))
    assert "gen" not in calls and "coro" not in calls
    assert "consume" in calls


def test_module_and_class_body_frames_are_left_alone():
    calls = []

    def callback(frame):
        calls.append(frame.f_code.co_name)

    with capturing(callback):
        exec("X = 1\nclass K:\n    y = 2\n", {})  # noqa: S102
    assert "<module>" not in calls and "K" not in calls


def test_disable_wrapper():
    def original(x):
        return "original"

    def transformed(x):
        return "transformed"

    cb = Compiler().add(original, transformed)

    def run(x, *, scale=1):
        return original(x), scale

    disabled = C.disable_wrapper(run)
    assert disabled.__wrapped__ is run
    with capturing(cb):
        assert disabled(1, scale=2) == ("original", 2)
        assert original(1) == "transformed"  # the hook is active again
        with pytest.raises(ZeroDivisionError):
            C.disable_wrapper(lambda: 1 / 0)()
        assert original(1) == "transformed"  # ... also after an exception
    assert disabled(1) == ("original", 1)  # works without a callback too

    class Holder:
        method = C.disable_wrapper(lambda self, x: (type(self).__name__, x))

    assert Holder().method(3) == ("Holder", 3)
    assert Holder.method(Holder(), 4) == ("Holder", 4)
    with pytest.raises(TypeError):
        C.disable_wrapper(3)


def test_tracing_sees_only_the_transformed_frame():
    def original(x):
        return ("original", x)

    def transformed(x):
        return ("transformed", x)

    events = []

    def tracer(frame, event, arg):
        if frame.f_code.co_name in ("original", "transformed"):
            events.append((event, frame.f_code.co_name))
        return tracer

    cb = Compiler().add(original, transformed)
    with capturing(cb):
        sys.settrace(tracer)
        try:
            assert original(1) == ("transformed", 1)
            assert original(2) == ("transformed", 2)
        finally:
            sys.settrace(None)
    assert ("call", "original") not in events
    assert ("exception", "original") not in events
    assert events.count(("call", "transformed")) == 2
    assert events.count(("return", "transformed")) == 2


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_monitoring_sees_no_events_for_replaced_frames():
    mon = sys.monitoring
    tool = 4
    seen = []

    def original(x):
        return ("original", x)

    def transformed(x):
        return ("transformed", x)

    def record(name):
        def handler(code, *args):
            if code.co_name in ("original", "transformed"):
                seen.append((name, code.co_name))

        return handler

    events = {
        "PY_START": mon.events.PY_START,
        "PY_THROW": mon.events.PY_THROW,
        "RAISE": mon.events.RAISE,
        "PY_UNWIND": mon.events.PY_UNWIND,
        "PY_RETURN": mon.events.PY_RETURN,
    }
    cb = Compiler().add(original, transformed)
    mon.use_tool_id(tool, "torch_plugin test")
    try:
        for name, event in events.items():
            mon.register_callback(tool, event, record(name))
        mon.set_events(tool, sum(events.values()))
        with capturing(cb):
            assert original(1) == ("transformed", 1)
    finally:
        mon.set_events(tool, 0)
        for event in events.values():
            mon.register_callback(tool, event, None)
        mon.free_tool_id(tool)
    assert seen == [("PY_START", "transformed"), ("PY_RETURN", "transformed")]


# --- threads -------------------------------------------------------------------------


def shared_target(x):
    return ("original", x)


def shared_target_t(x):
    return ("transformed", x, threading.current_thread().name)


def test_threads_each_have_their_own_callback():
    C.reset_code(shared_target.__code__)
    barrier = threading.Barrier(2)
    results: dict[str, Any] = {}
    callbacks = {name: Compiler().add(shared_target, shared_target_t) for name in ("t1", "t2")}

    def work(name):
        with capturing(callbacks[name]):
            barrier.wait()
            results[name] = shared_target(1)
            barrier.wait()
            results[name + " installed"] = C.is_hook_installed()
        barrier.wait()

    threads = [threading.Thread(target=work, args=(n,), name=n) for n in ("t1", "t2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["t1"] == ("transformed", 1, "t1")
    assert results["t2"] == ("transformed", 1, "t2")
    assert results["t1 installed"] and results["t2 installed"]
    assert callbacks["t1"].calls == [shared_target.__code__]
    assert callbacks["t2"].calls == [shared_target.__code__]
    assert len(C.cache_entries(shared_target.__code__)) == 2
    # This thread has no callback: the function runs unmodified here.
    assert C.get_eval_frame_callback() is None
    assert shared_target(1) == ("original", 1)
    assert not C.is_hook_installed()


def test_hook_stays_while_another_thread_has_a_callback():
    started, stop = threading.Event(), threading.Event()

    def work():
        with capturing(Compiler()):
            started.set()
            stop.wait()

    thread = threading.Thread(target=work)
    thread.start()
    started.wait()
    try:
        assert C.is_hook_installed()
        assert C.get_eval_frame_callback() is None
        C.set_eval_frame_callback(Compiler())
        C.set_eval_frame_callback(None)
        assert C.is_hook_installed()  # the other thread still has one
    finally:
        stop.set()
        thread.join()
    assert not C.is_hook_installed()


def test_thread_exiting_with_a_callback_releases_it():
    cb = Compiler()
    ref = weakref.ref(cb)
    thread = threading.Thread(target=C.set_eval_frame_callback, args=(cb,))
    thread.start()
    thread.join()
    del cb
    gc.collect()
    assert not C.is_hook_installed()
    assert ref() is None


# --- concurrency and raising guards (issue 4) -----------------------------------------


def test_threads_wait_for_a_compile_and_reuse_its_entry():
    """Two threads miss on the same frame while one compiles: the second waits (GIL
    released) and then finds the first one's entry instead of compiling again."""
    import time

    def original(x):
        return ("original", x)

    def transformed(x):
        return ("transformed", x)

    started = threading.Event()

    class SlowCompiler(Compiler):
        def __call__(self, frame):
            started.set()
            time.sleep(0.2)  # the other thread misses meanwhile
            return super().__call__(frame)

    cb = SlowCompiler(keep_frames=False).add(original, transformed)
    results: list = []

    def worker(i):
        with capturing(cb):
            if i == 1:
                started.wait()
            results.append(original(i))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [("transformed", 0), ("transformed", 1)]
    assert len(cb.calls) == 1
    assert len(C.cache_entries(original.__code__)) == 1


def test_optimized_function_in_many_threads_is_correct():
    import torch_plugin

    def g(x):
        return torch.sin(x) * 2 + x

    torch_plugin.reset()
    # Static shapes: one entry per size (dynamic shapes would share one for sizes >= 2).
    opt = torch_plugin.optimize("eager", dynamic=False)(g)
    errors: list = []

    def worker(seed):
        try:
            gen = torch.Generator().manual_seed(seed)
            for i in range(30):
                x = torch.randn(1 + (seed + i) % 3, generator=gen)
                torch.testing.assert_close(opt(x), g(x))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        assert len(C.cache_entries(g.__code__)) == 3  # one per size, none twice
    finally:
        torch_plugin.reset()


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
