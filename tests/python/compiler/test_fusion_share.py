"""Shared producers (csrc/compiler/passes/fusion_share.h): a cheap mask read by several
kernels is recomputed inside each instead of stored once and read by each. Differential
against eager (several calls, fresh inputs, NaN and -0.0 among them), and from the compiled
graph's description: no step of its own for the mask."""

import pytest
import torch

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU"))]  # fmt: skip
MASK_OPS = ("aten::gt", "aten::lt", "aten::bitwise_and", "aten::logical_and")


def _steps(graph) -> list[str]:
    return graph.describe().splitlines()


def _no_mask_step(graph) -> None:
    steps = _steps(graph)
    assert not [s for s in steps if any(op in s for op in MASK_OPS)], steps


def attention_masks(mask, s1, s2):
    """A [B, 1, 1, S] padding mask applied to two [B, H, S, S] score tensors."""
    keep = (mask > 0.5) & (mask < 2.0)
    return torch.where(keep, s1, -1e4), torch.where(keep, s2, 0.0) * 2


def positive_part_twice(x, w):
    """`x > 0` read by two kernels of the same sizes, which a matrix product keeps apart."""
    m = x > 0
    a = torch.where(m, x, 0.0) * 3
    return a, torch.where(m, a @ w, -1.0) + 1


def _inputs(fn, device, dtype, gen):
    if fn is attention_masks:
        mask = (torch.rand(2, 1, 1, 24, generator=gen) < 0.7).to(dtype)
        s = [torch.randn(2, 4, 24, 24, generator=gen).to(dtype) for _ in range(2)]
        s[0].view(-1)[:3] = torch.tensor([float("nan"), -0.0, float("inf")]).to(dtype)
        return [t.to(device) for t in (mask, *s)]
    x, w = torch.randn(33, 64, generator=gen).to(dtype), torch.eye(64).to(dtype)
    x.view(-1)[:3] = torch.tensor([float("nan"), -0.0, 0.0]).to(dtype)
    return [x.to(device), w.to(device)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("fn", [attention_masks, positive_part_twice])
def test_mask_recomputed_in_each_kernel(fn, dtype, device, graphs, compile_plugin, monkeypatch):
    import torch_plugin

    monkeypatch.setattr(torch_plugin.config, "always_run_compiled", True)
    gen = torch.Generator().manual_seed(0)
    c = compile_plugin(fn, *_inputs(fn, device, dtype, gen))
    for _ in range(3):
        xs = _inputs(fn, device, dtype, gen)
        for got, want in zip(c(*xs), fn(*xs)):
            assert torch.equal(got.isnan(), want.isnan())
            torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
            # -0.0 kept (a NaN's sign is not: kernels store bf16 NaN as the quiet 0x7FC0).
            num = ~want.isnan()
            assert torch.equal(torch.signbit(got[num]), torch.signbit(want[num]))
    assert len(graphs) == 1
    _no_mask_step(graphs[0])
    kernels = [s for s in _steps(graphs[0]) if "kernel fused_" in s]
    assert len(kernels) == 2, _steps(graphs[0])
    # Each consumer's kernel computes the mask: the first comparison twice in the IR.
    assert graphs[0].ir.count("aten::gt.") == 2, graphs[0].ir


@pytest.mark.parametrize("device", DEVICES)
def test_returned_mask_is_still_stored(device, graphs, compile_plugin, monkeypatch):
    """A mask the user gets back is computed once and returned (never only inlined)."""
    import torch_plugin

    monkeypatch.setattr(torch_plugin.config, "always_run_compiled", True)

    def f(x, y):
        m = x > 0
        return torch.where(m, x, 0.0) * 3, torch.where(m, y, -1.0) + 1, m

    gen = torch.Generator().manual_seed(1)
    x, y = (torch.randn(17, 40, generator=gen).to(device) for _ in range(2))
    c = compile_plugin(f, x, y)
    for got, want in zip(c(x, y), f(x, y)):
        assert torch.equal(got, want)
    assert graphs[0].ir.count("aten::gt.") == 1, graphs[0].ir
