"""Training graphs through the plugin compiler: both AOTAutograd graphs are lowered and
compiled (a backward graph returns None for inputs that need no gradient, which the IR
cannot return: training._without_none_outputs), and the gradients equal eager's."""

from __future__ import annotations

import copy

import pytest
import torch

import torch_plugin
from torch_plugin.compiler import stages

pytestmark = pytest.mark.usefixtures("fresh_capture")


def test_forward_and_backward_graphs_lowered(monkeypatch):
    compiled: list = []
    real = stages.compile_graph

    def recording(gm, *args, **kwargs):
        out = real(gm, *args, **kwargs)
        compiled.append(getattr(out, "unlowered", None))
        return out

    monkeypatch.setattr(stages, "compile_graph", recording)
    torch.manual_seed(0)
    m1 = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)
    )
    m2 = copy.deepcopy(m1)
    fast = torch_plugin.optimize(m2)
    for _ in range(3):
        x = torch.randn(4, 8)  # needs no gradient: its gradient is None in the backward graph
        m1(x).square().sum().backward()
        fast(x).square().sum().backward()
        for p, q in zip(m1.parameters(), m2.parameters()):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-5)
    assert len(compiled) == 2  # forward, backward; cached after
    assert compiled == [None, None], compiled


def test_bf16_batch_norm_backward_graph_compiled(monkeypatch):
    """The backward graph of conv + BatchNorm + ReLU under CPU bf16 autocast, compiled with
    its None outputs removed, against the same ATen graph run op by op on the same arguments;
    and the model's gradients against eager's. Issue #30: CPU batch norm saves fp32
    statistics where its meta kernel says bf16, and the backward graph's fused kernels read
    them as bf16 (a NaN convolution weight gradient, a BatchNorm weight gradient off by
    1e28) until the executor converted an ATen call's result to its IR dtype."""
    from torch_plugin.compiler import training

    saved: dict = {}
    real = training._without_none_outputs

    def spy(gm, compile_fn):
        if "gm" not in saved and any(n.name.startswith("tangents") for n in gm.graph.nodes):
            saved["gm"] = copy.deepcopy(gm)
            compiled = real(gm, compile_fn)

            def run(args):
                saved["args"] = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
                return compiled(args)

            run._boxed_call = True
            return run
        return real(gm, compile_fn)

    monkeypatch.setattr(training, "_without_none_outputs", spy)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1, bias=False), torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4),
    )  # fmt: skip
    reference = copy.deepcopy(model)
    fast = torch_plugin.optimize(model)
    for step in range(3):
        x = torch.randn(4, 3, 8, 8)
        with torch.autocast("cpu", torch.bfloat16):
            out = fast(x)
            want_out = reference(x)
        out.float().square().mean().backward()
        want_out.float().square().mean().backward()
        torch.testing.assert_close(out, want_out, rtol=2e-2, atol=2e-2)
        for (name, p), q in zip(reference.named_parameters(), model.parameters()):
            # The compiled backward reads the statistics rounded to bf16 (as the meta
            # kernel, and Inductor's decomposition, say), eager's fp32.
            torch.testing.assert_close(
                q.grad, p.grad, rtol=5e-2, atol=5e-2, msg=f"step {step}: {name}.grad"
            )
        for p in (*reference.parameters(), *model.parameters()):
            p.grad = None
    gm, args = saved["gm"], saved["args"]
    want = gm(*args)
    # The backward graph itself lowered (training._reduced_precision keeps such graphs as
    # their ATen graph in the model, for precision; the kernels must still be right).
    monkeypatch.setattr(training, "_reduced_precision", lambda gm: None)
    compiled = real(copy.deepcopy(gm), stages.compile_graph)
    assert getattr(compiled, "unlowered", None) is None  # lowered, not run op by op
    got = compiled([a for a in args])
    for i, (w, g) in enumerate(zip(want, got)):
        if w is not None:
            torch.testing.assert_close(g, w, rtol=1e-2, atol=1e-3, msg=f"output {i}")


class _ConvEmbed(torch.nn.Module):
    """A convolution with batch norm, and an embedding: the two backward ops the CUDA
    decomposition table keeps whole (decompositions.NATIVE_CUDA)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(8)
        self.embed = torch.nn.Embedding(50, 8, padding_idx=0)

    def forward(self, x, ids):
        y = torch.relu(self.bn(self.conv(x))).mean((2, 3))
        return y + self.embed(ids).mean(1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.usefixtures("no_tf32")
def test_cuda_backward_keeps_batch_norm_and_embedding_backward(monkeypatch, precision, graphs):
    """On CUDA the backward graph runs ATen's batch norm and embedding backward (not their
    decompositions: two sums per norm, an accumulating index_put), compiled, not op by op
    (bf16 autocast included: training._reduced_precision refuses CPU graphs only), with the
    convolution ATen's in the graph's layout (training._compile_training_graph: no
    channels-last copies of the saved activations); the gradients, outputs and BatchNorm
    buffers equal eager's over three steps."""
    from torch_plugin.compiler import training

    seen: list = []
    real = training._without_none_outputs

    def spy(gm, compile_fn):
        seen.append({str(n.target) for n in gm.graph.nodes if n.op == "call_function"})
        return real(gm, compile_fn)

    monkeypatch.setattr(training, "_without_none_outputs", spy)
    torch.manual_seed(0)
    ref = _ConvEmbed().cuda()
    model = copy.deepcopy(ref)
    fast = torch_plugin.optimize(model, backend="plugin")
    unlowered = dict(training.counters)
    bf16 = precision == "bf16"
    tol = {"rtol": 3e-2, "atol": 3e-2} if bf16 else {"rtol": 1e-4, "atol": 1e-5}
    for step in range(3):
        x = torch.randn(4, 3, 8, 8, device="cuda")
        ids = torch.randint(0, 50, (4, 5), device="cuda")
        ids[0, 0] = 0  # the padding row gets no gradient
        with torch.autocast("cuda", torch.bfloat16, enabled=bf16):
            want, got = ref(x, ids), fast(x, ids)
        want.float().square().mean().backward()
        got.float().square().mean().backward()
        torch.testing.assert_close(got, want, **tol, msg=f"step {step}: output")
        for (name, p), q in zip(ref.named_parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, **tol, msg=f"step {step}: {name}.grad")
            p.grad = q.grad = None
        for (name, b), c in zip(ref.named_buffers(), model.buffers()):
            torch.testing.assert_close(c, b, **tol, msg=f"step {step}: buffer {name}")
    backward = [ops for ops in seen if "aten.convolution_backward.default" in ops]
    assert backward, seen
    assert "aten.native_batch_norm_backward.default" in backward[0], backward[0]
    assert "aten.embedding_dense_backward.default" in backward[0], backward[0]
    assert dict(training.counters) == unlowered, "a training graph ran op by op"
    # (conv_pointwise: the channels-last cuDNN convolution, whose graph outputs are copied)
    assert graphs and all("conv_pointwise" not in g.ir for g in graphs), graphs[0].ir
