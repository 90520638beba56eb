"""Tests for torch_plugin/backends/inductor.py on symbolic_trace graphs.

The first Inductor compile in a process spends about 20 s probing the CPU's vector
instruction sets on a 2-core machine; later small graphs take a few seconds each.
"""

import subprocess
import sys

import torch

from torch_plugin.backends.registry import lookup_backend
from torch_plugin.contract import call_backend

TOL = 1e-4


def _compile(gm, example_inputs):
    return call_backend(
        lookup_backend("inductor"), gm, example_inputs, backend_name="inductor", graph_name="g"
    )


def test_import_does_not_load_inductor():
    code = (
        "import sys, torch_plugin.backends as b\n"
        "b.list_backends()\n"
        "assert 'torch._inductor.compile_fx' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_pointwise_matches_eager(pointwise_graph):
    compiled = _compile(pointwise_graph, [torch.randn(8, 8), torch.randn(8, 8)])
    x, y = torch.randn(8, 8), torch.randn(8, 8)
    out = compiled(x, y)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, torch.cos(x) + torch.sin(y), atol=TOL, rtol=0)


def test_module_inference_and_training_match_eager(mlp):
    with torch.no_grad():
        compiled = _compile(torch.fx.symbolic_trace(mlp), [torch.randn(4, 16)])
        x = torch.randn(4, 16)
        out, expected = compiled(x), mlp(x)
    assert type(out) is dict and type(out["parts"]) is tuple
    torch.testing.assert_close(out, expected, atol=TOL, rtol=0)

    compiled = _compile(torch.fx.symbolic_trace(mlp), [torch.randn(4, 16, requires_grad=True)])
    x = torch.randn(4, 16, requires_grad=True)
    mlp(x)["out"].pow(2).sum().backward()
    expected_grads = [p.grad.clone() for p in mlp.parameters()] + [x.grad.clone()]
    mlp.zero_grad(set_to_none=True)
    x.grad = None
    compiled(x)["out"].pow(2).sum().backward()
    grads = [p.grad for p in mlp.parameters()] + [x.grad]
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, expected_grad, atol=TOL, rtol=0)
