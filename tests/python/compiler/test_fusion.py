"""fusion + codegen: pointwise chains become one generated C++ kernel that matches eager
(odd sizes, broadcasting, non-contiguous inputs, scalars), cached on disk."""

import pytest
import torch

from torch_plugin import _C


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))


def chain(x, y, b):
    return torch.nn.functional.gelu(x * y + b).sigmoid() - 1.5 * torch.relu(x).sqrt()


def silu_chain(x, y, b):
    return torch.nn.functional.silu(x - y) * torch.tanh(b) / (1.0 + torch.exp(-x))


@pytest.mark.parametrize("fn", [chain, silu_chain])
@pytest.mark.parametrize(
    "make",
    [
        lambda: (torch.randn(33, 65), torch.randn(33, 65), torch.randn(65)),
        lambda: (torch.randn(65, 33).t(), torch.randn(33, 65), torch.randn(33, 1)),
        lambda: (
            torch.randn(2, 7, 9, 3).permute(0, 3, 1, 2),
            torch.randn(2, 3, 7, 9),
            torch.randn(3, 1, 1),
        ),
        lambda: (torch.randn(300, 257), torch.randn(257), torch.randn(())),
    ],
)
def test_pointwise_chain_matches_eager(fn, make, compile_plugin, assert_close):
    c = compile_plugin(fn, *make())
    for _ in range(2):
        args = make()
        assert_close(c(*args), fn(*args))


def test_kernels_cached_on_disk(compile_plugin, assert_close):
    def g(x):
        return torch.sigmoid(x * 3.25) + 0.125

    x = torch.randn(17, 5)
    before = _C._compiler.kernel_cache_stats()
    compile_plugin(g, x)
    mid = _C._compiler.kernel_cache_stats()
    assert mid["compiled"] + mid["disk_hits"] > before["compiled"] + before["disk_hits"]
    c = compile_plugin(g, x)  # same source: found in memory, no compiler run
    after = _C._compiler.kernel_cache_stats()
    assert after["compiled"] == mid["compiled"]
    assert_close(c(x), g(x))


def kernel_steps(graphs: list) -> list[str]:
    assert len(graphs) == 1
    return [s for s in graphs[0].describe().splitlines() if "kernel fused_" in s]


@pytest.mark.parametrize("fn", [chain, silu_chain])
def test_bf16_pointwise_chain(fn, graphs, compile_plugin, assert_close):
    def make():
        return (
            torch.randn(33, 65).bfloat16(),
            torch.randn(65, 33).bfloat16().t(),
            torch.randn(65).bfloat16(),
        )

    c = compile_plugin(fn, *make())
    # One kernel; tanh(b) of the broadcast input alone may stay an ATen call.
    assert len(kernel_steps(graphs)) == 1
    for _ in range(2):
        args = make()
        got = c(*args)
        assert got.dtype == torch.bfloat16
        # fp32 compute from the same bf16 inputs, rounded once: what the kernel does.
        want = fn(*(a.float() for a in args)).bfloat16()
        assert_close(got.float(), want.float(), rtol=1.6e-2, atol=1e-2)


def test_bf16_store_rounds_to_nearest_even(compile_plugin):
    def fn(x, y):
        return (x + y).bfloat16()

    # x + y lands on bf16 rounding ties and near-ties; the kernel must round like c10.
    x = torch.randn(4099)
    c = compile_plugin(fn, x, x)
    x = torch.randn(4099)
    y = (torch.arange(4099) % 3 - 1).float() * 2.0**-9
    assert torch.equal(c(x, y), fn(x, y))


def test_multi_output_pointwise_group(graphs, compile_plugin, assert_close):
    def fn(x, y):
        h = torch.relu(x * y)
        return h + 1.0, h.sigmoid() * 2.0, h

    def make():
        return torch.randn(31, 17), torch.randn(17)

    c = compile_plugin(fn, *make())
    assert len(kernel_steps(graphs)) == 1
    assert "fallback" not in graphs[0].describe()
    for _ in range(2):
        args = make()
        assert_close(c(*args), fn(*args))


def test_gelu_tanh_and_dtype_conversions_fuse(graphs, compile_plugin, assert_close):
    def fn(x):
        y = torch.nn.functional.gelu(x.float() * 1.5, approximate="tanh")
        return y.bfloat16(), y.exp()

    def make():
        return (torch.randn(9, 70) * 3).bfloat16()

    c = compile_plugin(fn, make())
    assert len(kernel_steps(graphs)) == 1
    assert "fallback" not in graphs[0].describe()
    for _ in range(2):
        x = make()
        got, want = c(x), fn(x)
        assert got[0].dtype == torch.bfloat16
        assert_close(got[0].float(), want[0].float(), rtol=1e-2, atol=1e-2)
        assert_close(got[1], want[1])


def test_exp_matches_eager_over_its_range(compile_plugin):
    def fn(x):
        return torch.exp(x * 1.0) + 0.0

    x = torch.randn(100005)
    c = compile_plugin(fn, x)
    x = torch.linspace(-110.0, 95.0, 100000)
    x = torch.cat([x, torch.tensor([float("-inf"), float("inf"), float("nan"), 0.0, 88.7])])
    # 2e-6 relative (a few ulp); denormal results (below 1.2e-38) to within 1e-40.
    torch.testing.assert_close(c(x), fn(x), rtol=2e-6, atol=1e-40, equal_nan=True)


def test_kernel_outputs_live_in_the_memory_plan(graphs, compile_plugin, assert_close):
    """Intermediate outputs of generated kernels get arena offsets (memory_planning), the
    arena is reused between runs, and results stay those of eager on fresh inputs."""

    def fn(x):
        a = torch.sigmoid(x * 2.0) + 1.0  # kernel 1
        b = torch.flip(a, [1])  # ATen fallback between the kernels
        c = torch.relu(b - a) * 0.5  # kernel 2 (reads a: a lives across the fallback)
        return torch.flip(c, [0])

    def make():
        return torch.randn(37, 29)

    c = compile_plugin(fn, make())
    (g,) = graphs
    assert len(kernel_steps(graphs)) == 2
    assert g.executor.num_planned() >= 2 and g.executor.arena_bytes() > 0
    for _ in range(3):
        x = make()
        assert_close(c(x), fn(x))


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -0.5, -1, -2, 1, 1.7])
def test_pow_by_a_constant_matches_eager(exponent, compile_plugin):
    def fn(x):
        return torch.pow(x * 1.0 + 0.5, exponent) * 1.0

    x = torch.rand(1037) * 4.0
    c = compile_plugin(fn, x)
    x = torch.rand(1037) * 4.0
    torch.testing.assert_close(c(x), fn(x), rtol=2e-6, atol=1e-6)


def test_tanh_and_erf_match_eager_over_their_range(graphs, compile_plugin):
    """The kernels' branch-free tanh (Cephes tanhf) and erf (Cephes erff's polynomial below
    1, Abramowitz-Stegun 7.1.26 above) against ATen's: a few ulp, 1.5e-7 absolute."""

    def fn(x):
        return torch.tanh(x * 1.0), torch.erf(x * 1.0)

    x = torch.cat(
        [
            torch.linspace(-12.0, 12.0, 20001),
            torch.logspace(-30, 0, 301),
            -torch.logspace(-30, 0, 301),
            torch.tensor([0.0, -0.0, 0.625, -0.625, float("inf"), float("-inf"), float("nan")]),
        ]
    )
    c = compile_plugin(fn, torch.randn(x.shape))
    assert kernel_steps(graphs) and "fallback" not in graphs[0].describe()
    got_tanh, got_erf = c(x)
    torch.testing.assert_close(got_tanh, torch.tanh(x), rtol=4e-7, atol=1e-45, equal_nan=True)
    torch.testing.assert_close(got_erf, torch.erf(x), rtol=1e-6, atol=2e-7, equal_nan=True)


def test_gelu_tanh_of_gpt2_is_one_vectorizable_kernel(graphs, compile_plugin, assert_close):
    """GPT-2's 'gelu_new' as HF writes it (pow(x, 3.0) and tanh): one kernel without libm
    calls (std::pow and std::tanh kept its loop scalar: 25 ns per element)."""
    import math

    def fn(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3.0))))

    x = torch.randn(64, 1024)
    c = compile_plugin(fn, x)
    (_step,) = kernel_steps(graphs)
    sources = [v for k, v in vars(graphs[0].graph_module).items() if k.endswith("_source")]
    (source,) = sources
    # The kernel after the preamble (which defines tp_pow as std::pow for other exponents, and
    # declares libmvec's functions in an extern "C" block of its own).
    body = source.split('extern "C"')[-1]
    assert "pow(" not in body and "std::tanh" not in body and "tp_tanh(" in body
    for _ in range(2):
        x = torch.randn(64, 1024) * 3
        assert_close(c(x), fn(x))


def test_contiguous_pointwise_kernel_shares_its_work_among_threads(graphs, compile_plugin):
    """A contiguous tensor coalesces into one loop row; the kernel splits it into blocks for
    OpenMP instead of running the row on one thread."""
    import re

    def fn(x):
        return torch.sigmoid(x * 2.0) + 1.0

    x = torch.randn(512, 1024)
    c = compile_plugin(fn, x)
    sources = [v for k, v in vars(graphs[0].graph_module).items() if k.endswith("_source")]
    (source,) = sources
    (iterations,) = re.findall(r"for \(int64_t r = 0; r < (\d+); \+\+r\)", source)
    assert int(iterations) >= 64
    x = torch.randn(512, 1024)
    torch.testing.assert_close(c(x), fn(x), rtol=1e-5, atol=1e-6)
