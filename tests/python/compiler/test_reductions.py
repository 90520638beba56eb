"""fusion + codegen of reductions (sum, mean, amax, var), softmax, log_softmax, layer_norm
and rms_norm with their pointwise neighbours: each test compiles through the "plugin"
backend, compares with eager PyTorch on fresh random inputs (odd sizes, non-contiguous
inputs, broadcasting, fp32 and bf16, each reduced dim, keepdim) and checks from the compiled
graph's IR and executor steps that the ops ran inside one generated kernel, so that a test
fails if the fusion silently stops happening."""

import pytest
import torch
import torch.nn.functional as F


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))


def assert_one_kernel(graphs: list, *ops: str) -> None:
    """One compiled graph whose steps are exactly one generated kernel (no ATen fallback)
    and whose fused body holds each of ``ops``."""
    assert len(graphs) == 1
    steps = graphs[0].describe().strip().splitlines()
    assert len(steps) == 1 and "kernel fused_" in steps[0], graphs[0].describe()
    body = [line for line in graphs[0].ir.splitlines() if line.lstrip().startswith("|")]
    for op in ops:
        assert any(op in line for line in body), f"{op} not fused:\n{graphs[0].ir}"


BF16 = {"rtol": 2e-2, "atol": 2e-2}

REDUCTIONS = {
    "sum": (lambda x, d, k: x.sum(d, keepdim=k), "aten::sum"),
    "mean": (lambda x, d, k: x.mean(d, keepdim=k), "aten::mean"),
    "amax": (lambda x, d, k: x.amax(d, keepdim=k), "aten::amax"),
    "var": (lambda x, d, k: x.var(d, keepdim=k), "aten::var"),
    "var0": (lambda x, d, k: x.var(d, correction=0, keepdim=k), "aten::var"),
}


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [0, 1, 2, -1, (0, 2), (1, 2), (0, 1, 2)], ids=str)
@pytest.mark.parametrize("name", list(REDUCTIONS))
def test_reduction_with_prologue_and_epilogue(
    name, dim, keepdim, graphs, compile_plugin, assert_close
):
    red, op = REDUCTIONS[name]

    def fn(x, y):
        return red(x * y + 0.5, dim, keepdim) * 2.0 - 1.0

    def make():
        return torch.randn(7, 13, 33), torch.randn(7, 13, 33)

    c = compile_plugin(fn, *make())
    assert_one_kernel(graphs, op, "aten::mul", "aten::sub")
    for _ in range(2):
        args = make()
        assert_close(c(*args), fn(*args))


LAYOUTS = {
    "transposed": lambda: torch.randn(33, 13, 7).permute(2, 1, 0),
    "sliced": lambda: torch.randn(9, 15, 40)[1:8, 1:14, 3:36],
    "channels_last": lambda: torch.randn(2, 7, 13, 33).to(memory_format=torch.channels_last)[0],
    "strided": lambda: torch.randn(7, 26, 33)[:, ::2],
}


@pytest.mark.parametrize("dim", [0, -1, (0, 1)], ids=str)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", ["sum", "amax", "var"])
def test_reduction_non_contiguous(name, layout, dim, graphs, compile_plugin, assert_close):
    red, op = REDUCTIONS[name]

    def fn(x):
        return red(torch.relu(x) + x, dim, False)

    make = LAYOUTS[layout]
    assert make().shape == (7, 13, 33)
    c = compile_plugin(fn, make())
    assert_one_kernel(graphs, op)
    for _ in range(2):
        x = make()
        assert_close(c(x), fn(x))


@pytest.mark.parametrize("dim", [0, 1, 2, (0, 2)], ids=str)
@pytest.mark.parametrize("name", ["sum", "mean", "amax", "var"])
def test_reduction_bf16(name, dim, graphs, compile_plugin, assert_close):
    red, op = REDUCTIONS[name]

    def fn(x, b):
        return red(x * b, dim, True) + 1.0

    def make():
        return torch.randn(7, 13, 33).bfloat16(), torch.randn(33).bfloat16()

    c = compile_plugin(fn, *make())
    assert_one_kernel(graphs, op)
    for _ in range(2):
        args = make()
        got = c(*args)
        assert got.dtype == torch.bfloat16
        # Reference: eager in bf16, which rounds every op's result (x * b, the reduction,
        # the + 1.0) to bf16; the kernel rounds at the same op boundaries. Not bitwise:
        # the fp32 sums inside may add in another order.
        assert_close(got, fn(*args), **BF16)


def test_channels_last_mean_over_hw(graphs, compile_plugin, assert_close):
    def fn(x, s):
        return (x * s).mean((2, 3), keepdim=True).sigmoid()

    def make():
        x = torch.randn(3, 37, 7, 9).to(memory_format=torch.channels_last)
        return x, torch.randn(37, 1, 1)

    c = compile_plugin(fn, *make())
    assert_one_kernel(graphs, "aten::mean", "aten::sigmoid")
    for _ in range(2):
        args = make()
        assert_close(c(*args), fn(*args))


@pytest.mark.parametrize("shape", [(513, 37), (3, 600), (5, 1030, 3)], ids=str)
def test_outer_dim_reduction_with_broadcast_epilogue(shape, graphs, compile_plugin, assert_close):
    def fn(x, b):
        return x.exp().sum(0) / b

    def make():
        return torch.randn(*shape) * 0.1, torch.rand(shape[1:]) + 0.5

    c = compile_plugin(fn, *make())
    assert_one_kernel(graphs, "aten::sum", "aten::exp", "aten::div")
    for _ in range(2):
        args = make()
        assert_close(c(*args), fn(*args))


def test_full_reduction_to_scalar(graphs, compile_plugin, assert_close):
    def fn(x):
        return (x * x).sum()

    c = compile_plugin(fn, torch.randn(37, 41))
    assert_one_kernel(graphs, "aten::sum")
    x = torch.randn(37, 41)
    assert_close(c(x), fn(x))


def test_amax_and_softmax_propagate_nan(graphs, compile_plugin, assert_close):
    def fn(x):
        return x.amax(-1), torch.softmax(x, -1)

    x = torch.randn(5, 19)
    c = compile_plugin(fn, x)
    x = torch.randn(5, 19)
    x[1, 3] = float("nan")
    x[3, 0] = float("nan")
    got, want = c(x), fn(x)
    torch.testing.assert_close(got, want, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("dim", [-1, 1, 0])
@pytest.mark.parametrize("kind", ["softmax", "log_softmax"])
def test_softmax(kind, dim, dtype, graphs, compile_plugin, assert_close):
    op = getattr(torch, kind)

    def fn(x, mask):
        return op(x * 0.125 + mask, dim) * 3.0

    def make():
        x = torch.randn(4, 12, 19, 33).to(dtype)
        mask = torch.zeros(19, 33).to(dtype)
        mask[:, 30:] = -10000.0
        return x, mask

    c = compile_plugin(fn, *make())
    assert_one_kernel(graphs, f"aten::_{kind}", "aten::mul")
    for _ in range(2):
        args = make()
        got = c(*args)
        if dtype == torch.bfloat16:
            # Eager in bf16 rounds each op's result; so does the kernel (fp32 inside
            # softmax, whose exp may differ from ATen's in the last fp32 bit).
            assert_close(got.float(), fn(*args).float(), **BF16)
        else:
            assert_close(got, fn(*args))


def test_softmax_transposed_input_and_masked_rows(graphs, compile_plugin, assert_close):
    def fn(x, mask):
        return torch.softmax(x + mask, -1)

    def make():
        x = torch.randn(33, 2, 17).transpose(0, 2)
        mask = torch.zeros(17, 2, 33)
        mask[..., 5:] = float("-inf")
        return x, mask

    c = compile_plugin(fn, *make())
    assert_one_kernel(graphs, "aten::_softmax", "aten::add")
    for _ in range(2):
        args = make()
        assert_close(c(*args), fn(*args))


class ResidualLayerNormGelu(torch.nn.Module):
    def __init__(self, shape, affine=True):
        super().__init__()
        self.norm = torch.nn.LayerNorm(shape, elementwise_affine=affine)
        if affine:
            torch.nn.init.normal_(self.norm.weight)
            torch.nn.init.normal_(self.norm.bias)

    def forward(self, x, attn):
        return F.gelu(self.norm(x + attn))


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(33,), (13, 33)], ids=str)
def test_layer_norm_with_residual_and_gelu(shape, affine, graphs, compile_plugin, assert_close):
    m = ResidualLayerNormGelu(shape, affine).eval()

    def make():
        return torch.randn(7, 13, 33), torch.randn(7, 13, 33)

    with torch.no_grad():
        c = compile_plugin(m, *make())
        assert_one_kernel(graphs, "aten::native_layer_norm", "aten::add", "aten::gelu")
        for _ in range(2):
            args = make()
            assert_close(c(*args), m(*args))


def test_layer_norm_all_outputs_bf16_and_residual_output(graphs, compile_plugin, assert_close):
    def fn(x, y, w, b):
        h = x + y
        out, mean, rstd = torch.ops.aten.native_layer_norm(h, [33], w, b, 1e-5)
        return out, mean, rstd, h

    def make(dtype):
        return [torch.randn(*s).to(dtype) for s in [(5, 11, 33), (5, 11, 33), (33,), (33,)]]

    c = compile_plugin(fn, *make(torch.float32))
    assert_one_kernel(graphs, "aten::native_layer_norm", "aten::add")
    args = make(torch.float32)
    assert_close(c(*args), fn(*args))
    graphs.clear()
    c = compile_plugin(fn, *make(torch.bfloat16))
    assert_one_kernel(graphs, "aten::native_layer_norm", "aten::add")
    args = make(torch.bfloat16)
    got = c(*args)
    want = fn(*args)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and g.stride() == w.stride()
        assert_close(g.float(), w.float(), **BF16)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_rms_norm_decomposition_is_one_kernel(dtype, graphs, compile_plugin, assert_close):
    def fn(x, w):
        return F.rms_norm(x, (33,), w, 1e-6)

    def make():
        return torch.randn(7, 13, 33).to(dtype), torch.randn(33).to(dtype)

    c = compile_plugin(fn, *make())
    assert_one_kernel(graphs, "aten::mean", "aten::rsqrt")
    for _ in range(2):
        args = make()
        got = c(*args)
        if dtype == torch.bfloat16:
            assert_close(got.float(), fn(*(a.float() for a in args)), **BF16)
        else:
            assert_close(got, fn(*args))


def test_layer_norm_training_gradients_match(compile_plugin, assert_close):
    m = ResidualLayerNormGelu((33,))
    m_ref = ResidualLayerNormGelu((33,))
    m_ref.load_state_dict(m.state_dict())
    x, a = torch.randn(7, 13, 33), torch.randn(7, 13, 33)
    c = compile_plugin(m, x.clone().requires_grad_(), a)
    x, a = torch.randn(7, 13, 33), torch.randn(7, 13, 33)
    xs = [x.clone().requires_grad_(), x.clone().requires_grad_()]
    c(xs[0], a).square().sum().backward()
    m_ref(xs[1], a).square().sum().backward()
    assert_close(xs[0].grad, xs[1].grad)
    assert_close(m.norm.weight.grad, m_ref.norm.weight.grad, rtol=1e-4, atol=1e-4)
    assert_close(m.norm.bias.grad, m_ref.norm.bias.grad, rtol=1e-4, atol=1e-4)


EDGE_CASES = {
    "softmax_over_size1_dim": (lambda x: torch.softmax(x * 2, 1), lambda: torch.randn(4, 1, 5)),
    "sum_over_size1_dim": (
        lambda x: (x * 2).sum(1, keepdim=True) + 1,
        lambda: torch.randn(4, 1, 5),
    ),
    "one_element": (lambda x: (x * 2).sum() + 1, lambda: torch.randn(1, 1)),
    "var_of_one_element": (lambda x: (x * 2).var(1), lambda: torch.randn(4, 1)),
    "layer_norm_2d_shape": (
        lambda x: F.layer_norm(x * 2, (5, 6)),
        lambda: torch.randn(3, 5, 6),
    ),
    "softmax_all_minus_inf_row": (
        lambda x: torch.softmax(x + 0, -1),
        lambda: torch.cat([torch.full((1, 4), float("-inf")), torch.randn(2, 4)]),
    ),
}


@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_reduction_edge_cases(name, graphs, compile_plugin):
    fn, make = EDGE_CASES[name]
    c = compile_plugin(fn, make())
    assert "kernel fused_" in graphs[0].describe()
    x = make()
    torch.testing.assert_close(c(x), fn(x), rtol=1e-4, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("shape", [(3, 100003), (1 << 22,)], ids=str)
def test_long_sums_stay_accurate(shape, graphs, compile_plugin):
    def fn(x):
        return (x + 1.0).sum(-1)

    c = compile_plugin(fn, torch.randn(shape))
    assert "kernel fused_" in graphs[0].describe()
    x = torch.randn(shape)
    want = (x.double() + 1.0).sum(-1)
    # fp32 with blocked (two-level) accumulation: within a few fp32 ulps of the sum's size.
    torch.testing.assert_close(c(x).double(), want, rtol=2e-6, atol=0)


def _cpu_kernels(fn, *example):
    """The generated CPU kernels (source, entry) of ``fn`` traced on ``example``."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch_plugin.compiler import lowering
    from torch_plugin.compiler.decompositions import decomposition_table

    gm = make_fx(fn, decomposition_table=decomposition_table())(*example)
    g = lowering.lower(gm, {})
    g.run_pipeline({"freeze": False, "verify": True})
    nodes = [n for n in g.export()["nodes"] if n["op"] == "torch_plugin::fused"]
    return [(n["attrs"]["source"], n["attrs"]["entry"]) for n in nodes]


# The CPU flags a -march target's code needs (a kernel built for it runs only where they are).
_MARCH_FLAGS = {
    "haswell": {"avx2", "fma", "bmi2", "f16c", "movbe"},
    "skylake-avx512": {"avx2", "fma", "bmi2", "avx512f", "avx512bw", "avx512dq", "avx512vl"},
}


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f
                         if line.startswith("flags")), set())  # fmt: skip
    except OSError:
        return set()


@pytest.mark.parametrize("march", list(_MARCH_FLAGS))
@pytest.mark.parametrize("op", ["amin", "amax"])
def test_min_max_kernels_right_on_other_cpus(op, march, tmp_path):
    """A min/max reduction kernel compiled for another x86 CPU than this one (the kernel
    cache compiles with -march=native): GCC miscompiled ``a = std::min(a, x)`` inside
    ``#pragma omp simd reduction(min:a)`` for AVX2/AVX-512 targets (a reference to the
    lane-private accumulator), which dropped the row minimum -8.0 of an op_coverage input on
    a Sapphire Rapids GPU host; the kernels now accumulate with a comparison."""
    import ctypes
    import shutil
    import subprocess

    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    missing = _MARCH_FLAGS[march] - _cpu_flags()
    if missing:
        pytest.skip(f"this CPU cannot run {march} code (no {', '.join(sorted(missing))})")
    gen = torch.Generator().manual_seed(1003)
    x = (torch.randn(3, 37, generator=gen, dtype=torch.float64) * 3).to(torch.bfloat16)
    x[2, 11] = -8.0 if op == "amin" else 8.0  # the extreme in the vectorized part of the row
    x[2, 32] = -7.3125 if op == "amin" else 7.3125  # a near one in the loop's tail

    def fn(x):
        return (getattr(torch.neg(torch.neg(x)), op)(-1),)

    kernels = _cpu_kernels(fn, x)
    assert len(kernels) == 1, kernels
    source, entry = kernels[0]
    src, lib = tmp_path / "k.cpp", tmp_path / "k.so"
    src.write_text(source)
    flags = ["-O3", f"-march={march}", "-fopenmp", "-fPIC", "-shared", "-fno-math-errno"]
    done = subprocess.run([cxx, *flags, "-std=c++17", str(src), "-o", str(lib)],
                          check=False, capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"{cxx} cannot compile for {march}: {done.stderr[:200]}")
    out = torch.empty(3, dtype=torch.bfloat16)
    args = (ctypes.c_void_p * 2)(out.data_ptr(), x.data_ptr())
    getattr(ctypes.CDLL(str(lib)), entry)(args)
    torch.testing.assert_close(out, getattr(x, op)(-1), rtol=0, atol=0)
