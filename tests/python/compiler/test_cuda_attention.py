"""Attention written op by op becomes one fused attention call on CUDA (pass
attention_patterns) and still matches eager (GPU only; the rewrite itself is tested without a
GPU in tests/cpp/compiler/test_attention_patterns.cpp)."""

from __future__ import annotations

import math

import pytest
import torch

import torch_plugin
from torch_plugin.artifact import compile_to_graph_module

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.usefixtures("fresh_capture"),
]


class Attention(torch.nn.Module):
    """Multi-head self-attention as older HF models write it: matmul, scale, additive mask,
    softmax, matmul."""

    def __init__(self, dim=64, heads=4, scale_by="div"):
        super().__init__()
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.heads = heads
        self.scale_by = scale_by

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2))
        if self.scale_by == "div":
            scores = scores / math.sqrt(d // self.heads)
        else:
            scores = scores * (d // self.heads) ** -0.5
        probs = torch.softmax(scores + mask, dim=-1)
        return torch.matmul(probs, v).transpose(1, 2).reshape(b, s, d)


@pytest.mark.parametrize("scale_by", ["div", "mul"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unfused_attention_matches_eager_and_is_fused(scale_by, dtype):
    torch.manual_seed(0)
    model = Attention(scale_by=scale_by).cuda().eval().to(dtype)
    fast = torch_plugin.optimize("plugin")(model)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 16, 64, device="cuda", dtype=dtype)
            mask = torch.where(torch.rand(2, 1, 1, 16, device="cuda") < 0.2, -1e4, 0.0).to(dtype)
            out, ref = fast(x, mask).float(), model(x, mask).float()
            assert (out - ref).abs().max().item() <= tol * ref.abs().max().item()
        gm = compile_to_graph_module(model, x, mask)
    targets = {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    assert "aten.scaled_dot_product_attention.default" in targets, targets
    assert "aten.bmm.default" not in targets, targets


class SdpaBlock(torch.nn.Module):
    """Self-attention as current HF models write it: F.scaled_dot_product_attention on
    head views of one projection."""

    def __init__(self, dim=64, heads=4):
        super().__init__()
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)
        self.heads = heads

    def forward(self, x, mask):
        b, s, d = x.shape
        q, k, v = (
            t.view(b, s, self.heads, d // self.heads).transpose(1, 2)
            for t in self.qkv(x).split(d, dim=-1)
        )
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return torch.nn.functional.gelu(self.out(o.transpose(1, 2).reshape(b, s, d))) + x


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_sdpa_is_traced_as_the_leaf_op_and_matches_eager(dtype, masked, monkeypatch):
    """F.scaled_dot_product_attention reaches the compiled graph as
    torch_plugin::scaled_dot_product_attention (not the math path, not cuDNN attention's
    int results) and the graph is lowered; outputs match eager over several calls."""
    from torch_plugin.compiler import stages as compile_mod

    graphs = []
    real = compile_mod.compile_graph

    def recording(gm, *args, **kwargs):
        graphs.append(gm)
        result = real(gm, *args, **kwargs)
        assert getattr(result, "unlowered", None) is None, result.unlowered
        return result

    monkeypatch.setattr(compile_mod, "compile_graph", recording)
    # Traced, not loaded from a warm graph cache (an earlier run's entry skips compile_graph).
    monkeypatch.setenv("TORCH_PLUGIN_GRAPH_CACHE", "0")
    torch.manual_seed(0)
    model = SdpaBlock().cuda().eval().to(dtype)
    fast = torch_plugin.optimize("plugin")(model)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(2, 16, 64, device="cuda", dtype=dtype)
            mask = (
                torch.where(torch.rand(2, 1, 16, 16, device="cuda") < 0.2, -1e4, 0.0).to(dtype)
                if masked
                else None
            )
            out, ref = fast(x, mask).float(), model(x, mask).float()
            assert (out - ref).abs().max().item() <= tol * ref.abs().max().item()
    targets = {str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"}
    assert "torch_plugin.scaled_dot_product_attention.default" in targets, targets
    assert not any("_scaled_dot_product" in t or "bmm" in t for t in targets), targets


def test_leaf_op_takes_a_column_broadcast_mask_without_the_math_path():
    """A bool mask expanded from a column (Hugging Face's sdpa_mask under capture: last
    dimension stride 0) is given to the fused kernels; with the math path switched off the
    leaf op still runs, and it matches eager attention with the math path allowed."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from torch_plugin import _C  # noqa: F401 - registers the torch_plugin ops

    torch.manual_seed(0)
    for _ in range(3):
        q, k, v = (torch.randn(4, 64, 6, 32, device="cuda").transpose(1, 2) for _ in range(3))
        # as sdpa_mask builds it: (query index >= 0) as a [1, 1, L, 1] column, expanded
        mask = (torch.arange(64, device="cuda")[None, None, :, None] >= 0).expand(4, 1, 64, 64)
        assert mask.stride(-1) == 0
        want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION]):
            got = torch.ops.torch_plugin.scaled_dot_product_attention(q, k, v, mask)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_multihead_attention_fused_call_becomes_the_leaf_op(monkeypatch):
    """nn.MultiheadAttention (fp32, eval) reaches the ATen graph as
    _scaled_dot_product_efficient_attention, tagged as drawing random numbers; without
    dropout it is rewritten to the leaf op, so the graph is pure (timed against eager, may be
    captured); outputs match eager over several calls."""
    from torch_plugin.compiler import inference as plugin_mod

    graphs = []
    real = plugin_mod.aten_graph_impurity

    def recording(gm):
        graphs.append(gm)
        return real(gm)

    monkeypatch.setattr(plugin_mod, "aten_graph_impurity", recording)
    # A graph-cache hit (an earlier run on this machine) would skip the lowering recorded here.
    monkeypatch.setenv("TORCH_PLUGIN_GRAPH_CACHE", "0")
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(64, 4, batch_first=True).cuda().eval()

    def block(x):
        return mha(x, x, x, need_weights=False)[0].relu() + x

    fast = torch_plugin.optimize("plugin")(block)
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(3, 20, 64, device="cuda")
            torch.testing.assert_close(fast(x), block(x), rtol=1e-4, atol=1e-4)
    assert graphs, "no inference graph was compiled"
    targets = {str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"}
    assert "torch_plugin.scaled_dot_product_attention.default" in targets, targets
    assert not any("_scaled_dot_product" in t for t in targets), targets
    assert all(real(gm) is None for gm in graphs)
