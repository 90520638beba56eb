"""``torch_plugin.run``: use compiled entries only, never compile (``_C.RUN_ONLY``).

A frame whose guards pass runs its compiled code (entries made by any backend); any other
frame runs unmodified without calling the translator. Answers are compared with eager on
fresh random inputs.
"""

from __future__ import annotations

import pytest
import torch

import torch_plugin
from torch_plugin import _C


@pytest.fixture(autouse=True)
def fresh():
    torch_plugin.reset()
    yield
    torch_plugin.reset()
    assert _C.get_eval_frame_callback() is None


class CountingBackend:
    """An eager backend that counts how often compiled graphs run."""

    def __init__(self) -> None:
        self.compiles = 0
        self.runs = 0

    def __call__(self, gm, example_inputs):
        self.compiles += 1

        def compiled(*args):
            self.runs += 1
            return gm.forward(*args)

        return compiled


def f(x, y):
    return torch.relu(x) * y + 1


def test_run_uses_entries_and_never_compiles():
    backend = CountingBackend()
    torch_plugin.optimize(backend)(f)(torch.randn(4), torch.randn(4))
    assert backend.compiles == 1 and backend.runs == 1
    captured = torch_plugin.stats.frames_captured

    serve = torch_plugin.run(f)
    x, y = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(serve(x, y), f(x, y))
    assert backend.runs == 2  # hit: the compiled graph ran

    x, y = torch.randn(7), torch.randn(7)  # miss: runs eagerly, nothing is compiled
    torch.testing.assert_close(serve(x, y), f(x, y))
    assert backend.compiles == 1 and backend.runs == 2
    assert torch_plugin.stats.frames_captured == captured
    assert _C.get_eval_frame_callback() is None


def test_run_without_entries_is_eager():
    def g(x):
        return x.sin() + 2

    x = torch.randn(3)
    torch.testing.assert_close(torch_plugin.run(g)(x), g(x))
    assert torch_plugin.stats.frames_captured == 0
    assert _C.cache_entries(g.__code__) == []
    assert not _C.is_code_skipped(g.__code__)


def test_run_as_context_and_on_modules():
    backend = CountingBackend()
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU()).eval()
    torch_plugin.optimize(backend)(net)(torch.randn(2, 3))
    served = torch_plugin.run(net)
    x = torch.randn(2, 3)
    torch.testing.assert_close(served(x), net(x))
    assert backend.runs == 2
    with torch_plugin.run():
        assert _C.get_eval_frame_callback() is _C.RUN_ONLY
        x = torch.randn(5, 3)
        torch.testing.assert_close(net(x), net.forward(x))
    assert backend.compiles == 1


def test_run_only_sentinel_at_the_hook():
    def g(x):
        return x + 1

    previous = _C.set_eval_frame_callback(_C.RUN_ONLY)
    try:
        assert g(1) == 2
    finally:
        _C.set_eval_frame_callback(previous)
    assert _C.cache_entries(g.__code__) == []
    assert not _C.is_code_skipped(g.__code__)
    assert _C.RUN_ONLY() is None
