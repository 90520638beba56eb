"""The torch_plugin:: dispatcher ops: torch.library.opcheck (schema, FakeTensor/Meta kernels,
autograd registration, AOT dispatch with dynamic shapes) and numerics against eager PyTorch,
on fresh random inputs.

Ops: conv_pointwise and linear_pointwise with each activation, fused (a hand-written kernel
for the op's contract: ABI, strides, several outputs, errors; and a kernel the compiler
generated)."""

import pytest
import torch
import torch.nn.functional as F

import torch_plugin  # noqa: F401  (registers the torch_plugin:: ops)
from torch_plugin import _C

ACTIVATIONS = ["", "relu", "silu", "gelu", "gelu_tanh", "sigmoid", "tanh", "hardswish", "clamp"]
NO_GRAD_UTILS = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")
GRAD_UTILS = ("test_schema", "test_autograd_registration", "test_faketensor")


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))


def activation(y: torch.Tensor, name: str, alpha: float, beta: float) -> torch.Tensor:
    """The eager reference of the library ops' activations."""
    if name == "":
        return y
    if name == "gelu_tanh":
        return F.gelu(y, approximate="tanh")
    if name == "clamp":
        return y.clamp(alpha, beta)
    return getattr(F, name)(y)


def clamp_bounds(name: str) -> tuple[float, float]:
    return (-0.5, 0.75) if name == "clamp" else (0.0, 0.0)


# --- conv_pointwise ---------------------------------------------------------------------------


def conv_args(act: str, bias: bool, residual: bool, groups: int, requires_grad: bool = False):
    n, c, h, w, k = 2, 4 * groups, 9, 11, 6 * groups
    stride, padding, dilation = [2, 1], [1, 2], [1, 2]
    x = torch.randn(n, c, h, w, requires_grad=requires_grad)
    wt = torch.randn(k, c // groups, 3, 3, requires_grad=requires_grad)
    b = torch.randn(k, requires_grad=requires_grad) if bias else None
    out = F.conv2d(x.detach(), wt.detach(), None, stride, padding, dilation, groups)
    r = torch.randn(out.shape, requires_grad=requires_grad) if residual else None
    alpha, beta = clamp_bounds(act)
    return (x, wt, b, r, stride, padding, dilation, groups, act, alpha, beta)


def conv_reference(x, w, b, r, stride, padding, dilation, groups, act, alpha, beta):
    y = F.conv2d(x, w, b, stride, padding, dilation, groups)
    if r is not None:
        y = y + r
    return activation(y, act, alpha, beta)


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("bias,residual,groups", [(True, False, 1), (False, True, 2)])
def test_conv_pointwise(act, bias, residual, groups):
    op = torch.ops.torch_plugin.conv_pointwise.default
    args = conv_args(act, bias, residual, groups)
    got = op(*args)
    torch.testing.assert_close(got, conv_reference(*args), rtol=1e-4, atol=1e-5)
    assert got.is_contiguous(memory_format=torch.channels_last)
    torch.library.opcheck(op, args, test_utils=NO_GRAD_UTILS)
    torch.library.opcheck(op, conv_args(act, bias, residual, groups, True), test_utils=GRAD_UTILS)


# --- linear_pointwise -------------------------------------------------------------------------


def linear_args(act: str, bias: bool, residual: bool, lead: tuple, requires_grad: bool = False):
    k, n = 13, 7
    x = torch.randn(*lead, k, requires_grad=requires_grad)
    w = torch.randn(n, k, requires_grad=requires_grad)
    b = torch.randn(n, requires_grad=requires_grad) if bias else None
    r = torch.randn(*lead, n, requires_grad=requires_grad) if residual else None
    alpha, beta = clamp_bounds(act)
    return (x, w, b, r, act, alpha, beta)


def linear_reference(x, w, b, r, act, alpha, beta):
    y = F.linear(x, w, b)
    if r is not None:
        y = y + r
    return activation(y, act, alpha, beta)


@pytest.mark.parametrize("act", ACTIVATIONS)
@pytest.mark.parametrize("bias,residual,lead", [(True, False, (5,)), (False, True, (2, 3))])
def test_linear_pointwise(act, bias, residual, lead):
    op = torch.ops.torch_plugin.linear_pointwise.default
    args = linear_args(act, bias, residual, lead)
    got = op(*args)
    torch.testing.assert_close(got, linear_reference(*args), rtol=1e-4, atol=1e-5)
    torch.library.opcheck(op, args, test_utils=NO_GRAD_UTILS)
    torch.library.opcheck(op, linear_args(act, bias, residual, lead, True), test_utils=GRAD_UTILS)


def test_library_ops_reject_bad_shapes():
    x, w = torch.randn(3, 5), torch.randn(4, 6)
    with pytest.raises(RuntimeError, match=r"shapes cannot be multiplied \(3x5 and 6x4\)"):
        torch.ops.torch_plugin.linear_pointwise(x, w, None, None, "", 0.0, 0.0)
    with pytest.raises(RuntimeError, match="5 features, weight expects 6"):  # Meta/FakeTensor
        torch.ops.torch_plugin.linear_pointwise(x.to("meta"), w.to("meta"), None, None, "", 0, 0)
    with pytest.raises(RuntimeError, match="a weight of its rank, got 3-d and 4-d"):
        xm, wm = torch.empty(1, 3, 5, device="meta"), torch.empty(2, 3, 3, 3, device="meta")
        torch.ops.torch_plugin.conv_pointwise(
            xm, wm, None, None, [1] * 2, [0] * 2, [1] * 2, 1, "", 0, 0
        )
    for device in ("cpu", "meta"):
        with pytest.raises(RuntimeError, match="unknown activation 'swish'"):
            w = torch.randn(4, 5, device=device)
            torch.ops.torch_plugin.linear_pointwise(x.to(device), w, None, None, "swish", 0, 0)


# --- fused ------------------------------------------------------------------------------------

# out0 = a * b + 1, out1 = a - b over [R, C]; a has strides [C, 1], b (a row) [0, 1] broadcast
# from [C]. The op's ABI: args = outputs, then inputs.
R, C = 5, 7
TWO_OUTPUTS = f"""
extern "C" void kernel(void** args) {{
  float* out0 = static_cast<float*>(args[0]);
  float* out1 = static_cast<float*>(args[1]);
  const float* a = static_cast<const float*>(args[2]);
  const float* b = static_cast<const float*>(args[3]);
  for (long i = 0; i < {R}; ++i)
    for (long j = 0; j < {C}; ++j) {{
      out0[i * {C} + j] = a[i * {C} + j] * b[j] + 1.0f;
      out1[j * {R} + i] = a[i * {C} + j] - b[j];  // out1 is column-major
    }}
}}
"""


def fused_two_outputs(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
    f32 = torch.float32
    return torch.ops.torch_plugin.fused(
        [a, b], TWO_OUTPUTS, [[R, C], [C]], [[C, 1], [1]], [f32, f32],
        [[R, C], [R, C]], [[C, 1], [1, R]], [f32, f32], "two_outputs",
    )  # fmt: skip


def test_fused_hand_written_kernel():
    a, b = torch.randn(R, C), torch.randn(C)
    out0, out1 = fused_two_outputs(a, b)
    torch.testing.assert_close(out0, a * b + 1)
    torch.testing.assert_close(out1, a - b)
    assert out0.stride() == (C, 1) and out1.stride() == (1, R)


def test_fused_copies_inputs_with_other_strides():
    a = torch.randn(C, R).t()  # the kernel was generated for [C, 1]
    b = torch.randn(2 * C)[::2]  # stride 2
    out0, out1 = fused_two_outputs(a, b)
    torch.testing.assert_close(out0, a * b + 1)
    torch.testing.assert_close(out1, a - b)


def test_fused_opcheck():
    op = torch.ops.torch_plugin.fused.default
    f32 = torch.float32
    args = (
        [torch.randn(R, C), torch.randn(C)], TWO_OUTPUTS, [[R, C], [C]], [[C, 1], [1]],
        [f32, f32], [[R, C], [R, C]], [[C, 1], [1, R]], [f32, f32], "two_outputs",
    )  # fmt: skip
    torch.library.opcheck(op, args, test_utils=NO_GRAD_UTILS)
    grad_args = ([t.requires_grad_() for t in args[0]], *args[1:])
    torch.library.opcheck(op, grad_args, test_utils=GRAD_UTILS)


def test_fused_checks_its_signature():
    a, b = torch.randn(R, C), torch.randn(C)
    with pytest.raises(RuntimeError, match=r"two_outputs\): input 0 has sizes \[5, 8\]"):
        fused_two_outputs(torch.randn(R, C + 1), b)
    with pytest.raises(RuntimeError, match=r"input 1 has dtype Double"):
        fused_two_outputs(a, b.double())
    with pytest.raises(RuntimeError, match="1 inputs given, the kernel takes 2"):
        torch.ops.torch_plugin.fused(
            [a], TWO_OUTPUTS, [[R, C], [C]], [[C, 1], [1]], [torch.float32] * 2,
            [[R, C]], [[C, 1]], [torch.float32], "two_outputs",
        )  # fmt: skip
    with pytest.raises(RuntimeError, match="input_sizes, input_strides and input_dtypes"):
        torch.ops.torch_plugin.fused(
            [a, b], TWO_OUTPUTS, [[R, C], [C]], [[C, 1]], [torch.float32] * 2,
            [[R, C]], [[C, 1]], [torch.float32], "two_outputs",
        )  # fmt: skip
    # The Meta kernel checks the same (FakeTensor tracing fails early, not at run time).
    with pytest.raises(RuntimeError, match="input 0 has sizes"):
        fused_two_outputs(torch.empty(R, 3, device="meta"), torch.empty(C, device="meta"))


def test_fused_has_no_derivative():
    a = torch.randn(R, C, requires_grad=True)
    out0, _ = fused_two_outputs(a, torch.randn(C))
    assert out0.requires_grad
    with pytest.raises(RuntimeError, match="torch_plugin::fused"):
        out0.sum().backward()


def test_fused_kernel_loaded_once():
    a, b = torch.randn(R, C), torch.randn(C)
    fused_two_outputs(a, b)
    before = _C._compiler.kernel_cache_stats()
    for _ in range(3):
        fused_two_outputs(a, b)
    assert _C._compiler.kernel_cache_stats() == before  # later calls: the op's own map


def test_fused_generated_kernel():
    """A kernel the compiler generated, called through the op with its exported signature."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch_plugin.compiler.stages import CompiledGraph, compile_graph

    def fn(x, y):
        return (torch.sigmoid(x * y + 0.5) - y,)  # AOTAutograd's graphs return tuples

    x, y = torch.randn(6, 33), torch.randn(33)
    compiled = compile_graph(make_fx(fn)(x, y))
    assert isinstance(compiled, CompiledGraph)
    exported = compiled.ir_graph.export()
    (node,) = [n for n in exported["nodes"] if n["op"] == "torch_plugin::fused"]
    x, y = torch.randn(6, 33), torch.randn(33)  # fresh inputs
    tensor_of = dict(zip(exported["inputs"], (x, y)))
    ins = [v for kind, v in node["args"] if kind == "t"]
    assert sorted(ins) == sorted(exported["inputs"])  # the whole graph is one kernel
    types = [exported["values"][v] for v in ins]
    out_type = exported["values"][node["outputs"][0]]
    f32 = torch.float32
    args = (
        [tensor_of[v] for v in ins], node["attrs"]["source"], [t[1] for t in types],
        [t[2] for t in types], [f32] * len(ins), [out_type[1]], [out_type[2]], [f32],
        node["attrs"]["name"],
    )  # fmt: skip
    (got,) = torch.ops.torch_plugin.fused(*args)
    torch.testing.assert_close(got, fn(x, y)[0])
    torch.library.opcheck(torch.ops.torch_plugin.fused.default, args, test_utils=NO_GRAD_UTILS)
