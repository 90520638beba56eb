"""cuDNN convolutions on CUDA: the torch_plugin::conv_pointwise CUDA kernel
(csrc/ops/cuda/conv_pointwise_cuda.cpp over csrc/libs/cudnn_conv*.cpp) against eager ATen on
fresh random inputs, each case asserting through the process-wide counters
(torch_plugin._C._cudnn.counters) that cuDNN ran it, not ATen; and the "plugin" backend's CUDA
convolution rows (csrc/compiler/passes/conv_patterns.cpp) and cuDNN executor steps on a ResNet
block and torchvision models against eager, outputs' strides included. GPU tests skip without
a GPU; the registration check runs where the build found cudnn-frontend's headers."""

import pytest
import torch
import torch.nn.functional as F

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _cudnn_module():
    from torch_plugin import _C

    return getattr(_C, "_cudnn", None)


needs_cudnn_build = pytest.mark.skipif(
    not torch.version.cuda or _cudnn_module() is None,
    reason="built without cudnn-frontend's headers (CUDA convolutions stay ATen's)",
)


@needs_cudnn_build
def test_cuda_kernel_is_registered():
    assert torch._C._dispatch_has_kernel_for_dispatch_key("torch_plugin::conv_pointwise", "CUDA")
    assert set(_cudnn_module().counters()) == {
        "executions",
        "fused",
        "plans",
        "no_engine",
        "split",
        "aten",
    }


@pytest.fixture
def cudnn_settings():
    """Turns TF32 off for convolutions (fp32 compared tightly) and restores the settings."""
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = saved


TOL = {torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 4e-3}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

# (name, N, C, H, W, K, kernel, stride, padding, dilation, groups)
SHAPES = [
    ("3x3", 2, 16, 13, 11, 32, 3, 1, 1, 1, 1),
    ("1x1", 3, 32, 7, 9, 24, 1, 1, 0, 1, 1),
    ("strided", 2, 8, 17, 15, 16, 3, 2, 1, 1, 1),
    ("dilated", 1, 8, 19, 21, 8, 3, 1, 2, 2, 1),
    ("grouped", 2, 16, 9, 9, 32, 3, 1, 1, 1, 4),
    ("depthwise", 2, 24, 15, 13, 24, 3, 2, 1, 1, 24),
    ("stem7x7", 2, 3, 33, 31, 16, 7, 2, 3, 1, 1),
    ("odd", 1, 5, 7, 6, 7, 2, 1, 0, 1, 1),
]
# (name, bias, batch norm (scale, shift), residual, activation)
EPILOGUES = [
    ("plain", False, False, False, ""),
    ("bias", True, False, False, ""),
    ("bn_relu", False, True, False, "relu"),
    ("bn_res_relu", False, True, True, "relu"),
    ("bias_res", True, False, True, ""),
    ("silu", True, False, False, "silu"),
    ("gelu", False, True, False, "gelu"),
    ("gelu_tanh", False, False, False, "gelu_tanh"),
    ("sigmoid", True, False, False, "sigmoid"),
    ("tanh", False, False, True, "tanh"),
    ("hardswish", True, False, False, "hardswish"),  # not cuDNN's: applied after
]

ACT = {
    "": lambda y: y,
    "relu": F.relu,
    "silu": F.silu,
    "gelu": F.gelu,
    "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "hardswish": F.hardswish,
}


def _reference(x, w, b, scale, shift, r, stride, padding, dilation, groups, act):
    """Eager ATen in the unfused graph's order: conv, then the batch norm's scale and shift in
    float32 (autocast's batch norm on a bf16/fp16 output), then the residual and activation."""
    y = F.conv2d(x, w, b, stride, padding, dilation, groups)
    if scale is not None:
        y = (y.float() * scale.view(1, -1, 1, 1) + shift.view(1, -1, 1, 1)).to(x.dtype)
    if r is not None:
        y = y + r
    return ACT[act](y)


def _case_ids(cases):
    return [c[0] for c in cases]


@needs_gpu
@needs_cudnn_build
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("epilogue", EPILOGUES, ids=_case_ids(EPILOGUES))
@pytest.mark.parametrize("shape", SHAPES, ids=_case_ids(SHAPES))
def test_conv_pointwise_against_aten(shape, epilogue, dtype, layout, cudnn_settings):
    _, n, c, h, w_, k, ks, stride, pad, dil, groups = shape
    _, has_bias, has_bn, has_res, act = epilogue
    dt = DTYPES[dtype]
    cd = _cudnn_module()
    gen = torch.Generator(device="cuda").manual_seed(hash((shape, epilogue, dtype)) % 2**31)
    for call in range(3):  # fresh inputs each call: first builds the plan, then the cache
        x = torch.randn(n, c, h, w_, device="cuda", dtype=dt, generator=gen)
        if layout == "nhwc":
            x = x.contiguous(memory_format=torch.channels_last)
        wt = torch.randn(k, c // groups, ks, ks, device="cuda", dtype=dt, generator=gen) * 0.2
        b = torch.randn(k, device="cuda", dtype=dt, generator=gen) if has_bias else None
        vec = torch.float32 if dt != torch.float32 else dt
        scale = torch.rand(k, device="cuda", dtype=vec, generator=gen) + 0.5 if has_bn else None
        shift = torch.randn(k, device="cuda", dtype=vec, generator=gen) if has_bn else None
        out_h = (h + 2 * pad - dil * (ks - 1) - 1) // stride + 1
        out_w = (w_ + 2 * pad - dil * (ks - 1) - 1) // stride + 1
        r = (
            torch.randn(n, k, out_h, out_w, device="cuda", dtype=dt, generator=gen)
            if has_res
            else None
        )
        before = cd.counters()
        got = torch.ops.torch_plugin.conv_pointwise(
            x, wt, b, r, [stride] * 2, [pad] * 2, [dil] * 2, groups, act, 0.0, 0.0, scale, shift
        )
        after = cd.counters()
        want = _reference(x, wt, b, scale, shift, r, stride, pad, dil, groups, act)
        tol = TOL[dt]
        span = want.float().abs().max().item() + 1.0
        torch.testing.assert_close(got, want, rtol=tol, atol=tol * span)
        assert got.is_contiguous(memory_format=torch.channels_last)
        assert after["aten"] == before["aten"], (before, after)
        assert after["executions"] == before["executions"] + 1, (before, after)
        if call == 0:
            print(shape[0], epilogue[0], dtype, layout, after)


@needs_gpu
@needs_cudnn_build
@pytest.mark.parametrize("act", ["relu", "silu", "sigmoid", "tanh", "gelu"])
def test_special_values_propagate_as_in_aten(act, cudnn_settings):
    """NaN and infinities through the fused epilogue as ATen computes them."""
    x = torch.randn(1, 4, 5, 5, device="cuda")
    x[0, 0, 2, 2] = float("nan")
    x[0, 1, 0, 0] = float("inf")
    x[0, 2, 4, 4] = -float("inf")
    w = torch.randn(6, 4, 1, 1, device="cuda")
    got = torch.ops.torch_plugin.conv_pointwise(
        x, w, None, None, [1, 1], [0, 0], [1, 1], 1, act, 0.0, 0.0
    )
    want = ACT[act](F.conv2d(x, w))
    torch.testing.assert_close(got, want, equal_nan=True, rtol=1e-4, atol=1e-4)


class _Block(torch.nn.Module):
    """A ResNet basic block after a stem: conv-bn-relu, conv-bn, + identity, relu; max pool."""

    def __init__(self, c=16):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, c, 3, padding=1, bias=False)
        self.bn0 = torch.nn.BatchNorm2d(c)
        self.pool = torch.nn.MaxPool2d(3, 2, 1)
        self.c1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b1 = torch.nn.BatchNorm2d(c)
        self.c2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b2 = torch.nn.BatchNorm2d(c)
        self.dw = torch.nn.Conv2d(c, c, 3, padding=1, groups=c)

    def forward(self, x):
        x = self.pool(F.relu(self.bn0(self.stem(x))))
        y = F.relu(self.b1(self.c1(x)))
        y = self.b2(self.c2(y))
        y = F.relu(x + y)
        return self.dw(y), y.mean((2, 3))


def _randomize_bn(model):
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)


def _check_model(model, shapes, dtype, autocast, layout="nchw", min_fused=1):
    import torch_plugin

    cd = _cudnn_module()
    torch_plugin.reset()
    compiled = torch_plugin.optimize("plugin")(model)
    tol = TOL[dtype]
    cd.reset_counters()
    with torch.no_grad(), torch.autocast("cuda", dtype=dtype, enabled=autocast):
        for shape in shapes:
            x = torch.randn(shape, device="cuda")
            if not autocast:
                x = x.to(dtype)
            if layout == "nhwc":
                x = x.contiguous(memory_format=torch.channels_last)
            want = model(x)
            got = compiled(x)
            want = want if isinstance(want, tuple) else (want,)
            got = got if isinstance(got, tuple) else (got,)
            for g_, w_ in zip(got, want):
                span = w_.float().abs().max().item() + 1.0
                torch.testing.assert_close(g_, w_, rtol=tol * 2, atol=tol * 2 * span)
                assert g_.stride() == w_.stride(), (g_.stride(), w_.stride())
    c = cd.counters()
    assert c["executions"] > 0 and c["fused"] >= min_fused, c
    assert c["aten"] == 0, c
    return c


@needs_gpu
@needs_cudnn_build
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize(
    "dtype,autocast",
    [(torch.float32, False), (torch.bfloat16, True), (torch.float16, False)],
    ids=["fp32", "bf16-autocast", "fp16"],
)
def test_resnet_block_through_plugin(dtype, autocast, layout, cudnn_settings):
    torch.manual_seed(0)
    model = _Block()
    _randomize_bn(model)
    model = model.to("cuda", torch.float32 if autocast else dtype).eval()
    # fp16 without autocast: a batch norm with fp16 parameters stays ATen's (only fp32/fp64
    # ones, and float32 ones on a bf16/fp16 input under autocast, become a scale and shift),
    # so the relu after it cannot join the convolution; the convolutions still run in cuDNN.
    min_fused = 0 if dtype == torch.float16 else 3
    _check_model(model, [(2, 3, 20, 18)] * 3, dtype, autocast, layout, min_fused=min_fused)


@needs_gpu
@needs_cudnn_build
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small"])
@pytest.mark.parametrize(
    "dtype,autocast", [(torch.float32, False), (torch.bfloat16, True)], ids=["fp32", "bf16"]
)
def test_torchvision_models_through_plugin(name, dtype, autocast, cudnn_settings):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10)
    _randomize_bn(model)
    model = model.to("cuda").eval()
    _check_model(model, [(2, 3, 64, 64)] * 3, dtype, autocast, min_fused=5)
