"""The "plugin" backend's safety rule for CUDA graphs that change the autocast state inside
an autocast region (backends/plugin.py, _changes_autocast): such a graph runs as its eager
graph on CUDA until a wrong result seen on an H100 is understood. The detection is checked
here on captured graphs (CPU); the rule itself on the GPU machine
(tests/python/models/test_cuda_models.py, llama-bf16)."""

from __future__ import annotations

import pytest
import torch

import torch_plugin
from torch_plugin.backends.plugin import _changes_autocast

pytestmark = pytest.mark.usefixtures("fresh_capture")


def _with_region(x, w):
    h = x @ w
    with torch.autocast("cpu", enabled=False):
        f = (x.float() @ w.float()).cos()
    return h * f.to(h.dtype)


def _without_region(x, w):
    return (x @ w).relu()


@pytest.mark.parametrize("fn, expected", [(_with_region, True), (_without_region, False)])
def test_autocast_regions_are_detected_in_captured_graphs(fn, expected):
    seen = []

    def backend(gm, example_inputs):
        seen.append(_changes_autocast(gm))
        return gm.forward

    opt = torch_plugin.optimize(backend)(fn)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        for _ in range(2):
            x, w = torch.randn(4, 8), torch.randn(8, 8)
            torch.testing.assert_close(opt(x, w), fn(x, w))
    assert seen == [expected]
