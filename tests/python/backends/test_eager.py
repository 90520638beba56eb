"""Tests for torch_plugin/backends/eager.py on symbolic_trace graphs."""

import torch

from torch_plugin.backends.registry import lookup_backend
from torch_plugin.contract import call_backend


def test_pointwise_matches_eager(pointwise_graph):
    compiled = call_backend(
        lookup_backend("eager"),
        pointwise_graph,
        [torch.randn(8), torch.randn(8)],
        backend_name="eager",
        graph_name="g",
    )
    x, y = torch.randn(8), torch.randn(8)
    torch.testing.assert_close(compiled(x, y), torch.cos(x) + torch.sin(y), atol=1e-6, rtol=0)


def test_module_with_parameters_matches_eager(mlp):
    gm = torch.fx.symbolic_trace(mlp)
    compiled = call_backend(
        lookup_backend("eager"), gm, [torch.randn(4, 16)], backend_name="eager", graph_name="g"
    )
    x = torch.randn(4, 16)
    out, expected = compiled(x), mlp(x)
    assert type(out["parts"]) is tuple
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)


def test_parameter_updates_and_replacements_are_seen(fresh_capture):
    """The eager backend caches get_attr tensors on the graph module: an in-place update
    (optimizer step) must be visible, and a replaced parameter must recompile."""
    import torch_plugin

    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    opt = torch_plugin.optimize("eager")(model)
    x = torch.randn(3, 4)
    torch.testing.assert_close(opt(x), model(x))
    sgd = torch.optim.SGD(model.parameters(), lr=0.5)
    model(x).sum().backward()
    sgd.step()
    torch.testing.assert_close(opt(x), model(x))
    model[0].weight = torch.nn.Parameter(torch.randn(4, 4))
    torch.testing.assert_close(opt(x), model(x))
    assert torch_plugin.stats.graphs_compiled == 2
