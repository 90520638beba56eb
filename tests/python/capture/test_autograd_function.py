"""torch.autograd.Function.apply in captured code (variables/autograd_function.py, issue
#12): inlined with grad mode off, called as ``cls.apply`` with grad mode on (the user's
backward kept); always as eager over several calls, including a call that switches grad
mode (the entry's global-state guard)."""

from __future__ import annotations

import pytest
import torch

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture")


class ScaledGelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.save_for_backward(x)
        ctx.scale = scale
        if ctx.needs_input_grad[0]:  # True for an input requiring grad, grad mode aside
            return torch.nn.functional.gelu(x) * ctx.scale - 1
        return torch.nn.functional.gelu(x) * ctx.scale

    @staticmethod
    def backward(ctx, grad):
        (_x,) = ctx.saved_tensors
        return grad * ctx.scale * 2, None  # deliberately not gelu's derivative


class Identity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


def f(x, w):
    return ScaledGelu.apply(x @ w, 3.0) + 1


def _recording():
    """A backend that keeps each graph's code."""
    codes = []

    def backend(gm, example_inputs):
        codes.append(gm.code)
        return gm.forward

    return backend, codes


def test_apply_is_inlined_without_grad_and_matches_eager():
    backend, codes = _recording()
    opt = torch_plugin.optimize(backend)(f)
    w = torch.randn(4, 4)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 4)
            got = opt(x, w)
            torch.testing.assert_close(got, f(x, w))
            assert not got.requires_grad
        assert len(codes) == 1 and "gelu" in codes[0]  # one graph holding forward's ops
        w.requires_grad_(True)  # a new tensor guard: recompiles
        for _ in range(2):
            x = torch.randn(2, 4)
            torch.testing.assert_close(opt(x, w), f(x, w))
    assert len(codes) == 2 and all("gelu" in c for c in codes)


def test_apply_with_grad_keeps_the_users_backward():
    """With grad mode on the graph calls ``ScaledGelu.apply`` itself (no graph break), so the
    user's own backward runs."""
    backend, codes = _recording()
    opt = torch_plugin.optimize(backend)(f)
    w = torch.randn(4, 4)
    with torch.no_grad():
        opt(torch.randn(2, 4), w)  # compiles the no-grad entry first
    for _ in range(2):
        x = torch.randn(2, 4, requires_grad=True)
        x2 = x.detach().clone().requires_grad_(True)
        got, want = opt(x, w), f(x2, w)
        torch.testing.assert_close(got, want)
        got.sum().backward()
        want.sum().backward()
        torch.testing.assert_close(x.grad, x2.grad)  # the deliberate "wrong" backward
    assert torch_plugin.stats.graph_breaks == []
    assert len(codes) == 2
    assert "gelu(" in codes[0] and "gelu(" not in codes[1] and "ScaledGelu" in codes[1]


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "plugin"])
def test_apply_with_grad_in_a_training_step_matches_eager(backend):
    """The user's backward, traced by AOTAutograd for aot_eager and plugin: gradients of the
    input and of a parameter equal eager's over steps with fresh inputs."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4)

    def step(x):
        return (ScaledGelu.apply(lin(x), 2.0) ** 2).mean()

    opt = torch_plugin.optimize(backend)(step)
    for _ in range(3):
        x = torch.randn(3, 4, requires_grad=True)
        grads = []
        for fn in (opt, step):
            lin.zero_grad(set_to_none=True)
            x.grad = None
            loss = fn(x)
            loss.backward()
            grads.append((loss.detach(), x.grad.clone(), lin.weight.grad.clone()))
        for a, b in zip(*grads):
            torch.testing.assert_close(a, b)
    assert torch_plugin.stats.graph_breaks == []


_forward_calls = []


class Logged(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        _forward_calls.append(1)  # an effect outside the result
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def test_apply_with_grad_and_a_forward_with_side_effects_breaks_the_graph():
    def g(x):
        return Logged.apply(x) + 1

    opt = torch_plugin.optimize("eager")(g)
    _forward_calls.clear()
    for _ in range(3):
        x = torch.randn(3, requires_grad=True)
        torch.testing.assert_close(opt(x), g(x))
    assert len(_forward_calls) == 6  # once per call, each way: nothing ran at capture
    reasons = [str(b) for b in torch_plugin.stats.graph_breaks + torch_plugin.stats.failures]
    assert any("side effects" in r or "list" in r for r in reasons), reasons


def test_forward_returning_its_input_is_not_inlined():
    def g(x):
        y = Identity.apply(x)
        return y is x, y * 2

    opt = torch_plugin.optimize("eager")(g)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(3)
            got, want = opt(x), g(x)
            assert got[0] == want[0] is False
            torch.testing.assert_close(got[1], want[1])
