"""Results whose real dtype is not the meta kernel's (issue #30).

The IR's dtypes are FakeTensor's (the meta kernels'), and a few real kernels return another
one: CPU ``native_batch_norm`` / ``native_group_norm`` of a bf16/fp16 input with fp32 weights
return fp32 statistics (mean, rstd) where the meta kernel says bf16/fp16 (on CUDA,
``native_group_norm``). A generated kernel compiled for the IR's dtype read those bytes as
bf16: garbage or NaN. The executor converts such a result (an ATen call's, or a graph input
from a forward graph that ran as its ATen graph) to the IR's dtype. Differential: against
eager on fresh random inputs over several calls."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import torch_plugin
from torch_plugin.compiler import stages

pytestmark = pytest.mark.usefixtures("fresh_capture")


def _centered(conv: torch.Tensor, mean: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # The BatchNorm backward's x - mean and its weight-gradient sum, as AOTAutograd writes it.
    c = conv.to(torch.float32)
    m = mean.to(torch.float32).unsqueeze(0).unsqueeze(2).unsqueeze(3)
    sub = c - m
    return sub, (conv.to(torch.float32) * sub).sum([0, 2, 3])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_kernel_input_of_another_float_dtype(dtype):
    """The smallest graph of the backward: a fused kernel of _to_copy + sub (+ the sum)
    compiled for a bf16 mean, called with the fp32 mean the real batch norm saved."""
    gm = make_fx(_centered)(torch.randn(4, 8, 8, 8).to(dtype), torch.randn(8).to(dtype))
    compiled = stages.compile_graph(gm)
    assert getattr(compiled, "unlowered", None) is None
    assert any(kind == "kernel" for kind, _, _ in compiled.executor.steps()), compiled.describe()
    for _ in range(3):
        conv, mean = torch.randn(4, 8, 8, 8).to(dtype), torch.randn(8) * 4
        got = compiled([conv, mean])
        # The graph's semantics: the mean as the dtype it was compiled for.
        want = gm(conv, mean.to(dtype))
        for g, w in zip(got, want):
            assert g.dtype == w.dtype
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-4)
        # And eager on the fp32 mean, within the mean's rounding.
        for g, w in zip(got, gm(conv, mean)):
            assert not g.isnan().any()
            torch.testing.assert_close(g, w, rtol=2e-2, atol=0.1)


def test_graph_input_of_another_integer_dtype_raises():
    gm = make_fx(lambda x: (x * 3 + 1,))(torch.arange(6))
    compiled = stages.compile_graph(gm)
    assert getattr(compiled, "unlowered", None) is None
    torch.testing.assert_close(compiled([torch.arange(6)])[0], torch.arange(6) * 3 + 1)
    with pytest.raises(RuntimeError, match="input 0 is Int, the graph was compiled for Long"):
        compiled([torch.arange(6, dtype=torch.int32)])


def _batch_norm(x, w, b):
    out, mean, rstd = torch.ops.aten.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5)
    return out.relu(), mean * 2 + rstd


def _group_norm(x, w, b):
    n, c, h, wd = x.shape
    out, mean, rstd = torch.ops.aten.native_group_norm(x, w, b, n, c, h * wd, 2, 1e-5)
    return out.relu(), mean * 2 + rstd


def _layer_norm(x, w, b):
    out, mean, rstd = torch.ops.aten.native_layer_norm(x.transpose(1, 3), [8], w, b, 1e-5)
    return out.relu(), (mean + 1) * rstd


NORMS = [_batch_norm, _group_norm, _layer_norm]


def _check_statistics(fn, device: str, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 8, 6, 8, device=device).to(dtype)
    w = torch.randn(8, device=device)
    try:
        fn(x, w, w)
    except RuntimeError as e:  # a mixed-dtype norm this device's kernels do not take
        pytest.skip(f"eager: {e}")
    fast = torch_plugin.optimize(fn)
    for _ in range(3):
        x = (torch.randn(4, 8, 6, 8, device=device) * 3 + 1).to(dtype)
        w, b = torch.randn(8, device=device), torch.randn(8, device=device)
        want = fn(x, w, b)
        got = fast(x, w, b)
        for i, (g, e) in enumerate(zip(got, want)):
            assert not g.isnan().any(), i
            # Statistics: eager's fp32, the compiled graph's in the meta kernel's dtype.
            torch.testing.assert_close(g.float(), e.float(), rtol=2e-2, atol=2e-2, msg=str(i))


@pytest.mark.parametrize("fn", NORMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_norm_statistics_consumed_in_a_forward_graph(fn, dtype):
    """An inference graph computing with the statistics of a mixed-dtype norm: batch and
    group norm's were wrong (1e37) before the fix."""
    _check_statistics(fn, "cpu", dtype)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("fn", NORMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_norm_statistics_consumed_in_a_forward_graph_cuda(fn, dtype):
    """CUDA shares the IR and the executor: native_group_norm's meta kernel says bf16/fp16
    statistics there too."""
    _check_statistics(fn, "cuda", dtype)
