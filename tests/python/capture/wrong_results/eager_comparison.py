"""The harness of the issue #10 regression tests (this folder): run a function eagerly and
through each backend on deep copies of the same arguments, over several calls, and compare the
results, the arguments after each call (in-place mutations included) and, optionally, the
globals the function touches.

(The later regression tests use the stricter tests/fuzz/against_eager.py, which also compares
identity relations and the global torch state.)
"""

import copy

import torch

import torch_plugin

BACKENDS = ["eager", "aot_eager", "plugin"]


def same(a, b) -> bool:
    """``a`` (eager's) and ``b`` equal: tensors of the same shape and dtype within 1e-5,
    lists, tuples and dicts element by element, anything else by ``==``."""
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
        )
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
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
        assert same(expected, got), f"call {i}: result {got} != eager {expected}"
        assert same(list(eager_args), list(opt_args)), f"call {i}: arguments differ after call"
        if state:
            assert same(eager_state, state()), f"call {i}: state {state()} != {eager_state}"
    torch_plugin.reset()


def _restore(live: dict, saved: dict) -> None:
    for k, v in saved.items():
        if isinstance(live[k], list):
            live[k][:] = v
        elif isinstance(live[k], dict):
            live[k].clear()
            live[k].update(v)
