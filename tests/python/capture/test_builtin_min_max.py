"""Builtin ``max()`` / ``min()`` over tensors and mixed Python numbers (issue #31).

CPython's loop (``min_max`` in bltinmodule.c: ``val > maxval`` / ``val < maxval``, ties keep
the earlier item, the result is one of the operands) is inlined from
``torch_plugin/capture/variables/polyfills.py``; each comparison of one-element tensors is a
data-dependent condition captured as a conditional in the graph (the result is the very
operand eager returns: identity, gradients on ties and NaN operands as in eager), and a
graph break where a conditional could not be exact: operands of different dtype, shape,
strides or storage offset, a tensor against a Python number (eager returns either a tensor
or the number), multi-element tensors (eager raises), and any use of the result that needs
to know which object it is (``is``, an in-place write, an attribute write).

Each case runs through the differential harness on every backend (compile, cached,
recompile; outputs, identities among them, arguments compared), then must be one graph
(captured) or break the graph and still equal eager (refused).
"""

from __future__ import annotations

import pytest
import torch
from differential import check
from one_graph import _probe, check_one_graph

pytestmark = pytest.mark.usefixtures("fresh_capture")


def _scalars(*values):
    return lambda: tuple(torch.tensor(v) if v is not None else torch.randn(()) for v in values)


def _grad_scalars(*values):
    def make():
        return tuple(
            (torch.tensor(v) if v is not None else torch.randn(())).requires_grad_() for v in values
        )

    return make


def _vec(n):
    return lambda: (torch.randn(n),)


VEC = (_vec(3), _vec(3), _vec(4))


def _two_reductions(x):
    return max(x.sum(), x.mean()) * x, min(x.sum(), x.mean()) - x


def _three_and_list(x):
    a, b, c = x.sum(), x.mean(), x.amax()
    return min(a, b, c) + max([a, b, c]) + max((b, c))


def _operands_returned(x):
    a, b = x.sum(), x.mean()
    return a, b, max(a, b), min(a, b)  # the result is one of the returned operands


def _inputs(x, y):
    return max(x, y), min(x, y), max(x, y) * 2 + min(y, x)


def _key_fn(x):
    a, b = x.sum(), x.mean()
    return max([a, b], key=lambda t: -t) + min(a, b, key=torch.abs)


def _ties(x):
    a = x.sum()
    return max(a, a * 1.0), min(a * 1.0, a)


def _in_no_grad(x):
    with torch.no_grad():
        m = max(x.sum(), x.mean())
    return m * x


def _grads(x, y):
    return max(x, y) * 2 + min(x, y) * 3


CAPTURED = {
    "two_reductions": (_two_reductions, VEC),
    "three_and_list": (_three_and_list, VEC),
    "operands_returned": (_operands_returned, VEC),
    "graph_inputs": (_inputs, (_scalars(None, None), _scalars(1.0, 1.0), _scalars(None, None))),
    "nan_operands": (
        _inputs,
        (_scalars(float("nan"), 1.0), _scalars(1.0, float("nan")), _scalars(None, None)),
    ),
    "key_function": (_key_fn, VEC),
    "ties_keep_the_first": (_ties, VEC),
    "no_grad_block": (_in_no_grad, VEC),
    "grads_and_ties": (
        _grads,
        (_grad_scalars(None, None), _grad_scalars(1.0, 1.0), _grad_scalars(2.0, None)),
    ),
}


@pytest.mark.parametrize("name", list(CAPTURED))
def test_min_max_of_tensors_is_one_graph(name):
    fn, calls = CAPTURED[name]
    check_one_graph(fn, *calls)


def test_min_max_gradients_equal_eager_on_ties():
    """The gradient goes to the operand eager returns (all of it: no tie split, as
    torch.maximum would do), and the other operand's ``.grad`` stays None."""
    import torch_plugin

    for backend in ("eager", "aot_eager", "plugin"):
        torch_plugin.reset()
        compiled = torch_plugin.optimize(backend, nopython=True)(_grads)
        for values in ((1.0, 1.0), (2.0, 1.0), (1.0, 3.0), (float("nan"), 1.0)):
            got = []
            for fn in (_grads, compiled):
                x, y = (torch.tensor(v, requires_grad=True) for v in values)
                fn(x, y).backward()
                got.append((x.grad, y.grad))
            for want, have in zip(got[0], got[1]):
                assert (want is None) == (have is None), (backend, values, got)
                if want is not None:
                    torch.testing.assert_close(have, want)


def _dtypes_differ(x):
    return max(x.sum().int(), x.mean())


def _shapes_differ(x):
    return max(x[:1], x.sum())


def _views_differ(x):
    return max(x[0], x[1])  # which view (storage offset) depends on data


def _python_number(x):
    return max(x.sum(), 0.5)  # a tensor or the float


def _identity(x):
    a = x.sum()
    return max(a, x.mean()) is a


def _inplace(x):
    a, b = x.sum(), x.mean()
    m = max(a, b)
    m.add_(1)
    return a, b, m


REFUSED = {
    "dtypes_differ": (_dtypes_differ, "torch.int32"),
    "shapes_differ": (_shapes_differ, "shape"),
    "views_differ": (_views_differ, "storage offset"),
    "python_number": (_python_number, "ConstantVariable(0.5)"),
    "identity": (_identity, "`is`"),
    "inplace_write": (_inplace, "writes in place"),
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_min_max_breaks_where_not_exact(name):
    fn, reason = REFUSED[name]
    check(fn, *VEC)
    mismatch, _, breaks = _probe(fn, VEC, None, fullgraph=False)
    assert mismatch is None, mismatch
    assert any(reason in b for b in breaks), breaks


def test_multi_element_tensors_raise_as_in_eager():
    def fn(x):
        return max(x, x * 2)

    check(fn, *VEC)  # eager's RuntimeError (ambiguous truth value) on every backend
