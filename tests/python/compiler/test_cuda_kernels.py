"""GPU tests of the CUDA renderer's kernels (csrc/compiler/codegen/cuda): each kernel kind
compiled by the "plugin" backend on CUDA tensors against eager, skipped without a GPU.

Kinds (rows: at least 33, see cuda_reduction.cpp's kFewRows): pointwise groups (odd sizes 1, 3, 1000003; broadcasting; scalars; transposed and
misaligned inputs) and row reductions (softmax, log_softmax, layer_norm, rms_norm, sum,
mean, amax, var over the last dim with rows of 7, 768, 4096, 50257; mean over H, W; mean,
amax, var over H, W of channels-last tensors, columns split across warps), in
float32, bfloat16 and float16. Tolerances (issue #11): float32 within 1e-4 of the output's
scale with TF32 off; bf16/fp16 within 1e-2 of the scale against the float32 computation on
the same (rounded) inputs, rounded once, which is what the kernels do. NaN never passes, and
the caching allocator is filled with NaN before each compiled call so an output element that
a kernel leaves unwritten shows. Each test checks that the compiled graph's executor has
generated-kernel steps and runs the compiled graph itself (the backend may pick the eager
graph when that measures faster, see backends/plugin.py), then the backend's callable.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import torch_plugin

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(autouse=True)
def _setup(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def poison_allocator() -> None:
    """Leaves NaN in blocks of PyTorch's caching allocator (small and large pools), so that
    outputs allocated next start as NaN rather than as zeros or old results."""
    blocks = [torch.full((n,), float("nan"), device="cuda") for n in (2**8, 2**12, 2**16, 2**18)]
    blocks += [torch.full((2**24,), float("nan"), device="cuda")]
    del blocks


def check_close(
    got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, what: str, low_tol: float = 1e-2
) -> None:
    """``got`` within 1e-4 (fp32) or ``low_tol`` (bf16/fp16) of ``want``'s scale; NaN only
    where ``want`` has NaN, and infinities only where ``want`` has the same one."""
    assert got.shape == want.shape, what
    assert got.dtype == want.dtype, what
    g, w = got.double(), want.double()
    assert not (g.isnan() & ~w.isnan()).any(), f"{what}: NaN (unwritten output?)"
    same_inf = g.isinf() & (g == w)
    assert (g.isinf() == same_inf).all(), f"{what}: infinity where the reference has none"
    g, w = g.masked_fill(same_inf, 0.0), w.masked_fill(same_inf, 0.0)
    finite = w[w.isfinite()]
    scale = max(1.0, finite.abs().max().item() if finite.numel() else 1.0)
    tol = 1e-4 if dtype == torch.float32 else low_tol
    err = (g - w).abs().nan_to_num(0.0).max().item()
    assert err <= tol * scale, f"{what}: max error {err:.3g} > {tol:.0e} * {scale:.3g}"


def reference(fn, args, dtype):
    """fn on float32 copies of the inputs, outputs rounded to ``dtype``."""
    out = fn(*(a.float() if a.is_floating_point() else a for a in args))
    outs = out if isinstance(out, tuple) else (out,)
    return tuple(o.to(dtype) for o in outs)


def run_and_compare(fn, make, dtype, compile_plugin, graphs, min_kernels=1):
    """Compiles ``fn`` on ``make()``, checks kernel steps, compares the compiled graph and
    the backend's callable with the reference on fresh inputs."""
    args = make()
    with torch.no_grad():
        c = compile_plugin(fn, *args)
        assert graphs, "nothing compiled (lowering unsupported?)"
        steps = graphs[-1].describe().splitlines()
        kernels = [s for s in steps if "kernel" in s]
        assert len(kernels) >= min_kernels, "\n".join(steps)
        for _ in range(3):
            args = make()
            want = reference(fn, args, dtype)
            poison_allocator()
            direct = graphs[-1](list(args))
            torch.cuda.synchronize()
            assert len(direct) == len(want)
            # Generated kernels round every bf16/fp16 op's result as eager does
            # (test_low_precision_rounding.py): ~1% off the reference rounded once.
            for i, (g, w) in enumerate(zip(direct, want)):
                check_close(g, w, dtype, f"compiled graph output {i}", low_tol=3e-2)
            poison_allocator()
            got = c(*args)
            got = got if isinstance(got, tuple) else (got,)
            # The backend may run the eager graph (measured faster): the same tolerance.
            for i, (g, w) in enumerate(zip(got, want)):
                check_close(g, w, dtype, f"backend output {i}", low_tol=3e-2)


def randn(*sizes, dtype=torch.float32):
    return torch.randn(*sizes, device="cuda").to(dtype)


# ---- pointwise ---------------------------------------------------------------------------


def chain(x, y, b):
    return F.gelu(x * y + b).sigmoid() - 1.5 * torch.relu(x).sqrt()


def tanh_chain(x, y, b):
    return torch.tanh(x - y) * F.gelu(b, approximate="tanh") / (1.0 + torch.exp(-x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 3, 1000003])
@pytest.mark.parametrize("fn", [chain, tanh_chain])
def test_pointwise_odd_sizes(fn, n, dtype, compile_plugin, graphs):
    run_and_compare(
        fn, lambda: (randn(n, dtype=dtype), randn(n, dtype=dtype), randn(n, dtype=dtype)),
        dtype, compile_plugin, graphs,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "make",
    [
        # broadcast along leading dims (vectorized), a 0-d scalar
        lambda dt: (randn(257, 1024, dtype=dt), randn(1024, dtype=dt), randn((), dtype=dt)),
        # broadcast along the inner dim, transposed operand (scalar path)
        lambda dt: (randn(65, 33, dtype=dt).t(), randn(33, 65, dtype=dt), randn(33, 1, dtype=dt)),
        # channels-last-like permutation
        lambda dt: (
            randn(2, 7, 9, 3, dtype=dt).permute(0, 3, 1, 2),
            randn(2, 3, 7, 9, dtype=dt),
            randn(3, 1, 1, dtype=dt),
        ),
        # a view one element into its storage: misaligned for 16-byte vectors
        lambda dt: (randn(4096 + 1, dtype=dt)[1:], randn(4096, dtype=dt), randn(4096, dtype=dt)),
    ],
)
def test_pointwise_layouts(make, dtype, compile_plugin, graphs):
    run_and_compare(chain, lambda: make(dtype), dtype, compile_plugin, graphs)


# ---- row reductions ----------------------------------------------------------------------

ROWS = [7, 768, 4096, 50257]


def softmax(x):
    return torch.softmax(x * 0.5, dim=-1)


def log_softmax(x):
    return torch.log_softmax(x * 0.5, dim=-1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", ROWS)
@pytest.mark.parametrize("fn", [softmax, log_softmax])
def test_softmax_rows(fn, n, dtype, compile_plugin, graphs):
    run_and_compare(fn, lambda: (randn(3, 11, n, dtype=dtype),), dtype, compile_plugin, graphs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", ROWS)
def test_layer_norm_residual_gelu(n, dtype, compile_plugin, graphs):
    def fn(x, r, w, b):
        h = x + r
        return F.gelu(F.layer_norm(h, (n,), w, b, 1e-5)), h

    run_and_compare(
        fn,
        lambda: (randn(5, 7, n, dtype=dtype), randn(5, 7, n, dtype=dtype),
                 randn(n, dtype=dtype), randn(n, dtype=dtype)),
        dtype, compile_plugin, graphs,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", ROWS)
def test_rms_norm(n, dtype, compile_plugin, graphs):
    def fn(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    run_and_compare(
        fn, lambda: (randn(4, 9, n, dtype=dtype), randn(n, dtype=dtype)), dtype,
        compile_plugin, graphs,
    )  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", ROWS)
@pytest.mark.parametrize(
    "fn",
    [
        lambda x: (x * x).sum(-1) * 2.0,
        lambda x: x.mean(-1, keepdim=True) + 1.0,
        lambda x: x.amax(-1) - 1.0,
        lambda x: x.var(-1) * 0.5,
    ],
    ids=["sum", "mean", "amax", "var"],
)
def test_reductions_over_last_dim(fn, n, dtype, compile_plugin, graphs):
    run_and_compare(fn, lambda: (randn(40, n, dtype=dtype),), dtype, compile_plugin, graphs)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mean_over_hw_of_nchw(dtype, compile_plugin, graphs):
    def fn(x):
        return torch.sigmoid(x.mean((2, 3), keepdim=True)) * x

    run_and_compare(fn, lambda: (randn(4, 16, 13, 11, dtype=dtype),), dtype, compile_plugin, graphs)


_OVER_HW = {
    "mean": lambda t: t.mean((2, 3), keepdim=True),
    "amax": lambda t: t.amax((2, 3), keepdim=True),
    "var": lambda t: t.var((2, 3), keepdim=True),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(32, 96, 56, 56), (8, 37, 23, 29), (32, 672, 14, 14)], ids=str)
@pytest.mark.parametrize("red", list(_OVER_HW))
def test_channels_last_column_split(shape, red, dtype, compile_plugin, graphs):
    """Reductions over H, W of NHWC tensors (EfficientNet's squeeze-excitation pools), each
    column split across 4 to 32 warps (cuda_reduction.cpp's column split), with a prologue
    whose value is stored too; var's two passes; 37 channels leave lanes of the last block
    idle (clamped rows)."""

    def fn(x, s):
        y = F.silu(x * s)
        return y, _OVER_HW[red](y)

    def make():
        x = randn(*shape, dtype=dtype).to(memory_format=torch.channels_last)
        return x, randn(1, shape[1], 1, 1, dtype=dtype)

    run_and_compare(fn, make, dtype, compile_plugin, graphs)


@pytest.mark.parametrize("n", [1, 3, 1003])
def test_odd_outputs_fully_written(n, compile_plugin, graphs):
    """Outputs of odd sizes (vector tail, partial warps and blocks), every element checked
    after the allocator was filled with NaN."""

    def fn(x, y):
        return torch.softmax(x, -1), (x * y).sum(-1), torch.relu(x - y) * 3.0

    run_and_compare(
        fn, lambda: (randn(5, n), randn(5, n)), torch.float32, compile_plugin, graphs, 2
    )


def test_optimize_end_to_end(graphs):
    """Through torch_plugin.optimize("plugin") (capture, AOTAutograd, the backend)."""
    torch_plugin.reset()

    def block(x, r, w, b):
        h = x + r
        return torch.softmax(F.layer_norm(h, (768,), w, b) * 0.125, -1)

    fast = torch_plugin.optimize("plugin")(block)
    with torch.no_grad():
        for _ in range(3):
            args = (randn(8, 128, 768), randn(8, 128, 768), randn(768), randn(768))
            poison_allocator()
            check_close(fast(*args), block(*args), torch.float32, "optimize(plugin)")
    assert any("kernel" in s for g in graphs for s in g.describe().splitlines())
