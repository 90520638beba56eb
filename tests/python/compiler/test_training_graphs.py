"""Training graphs through the plugin compiler: both AOTAutograd graphs are lowered and
compiled (a backward graph returns None for inputs that need no gradient, which the IR
cannot return: training._without_none_outputs), and the gradients equal eager's."""

from __future__ import annotations

import copy

import pytest
import torch

import torch_plugin
from torch_plugin.compiler import stages

pytestmark = pytest.mark.usefixtures("fresh_capture")


def test_forward_and_backward_graphs_lowered(monkeypatch):
    compiled: list = []
    real = stages.compile_graph

    def recording(gm, *args, **kwargs):
        out = real(gm, *args, **kwargs)
        compiled.append(getattr(out, "unlowered", None))
        return out

    monkeypatch.setattr(stages, "compile_graph", recording)
    torch.manual_seed(0)
    m1 = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)
    )
    m2 = copy.deepcopy(m1)
    fast = torch_plugin.optimize(m2)
    for _ in range(3):
        x = torch.randn(4, 8)  # needs no gradient: its gradient is None in the backward graph
        m1(x).square().sum().backward()
        fast(x).square().sum().backward()
        for p, q in zip(m1.parameters(), m2.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
    assert len(compiled) == 2  # forward, backward; cached after
    assert compiled == [None, None], compiled
