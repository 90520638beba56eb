"""Generated kernels round every bfloat16/float16 op's result to its dtype, as eager does.

Kernels compute bf16/fp16 values in fp32; eager holds each op's result in a bf16/fp16
tensor, so it is rounded after every op. Before the fix a fused kernel kept the fp32
intermediate: ``(x.to(torch.bfloat16) + 1.5).float() * 3`` differed from eager in most
elements (fuzz seeds 43, 328, 603 of tests/fuzz/run.py on the "plugin" backend).

Each case runs through ``torch_plugin.optimize(backend="plugin")`` over three calls (the
compiling call, a cached call on fresh values, a recompiling call on another shape) and is
compared BITWISE to eager: the ops are pointwise and deterministic, and both sides compute
each op in fp32 from the same rounded operands. A fused kernel must have run (so the test
checks generated code, not ATen). Reductions and row-wise ops (softmax, layer_norm) keep
their internal fp32 and round only their outputs: checked by exact representability of
their bf16 outputs as consumed inside the kernel.
"""

import pytest
import torch
import torch.nn.functional as F

import torch_plugin

LOW = [torch.bfloat16, torch.float16]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU"))]  # fmt: skip


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))


# Each case: (name, fn(dtype) -> callable of fp32 tensors a, b). The inputs are fp32; the
# cases convert to the low-precision dtype inside, as autocast-style code does.
def _cases():
    def add_scalar(dt):
        return lambda a, b: (a.to(dt) + 1.5).float() * 3

    def sub_scalar(dt):
        return lambda a, b: (a.to(dt) - 0.3).float() * 3

    def mul_scalar(dt):
        return lambda a, b: (a.to(dt) * 1.7).float() + 0.1

    def div_scalar(dt):
        return lambda a, b: (a.to(dt) / 3.0).float() * 7

    def add_tensor(dt):
        return lambda a, b: (a.to(dt) + b.to(dt)).float() * 3

    def sub_tensor(dt):
        return lambda a, b: (a.to(dt) - b.to(dt)).float() / 3

    def mul_tensor(dt):
        return lambda a, b: (a.to(dt) * b.to(dt)).float() + 0.1

    def div_tensor(dt):
        return lambda a, b: (a.to(dt) / (b.to(dt).abs() + 0.5)).float() * 3

    def exp(dt):
        return lambda a, b: a.to(dt).exp().float() * 3

    def sigmoid(dt):
        return lambda a, b: torch.sigmoid(a.to(dt)).float() * 3

    def gelu(dt):
        return lambda a, b: F.gelu(a.to(dt)).float() * 3

    def gelu_tanh(dt):
        return lambda a, b: F.gelu(a.to(dt), approximate="tanh").float() * 3

    def chain_of_three(dt):
        # Low-precision output: the last op is rounded by the store, the first two by the fix.
        return lambda a, b: ((a.to(dt) + b.to(dt)) * 1.3 - 0.7) / 3

    def cast_round_trip(dt):
        # (no fp32 multiply-add here: kernels contract those into an FMA, 1 fp32 ulp.)
        return lambda a, b: (a.to(dt).float() + a).to(dt).float() * 3

    def mixed_consumers(dt):
        # The bf16 sum is read by an fp32 and a bf16 consumer in one kernel.
        def f(a, b):
            s = a.to(dt) + b.to(dt)
            return s.float() / 3 + a, (s * s).float()

        return f

    return [
        add_scalar,
        sub_scalar,
        mul_scalar,
        div_scalar,
        add_tensor,
        sub_tensor,
        mul_tensor,
        div_tensor,
        exp,
        sigmoid,
        gelu,
        gelu_tanh,
        chain_of_three,
        cast_round_trip,
        mixed_consumers,
    ]


def _bitwise_equal(got, want) -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _bitwise_equal(g, w)
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    same = (got == want) | (got.isnan() & want.isnan())
    bad = (~same).sum().item()
    assert bad == 0, (
        f"{bad} of {want.numel()} elements differ from eager, e.g. "
        f"{got[~same][:4].tolist()} vs {want[~same][:4].tolist()}"
    )


def _kernels(graphs) -> list[str]:
    return [line for g in graphs for line in g.describe().splitlines() if "kernel fused_" in line]


# Ops whose fp32 value comes from a math-library approximation (our tp_exp / tp_erf against
# ATen's Sleef or CUDA's expf): the fp32 values may differ in the last bit, which rounding to
# bf16/fp16 hides except near a rounding tie, and gelu's 1 + erf(x / sqrt 2) cancels for
# x << 0. These compare by a property instead: `y.float() * 3` of a rounded `y` is exact in
# fp32, so `out / 3` must be representable in the low-precision dtype; and close to eager.
_TRANSCENDENTAL = {"exp", "sigmoid", "gelu", "gelu_tanh"}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", LOW, ids=["bf16", "fp16"])
@pytest.mark.parametrize("case", _cases(), ids=lambda c: c.__name__)
def test_pointwise_rounds_like_eager(case, dtype, device, graphs):
    torch_plugin.reset()
    torch.manual_seed(0)
    fn = case(dtype)
    opt = torch_plugin.optimize(fn, backend="plugin")
    for shape in [(1000,), (1000,), (37, 65)]:  # compile, cached, recompile
        a = torch.randn(shape, device=device) * 4
        b = torch.randn(shape, device=device) * 4
        got, want = opt(a, b), fn(a, b)
        if case.__name__ in _TRANSCENDENTAL:
            third = got / 3
            assert torch.equal(third.to(dtype).float(), third), "an unrounded fp32 intermediate"
            torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-3)
        else:
            _bitwise_equal(got, want)
    assert _kernels(graphs), "no generated kernel ran: the test would check ATen, not codegen"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", LOW, ids=["bf16", "fp16"])
def test_reduction_group_pointwise_rounds(dtype, device, graphs):
    """A pointwise op of low-precision output inside a reduction group (amax: exact in any
    order, so the comparison is bitwise)."""
    torch_plugin.reset()
    torch.manual_seed(0)

    def fn(a):
        return (a.to(dtype) * 1.3 + 0.7).float().amax(-1) * 3

    opt = torch_plugin.optimize(fn, backend="plugin")
    for shape in [(16, 100), (16, 100), (9, 257)]:
        a = torch.randn(shape, device=device) * 4
        _bitwise_equal(opt(a), fn(a))
    assert _kernels(graphs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", LOW, ids=["bf16", "fp16"])
@pytest.mark.parametrize("op", ["softmax", "layer_norm", "sum"])
def test_row_op_output_rounded_where_consumed(op, dtype, device, graphs):
    """softmax / layer_norm / sum of a bf16 tensor compute in fp32 inside and round their
    bf16 result; an fp32 consumer in the same kernel must read the rounded value: ``y * 3``
    in fp32 of a bf16 ``y`` is exact, so ``out / 3`` is representable in ``dtype``. Close to
    eager (the fp32 internals may differ in the last fp32 bit, which rounding hides mostly)."""
    torch_plugin.reset()
    torch.manual_seed(0)

    def fn(a):
        x = a.to(dtype)
        if op == "softmax":
            y = torch.softmax(x, -1)
        elif op == "layer_norm":
            y = F.layer_norm(x, (a.shape[-1],))
        else:
            y = x.sum(-1, keepdim=True)
        return y.float() * 3

    opt = torch_plugin.optimize(fn, backend="plugin")
    for shape in [(16, 100), (16, 100), (9, 257)]:
        a = torch.randn(shape, device=device)
        got, want = opt(a), fn(a)
        third = got / 3
        assert torch.equal(third.to(dtype).float(), third), "an unrounded fp32 intermediate"
        torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)
    assert _kernels(graphs)


def test_rounding_is_in_the_generated_source():
    """The CPU kernel of ``(x.bfloat16() + 1.5).float() * 3`` rounds the sum (one rounding
    for the conversion, one for the add)."""
    from torch_plugin.compiler import lowering

    def fn(x):
        return ((x.to(torch.bfloat16) + 1.5).float() * 3,)

    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    with FakeTensorMode():
        gm = make_fx(fn)(torch.empty(1000))
    g = lowering.lower(gm, {})
    g.run_pipeline({"freeze": False, "verify": True})
    kernels = [n for n in g.export()["nodes"] if n["op"] == "torch_plugin::fused"]
    assert len(kernels) == 1, kernels
    body = kernels[0]["attrs"]["source"].split('extern "C"')[-1]  # after the preamble
    assert body.count("tp_round_bf16(") == 2, body


@pytest.mark.parametrize("dtype", LOW, ids=["bf16", "fp16"])
def test_cuda_rounding_kernels_compile_with_nvrtc(dtype):
    """CUDA graphs traced on FakeTensors (no GPU needed): their pointwise and reduction
    kernels with the rounding compile with NVRTC and round (skipped without NVRTC)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch_plugin import _C
    from torch_plugin.compiler import lowering
    from torch_plugin.compiler.decompositions import decomposition_table

    cuda_rt = getattr(_C, "_cuda", None)
    if cuda_rt is None:
        pytest.skip("built without the CUDA parts")

    def fn(a, b):
        s = (a.to(dtype) + 1.5) * b.to(dtype)
        r = torch.softmax(s, -1).float() * 3
        return (s.exp().float() * 3, r, torch.randn_like(a, dtype=dtype).float() * 3)

    with FakeTensorMode():
        a = torch.empty(64, 33, device="cuda")
        gm = make_fx(fn, decomposition_table=decomposition_table())(a, a)
    g = lowering.lower(gm, {})
    g.run_pipeline({"freeze": False, "verify": True})
    kernels = [n for n in g.export()["nodes"] if n["op"] == "torch_plugin::fused"]
    assert kernels
    rounding = "tp_round_bf16" if dtype == torch.bfloat16 else "tp_round_f16"
    for n in kernels:
        assert n["attrs"]["target"] == "cuda"
        source = n["attrs"]["source"]
        try:
            ptx = cuda_rt.nvrtc_compile_check(source, "sm_90")
        except RuntimeError as e:
            if "NVRTC" in str(e) and "load" in str(e).lower():
                pytest.skip(f"NVRTC not available: {e}")
            raise
        assert f".entry {n['attrs']['entry']}" in ptx
    # In a pointwise kernel's body (after the preamble, which defines the helpers).
    assert any(rounding + "(" in n["attrs"]["source"].split("void tp_body(")[-1] for n in kernels)
