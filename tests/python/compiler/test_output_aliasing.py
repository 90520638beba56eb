"""Outputs that alias each other keep eager's aliasing through the "plugin" backend: a view
op (``aten::alias`` from ``detach``, a bitcast ``view(dtype)``, chains of views) whose result
is a graph output stays a view of its base instead of becoming a new buffer inside a fusion
group (csrc/compiler/passes/fusion.cpp, observable views). Differential: each function runs
eagerly and compiled on fresh random inputs over three calls (compile, cached, cached); the
outputs are compared, then the first output is mutated in place on both sides and every
output and the input are compared again: an alias that became a copy shows up there."""

from __future__ import annotations

import pytest
import torch

import torch_plugin

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU"))]  # fmt: skip


def detach_twin(x):
    y = x * 2
    return y, y.detach()


def bitcast_twin(x):
    y = x * 2 + 1
    return y, y.view(torch.int32)


def detach_then_transpose(x):
    y = x * 3
    return y, y.detach().t()


def alias_used_and_returned(x):
    z = (x + 1).detach()
    return z, z * 3


def input_alias_and_kernel(x):
    return x.detach(), (x + 1) * 2


def two_views_of_a_temporary(x):
    t = x * 2 + 1
    return t.detach(), t.view(torch.int32)


CASES = [detach_twin, two_views_of_a_temporary, bitcast_twin, detach_then_transpose, alias_used_and_returned,
         input_alias_and_kernel]  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_outputs_keep_eager_aliasing(fn, device):
    torch_plugin.reset()
    compiled = torch_plugin.optimize("plugin")(fn)
    for call in range(3):
        x = torch.randn(6, 5, device=device)
        x_eager = x.clone()
        want = fn(x_eager)
        got = compiled(x)
        for i, (g, w) in enumerate(zip(got, want)):
            torch.testing.assert_close(g, w, msg=f"call {call}, output {i}")
        want[0].add_(100)
        got[0].add_(100)
        for i, (g, w) in enumerate(zip(got, want)):
            torch.testing.assert_close(g, w, msg=f"call {call}, output {i} after mutating 0")
        torch.testing.assert_close(x, x_eager, msg=f"call {call}: the input")
