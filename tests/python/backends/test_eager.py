"""Tests for torch_plugin/backends/eager.py on symbolic_trace graphs."""

import torch

from torch_plugin.backends.registry import call_backend


def test_pointwise_matches_eager(pointwise_graph):
    compiled = call_backend(
        "eager",
        pointwise_graph,
        [torch.randn(8), torch.randn(8)],
        backend_name="eager",
        graph_name="g",
    )
    x, y = torch.randn(8), torch.randn(8)
    torch.testing.assert_close(compiled(x, y), torch.cos(x) + torch.sin(y), atol=1e-6, rtol=0)


def test_module_with_parameters_matches_eager(mlp):
    gm = torch.fx.symbolic_trace(mlp)
    compiled = call_backend("eager", gm, [torch.randn(4, 16)], backend_name="eager", graph_name="g")
    x = torch.randn(4, 16)
    out, expected = compiled(x), mlp(x)
    assert type(out["parts"]) is tuple
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
