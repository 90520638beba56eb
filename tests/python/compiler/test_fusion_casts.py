"""Autocast's casts of flattened activations (csrc/compiler/passes/fusion_casts.cpp): a
dtype conversion after a view becomes the view of a conversion, so it joins the kernel that
computed its input instead of running as a lone ATen copy. Against eager on fresh random
inputs over three calls, on the CPU (bf16 autocast) and on a GPU (bf16 and fp16 autocast),
asserting from the executor's steps that no _to_copy stays an ATen call."""

from __future__ import annotations

import pytest
import torch

import torch_plugin


def _record_compiled_graphs(monkeypatch):
    from torch_plugin.compiler import stages as compile_mod

    built = []
    init = compile_mod.CompiledGraph.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(compile_mod.CompiledGraph, "__init__", record)
    return built


class Block(torch.nn.Module):
    """GPT-2's Conv1D shape (norm, view to 2-d, addmm under autocast) and an F.linear of a
    3-d input; ``reuse``: the norm's fp32 output is read by something else too; ``permute``:
    the cast follows a transpose."""

    def __init__(self, c: int, reuse: bool, permute: bool) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(c)
        self.weight = torch.nn.Parameter(torch.randn(c, 2 * c) / c**0.5)
        self.bias = torch.nn.Parameter(torch.randn(2 * c))
        self.proj = torch.nn.Linear(c, c)
        self.reuse = reuse
        self.permute = permute

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        flat = h.view(-1, h.size(-1))
        y = torch.addmm(self.bias, flat, self.weight)  # GPT-2's Conv1D
        y = torch.relu(y).view(*x.shape[:-1], -1)
        out = self.proj(torch.sigmoid(self.norm(y[..., : x.size(-1)]) + 1))
        # GPT-2's gelu_new after a product: autocast runs pow in fp32, so the product's
        # bf16 output is cast up after the view (no kernel before it to join: the cast
        # moves to the GELU's kernel instead).
        g = out.view(-1, out.size(-1))
        g = 0.5 * g * (1.0 + torch.tanh(0.7978845608 * (g + 0.044715 * torch.pow(g, 3.0))))
        out = g.view_as(out)
        if self.permute:
            out = out + (h.transpose(0, 1) @ self.proj.weight[:, : x.size(-1)].T).transpose(0, 1)
        if self.reuse:
            out = out + flat.sum()
        return out


CASES = [
    ("cpu", torch.bfloat16),
    ("cuda", torch.bfloat16),
    ("cuda", torch.float16),
]


@pytest.mark.parametrize("device,dtype", CASES, ids=[f"{d}-{str(t)[6:]}" for d, t in CASES])
@pytest.mark.parametrize("reuse", [False, True], ids=["single", "reuse"])
@pytest.mark.parametrize("permute", [False, True], ids=["view", "permute"])
def test_casts_after_views_join_kernels(device, dtype, reuse, permute, monkeypatch):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    torch_plugin.reset()
    built = _record_compiled_graphs(monkeypatch)
    torch.manual_seed(0)
    model = Block(24, reuse, permute).to(device).eval()
    compiled = torch_plugin.optimize("plugin")(model)
    tol = 3e-2 if dtype == torch.bfloat16 else 5e-3
    for call in range(3):
        x = torch.randn(2, 7, 24, device=device) * (call + 1)
        with torch.no_grad(), torch.autocast(device, dtype):
            want = model(x)
            got = compiled(x)
        assert got.dtype == want.dtype and got.shape == want.shape
        scale = max(want.abs().max().item(), 1.0)
        torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol * scale)
    assert built, "no graph went through the plugin compiler"
    steps = "\n".join(g.describe() for g in built)
    casts = [line for line in steps.splitlines() if "fallback aten::_to_copy" in line]
    # The weight casts are folded (frozen), the activation casts fused.
    assert not casts, steps
