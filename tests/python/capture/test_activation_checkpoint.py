"""``torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)`` as one graph (issue
#31): the checkpointed function is traced into a ``tag_activation_checkpoint`` node (as
torch.compile does), where eager's values and gradients are reproduced exactly; elsewhere
(a random draw in the body, ``use_reentrant`` not given as False, a non-default option, an
effect outside the graph, an in-place write to an input) it stays the graph break it was,
with checkpoint run for real.

Each case runs through the differential harness on every backend (three calls: compile,
cached, recompile) and, for the captured ones, as one graph; gradients (of inputs and of a
module's parameters) are compared with eager's, bit for bit on the backends that run eager's
kernels.
"""

from __future__ import annotations

import copy

import pytest
import torch
from differential import check
from one_graph import _probe, check_one_graph
from torch.utils.checkpoint import checkpoint

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture")

BACKENDS = ("eager", "aot_eager", "plugin")


def _sin2(x):
    return torch.sin(x) * 2


def _one_output(x):
    return checkpoint(_sin2, x, use_reentrant=False) + 1


def _two_outputs(x, w, scale=1.0):
    h = torch.relu(x @ w)
    return h * scale, h.sum()


def _tuple_and_kwargs(x, w):
    a, b = checkpoint(_two_outputs, x, w, use_reentrant=False, scale=0.5)
    return a + b


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def inner(self, x):
        return torch.nn.functional.gelu(self.lin(x)) * x

    def forward(self, x):
        return checkpoint(self.inner, x.cos(), use_reentrant=False).tanh()


def _mat(n):
    return lambda: (torch.randn(n, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True))


CAPTURED = {
    "one_output": (_one_output, None),
    "tuple_and_kwargs": (_tuple_and_kwargs, (_mat(3), _mat(3), _mat(5))),
}


@pytest.mark.parametrize("name", list(CAPTURED))
def test_checkpoint_is_one_graph(name):
    fn, calls = CAPTURED[name]
    calls = calls or (
        lambda: (torch.randn(3, requires_grad=True),),
        lambda: (torch.randn(3, requires_grad=True),),
        lambda: (torch.randn(4, requires_grad=True),),
    )
    check_one_graph(fn, *calls)


@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpoint_gradients_equal_eager(backend):
    torch_plugin.reset()
    compiled = torch_plugin.optimize(backend, nopython=True)(_tuple_and_kwargs)
    for n in (3, 3, 5):
        x = torch.randn(n, 4, requires_grad=True)
        w = torch.randn(4, 4, requires_grad=True)
        x2, w2 = (t.detach().clone().requires_grad_() for t in (x, w))
        _tuple_and_kwargs(x, w).sum().backward()
        compiled(x2, w2).sum().backward()
        assert torch.equal(x.grad, x2.grad) and torch.equal(w.grad, w2.grad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_checkpointed_method_parameters_get_eager_gradients(backend):
    torch.manual_seed(0)
    block = Block()
    ref = copy.deepcopy(block)
    torch_plugin.reset()
    compiled = torch_plugin.optimize(backend, nopython=True)(block)
    for n in (3, 3, 5):
        x = torch.randn(n, 4, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        out, want = compiled(x2), ref(x)
        # bit for bit where the backend runs eager's kernels; "plugin" generates its own
        tol = {} if backend == "plugin" else {"rtol": 0, "atol": 0}
        torch.testing.assert_close(out, want, **tol)
        out.sum().backward()
        want.sum().backward()
        torch.testing.assert_close(x2.grad, x.grad, **tol)
        for p, q in zip(block.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, **tol)


def _random_body(x):
    return checkpoint(lambda t: torch.nn.functional.dropout(t, 0.5), x, use_reentrant=False)


def _no_use_reentrant(x):
    return checkpoint(_sin2, x) + 1


def _reentrant(x):
    return checkpoint(_sin2, x, use_reentrant=True) + 1


def _inplace_input(x):
    return checkpoint(lambda t: t.mul_(2), x.clone(), use_reentrant=False)


def _returns_input(x):
    return checkpoint(lambda t: t, x, use_reentrant=False) * 2


REFUSED = {
    "random_draw": (_random_body, "random numbers"),
    "use_reentrant_omitted": (_no_use_reentrant, "use_reentrant"),
    "use_reentrant_true": (_reentrant, "use_reentrant"),
    "inplace_on_input": (_inplace_input, "in place"),
    "returns_its_input": (_returns_input, "from before the call"),
}


@pytest.mark.parametrize("name", list(REFUSED))
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_checkpoint_breaks_where_not_exact(name):
    fn, reason = REFUSED[name]
    calls = (
        lambda: (torch.randn(3, requires_grad=True),),
        lambda: (torch.randn(3, requires_grad=True),),
        lambda: (torch.randn(4, requires_grad=True),),
    )
    check(fn, *calls)
    mismatch, _, breaks = _probe(fn, calls, None, fullgraph=False)
    assert mismatch is None, mismatch
    assert any(reason in b for b in breaks), breaks
