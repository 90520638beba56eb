"""Tests for torch_plugin/backends/aot_eager.py on symbolic_trace graphs: outputs and
gradients match eager, parameters read through get_attr nodes get their gradients."""

import pytest
import torch

from torch_plugin.backends.aot_eager import flatten_graph_outputs
from torch_plugin.backends.registry import lookup_backend
from torch_plugin.contract import call_backend


def _compile(gm, example_inputs):
    return call_backend(
        lookup_backend("aot_eager"), gm, example_inputs, backend_name="aot_eager", graph_name="g"
    )


def test_pointwise_matches_eager(pointwise_graph):
    compiled = _compile(pointwise_graph, [torch.randn(8), torch.randn(8)])
    x, y = torch.randn(8), torch.randn(8)
    out = compiled(x, y)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, torch.cos(x) + torch.sin(y), atol=1e-6, rtol=0)


def test_inference_matches_eager(mlp):
    with torch.no_grad():
        compiled = _compile(torch.fx.symbolic_trace(mlp), [torch.randn(4, 16)])
        x = torch.randn(4, 16)
        out, expected = compiled(x), mlp(x)
    assert type(out) is dict and type(out["parts"]) is tuple
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)


def _grads(module, x):
    return [p.grad.clone() for p in module.parameters()] + [x.grad.clone()]


def test_training_gradients_match_eager(mlp):
    compiled = _compile(torch.fx.symbolic_trace(mlp), [torch.randn(4, 16, requires_grad=True)])
    x = torch.randn(4, 16, requires_grad=True)

    expected = mlp(x)
    (
        expected["out"].sum() + expected["parts"][0].sum() + expected["parts"][1].pow(2).sum()
    ).backward()
    expected_grads = _grads(mlp, x)
    mlp.zero_grad(set_to_none=True)
    x.grad = None

    out = compiled(x)
    assert out["out"].requires_grad
    (out["out"].sum() + out["parts"][0].sum() + out["parts"][1].pow(2).sum()).backward()
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    grads = _grads(mlp, x)  # includes mlp.scale, read through a get_attr node
    assert len(grads) == 6
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, expected_grad, atol=1e-6, rtol=0)


def test_input_mutation_is_kept():
    def add_one_(x):
        x.add_(1)
        return x * 2

    gm = torch.fx.symbolic_trace(add_one_)
    compiled = _compile(gm, [torch.zeros(3)])
    x = torch.zeros(3)
    out = compiled(x)
    torch.testing.assert_close(x, torch.ones(3), atol=0, rtol=0)
    torch.testing.assert_close(out, torch.full((3,), 2.0), atol=0, rtol=0)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x + 1,
        lambda x: (x + 1, x * 2),
        lambda x: [x + 1],
        lambda x: {"a": (x + 1, [x * 2]), "b": x - 1},
        lambda x: (x, (x + 1,)),
    ],
    ids=["tensor", "flat_tuple", "list", "nested_dict", "nested_tuple"],
)
def test_flatten_graph_outputs_round_trips(fn):
    gm = torch.fx.symbolic_trace(fn)
    x = torch.randn(3)
    expected = fn(x)
    rebuild = flatten_graph_outputs(gm)
    flat = gm(x)
    assert type(flat) is tuple and all(isinstance(t, torch.Tensor) for t in flat)
    out = rebuild(list(flat))
    assert type(out) is type(expected)
    torch.testing.assert_close(out, expected, atol=0, rtol=0)


def test_backward_compiles_and_runs_with_capture_off(mlp):
    """The backward graph is compiled and run from backward(), outside the compiled forward
    call; capture must stay off for it even when an optimize region is active."""
    from torch_plugin import _C

    compiled = _compile(torch.fx.symbolic_trace(mlp), [torch.randn(4, 16, requires_grad=True)])
    out = compiled(torch.randn(4, 16, requires_grad=True))
    seen = []

    def callback(frame):  # returns None: run unmodified (and mark skipped, undone below)
        seen.append(frame.f_code)

    previous = _C.set_eval_frame_callback(callback)
    try:
        out["out"].sum().backward()
    finally:
        _C.set_eval_frame_callback(previous)
        for code in seen:
            _C.reset_code(code)
    assert mlp.fc1.weight.grad is not None
    fx_frames = [c.co_name for c in seen if c.co_filename.startswith("<eval_with_key>")]
    assert fx_frames == []
