"""Regression tests for the silent wrong results of issue #10, by mechanism.

Each case runs eager and each backend on deep copies of fresh random inputs, over several
calls (the compiling call, cached calls, calls that recompile), and compares the result and
every argument after the call (in-place mutations included).
"""

import copy

import pytest
import torch

import torch_plugin

BACKENDS = ["eager", "aot_eager", "plugin"]


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
        )
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b


def run_against_eager(backend, fn, argsets, state=None):
    """Call ``fn`` eagerly and optimized on copies of each argument tuple in ``argsets``;
    compare results, arguments after the call, and ``state()`` (globals the function
    touches) after each call."""
    torch_plugin.reset()
    opt = torch_plugin.optimize(backend)(fn)
    for i, args in enumerate(argsets):
        eager_args, opt_args = copy.deepcopy(args), copy.deepcopy(args)
        before = copy.deepcopy(state()) if state else None
        expected = fn(*eager_args)
        eager_state = copy.deepcopy(state()) if state else None
        if state:
            _restore(state(), before)
        got = opt(*opt_args)
        assert _same(expected, got), f"call {i}: result {got} != eager {expected}"
        assert _same(list(eager_args), list(opt_args)), f"call {i}: arguments differ after call"
        if state:
            assert _same(eager_state, state()), f"call {i}: state {state()} != {eager_state}"
    torch_plugin.reset()


def _restore(live: dict, saved: dict) -> None:
    for k, v in saved.items():
        if isinstance(live[k], list):
            live[k][:] = v
        elif isinstance(live[k], dict):
            live[k].clear()
            live[k].update(v)


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
    folded: the graph breaks there and CPython runs it."""
    calls = []

    def f(x):
        y = x + 1
        torch._C._log_api_usage_once("torch_plugin.test")  # returns None, not on the list
        calls.append(1)
        return y * 2

    torch_plugin.reset()
    opt = torch_plugin.optimize("eager")(f)
    x = torch.randn(3)
    assert torch.equal(opt(x), f(x))
    assert any("not known to be pure" in reason for _, reason, _ in torch_plugin.stats.graph_breaks)
    torch_plugin.reset()


# --- 4. specialisation without a guard ---------------------------------------------------
def _times_int(x, k):
    return torch.sin(x) * k


@pytest.mark.parametrize("backend", BACKENDS)
def test_int_argument_zero_one_and_others(backend):
    x = torch.randn(4)
    run_against_eager(backend, _times_int, [(x, k) for k in (0, 1, 2, 3, 1, 0, 5)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_int_argument_other_order(backend):
    run_against_eager(backend, _times_int, [(torch.randn(4), k) for k in (2, 3, 1, 0, 7)])


def test_plugin_graph_cache_not_shared_between_static_and_dynamic():
    """A graph recompiled with symbolic sizes has the code of its static twin; the plugin
    graph cache must not replay the static recipe for it (outputs of the old size)."""

    def f(x):
        return torch.relu(x) * 2 + 1

    run_against_eager("plugin", f, [(torch.randn(n, 8),) for n in (4, 5, 6, 4, 7)])
    # and in a fresh capture state (the disk cache is filled now)
    run_against_eager("plugin", f, [(torch.randn(n, 8),) for n in (5, 4, 9)])
