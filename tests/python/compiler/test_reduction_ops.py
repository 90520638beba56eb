"""REDUCTION_CASES (op_coverage/reduction_cases.py) on the CPU, by a small runner of this
file's own (the shared op-coverage harness runs the same list on every device): each case
goes through ``torch_plugin.optimize(fn, backend="plugin")`` with static sizes over
several calls on fresh inputs, compares with eager (values, dtypes, NaN positions, exact
int64 indices) and, for ``fused`` cases, checks from the compiled graph's IR and executor
steps that the op ran inside a generated kernel (no ATen fallback step)."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
import zlib

import pytest
import torch

import torch_plugin
from torch_plugin.compiler import stages as compile_mod

_spec = importlib.util.spec_from_file_location(
    "reduction_cases", pathlib.Path(__file__).parent / "op_coverage" / "reduction_cases.py"
)
cases_mod = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("reduction_cases", cases_mod)
_spec.loader.exec_module(cases_mod)
CASES = {c.name: c for c in cases_mod.REDUCTION_CASES}


def _any(shape, dtype, gen):
    x = torch.randn(shape, generator=gen) * 3
    flat = x.view(-1)
    specials = [float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e30, -1e-30]
    idx = torch.randperm(flat.numel(), generator=gen)[: len(specials)]
    for i, v in zip(idx.tolist(), specials):
        flat[i] = v
    return x.to(dtype)


DOMAINS = {"any": _any, "case": lambda s, d, g: torch.randn(s, generator=g).to(d)}
DOMAINS.update(cases_mod.EXTRA_DOMAINS)
SHAPES = [(3, 37), (2, 5, 129)]


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))


@pytest.fixture(name="graphs")
def _graphs(monkeypatch: pytest.MonkeyPatch) -> list:
    built: list = []
    init = compile_mod.CompiledGraph.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(compile_mod.CompiledGraph, "__init__", record)
    return built


def _compare(got, want, tol):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _compare(g, w, tol)
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    if not want.is_floating_point():
        assert torch.equal(got, want), f"indices differ:\n{got}\n{want}"
        return
    torch.testing.assert_close(got, want, rtol=tol[0], atol=tol[1], equal_nan=True)


# The CUDA renderer has no scan: cumsum/cumprod are ATen calls there.
NO_CUDA_KERNEL = ("aten::cumsum", "aten::cumprod")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name", list(CASES))
def test_reduction_case(name, device, dtype, shape, graphs):
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    case = CASES[name]
    if dtype not in case.dtypes:
        pytest.skip(f"{name} does not run in {dtype}")
    tol = (1.3e-6 * 10, 1e-5) if dtype == torch.float32 else (2e-2, 2e-2)
    if case.tol and dtype in case.tol:
        tol = case.tol[dtype]
    torch._dynamo.reset()
    compiled = torch_plugin.optimize("plugin", dynamic=False)(case.fn)
    gen = torch.Generator().manual_seed(zlib.crc32(f"{name}{dtype}{shape}".encode()))
    # ATen's CUDA kernels accumulate in fp32 like the generated ones (its CPU var/std and
    # cumsum use double); the tolerances above hold on both.
    for _ in range(3):
        args = [DOMAINS[d](shape, dtype, gen).to(device) for d in case.inputs]
        _compare(compiled(*args), case.fn(*args), tol)
    assert len(graphs) == 1
    steps = graphs[0].describe()
    body = [ln for ln in graphs[0].ir.splitlines() if ln.lstrip().startswith("|")]
    atens = (case.aten,) if isinstance(case.aten, str) else case.aten
    fused = case.fused and not (device == "cuda" and set(atens) & set(NO_CUDA_KERNEL))
    for op in atens:
        inside = any(op + "." in ln or op + "(" in ln for ln in body)
        assert inside == fused, f"{op}: fused={inside}\n{graphs[0].ir}\n{steps}"
    if fused:
        assert "aten" not in steps.replace("kernel fused_", ""), steps
