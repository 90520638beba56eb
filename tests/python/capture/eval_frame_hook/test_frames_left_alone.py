"""Frames the hook runs unmodified: generators, coroutines, module and class bodies, and calls
under ``disable_wrapper``.

See conftest.py and frame_callbacks.py in this folder."""

from __future__ import annotations

import pytest
from frame_callbacks import Compiler, capturing

import torch_plugin._C as C


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
