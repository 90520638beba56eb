"""Exceptions from transformed code and from the callback, and callback results of the wrong
shape: the type, message and traceback a user sees.

See conftest.py and frame_callbacks.py in this folder."""

from __future__ import annotations

import traceback

import pytest
from frame_callbacks import Compiler, capturing

import torch_plugin._C as C


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
