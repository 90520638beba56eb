"""``tensor.requires_grad = True`` in captured code (wav2vec2's feature encoder, issue #12):
part of the graph where eager allows it and every backend reproduces it, a graph break
elsewhere. Each case compares with an eager twin: outputs, their ``requires_grad``, the
parameters' gradients, the inputs' flags and, where a tensor escapes, its ``.grad``."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture")


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 4, 3)
        self.lin = nn.Linear(4, 2)

    def forward(self, x):
        h = x[:, None]
        if self.training:
            h.requires_grad = True
        h = self.conv(h).relu()
        return self.lin(h.transpose(1, 2)).sum(1)


def _step(fn, model, x):
    out = fn(x)
    if out.requires_grad:
        out.pow(2).mean().backward()
    grads = [None if p.grad is None else p.grad.clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return out, grads


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "plugin"])
def test_in_one_graph_while_parameters_require_grad(backend):
    torch.manual_seed(0)
    model = Encoder()
    twin = copy.deepcopy(model)
    opt = torch_plugin.optimize(backend)(model)
    for _ in range(2):
        x = torch.randn(2, 16)
        (got, got_grads), (want, want_grads) = _step(opt, model, x), _step(twin, twin, x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        assert got.requires_grad and want.requires_grad and not x.requires_grad
        for a, b in zip(got_grads, want_grads):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert torch_plugin.stats.graph_breaks == []
    assert torch_plugin.stats.graphs_compiled == 1


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_frozen_parameters_break_there(backend):
    """No parameter requires grad: eager's output still requires grad (through the new
    leaf); an AOTAutograd graph's would not, so the assignment breaks the graph. Freezing
    after a first compile recompiles (the parameter's flag is guarded)."""
    torch.manual_seed(0)
    model = Encoder()
    twin = copy.deepcopy(model)
    opt = torch_plugin.optimize(backend)(model)
    x = torch.randn(2, 16)
    assert _step(opt, model, x)[0].requires_grad
    for m in (model, twin):
        m.requires_grad_(False)
    for _ in range(2):
        x = torch.randn(2, 16)
        got, want = opt(x), twin(x)
        torch.testing.assert_close(got, want)
        assert got.requires_grad is want.requires_grad is True
    assert any("requires_grad" in reason for _, reason, _ in torch_plugin.stats.graph_breaks)


def test_on_a_graph_input_breaks_and_sets_the_flag():
    def f(x, w):
        y = x * w
        x.requires_grad = True
        return (x * y).sum()

    opt = torch_plugin.optimize("aot_eager")(f)
    for _ in range(2):
        w = torch.randn(3, requires_grad=True)
        xa = torch.randn(3)
        xb = xa.clone()
        got, want = opt(xa, w), f(xb, w)
        got.backward()
        want.backward()
        torch.testing.assert_close(got, want)
        assert xa.requires_grad and xb.requires_grad
        torch.testing.assert_close(xa.grad, xb.grad)
    assert torch_plugin.stats.graph_breaks


def test_returned_leaf_breaks_and_keeps_its_grad():
    """The new leaf itself returned: eager's is a leaf whose ``.grad`` fills in backward."""
    w = torch.randn(3, requires_grad=True)

    def f(x):
        h = x * 2
        h.requires_grad = True
        return h, (h * w).sum()

    opt = torch_plugin.optimize("aot_eager")(f)
    for _ in range(2):
        x = torch.randn(3)
        (gh, gs), (wh, ws) = opt(x), f(x)
        gs.backward()
        ws.backward()
        assert gh.is_leaf and wh.is_leaf
        torch.testing.assert_close(gh.grad, wh.grad)


def test_false_on_a_non_leaf_raises_as_in_eager():
    w = torch.randn(3, requires_grad=True)

    def f(x):
        h = x * w
        h.requires_grad = False
        return h

    opt = torch_plugin.optimize("aot_eager")(f)
    with pytest.raises(RuntimeError, match="leaf"):
        f(torch.randn(3))
    with pytest.raises(RuntimeError, match="leaf"):
        opt(torch.randn(3))
