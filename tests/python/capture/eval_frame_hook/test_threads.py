"""Threads: a callback per thread, the hook installed while any thread has one, threads that
wait for another's compile, an optimized function called from many threads.

See conftest.py and frame_callbacks.py in this folder."""

from __future__ import annotations

import gc
import threading
import weakref
from typing import Any

import torch
from frame_callbacks import Compiler, capturing

import torch_plugin._C as C


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


# --- concurrency (issue 4) -----------------------------------------------------------


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
