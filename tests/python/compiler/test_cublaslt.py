"""cuBLASLt matrix products on CUDA: the torch_plugin::linear_pointwise CUDA kernel
(csrc/ops/cuda/library_ops_cuda.cpp over csrc/libs/cublaslt.cpp) against a float64
reference and ATen, and the "plugin" backend's CUDA rules and cuBLASLt executor steps on
small models against eager. GPU tests skip without a GPU; the registration check runs on
any machine whose build found the CUDA toolkit."""

import os
import shutil

import pytest
import torch
import torch.nn.functional as F

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _built_with_cuda_toolkit() -> bool:
    """What CMake's detection sees: a CUDA build of torch and an nvcc."""
    nvcc = shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc")
    return bool(torch.version.cuda) and bool(nvcc)


@pytest.mark.skipif(not _built_with_cuda_toolkit(), reason="built without the CUDA toolkit")
def test_cuda_kernel_is_registered():
    import torch_plugin._C  # noqa: F401  (registers the torch_plugin ops)

    assert torch._C._dispatch_has_kernel_for_dispatch_key("torch_plugin::linear_pointwise", "CUDA")


@pytest.fixture
def cublaslt_tuning():
    """Sets TORCH_PLUGIN_CUBLASLT_TUNING for the test and hands it to the C++ runtime (which
    reads no environment variable: torch_plugin.compiler.configure_runtime), also for the ops
    called directly; both are restored after the test."""
    from torch_plugin.compiler import configure_runtime

    name = "TORCH_PLUGIN_CUBLASLT_TUNING"
    old = os.environ.get(name)

    def set_tuning(value: str) -> None:
        os.environ[name] = value
        configure_runtime()

    yield set_tuning
    if old is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = old
    configure_runtime()


@pytest.fixture
def tf32():
    """Sets torch.backends.cuda.matmul.allow_tf32 for one test and restores it."""
    saved = torch.backends.cuda.matmul.allow_tf32

    def set_tf32(on: bool) -> None:
        torch.backends.cuda.matmul.allow_tf32 = on

    yield set_tf32
    torch.backends.cuda.matmul.allow_tf32 = saved


ACTIVATIONS = {
    "": lambda y: y,
    "relu": torch.relu,
    "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
    "gelu": F.gelu,
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
}

# (name, dtype, allow_tf32, relative tolerance of the output scale)
PRECISIONS = [
    ("fp32", torch.float32, False, 1e-4),
    ("tf32", torch.float32, True, 5e-3),
    ("bf16", torch.bfloat16, False, 2e-2),
    ("fp16", torch.float16, False, 5e-3),
]


def _reference(x, w, b, residual, activation):
    y = x.double() @ w.double().T
    if b is not None:
        y = y + b.double()
    if residual is not None:
        y = y + residual.double()
    return ACTIVATIONS[activation](y)


def _check(got, want, tol, dtype):
    assert got.dtype == dtype and got.is_contiguous()
    scale = max(want.abs().max().item(), 1e-3)
    torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol * scale)


def _op(x, w, b=None, residual=None, activation=""):
    return torch.ops.torch_plugin.linear_pointwise(x, w, b, residual, activation, 0.0, 0.0)


@needs_gpu
@pytest.mark.parametrize("name,dtype,allow_tf32,tol", PRECISIONS, ids=[p[0] for p in PRECISIONS])
@pytest.mark.parametrize("bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("activation", ["", "relu", "gelu_tanh"], ids=["none", "relu", "gelu_tanh"])
@pytest.mark.parametrize(
    "m,k,n", [(1, 7, 1), (3, 768, 3072), (1000, 7, 3), (1000, 768, 1), (3, 7, 3072)]
)
def test_linear_pointwise_fused_epilogues(
    name, dtype, allow_tf32, tol, bias, activation, m, k, n, tf32
):
    tf32(allow_tf32)
    torch.manual_seed(0)
    x = torch.randn(m, k, device="cuda", dtype=dtype)
    w = torch.randn(n, k, device="cuda", dtype=dtype) / k**0.5
    b = torch.randn(n, device="cuda", dtype=dtype) if bias else None
    got = _op(x, w, b, None, activation)
    _check(got, _reference(x, w, b, None, activation), tol, dtype)
    # ATen agrees too (same dtype, its own cuBLAS path).
    aten = ACTIVATIONS[activation](F.linear(x, w, b))
    torch.testing.assert_close(
        got, aten, rtol=2 * tol, atol=2 * tol * max(aten.abs().max().item(), 1e-3)
    )


@needs_gpu
@pytest.mark.parametrize("name,dtype,allow_tf32,tol", PRECISIONS, ids=[p[0] for p in PRECISIONS])
@pytest.mark.parametrize("tuning", ["1", "gemm"], ids=["tuned", "cublas_gemm"])
def test_layouts_residuals_and_unfused_activations(
    name, dtype, allow_tf32, tol, tuning, tf32, cublaslt_tuning
):
    """Each layout, residual and activation, with the plan chosen by timing and with
    cuBLAS's gemm forced wherever it can run (bias and residual written into the output
    first; TORCH_PLUGIN_CUBLASLT_TUNING=gemm). Plans are cached per shape, so the two
    tunings use different widths."""
    cublaslt_tuning(tuning)
    tf32(allow_tf32)
    torch.manual_seed(0)
    dev = "cuda"
    n = 24 if tuning == "1" else 32
    w = torch.randn(n, 40, device=dev, dtype=dtype) / 40**0.5
    b = torch.randn(n, device=dev, dtype=dtype)
    cases = {
        # x: non-contiguous (every other column; transposed storage), batched 3-d, 1-d
        "strided_x": torch.randn(9, 80, device=dev, dtype=dtype)[:, ::2],
        "transposed_x": torch.randn(40, 9, device=dev, dtype=dtype).t(),
        "batched_x": torch.randn(2, 5, 40, device=dev, dtype=dtype),
        "permuted_3d_x": torch.randn(5, 2, 40, device=dev, dtype=dtype).transpose(0, 1),
        "vector_x": torch.randn(40, device=dev, dtype=dtype),
    }
    for label, x in cases.items():
        out_shape = x.shape[:-1] + (n,)
        for activation in ACTIVATIONS:
            for residual in (None, torch.randn(out_shape, device=dev, dtype=dtype)):
                got = _op(x, w, b, residual, activation)
                assert got.shape == out_shape, label
                _check(got, _reference(x, w, b, residual, activation), tol, dtype)
    # A column-major weight (w = wt.t() of a contiguous [K, N]) and a broadcast residual.
    x = torch.randn(7, 40, device=dev, dtype=dtype)
    wt = torch.randn(40, n, device=dev, dtype=dtype) / 40**0.5
    r = torch.randn(n, device=dev, dtype=dtype)
    _check(_op(x, wt.t(), b, r, "relu"), _reference(x, wt.t(), b, r, "relu"), tol, dtype)


@needs_gpu
def test_mixed_dtypes_and_empty_sizes_follow_the_reference():
    dev = "cuda"
    x = torch.randn(4, 8, device=dev)
    w = torch.randn(3, 8, device=dev)
    r64 = torch.randn(4, 3, device=dev, dtype=torch.float64)
    got = _op(x, w, None, r64, "relu")
    assert got.dtype == torch.float64  # y + residual promotes, as the CPU reference does
    torch.testing.assert_close(got, torch.relu(F.linear(x, w) + r64))
    assert _op(torch.randn(0, 8, device=dev), w).shape == (0, 3)
    torch.testing.assert_close(
        _op(
            torch.randn(4, 0, device=dev), torch.randn(3, 0, device=dev), torch.ones(3, device=dev)
        ),
        torch.ones(4, 3, device=dev),
    )


@needs_gpu
def test_tf32_setting_is_read_at_every_call(tf32):
    """The setting is part of the plan's key: turning TF32 on and off again gives the full
    fp32 precision back (a stale TF32 plan would not)."""
    torch.manual_seed(0)
    x = torch.randn(256, 4096, device="cuda")
    w = torch.randn(512, 4096, device="cuda") / 64
    want = _reference(x, w, None, None, "")
    tf32(False)
    _check(_op(x, w), want, 1e-4, torch.float32)
    tf32(True)
    _check(_op(x, w), want, 5e-3, torch.float32)
    tf32(False)
    _check(_op(x, w), want, 1e-4, torch.float32)


@needs_gpu
def test_opcheck_cuda():
    torch.manual_seed(0)
    x = torch.randn(6, 16, device="cuda")
    w = torch.randn(8, 16, device="cuda")
    b = torch.randn(8, device="cuda")
    r = torch.randn(6, 8, device="cuda")
    op = torch.ops.torch_plugin.linear_pointwise.default
    for args in [(x, w, b, None, "relu", 0.0, 0.0), (x, w, None, r, "gelu_tanh", 0.0, 0.0),
                 (x.view(2, 3, 16), w, b, None, "", 0.0, 0.0)]:  # fmt: skip
        torch.library.opcheck(op, args)


def _model():
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128),
        torch.nn.ReLU(),
        torch.nn.Linear(128, 32),
        torch.nn.GELU(approximate="tanh"),
    )


def _record_compiled_graphs(monkeypatch):
    from torch_plugin.compiler import stages as compile_mod

    built = []
    init = compile_mod.CompiledGraph.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(compile_mod.CompiledGraph, "__init__", record)
    return built


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_model_through_plugin_uses_cublaslt_steps(dtype, monkeypatch, tf32):
    import torch_plugin

    tf32(False)
    torch_plugin.reset()
    built = _record_compiled_graphs(monkeypatch)
    torch.manual_seed(0)
    model = _model().to("cuda", dtype).eval()
    compiled = torch_plugin.optimize("plugin")(model)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    with torch.no_grad():
        for shape in [(8, 64), (8, 64), (3, 5, 64)]:
            x = torch.randn(shape, device="cuda", dtype=dtype)
            want = model(x)
            got = compiled(x)
            scale = want.abs().max().item()
            torch.testing.assert_close(got, want, rtol=tol, atol=tol * scale)
    assert built, "no graph went through the plugin compiler"
    steps = "\n".join(g.describe() for g in built)
    assert steps.count("cublaslt linear_pointwise") >= 2, steps
    assert "epilogue=relu_bias" in steps and "epilogue=gelu_tanh_bias" in steps, steps
    assert "aten::addmm" not in steps and "aten::relu" not in steps, steps


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_executor_steps_with_cublas_gemm(dtype, monkeypatch, tf32, cublaslt_tuning):
    """The executor's cuBLASLt steps when their plans use cuBLAS's gemm (forced with
    TORCH_PLUGIN_CUBLASLT_TUNING=gemm; chosen by timing where it is faster): a bias, a
    residual and a 3-d input, over calls that compile, reuse and recompile, in a CUDA graph
    too (reduce-overhead)."""
    import torch_plugin

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up = torch.nn.Linear(48, 96)
            self.down = torch.nn.Linear(96, 48, bias=False)

        def forward(self, x):
            return x + self.down(torch.sigmoid(self.up(x)))

    cublaslt_tuning("gemm")
    tf32(False)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    for mode in (None, "reduce-overhead"):
        torch_plugin.reset()
        built = _record_compiled_graphs(monkeypatch)
        torch.manual_seed(0)
        model = Block().to("cuda", dtype).eval()
        compiled = torch_plugin.optimize("plugin", mode=mode)(model)
        with torch.no_grad():
            for shape in [(40, 48), (40, 48), (40, 48), (2, 7, 48)]:
                x = torch.randn(shape, device="cuda", dtype=dtype)
                want = model(x)
                got = compiled(x)
                scale = want.abs().max().item()
                torch.testing.assert_close(got, want, rtol=tol, atol=tol * scale)
        steps = "\n".join(g.describe() for g in built)
        assert "algo=cublas_gemm" in steps, steps


@needs_gpu
def test_training_through_plugin_matches_eager(monkeypatch, tf32):
    """Training graphs: weights are inputs (not constants) and the backward's mm of
    transposed operands go through cuBLASLt too."""
    import torch_plugin

    tf32(False)
    torch_plugin.reset()
    torch.manual_seed(0)
    model = _model().cuda()
    ref = _model().cuda()
    ref.load_state_dict(model.state_dict())
    compiled = torch_plugin.optimize("plugin")(model)
    x = torch.randn(16, 64, device="cuda")
    compiled(x).square().sum().backward()
    ref(x).square().sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        scale = q.grad.abs().max().item()
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4 * scale)
