"""Random ops generated in kernels (csrc/compiler/codegen/random_ops.h): rand, randn, their
``_like`` forms, ``bernoulli.p`` and training dropout, through the "plugin" backend on the CPU
(and CUDA when available).

The kernels draw other numbers than eager (Philox from the default generator's seed and
offset, as Inductor), so the checks are what a user can observe: statistics against the
distribution and against eager's own numbers (bounds of 6 standard errors at n = 2^20),
dropout's scaling exact for its mask, the same ``torch.manual_seed`` giving the same results,
consecutive calls and eager calls after a call giving other numbers, the generator advanced,
``fallback_random`` giving eager's numbers bit for bit, and that the op ran inside a generated
kernel (``Executor.steps()`` kind ``random_kernel``, no ATen fallback step for it).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

import torch_plugin

N = 1 << 20
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU"))]  # fmt: skip
FLOATS = [torch.float32, torch.bfloat16, torch.float16]


def _compile(fn):
    torch_plugin.reset()
    return torch_plugin.optimize("plugin")(fn)


def _steps(graphs) -> list[tuple[str, str]]:
    return [(kind, op) for g in graphs for kind, op, _ in g.executor.steps()]


def _assert_in_kernel(graphs) -> None:
    steps = _steps(graphs)
    assert any(kind == "random_kernel" for kind, _ in steps), steps
    bad = [op for kind, op in steps if kind == "fallback" and _random_name(op)]
    assert not bad, f"random ops ran as ATen calls: {bad}"


def _random_name(op: str) -> bool:
    return any(w in op for w in ("rand", "bernoulli", "dropout"))


def _within(got: float, want: float, sigma: float, what: str) -> None:
    assert abs(got - want) <= 6 * sigma, f"{what}: {got} vs {want} (6 sigma = {6 * sigma})"


def _rng_state(device: str) -> torch.Tensor:
    return torch.cuda.get_rng_state() if device == "cuda" else torch.get_rng_state()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("kind", ["uniform", "normal"])
def test_statistics_against_distribution_and_eager(kind, dtype, device, graphs):
    draw = torch.rand_like if kind == "uniform" else torch.randn_like
    f = _compile(lambda x: draw(x) * 2 + x)
    x = torch.zeros(N, dtype=dtype, device=device)
    got = ((f(x) - x) / 2).double()
    want = ((draw(x) * 2 + x - x) / 2).double()  # eager's numbers
    _assert_in_kernel(graphs)
    assert got.dtype == want.dtype and got.shape == want.shape
    if kind == "uniform":
        assert got.min() >= 0 and got.max() < 1, (got.min(), got.max())
        mean, var, sd_mean, sd_var = 0.5, 1 / 12, math.sqrt(1 / 12 / N), math.sqrt(1 / 180 / N)
    else:
        mean, var, sd_mean, sd_var = 0.0, 1.0, math.sqrt(1 / N), math.sqrt(2 / N)
    # bf16/fp16 rounding of the values shifts the moments by at most the rounding error.
    eps = {torch.float32: 0.0, torch.bfloat16: 2**-8, torch.float16: 2**-11}[dtype]
    _within(got.mean().item(), mean, sd_mean + eps, "mean")
    _within(got.var().item(), var, sd_var + 4 * eps, "variance")
    _within(got.mean().item(), want.mean().item(), math.sqrt(2) * sd_mean + eps, "mean vs eager")
    _within(got.var().item(), want.var().item(), math.sqrt(2) * sd_var + 4 * eps, "var vs eager")
    assert len(torch.unique(got)) > min(N // 4, 200), "too few distinct values"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_keep_rate_and_exact_scaling(p, dtype, device, graphs):
    f = _compile(lambda x: F.dropout(x, p, training=True))
    x = (torch.rand(N, device=device) + 1).to(dtype)  # nonzero: out == 0 only where dropped
    for _ in range(2):
        out = f(x)
        keep = out != 0
        assert out.dtype == dtype
        assert torch.equal(out, x * keep * (1.0 / (1.0 - p))), "not x * mask / (1 - p)"
        _within(keep.double().mean().item(), 1 - p, math.sqrt(p * (1 - p) / N), "keep rate")
    _assert_in_kernel(graphs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bernoulli_rate(dtype, device, graphs):
    p = 0.2
    f = _compile(lambda x: torch.bernoulli(x, p) + x)
    x = torch.zeros(N, dtype=dtype, device=device)
    out = f(x)
    assert out.dtype == dtype
    assert torch.equal(out, (out == 1).to(dtype)), "values other than 0 and 1"
    _within(out.double().mean().item(), p, math.sqrt(p * (1 - p) / N), "bernoulli rate")
    _assert_in_kernel(graphs)


def _mixed(x: torch.Tensor):
    return (
        F.dropout(x, 0.3, training=True),
        torch.rand_like(x) + x,
        torch.randn_like(x) * 2,
        torch.rand(x.shape[0], device=x.device) - 1,
    )


@pytest.mark.parametrize("device", DEVICES)
def test_reproducible_per_seed_and_advancing(device, graphs):
    f = _compile(_mixed)
    x = torch.randn(4097, device=device)
    torch.manual_seed(1234)
    before = _rng_state(device)
    a = f(x)
    after = _rng_state(device)
    eager_next = torch.rand_like(x)
    torch.manual_seed(1234)
    b = f(x)
    c = f(x)
    _assert_in_kernel(graphs)
    for i, (u, v, w) in enumerate(zip(a, b, c)):
        assert torch.equal(u, v), f"output {i}: same seed, other numbers"
        assert not torch.equal(v, w), f"output {i}: two calls gave the same numbers"
    assert not torch.equal(before, after), "the call did not advance the generator"
    assert not torch.equal(eager_next, a[1] - x), "eager after the call repeated its numbers"
    # Two random ops of one graph draw different numbers (no CSE, no shared stream).
    g = _compile(lambda t: (torch.rand_like(t) + 0, torch.rand_like(t) + 0))
    u, v = g(x)
    assert not torch.equal(u, v)


@pytest.mark.parametrize("device", DEVICES)
def test_fallback_random_gives_eager_numbers(device, graphs, monkeypatch):
    monkeypatch.setattr(torch_plugin.config, "fallback_random", True)

    def fn(x):
        return (
            torch.rand_like(x) + x,
            torch.randn_like(x) * 2,
            torch.bernoulli(x.sigmoid(), 0.3),
            F.dropout(x, 0.3, training=True) if device == "cuda" else x,
        )

    f = _compile(fn)
    x = torch.randn(1000, device=device)
    for seed in (0, 7):
        torch.manual_seed(seed)
        got = f(x)
        torch.manual_seed(seed)
        want = fn(x)
        for i, (g, w) in enumerate(zip(got, want)):
            assert torch.equal(g, w), f"output {i} differs from eager with fallback_random"
    assert not any(kind == "random_kernel" for kind, _ in _steps(graphs))


def test_fallback_random_env_and_log(monkeypatch, capfd):
    monkeypatch.setenv("TORCH_PLUGIN_FALLBACK_RANDOM", "1")
    monkeypatch.setenv("TORCH_PLUGIN_LOGS", "kernels")
    monkeypatch.setattr(torch_plugin.config, "logs", ("kernels",), raising=False)
    from torch_plugin.compiler import options

    assert options.current().fallback_random
    f = _compile(lambda x: torch.rand_like(x) * 2 + x)
    f(torch.randn(64))
    err = capfd.readouterr().err
    assert "aten::rand_like stays an ATen call: random op kept as an ATen call" in err, err[-2000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_why_not_capturable_allows_random_kernels_not_aten_random_ops():
    from torch_plugin.compiler.cuda_graphs import why_not_capturable

    steps = [("kernel", "torch_plugin::fused", "cuda:0")]
    inputs = [torch.zeros(2, device="cuda")]
    assert why_not_capturable(steps, inputs, []) is None
    random_kernel = ("random_kernel", "torch_plugin::fused", "cuda:0")
    assert why_not_capturable([*steps, random_kernel], inputs, []) is None
    why = why_not_capturable([*steps, ("fallback", "aten::rand_like.default", "cuda:0")],
                             inputs, [])  # fmt: skip
    assert why and "random" in why, why


def _dropout_and_rand(x):
    return torch.rand_like(x) + x, F.dropout(x, 0.5, training=True) * 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["reduce-overhead", "default"])
def test_cuda_graph_replays_draw_what_uncaptured_calls_draw(mode, graphs, monkeypatch):
    """Random kernels inside a CUDA graph: each replay draws new numbers, the numbers an
    uncaptured run of the same compiled graph draws for the same seed, bit for bit, and the
    generator ends where the uncaptured calls leave it (the runner's warm-up, timing and
    capture runs leave no trace)."""
    from torch_plugin.compiler import cuda_graphs

    x = torch.randn(1 << 12, device="cuda")

    def calls(f):
        torch.manual_seed(7)
        outs = [tuple(o.clone() for o in f(x)) for _ in range(5)]
        return outs, torch.cuda.get_rng_state()

    before = dict(cuda_graphs.counters)
    torch_plugin.reset()
    replayed, state_replayed = calls(torch_plugin.optimize("plugin", mode=mode)(_dropout_and_rand))
    _assert_in_kernel(graphs)
    assert cuda_graphs.counters["captured"] > before["captured"], cuda_graphs.counters
    if mode == "reduce-overhead":
        assert cuda_graphs.counters["replays"] >= before["replays"] + 3, cuda_graphs.counters
    monkeypatch.setenv("TORCH_PLUGIN_CUDA_GRAPHS", "0")
    torch_plugin.reset()
    plain, state_plain = calls(torch_plugin.optimize("plugin")(_dropout_and_rand))
    assert torch.equal(state_replayed, state_plain), "the generator ended elsewhere"
    for i, (r, p) in enumerate(zip(replayed, plain)):
        for j, (a, b) in enumerate(zip(r, p)):
            assert torch.equal(a, b), f"call {i} output {j}: replay and uncaptured run differ"
    for a, b in itertools.pairwise(replayed):
        assert not torch.equal(a[0], b[0]), "a replay repeated the random numbers"
        assert not torch.equal(a[1], b[1]), "a replay repeated the dropout mask"
    torch.manual_seed(7)
    eager = _dropout_and_rand(x)
    mask = replayed[0][1] != 0
    assert 0.4 < mask.float().mean().item() < 0.6
    assert torch.equal(replayed[0][1][mask], (x * 4)[mask]), "dropout scaling"
    assert not torch.equal(eager[0], replayed[0][0])  # kernels draw other numbers than eager


def test_cuda_random_kernel_compiles_with_nvrtc():
    """A CUDA graph with dropout and randn, traced on FakeTensors and passed through the
    pipeline without a GPU: its random kernel compiles with NVRTC (skipped without it)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch_plugin import _C
    from torch_plugin.compiler import lowering
    from torch_plugin.compiler.decompositions import decomposition_table

    cuda_rt = getattr(_C, "_cuda", None)
    if cuda_rt is None:
        pytest.skip("built without the CUDA parts")

    def fn(x):
        return F.dropout(x, 0.2, training=True)[0] * 2, torch.randn_like(x).half()

    with FakeTensorMode():
        x = torch.empty(64, 33, device="cuda")
        gm = make_fx(fn, decomposition_table=decomposition_table())(x)
    g = lowering.lower(gm, {})
    g.run_pipeline({"freeze": False, "verify": True})
    kernels = [n for n in g.export()["nodes"] if n["op"] == "torch_plugin::fused"]
    random = [n for n in kernels if n["attrs"].get("random_streams")]
    assert random, kernels
    for n in random:
        assert n["attrs"]["target"] == "cuda"
        try:
            ptx = cuda_rt.nvrtc_compile_check(n["attrs"]["source"], "sm_90")
        except RuntimeError as e:
            if "NVRTC" in str(e) and "load" in str(e).lower():
                pytest.skip(f"NVRTC not available: {e}")
            raise
        assert f".entry {n['attrs']['entry']}" in ptx
