"""cuDNN convolutions on CUDA: the torch_plugin::conv_pointwise CUDA kernel
(csrc/ops/cuda/conv_pointwise_cuda.cpp over csrc/libs/cudnn_conv*.cpp) against eager ATen on
fresh random inputs (1-d, 2-d and 3-d; grouped, depthwise, odd channel counts, strided,
dilated, padded), each case asserting through the process-wide counters
(torch_plugin._C._cudnn.counters) that cuDNN ran it, not ATen, and that the plan was built once;
and the "plugin" backend's CUDA convolution rows (csrc/compiler/passes/conv_patterns.cpp) and
cuDNN executor steps on a ResNet block, depthwise-separable, 1-d and 3-d blocks and torchvision
models against eager, outputs' strides included. GPU tests skip without a GPU; the registration
check runs where the build found cudnn-frontend's headers; the CPU reference and Meta kernels of
the op's 1-d and 3-d forms run everywhere (the rules' IR tests: tests/cpp/compiler/
test_cudnn_patterns.cpp)."""

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
        "disk_hits",
        "disk_replays",
        "disk_writes",
        "disk_rejected",
        "parallel_builds",
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


CONV = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}


def _channels(v, rank):
    """A per-channel vector [K] shaped to broadcast over a rank-`rank` output."""
    return v.view(1, -1, *[1] * (rank - 2))


def _reference(x, w, b, scale, shift, r, stride, padding, dilation, groups, act):
    """Eager ATen in the unfused graph's order: conv, then the batch norm's scale and shift in
    float32 (autocast's batch norm on a bf16/fp16 output), then the residual and activation."""
    y = CONV[x.dim()](x, w, b, stride, padding, dilation, groups)
    if scale is not None:
        rank = y.dim()
        y = (y.float() * _channels(scale, rank) + _channels(shift, rank)).to(x.dtype)
    if r is not None:
        y = y + r
    return ACT[act](y)


def _channels_last(t):
    """t with the channels innermost (NLC, NHWC, NDHWC), as conv_pointwise writes."""
    if t.dim() == 3:
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
    return t.contiguous(memory_format=fmt)


def _is_channels_last(t):
    return t.stride() == _channels_last(torch.empty_like(t, device="meta")).stride()


def _case_ids(cases):
    return [c[0] for c in cases]


def _check_op(spatial, n, c, k, ks, stride, pad, dil, groups, epilogue, dt, layout, seed):
    """conv_pointwise on CUDA against eager over 3 calls on fresh inputs (the first builds the
    plan, the others reuse it): cuDNN ran every call (no ATen convolution), no plan was built
    after the first call, the output is channels-last."""
    _, has_bias, has_bn, has_res, act = epilogue
    rank = len(spatial) + 2
    cd = _cudnn_module()
    gen = torch.Generator(device="cuda").manual_seed(seed)
    for call in range(3):
        x = torch.randn(n, c, *spatial, device="cuda", dtype=dt, generator=gen)
        if layout == "nhwc":
            x = _channels_last(x)
        wt = torch.randn(k, c // groups, *[ks] * (rank - 2), device="cuda", dtype=dt, generator=gen)
        wt = wt * 0.2
        b = torch.randn(k, device="cuda", dtype=dt, generator=gen) if has_bias else None
        vec = torch.float32 if dt != torch.float32 else dt
        scale = torch.rand(k, device="cuda", dtype=vec, generator=gen) + 0.5 if has_bn else None
        shift = torch.randn(k, device="cuda", dtype=vec, generator=gen) if has_bn else None
        out = [(s + 2 * pad - dil * (ks - 1) - 1) // stride + 1 for s in spatial]
        r = torch.randn(n, k, *out, device="cuda", dtype=dt, generator=gen) if has_res else None
        before = cd.counters()
        m = rank - 2
        got = torch.ops.torch_plugin.conv_pointwise(
            x, wt, b, r, [stride] * m, [pad] * m, [dil] * m, groups, act, 0.0, 0.0, scale, shift
        )
        after = cd.counters()
        want = _reference(x, wt, b, scale, shift, r, stride, pad, dil, groups, act)
        tol = TOL[dt]
        span = want.float().abs().max().item() + 1.0
        torch.testing.assert_close(got, want, rtol=tol, atol=tol * span)
        assert _is_channels_last(got), got.stride()
        assert after["aten"] == before["aten"], (before, after)
        assert after["executions"] == before["executions"] + 1, (before, after)
        if call == 0:
            print(spatial, groups, epilogue[0], dt, layout, after)
        else:
            assert after["plans"] == before["plans"], (before, after)


@needs_gpu
@needs_cudnn_build
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("epilogue", EPILOGUES, ids=_case_ids(EPILOGUES))
@pytest.mark.parametrize("shape", SHAPES, ids=_case_ids(SHAPES))
def test_conv_pointwise_against_aten(shape, epilogue, dtype, layout, cudnn_settings):
    _, n, c, h, w_, k, ks, stride, pad, dil, groups = shape
    seed = hash((shape, epilogue, dtype)) % 2**31
    _check_op((h, w_), n, c, k, ks, stride, pad, dil, groups, epilogue, DTYPES[dtype], layout, seed)


# 1-d (run as 2-d over [N, C, 1, L]) and 3-d (NDHWC) convolutions:
# (name, spatial sizes, N, C, K, kernel, stride, padding, dilation, groups)
SHAPES_ND = [
    ("1d", (37,), 2, 16, 24, 5, 1, 2, 1, 1),
    ("1d_strided_dilated", (41,), 3, 8, 8, 3, 2, 2, 3, 1),
    ("1d_depthwise", (29,), 2, 12, 12, 3, 1, 1, 1, 12),
    ("1d_grouped_odd", (19,), 1, 6, 9, 3, 1, 0, 1, 3),
    ("1d_odd_channels", (23,), 2, 5, 7, 4, 1, 1, 1, 1),
    ("3d", (5, 9, 7), 2, 8, 16, 3, 1, 1, 1, 1),
    ("3d_strided_dilated", (9, 11, 10), 1, 8, 8, 3, 2, 2, 2, 1),
    ("3d_depthwise", (4, 7, 6), 2, 16, 16, 3, 1, 1, 1, 16),
    ("3d_grouped", (5, 6, 6), 1, 16, 32, 3, 2, 1, 1, 4),
    ("3d_stem_odd", (6, 13, 11), 1, 3, 8, 3, 2, 1, 1, 1),
]
EPILOGUES_ND = [e for e in EPILOGUES if e[0] in ("plain", "bn_res_relu", "silu", "hardswish")]


@needs_gpu
@needs_cudnn_build
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("epilogue", EPILOGUES_ND, ids=_case_ids(EPILOGUES_ND))
@pytest.mark.parametrize("shape", SHAPES_ND, ids=_case_ids(SHAPES_ND))
def test_conv_pointwise_nd_against_aten(shape, epilogue, dtype, layout, cudnn_settings):
    _, spatial, n, c, k, ks, stride, pad, dil, groups = shape
    seed = hash((shape, epilogue, dtype)) % 2**31
    _check_op(spatial, n, c, k, ks, stride, pad, dil, groups, epilogue, DTYPES[dtype], layout, seed)


@needs_gpu
@needs_cudnn_build
@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("offset", [1, 3])
def test_misaligned_operands_match_aten(dtype, offset, cudnn_settings):
    """Operands at addresses aligned below 16 bytes (a view at an element offset): the plan is
    keyed by the pointers' alignment (PyTorch's getAlignment); where cuDNN has an engine for it
    cuDNN runs, else ATen's convolution; the result matches eager either way, and each call
    runs exactly one of the two."""
    dt = DTYPES[dtype]
    cd = _cudnn_module()
    for _ in range(2):
        n, c, h, w_, k = 2, 8, 9, 7, 16
        flat = torch.randn(n * c * h * w_ + offset, device="cuda", dtype=dt)
        x = flat[offset:].view(n, h, w_, c).permute(0, 3, 1, 2)  # channels-last, misaligned
        assert x.data_ptr() % 16 != 0 and _is_channels_last(x)
        wt = torch.randn(k, c, 3, 3, device="cuda", dtype=dt) * 0.2
        b = torch.randn(k, device="cuda", dtype=dt)
        before = cd.counters()
        got = torch.ops.torch_plugin.conv_pointwise(
            x, wt, b, None, [1, 1], [1, 1], [1, 1], 1, "relu", 0.0, 0.0
        )
        after = cd.counters()
        want = F.relu(F.conv2d(x, wt, b, 1, 1))
        tol = TOL[dt]
        torch.testing.assert_close(got, want, rtol=tol, atol=tol * (want.abs().max().item() + 1))
        ran = (after["executions"] - before["executions"]) + (after["aten"] - before["aten"])
        assert ran == 1, (before, after)


def test_conv_pointwise_nd_cpu_reference_and_meta():
    """The op's 1-d and 3-d forms on the CPU (the reference kernel) against eager, and its Meta
    kernel: the reference's sizes and channels-last strides (NLC, NDHWC); a rank mismatch or a
    stride list of the wrong length is a clear error."""
    torch.manual_seed(0)
    for spatial, groups in [((17,), 1), ((15,), 4), ((5, 6, 7), 1), ((4, 5, 6), 8)]:
        m = len(spatial)
        x = torch.randn(2, 8, *spatial)
        w = torch.randn(16, 8 // groups, *[3] * m)
        b, scale, shift = torch.randn(16), torch.rand(16) + 0.5, torch.randn(16)
        args = ([2] * m, [1] * m, [1] * m, groups)
        got = torch.ops.torch_plugin.conv_pointwise(
            x, w, b, None, *args, "silu", 0.0, 0.0, scale, shift
        )
        y = CONV[x.dim()](x, w, b, *args)
        want = F.silu(y * _channels(scale, y.dim()) + _channels(shift, y.dim()))
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        assert _is_channels_last(got), got.stride()
        meta = torch.ops.torch_plugin.conv_pointwise(
            x.to("meta"), w.to("meta"), None, None, *args, "", 0.0, 0.0
        )
        assert meta.shape == got.shape and meta.stride() == got.stride()
    with pytest.raises(RuntimeError, match="3-d, 4-d or 5-d input and a weight of its rank"):
        torch.ops.torch_plugin.conv_pointwise(
            torch.randn(1, 4, 5), torch.randn(4, 4, 1, 1), None, None, [1], [0], [1], 1, "", 0, 0
        )
    with pytest.raises(RuntimeError, match="must have 1 entries each"):
        torch.ops.torch_plugin.conv_pointwise(
            torch.randn(1, 4, 5), torch.randn(4, 4, 1), None, None, [1, 1], [0], [1], 1, "", 0, 0
        )


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


class _Separable(torch.nn.Module):
    """MobileNetV3/EfficientNet-style: a 1x1 expansion of 5 (odd) channels with batch norm and
    hardswish, a strided depthwise 3x3 with batch norm and SiLU, a dilated depthwise 5x5 with
    batch norm and ReLU, a grouped 1x1 projection with batch norm plus a strided shortcut."""

    def __init__(self):
        super().__init__()
        bn = torch.nn.BatchNorm2d
        self.expand, self.b0 = torch.nn.Conv2d(5, 24, 1, bias=False), bn(24)
        self.dw, self.b1 = torch.nn.Conv2d(24, 24, 3, 2, 1, groups=24, bias=False), bn(24)
        self.dw2, self.b2 = torch.nn.Conv2d(24, 24, 5, 1, 4, 2, groups=24, bias=False), bn(24)
        self.project, self.b3 = torch.nn.Conv2d(24, 16, 1, groups=4, bias=False), bn(16)
        self.short = torch.nn.Conv2d(5, 16, 1, stride=2)

    def forward(self, x):
        y = F.hardswish(self.b0(self.expand(x)))
        y = F.silu(self.b1(self.dw(y)))
        y = F.relu(self.b2(self.dw2(y)))
        y = self.b3(self.project(y)) + self.short(x)
        return y, y.mean((2, 3))


class _Block1d(torch.nn.Module):
    """1-d: conv (8 channels) with batch norm and ReLU, a dilated depthwise conv with batch norm
    and SiLU plus the first's output, a strided grouped conv with a bias."""

    def __init__(self):
        super().__init__()
        self.c0, self.b0 = (
            torch.nn.Conv1d(8, 16, 3, padding=1, bias=False),
            torch.nn.BatchNorm1d(16),
        )
        self.dw = torch.nn.Conv1d(16, 16, 5, padding=4, dilation=2, groups=16, bias=False)
        self.b1 = torch.nn.BatchNorm1d(16)
        self.c2 = torch.nn.Conv1d(16, 8, 3, stride=2, groups=2)

    def forward(self, x):
        y = F.relu(self.b0(self.c0(x)))
        y = F.silu(self.b1(self.dw(y)) + y)
        return self.c2(y)


class _Block3d(torch.nn.Module):
    """3-d: a strided stem of 3 channels with batch norm and ReLU, a grouped conv with batch norm
    plus the stem's output and ReLU, a dilated depthwise conv."""

    def __init__(self):
        super().__init__()
        bn = torch.nn.BatchNorm3d
        self.stem, self.b0 = torch.nn.Conv3d(3, 16, 3, (1, 2, 2), 1, bias=False), bn(16)
        self.c1, self.b1 = torch.nn.Conv3d(16, 16, 3, padding=1, groups=2, bias=False), bn(16)
        self.dw = torch.nn.Conv3d(16, 16, 3, padding=2, dilation=2, groups=16)

    def forward(self, x):
        y = F.relu(self.b0(self.stem(x)))
        y = F.relu(self.b1(self.c1(y)) + y)
        return self.dw(y)


def _randomize_bn(model):
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)


def _check_model(model, shapes, dtype, autocast, layout="nchw", min_fused=1):
    """The model compiled by the plugin backend against eager over several calls on fresh
    inputs (outputs and their strides). Every convolution of the model ran through cuDNN on
    every call (each the rule takes): the compiled graph always runs (no timing against eager) without CUDA graphs,
    so each call runs each cuDNN step once (a convolution the rules left to ATen would be
    missing from the count), and ATen's convolution never ran as a fallback."""
    import torch_plugin

    cd = _cudnn_module()
    torch_plugin.reset()
    torch_plugin._C._compiler.reset_layout_copies()
    # The convolutions the CUDA rule takes: 1-d and 2-d ones with input channels per group a
    # multiple of 8 (depthwise ones and the 3-channel stem stay ATen's, measured faster
    # there; 3-d ones ATen's until verified in a model).
    convs = sum(
        isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d)) and (m.in_channels // m.groups) % 8 == 0
        for m in model.modules()
    )
    min_fused = min(min_fused, convs)
    tol = TOL[dtype]
    saved = torch_plugin.config.always_run_compiled
    torch_plugin.config.always_run_compiled = True
    try:
        compiled = torch_plugin.optimize(model, options={"cuda_graphs": False})
        cd.reset_counters()
        with torch.no_grad(), torch.autocast("cuda", dtype=dtype, enabled=autocast):
            for shape in shapes:
                x = torch.randn(shape, device="cuda")
                if not autocast:
                    x = x.to(dtype)
                if layout == "nhwc":
                    x = _channels_last(x)
                want = model(x)
                got = compiled(x)
                want = want if isinstance(want, tuple) else (want,)
                got = got if isinstance(got, tuple) else (got,)
                for g_, w_ in zip(got, want):
                    span = w_.float().abs().max().item() + 1.0
                    torch.testing.assert_close(g_, w_, rtol=tol * 2, atol=tol * 2 * span)
                    assert g_.stride() == w_.stride(), (g_.stride(), w_.stride())
    finally:
        torch_plugin.config.always_run_compiled = saved
    c = cd.counters()
    assert c["executions"] == convs * len(shapes) and c["fused"] >= min_fused, (convs, c)
    assert c["aten"] == 0, c
    c["layout_copies"] = torch_plugin._C._compiler.layout_copies()
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
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small", "efficientnet_b0"])
@pytest.mark.parametrize(
    "dtype,autocast", [(torch.float32, False), (torch.bfloat16, True)], ids=["fp32", "bf16"]
)
def test_torchvision_models_through_plugin(name, dtype, autocast, cudnn_settings):
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(num_classes=10)
    _randomize_bn(model)
    model = model.to("cuda").eval()
    c = _check_model(model, [(2, 3, 64, 64)] * 3, dtype, autocast, min_fused=5)
    # One layout for the whole graph (issue #29): the stem reads a channels-last copy of the
    # image and the convolutions ATen keeps (depthwise) write channels-last as the generated
    # kernels after them are planned to read; only the graph's outputs (back to eager's
    # strides) and the NCHW weights (a channels-last copy per call for cuDNN) are copied.
    copies = {
        k: v
        for k, v in c["layout_copies"].items()
        if not k.startswith(("graph output", "cudnn conv weight"))
    }
    assert not copies, copies


BLOCKS = {
    "separable": (_Separable, (2, 5, 21, 19), 4),
    "conv1d": (_Block1d, (2, 8, 37), 2),
    "conv3d": (_Block3d, (2, 3, 6, 14, 12), 1),
}


@needs_gpu
@needs_cudnn_build
@pytest.mark.parametrize("layout", ["nchw", "nhwc"])
@pytest.mark.parametrize(
    "dtype,autocast",
    [(torch.float32, False), (torch.bfloat16, True), (torch.float16, False)],
    ids=["fp32", "bf16-autocast", "fp16"],
)
@pytest.mark.parametrize("block", list(BLOCKS))
def test_depthwise_1d_3d_blocks_through_plugin(block, dtype, autocast, layout, cudnn_settings):
    """Depthwise, grouped, odd-channel, 1-d and 3-d convolutions of a compiled model against
    eager; those the rule takes (8 or more input channels per group) run through cuDNN with
    their batch norm, residual add and activation fused, the others as ATen's."""
    cls, shape, min_fused = BLOCKS[block]
    torch.manual_seed(0)
    model = cls()
    _randomize_bn(model)
    model = model.to("cuda", torch.float32 if autocast else dtype).eval()
    # fp16 without autocast: fp16 batch norms stay ATen's (see test_resnet_block_through_plugin).
    min_fused = 0 if dtype == torch.float16 else min_fused
    _check_model(model, [shape] * 3, dtype, autocast, layout, min_fused=min_fused)
