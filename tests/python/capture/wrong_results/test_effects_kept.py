"""Issue #10 regressions: every call with an effect is a graph node or a graph break, and where
eager raises or cannot be traced (overlapping in-place writes, boolean-mask assignment under
autograd, ``t.requires_grad = ...``) CPython runs it as eager does.

Each case runs eager and each backend on deep copies of fresh random inputs, over several
calls (the compiling call, cached calls, calls that recompile), and compares the result and
every argument after the call (in-place mutations included): eager_comparison.py.
"""

import pytest
import torch
from eager_comparison import BACKENDS, run_against_eager, same

import torch_plugin


# --- 1. dropped effects: every call with an effect is a graph node or a graph break ------
def _setitem_local(x):
    m = torch.zeros(4, 4)
    m[1:3, 1:3] = 1.0
    return x * m


def _setitem_input(x, i):
    x[i] = 5.0
    return x + 1


def _setitem_through_view(x):
    v = x[0]
    v[1:] = 3
    return x * 2


def _setitem_tensor_value(x, y):
    out = torch.zeros_like(x)
    out[:, 1] = y.sum(0)
    out[0] += x[1]
    return out


def _masked_fill_swin(x):
    # torchvision swin_t's shifted-window mask is built this way
    mask = x.new_zeros(6, 6)
    for j, s in enumerate(((0, -2), (-2, -1), (-1, None))):
        mask[slice(*s), :] = j
    return x + mask


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn,make",
    [
        (_setitem_local, lambda: (torch.randn(4, 4),)),
        (_setitem_input, lambda: (torch.randn(4, 4), 2)),
        (_setitem_through_view, lambda: (torch.randn(4, 4),)),
        (_setitem_tensor_value, lambda: (torch.randn(3, 3), torch.randn(2, 3))),
        (_masked_fill_swin, lambda: (torch.randn(6, 6),)),
    ],
    ids=["local", "input", "view", "tensor_value", "swin_mask"],
)
def test_setitem_is_not_dropped(backend, fn, make):
    run_against_eager(backend, fn, [make() for _ in range(3)])


def test_unknown_call_without_tensor_result_breaks_the_graph():
    """A torch call that returns no tensor and is neither known pure nor in-place is not
    folded: the graph breaks there and CPython runs it, so its effect happens
    (``increment_version`` bumps the tensor's version counter and returns None)."""

    def f(x):
        y = x + 1
        torch.autograd.graph.increment_version(x)
        return y * 2

    torch_plugin.reset()
    opt = torch_plugin.optimize("eager")(f)
    for _ in range(2):
        x = torch.randn(3)
        before = x._version
        assert torch.equal(opt(x), f(x.clone()))
        assert x._version == before + 1
    assert any("not known to be pure" in reason for _, reason, _ in torch_plugin.stats.graph_breaks)
    torch_plugin.reset()


# --- in-place writes from an overlapping argument: eager decides --------------------------
def _copy_from_own_element(x):
    y = x * 2
    x.copy_(x[2, 1])  # eager raises: the source overlaps the written tensor
    return y


def _add_own_transpose(x):
    x.add_(x.t())  # eager raises too
    return x


def _assign_own_row(x):
    x[0] = x[1]  # same storage, no overlap: eager computes it
    x.add_(x)  # the same tensor: fine in eager and in the graph
    return x * 2


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn",
    [_copy_from_own_element, _add_own_transpose, _assign_own_row],
    ids=["copy_element", "add_transpose", "assign_row"],
)
def test_inplace_with_overlapping_argument_matches_eager(backend, fn):
    """A functionalized graph computed `x.copy_(x[2, 1])` where eager raises (fuzz seed
    1869); such calls now break the graph and CPython runs them."""
    torch_plugin.reset()
    opt = torch_plugin.optimize(backend)(fn)
    for _ in range(3):
        x = torch.randn(4, 4)
        x2 = x.clone()
        try:
            want = fn(x)
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match="single memory location"):
                opt(x2)
            assert "single memory location" in str(e)
            continue
        got = opt(x2)
        assert same(want, got) and same(x, x2)
    torch_plugin.reset()


def test_inplace_with_a_distinct_tensor_stays_in_the_graph():
    """The overlap rule breaks only for arguments sharing the written tensor's memory: a
    residual `out += identity` and `x[0] = y` stay in one graph."""

    def f(x, y):
        out = x * 2
        out += y
        out[0] = y[1]
        out.add_(out)
        return out

    torch_plugin.reset()
    opt = torch_plugin.optimize("eager")(f)
    x, y = torch.randn(3, 3), torch.randn(3, 3)
    assert same(opt(x, y), f(x, y))
    assert torch_plugin.stats.graphs_compiled == 1
    assert not torch_plugin.stats.graph_breaks and not torch_plugin.stats.failures
    torch_plugin.reset()


# --- boolean-mask assignment in training: no crash, same values and gradients --------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_mask_assignment_under_autograd_matches_eager(backend):
    """``h[mask] = emb`` while autograd records it (wav2vec2's SpecAugment): its backward
    gathers through nonzero(mask), which AOTAutograd cannot trace; compiling the graph
    raised BackendCompilerFailed. Now a graph break: outputs and gradients equal eager's."""
    torch.manual_seed(0)
    emb = torch.nn.Parameter(torch.randn(4))

    def f(x, m):
        h = x * 2
        h[m] = emb
        return (h * h).sum()

    opt = torch_plugin.optimize(backend)(f)
    for _ in range(3):
        x = torch.randn(3, 5, 4, requires_grad=True)
        m = torch.rand(3, 5) > 0.5
        got = opt(x, m)
        gx, ge = torch.autograd.grad(got, (x, emb))
        want = f(x, m)
        wx, we = torch.autograd.grad(want, (x, emb))
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(gx, wx)
        torch.testing.assert_close(ge, we)


# --- t.requires_grad = ...: a graph break; eager decides (it raises on a non-leaf) ----------
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("x_grad", [True, False])
def test_setting_requires_grad_matches_eager(backend, x_grad):
    w = torch.nn.Parameter(torch.randn(4))

    def f(x):
        h = x[:, None]
        h.requires_grad = True  # wav2vec2's feature encoder in training
        return h * w, h

    opt = torch_plugin.optimize(backend)(f)
    for _ in range(3):
        x = torch.randn(3, 4, requires_grad=x_grad)
        if x_grad:  # h is not a leaf: eager raises, and so does the compiled call
            for fn in (opt, f):
                with pytest.raises(RuntimeError, match="leaf"):
                    fn(x)
            continue
        (got, gh), (want, wh) = opt(x), f(x)
        torch.testing.assert_close(got, want)
        assert gh.requires_grad and wh.requires_grad and got.requires_grad == want.requires_grad
