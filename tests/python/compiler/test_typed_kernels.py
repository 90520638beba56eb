"""Typed kernels (issue #27, ops-typed) beyond single ops: the attention-mask chain and a
mixed-dtype group that must each be ONE generated kernel, against eager, on the CPU and,
when present, CUDA. The single typed ops (op_coverage/typed_cases.py) run in the shared
op-coverage harness (op_coverage/test_op_coverage.py)."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))


def fallbacks(graph) -> list[str]:
    return [s for s in graph.describe().splitlines() if "fallback" in s]


_DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def attention_mask_chain(scores, mask, pos):
    """A padding mask (mask == 0 -> -inf) and a causal mask from arange comparisons, then
    softmax, as attention layers build them."""
    causal = pos[None, :] <= pos[:, None]
    s = scores.masked_fill(mask == 0, float("-inf"))
    s = s.masked_fill(~causal, float("-inf"))
    return torch.softmax(s, dim=-1)


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_mask_chain_fuses(device, dtype, compile_plugin, graphs):
    def make():
        scores = torch.randn(2, 3, 17, 17, dtype=dtype, device=device)
        mask = torch.randint(0, 2, (2, 1, 1, 17), device=device)
        mask[:, :, :, 0] = 1  # every row keeps a column: no all -inf row
        return scores, mask, torch.arange(17, device=device)

    c = compile_plugin(attention_mask_chain, *make())
    for _ in range(3):
        args = make()
        got, want = c(*args), attention_mask_chain(*args)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.float(), want.float(), rtol=1.6e-2, atol=1e-5)
    steps = fallbacks(graphs[-1])
    for op in ("aten::eq", "aten::le", "aten::where", "aten::bitwise_not", "aten::masked_fill"):
        assert not [s for s in steps if op in s], f"{op} ran as ATen: {steps}"
    assert "kernel fused_" in graphs[-1].describe()


@pytest.mark.parametrize("device", _DEVICES)
def test_mixed_dtype_group_is_one_kernel(device, compile_plugin, graphs):
    """int64 positions compared, a bool mask selecting over bf16 values, an int32 result and a
    float64 one: one kernel, every value computed in its own type."""

    def fn(x, pos, d):
        keep = (pos % 4 != 0) & (pos < 3 * pos.flip(0))
        y = torch.where(keep, x, -x) * 2
        return y, (pos * 3 + 1).to(torch.int32), d * 0.1 + pos

    def make():
        return (
            torch.randn(7, 33, device=device).bfloat16(),
            torch.randint(-50, 50, (33,), device=device),
            torch.randn(7, 33, dtype=torch.float64, device=device),
        )

    c = compile_plugin(fn, *make())
    for _ in range(2):
        args = make()
        got, want = c(*args), fn(*args)
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        # float64 stays float64: 1e-15 relative, far below float32's 6e-8.
        torch.testing.assert_close(got[2], want[2], rtol=1e-15, atol=1e-15)
    steps = fallbacks(graphs[-1])
    for op in ("aten::remainder", "aten::ne", "aten::lt", "aten::where", "aten::_to_copy"):
        assert not [s for s in steps if op in s], f"{op} ran as ATen: {steps}"
