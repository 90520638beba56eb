"""Typed kernels (issue #27, ops-typed): every case of op_coverage/typed_cases.py through the
"plugin" backend against eager, on fresh inputs over several calls, values and dtypes exact
(nan positions and signed zeros included), and the op inside a generated kernel (no
"fallback aten::<op>" step) unless the case documents a fallback. The shared harness
(op_coverage/test_op_coverage.py) runs the same cases on both devices; this file is the local
runner of the typed cases (one dtype per case by default, every dtype under the slow marker)
plus the attention-mask chains that must fuse, on CPU and, when present, CUDA."""

import importlib.util
import pathlib
import sys
import zlib

import pytest
import torch

_spec = importlib.util.spec_from_file_location(
    "typed_cases", pathlib.Path(__file__).parent / "op_coverage" / "typed_cases.py"
)
typed_cases = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("typed_cases", typed_cases)  # dataclasses look the module up
_spec.loader.exec_module(typed_cases)


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))


@pytest.fixture(name="graphs")
def _graphs(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every CompiledGraph built during the test."""
    from torch_plugin.compiler import stages as compile_mod

    built: list = []
    init = compile_mod.CompiledGraph.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(compile_mod.CompiledGraph, "__init__", record)
    return built


def _nonzero(shape, dtype, gen):
    t = typed_cases.EXTRA_DOMAINS["typed"](shape, dtype, gen)
    return torch.where(t == 0, torch.ones((), dtype=dtype), t)


DOMAINS = {
    **typed_cases.EXTRA_DOMAINS,
    "bool": lambda shape, dtype, gen: torch.rand(shape, generator=gen) < 0.5,
    "nonzero": _nonzero,
}


def make_inputs(case, dtype, device, seed):
    gen = torch.Generator().manual_seed(seed)
    # The first input (2, 5, 129) (odd inner size: vector loops and their tails), the others
    # broadcast from (5, 129).
    shapes = [(2, 5, 129)] + [(5, 129)] * (len(case.inputs) - 1)
    return [DOMAINS[d](s, dtype, gen).to(device) for d, s in zip(case.inputs, shapes)]


def assert_same(got, want, tol=(0.0, 0.0)):
    if isinstance(want, (tuple, list)):
        for g, w in zip(got, want):
            assert_same(g, w, tol)
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=tol[0], atol=tol[1], equal_nan=True)
    if want.dtype.is_floating_point:
        zero = want == 0
        assert torch.equal(torch.signbit(got[zero]), torch.signbit(want[zero])), "signed zeros"


def fallbacks(graph) -> list[str]:
    return [s for s in graph.describe().splitlines() if "fallback" in s]


def run_case(case, dtype, device, compile_plugin, graphs):
    seed = zlib.crc32(f"{case.name}/{dtype}".encode())
    c = compile_plugin(case.fn, *make_inputs(case, dtype, device, seed))
    for call in range(1, 3):
        args = make_inputs(case, dtype, device, seed + call)
        assert_same(c(*args), case.fn(*args), (case.tol or {}).get(dtype, (0.0, 0.0)))
    names = (case.aten,) if isinstance(case.aten, str) else case.aten
    left = [s for s in fallbacks(graphs[-1]) if any(f"{n}." in s or s.endswith(n) for n in names)]
    if case.fused:
        assert not left, f"{case.name} {dtype}: ran as ATen: {left}"
    else:
        assert left, f"{case.name} {dtype}: documented fallback ({case.why}) did not happen"


_FAST = [(c, c.dtypes[i % len(c.dtypes)]) for i, c in enumerate(typed_cases.TYPED_CASES)]
_ALL = [(c, d) for c in typed_cases.TYPED_CASES for d in c.dtypes if (c, d) not in _FAST]
_DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize(("case", "dtype"), _FAST, ids=[f"{c.name}-{d}" for c, d in _FAST])
def test_typed_case(case, dtype, device, compile_plugin, graphs):
    run_case(case, dtype, device, compile_plugin, graphs)


@pytest.mark.slow
@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize(("case", "dtype"), _ALL, ids=[f"{c.name}-{d}" for c, d in _ALL])
def test_typed_case_every_dtype(case, dtype, device, compile_plugin, graphs):
    run_case(case, dtype, device, compile_plugin, graphs)


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
