"""CUDA graphs, modes and the never-slower-than-eager choice of the "plugin" backend.

The mode plumbing and the capturability rules run on the CPU; everything that replays a CUDA
graph needs a GPU and is skipped without one. Each GPU test compares against eager on fresh
random inputs over several calls (compile, capture, replays), and checks what the caller can
observe: outputs kept from an earlier call, mutated inputs, gradients.
"""

from __future__ import annotations

import logging

import pytest
import torch

import torch_plugin
from torch_plugin.compiler import cuda_graphs

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_unknown_mode_is_an_error():
    with pytest.raises(ValueError, match="unknown mode 'fast'"):
        torch_plugin.optimize("plugin", mode="fast")


def test_mode_for_a_backend_without_modes_is_an_error():
    with pytest.raises(ValueError, match="only 'plugin' and 'inductor' take a mode"):
        torch_plugin.optimize("eager", mode="reduce-overhead")


def test_reduce_overhead_on_cpu_matches_eager():
    torch_plugin.reset()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    fast = torch_plugin.optimize("plugin", mode="reduce-overhead")(model)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(5, 8)
            torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-5)


def test_why_not_capturable():
    cpu = [torch.randn(2)]
    assert "not all on one CUDA device" in cuda_graphs.why_not_capturable([], cpu, [])
    meta = [torch.empty(2, device="meta")]
    assert cuda_graphs.why_not_capturable(["fallback aten::add.Tensor"], meta, []) is not None


def test_op_impurity():
    assert cuda_graphs.op_impurity("aten::add.Tensor") is None
    assert "mutates" in cuda_graphs.op_impurity("aten::add_.Tensor")
    assert "mutates" in cuda_graphs.op_impurity("aten::copy_")
    assert "random" in cuda_graphs.op_impurity("aten::native_dropout")
    assert "random" in cuda_graphs.op_impurity("aten::bernoulli.p")
    assert "not a known op" in cuda_graphs.op_impurity("aten::no_such_op")


def _mlp():
    torch.manual_seed(0)
    return (
        torch.nn.Sequential(
            torch.nn.Linear(64, 128),
            torch.nn.GELU(),
            torch.nn.LayerNorm(128),
            torch.nn.Linear(128, 32),
        )
        .cuda()
        .eval()
    )


@requires_cuda
@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_cuda_graph_replays_match_eager_and_keep_earlier_outputs(mode, caplog):
    caplog.set_level(logging.INFO, logger="torch_plugin")
    torch_plugin.reset()
    model = _mlp()
    fast = torch_plugin.optimize("plugin", mode=mode)(model)
    before = dict(cuda_graphs.counters)
    kept = []
    with torch.no_grad():
        for _ in range(6):
            x = torch.randn(4, 64, device="cuda")
            out = fast(x)
            kept.append((x, out))
            torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
        # outputs of earlier calls are the caller's own: later replays did not overwrite them
        for x, out in kept:
            torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
    if mode == "reduce-overhead":
        assert cuda_graphs.counters["captured"] > before["captured"], caplog.text
        assert cuda_graphs.counters["replays"] > before["replays"]


@requires_cuda
def test_input_mutation_is_not_captured_and_reaches_the_caller():
    torch_plugin.reset()

    def f(x, y):
        x.add_(1)
        return x * y

    fast = torch_plugin.optimize("plugin", mode="reduce-overhead")(f)
    for _ in range(4):
        x = torch.randn(16, device="cuda")
        y = torch.randn(16, device="cuda")
        xe = x.clone()
        out = fast(x, y)
        expected = f(xe, y)
        torch.testing.assert_close(out, expected)
        torch.testing.assert_close(x, xe)


@requires_cuda
def test_random_ops_are_not_captured():
    torch_plugin.reset()

    def f(x):
        return torch.nn.functional.dropout(x, 0.5, training=True) + 1

    fast = torch_plugin.optimize("plugin", mode="reduce-overhead")(f)
    seen = set()
    with torch.no_grad():
        for _ in range(4):
            x = torch.ones(4096, device="cuda")
            out = fast(x)
            kept = (out == 1 + 2).float().mean().item()
            assert 0.4 < kept < 0.6, kept  # about half the elements kept, scaled by 2
            seen.add(out.sum().item())
    assert len(seen) > 1, "every call drew the same random numbers"


@requires_cuda
def test_training_step_on_cuda_matches_eager():
    torch_plugin.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
    ).cuda()
    ref = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
    ).cuda()
    ref.load_state_dict(model.state_dict())
    fast = torch_plugin.optimize("plugin")(model)
    for _ in range(3):
        x = torch.randn(8, 32, device="cuda")
        fast(x).sum().backward()
        ref(x).sum().backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)


@requires_cuda
def test_inductor_reduce_overhead_matches_eager():
    torch_plugin.reset()
    model = _mlp()
    fast = torch_plugin.optimize("inductor", mode="reduce-overhead")(model)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(4, 64, device="cuda")
            torch.testing.assert_close(fast(x).clone(), model(x), rtol=1e-4, atol=1e-5)
