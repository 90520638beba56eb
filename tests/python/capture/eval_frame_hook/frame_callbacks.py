"""The test double of a compiler for the PEP 523 hook tests: only ``torch_plugin._C`` is used.

"Transformed code" is the code of a hand-written function whose signature is the original's
flattened argument slots (positional, keyword-only, ``*args``, ``**kwargs``, in slot order) and
whose free variables match. :class:`Compiler` is a callback mapping original code objects to
transformed ones; :func:`capturing` sets a callback for the duration of a ``with`` block.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

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
