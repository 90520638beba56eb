"""Interpreter exit while a frame is being captured or compiled on another thread.

CPython (3.11-3.13) ends a thread that tries to take the GIL after finalization has begun
with ``pthread_exit``; in a thread inside C++ code (AOTAutograd's torch calls, the kernel
compilers) the forced unwind crosses ``noexcept`` frames and calls ``std::terminate``: the
process aborts at exit ("terminate called without an active exception"). ``atexit``
callbacks run before finalization begins, so :func:`_wait_for_conversions` (registered on
import) waits there until every conversion in flight has finished, at most
:data:`EXIT_WAIT_S` seconds; the program then exits normally.

Key parts: :func:`converting` (the context manager the frame converter runs each conversion
in), :func:`in_flight`, :data:`EXIT_WAIT_S`.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time

EXIT_WAIT_S = 300.0
"""Longest wait at exit for conversions in flight (a cold compile of a large model on few
cores takes about a minute)."""

_lock = threading.Lock()
_count = 0


@contextlib.contextmanager
def converting():
    """Marks one frame conversion (capture and backend compile) as in flight."""
    global _count
    with _lock:
        _count += 1
    try:
        yield
    finally:
        with _lock:
            _count -= 1


def in_flight() -> int:
    """How many conversions are in flight now, over all threads."""
    return _count


def _wait_for_conversions() -> None:
    deadline = time.monotonic() + EXIT_WAIT_S
    while _count and time.monotonic() < deadline:
        time.sleep(0.01)  # releases the GIL: the converting threads go on


atexit.register(_wait_for_conversions)
