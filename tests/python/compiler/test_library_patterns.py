"""library_patterns: convolutions and linears with constant weights become oneDNN nodes with
their residual add and activation as post-ops; results match eager."""

import pytest
import torch

from torch_plugin import _C

pytestmark = pytest.mark.skipif(not _C._compiler.has_onednn, reason="built without oneDNN")


class ConvBlock(torch.nn.Module):
    def __init__(self, act: torch.nn.Module):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(5, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=1, padding=1, groups=2, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(8)
        self.act = act

    def forward(self, x):
        y = self.act(self.bn1(self.conv1(x)))
        return self.act(self.bn2(self.conv2(y)) + y)


@pytest.mark.parametrize(
    "act", [torch.nn.ReLU(), torch.nn.SiLU(), torch.nn.GELU(), torch.nn.Hardtanh(-1.0, 2.0)]
)
def test_conv_bn_residual_activation(act, compile_plugin, assert_close):
    torch.manual_seed(0)
    model = ConvBlock(act).eval()
    for bn in (model.bn1, model.bn2):  # non-trivial running statistics
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 5, 9, 11)
    with torch.no_grad():
        c = compile_plugin(torch.fx.symbolic_trace(model), x)
        for _ in range(2):
            x = torch.randn(2, 5, 9, 11)
            assert_close(c(x), model(x))


@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_joins_the_convolution(affine, compile_plugin, assert_close, monkeypatch):
    """conv -> batch norm (-> residual add) -> activation: the batch norm's per-channel scale
    and shift, the add and the activation are the oneDNN convolution's post-ops (no generated
    kernel, no ATen mul/add left), and the results match eager over several calls."""
    from torch_plugin.compiler import stages as compile_mod

    built = []
    init = compile_mod.CompiledGraph.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(compile_mod.CompiledGraph, "__init__", record)
    torch.manual_seed(0)
    model = ConvBlock(torch.nn.ReLU()).eval()
    for bn in (model.bn1, model.bn2):
        if not affine:
            bn.weight, bn.bias = None, None
            bn.affine = False
        else:
            bn.weight.data.uniform_(-2, 2)  # negative scales too
            bn.bias.data.uniform_(-1, 1)
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    x = torch.randn(2, 5, 9, 11)
    with torch.no_grad():
        c = compile_plugin(torch.fx.symbolic_trace(model), x)
        (compiled,) = built
        steps = compiled.describe()
        assert steps.count("conv_pointwise") == 2 and "kernel" not in steps, steps
        assert "aten::mul" not in steps and "aten::add" not in steps, steps
        for _ in range(2):
            x = torch.randn(2, 5, 9, 11)
            assert_close(c(x), model(x))


def test_linear_gelu_3d_input(compile_plugin, assert_close):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
    model.eval()
    x = torch.randn(3, 7, 16)
    with torch.no_grad():
        c = compile_plugin(torch.fx.symbolic_trace(model), x)
        x = torch.randn(3, 7, 16)
        assert_close(c(x), model(x))


class TransposedLinear(torch.nn.Module):
    """A linear on a transposed 3-d input, then relu: AOTAutograd gives clone, view, mm, view,
    add(bias) (as in nn.MultiheadAttention's in-projection); the bias add and the relu join
    the oneDNN linear."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(12, 20)

    def forward(self, x):
        return torch.relu(self.lin(x.transpose(0, 1)))


def test_bias_add_after_a_view_joins_the_linear(compile_plugin, assert_close, monkeypatch):
    from torch_plugin.compiler import stages as compile_mod

    built = []
    init = compile_mod.CompiledGraph.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(compile_mod.CompiledGraph, "__init__", record)
    torch.manual_seed(0)
    model = TransposedLinear().eval()
    x = torch.randn(5, 3, 12)
    with torch.no_grad():
        c = compile_plugin(torch.fx.symbolic_trace(model), x)
        (compiled,) = built
        steps = compiled.describe()
        assert "linear_pointwise" in steps and "aten::add" not in steps, steps
        assert "aten::relu" not in steps and "kernel" not in steps, steps
        for _ in range(2):
            x = torch.randn(5, 3, 12)
            assert_close(c(x), model(x))


def test_schema_ops_match_reference():
    x, w, b = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(4)
    r = torch.randn(2, 4, 8, 8)
    got = torch.ops.torch_plugin.conv_pointwise(
        x, w, b, r, [1, 1], [1, 1], [1, 1], 1, "relu", 0.0, 0.0
    )
    want = torch.relu(torch.nn.functional.conv2d(x, w, b, padding=1) + r)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    meta = torch.ops.torch_plugin.conv_pointwise(
        x.to("meta"), w.to("meta"), None, None, [2, 2], [1, 1], [1, 1], 1, "", 0.0, 0.0
    )
    assert meta.shape == (2, 4, 4, 4)
    scale, shift = torch.randn(4), torch.randn(4)
    got = torch.ops.torch_plugin.conv_pointwise(
        x, w, b, r, [1, 1], [1, 1], [1, 1], 1, "relu", 0.0, 0.0, scale, shift
    )
    y = torch.nn.functional.conv2d(x, w, b, padding=1)
    want = torch.relu(y * scale.view(-1, 1, 1) + shift.view(-1, 1, 1) + r)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    a, wl = torch.randn(5, 8), torch.randn(6, 8)
    lin = torch.ops.torch_plugin.linear_pointwise(a, wl, None, None, "silu", 0.0, 0.0)
    torch.testing.assert_close(lin, torch.nn.functional.silu(a @ wl.T))


def test_flatten_of_a_channels_last_conv_output(compile_plugin, assert_close):
    """Conv outputs become channels_last; a later flatten (aten.view) cannot view that
    layout and must become a reshape (propagate_strides), not fail at run time."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 4 * 4, 10),
    ).eval()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        c = compile_plugin(torch.fx.symbolic_trace(model), x)
        for _ in range(2):
            x = torch.randn(2, 3, 8, 8)
            assert_close(c(x), model(x))


class SelfAttention(torch.nn.Module):
    """A layer norm, then nn.MultiheadAttention as torchvision's ViT calls it (self-attention,
    packed in-projection)."""

    def __init__(self, batch_first: bool):
        super().__init__()
        self.ln = torch.nn.LayerNorm(32)
        self.attn = torch.nn.MultiheadAttention(32, 4, batch_first=batch_first)

    def forward(self, x):
        x = self.ln(x)
        y, _ = self.attn(x, x, x, need_weights=False)
        return y


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("batch", [1, 3])
def test_packed_in_projection_splits_into_heads(
    batch_first, batch, compile_plugin, assert_close, monkeypatch
):
    """split_projection: the in-projection's [M, 3E] product, copied into q, k and v
    (clone, select), becomes three products with row blocks of the weight: no copy of the
    product, no select; the transposed copy of the layer norm's output (batch_first) is
    written by the layer norm's kernel; the results match eager over several calls."""
    from torch_plugin.compiler import stages as compile_mod

    built = []
    init = compile_mod.CompiledGraph.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(compile_mod.CompiledGraph, "__init__", record)
    torch.manual_seed(0)
    model = SelfAttention(batch_first).eval()
    shape = (batch, 10, 32) if batch_first else (10, batch, 32)
    x = torch.randn(shape)
    with torch.no_grad():
        c = compile_plugin(torch.fx.symbolic_trace(model), x)
        (compiled,) = built
        steps = compiled.describe()
        assert steps.count("linear_pointwise") == 4, steps  # q, k, v, out
        assert "select" not in steps, steps
        # batch_first: the in-projection's input is the layer norm's output transposed
        # (clone(permute)), which the layer norm's kernel writes in that layout (codegen).
        assert "clone" not in steps, steps
        for _ in range(3):
            x = torch.randn(shape)
            assert_close(c(x), model(x))
