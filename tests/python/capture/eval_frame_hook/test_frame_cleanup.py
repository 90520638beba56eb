"""Replaced frames release their arguments, and many calls do not grow the frame stack.

See conftest.py and frame_callbacks.py in this folder."""

from __future__ import annotations

import sys
import weakref

from frame_callbacks import Compiler, capturing

import torch_plugin._C as C


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
