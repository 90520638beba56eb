"""The compiled artifact (torch_plugin/compiler/fx_artifact.py): a compiled graph as an FX
graph of torch.ops.torch_plugin.* and ATen calls that prints, runs and matches eager,
re-traces through the Meta kernels, and survives torch.save/torch.load, also in a fresh
process whose kernel cache is empty."""

import io
import operator
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import torch_plugin
from torch_plugin import _C
from torch_plugin.artifact import compile_to_graph_module
from torch_plugin.compiler.fx_artifact import PluginGraphModule, to_graph_module
from torch_plugin.compiler.stages import CompiledGraph, compile_graph

REPO = os.path.dirname(os.path.dirname(torch_plugin.__file__))
PLUGIN_OPS = {
    torch.ops.torch_plugin.conv_pointwise.default,
    torch.ops.torch_plugin.linear_pointwise.default,
    torch.ops.torch_plugin.fused.default,
}


needs_onednn = pytest.mark.skipif(
    not _C._compiler.has_onednn, reason="built without oneDNN: no library ops to check"
)


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))


def pointwise(x, y, b):
    return (F.gelu(x * y + b).sigmoid() - 1.5 * torch.relu(x).sqrt(),)


class Net(torch.nn.Module):
    """conv+BN+ReLU, a residual block, max-pool and mean (ATen fallbacks), linear+GELU, a
    pointwise tail (a fused kernel)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 10)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)) + y)
        y = F.max_pool2d(y, 2).mean(dim=(2, 3))
        z = F.gelu(self.fc(y))
        return torch.tanh(z * 0.5 + 1.0) * torch.sigmoid(z)


def make_net() -> torch.nn.Module:
    net = Net()
    for bn in (net.bn1, net.bn2):  # non-trivial batch-norm statistics to fold
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
    return net.eval()


def net_inputs():
    return (torch.randn(2, 3, 8, 8),)


def pointwise_inputs():
    return (torch.randn(33, 65), torch.randn(33, 65), torch.randn(65))


@pytest.fixture(scope="module")
def net_artifact():
    net = make_net()
    return net, compile_to_graph_module(torch.fx.symbolic_trace(net), *net_inputs())


@pytest.fixture(scope="module")
def pointwise_artifact():
    return compile_to_graph_module(torch.fx.symbolic_trace(pointwise), *pointwise_inputs())


def targets(gm: torch.fx.GraphModule) -> set:
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


@needs_onednn
def test_prints_torch_plugin_ops(net_artifact, pointwise_artifact):
    _, gm = net_artifact
    code = gm.code
    for name in ("conv_pointwise", "linear_pointwise", "fused"):
        assert f"torch.ops.torch_plugin.{name}.default(" in code, code
    assert "torch.ops.aten.max_pool2d_with_indices.default(" in code  # ATen fallback steps
    assert 'extern "C"' not in code  # kernel sources are attributes, not literals
    assert "fused_0_source = self.fused_0_source" in code
    assert "torch.ops.torch_plugin.fused.default(" in pointwise_artifact.code
    assert "class PluginGraphModule" in gm.print_readable(print_output=False)


@needs_onednn
def test_frozen_constants_are_buffers(net_artifact):
    net, gm = net_artifact
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == 1  # the image; the parameters are constants
    buffers = dict(gm.named_buffers())
    get_attrs = {n.target for n in gm.graph.nodes if n.op == "get_attr"}
    assert buffers and set(buffers) <= get_attrs
    # conv1's weight is a buffer as it is (the batch norm is a scale and shift, not folded
    # into a copy of the weight), and so is bn1's per-channel scale.
    bn = net.bn1
    scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
    assert any(torch.equal(b, net.conv1.weight) for b in buffers.values())
    assert any(
        b.numel() == scale.numel() and torch.allclose(b.flatten(), scale, atol=1e-6)
        for b in buffers.values()
    )


@pytest.mark.parametrize("which", ["net", "pointwise"])
def test_runs_and_matches_eager(which, net_artifact, pointwise_artifact):
    if which == "net":
        net, gm = net_artifact
        model, make = net, net_inputs
    else:
        gm, model, make = pointwise_artifact, pointwise, pointwise_inputs
    for _ in range(2):
        args = make()
        got = gm(*args)
        want = model(*args)
        want = want if isinstance(want, tuple) else (want,)
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_matches_the_executor():
    def fn(x, w):
        return (torch.relu(x @ w) * 2.0 + 1.0, x.sum(dim=0))

    x, w = torch.randn(9, 5), torch.randn(5, 4)
    compiled = compile_graph(make_fx(fn)(x, w))  # not frozen: w stays an input
    assert isinstance(compiled, CompiledGraph)
    gm = compiled.graph_module
    assert isinstance(gm, PluginGraphModule)
    x, w = torch.randn(9, 5), torch.randn(5, 4)
    for g, e in zip(gm(x, w), compiled([x, w])):
        torch.testing.assert_close(g, e)
    for g, e in zip(gm(x, w), fn(x, w)):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-5)


@needs_onednn
@pytest.mark.parametrize("mode", ["real", "fake", "symbolic"])
def test_retraces_through_meta_kernels(mode, net_artifact):
    net, gm = net_artifact
    buffers = dict(gm.named_buffers())

    def stateless(buffers, *args):  # the constants become inputs, fake like the others
        return torch.func.functional_call(gm, buffers, args)

    retraced = make_fx(stateless, tracing_mode=mode)(buffers, *net_inputs())
    assert PLUGIN_OPS <= targets(retraced)
    args = net_inputs()
    for g, w in zip(retraced(buffers, *args), (net(*args),)):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_fake_tensor_shapes(net_artifact):
    net, gm = net_artifact
    (x,) = net_inputs()
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        (out,) = gm(mode.from_tensor(x))
    want = net(x)
    assert out.shape == want.shape and out.dtype == want.dtype


@needs_onednn
def test_save_and_load_in_process(tmp_path, net_artifact):
    net, gm = net_artifact
    path = tmp_path / "net.pt"
    torch.save(gm, path)
    loaded = torch.load(path, weights_only=False)
    assert isinstance(loaded, PluginGraphModule)
    assert "fused_0_source = self.fused_0_source" in loaded.code  # not inlined by re-tracing
    assert PLUGIN_OPS <= targets(loaded)
    args = net_inputs()
    torch.testing.assert_close(loaded(*args)[0], net(*args), rtol=1e-4, atol=1e-5)


@needs_onednn
def test_save_and_load_in_a_fresh_process(tmp_path, net_artifact):
    """A fresh interpreter with an empty kernel cache: loading imports torch_plugin by itself,
    and the fused kernels are rebuilt from the saved sources."""
    net, gm = net_artifact
    n_kernels = sum(1 for n in gm.graph.nodes if n.target is torch.ops.torch_plugin.fused.default)
    assert n_kernels >= 1
    args = net_inputs()
    torch.save(gm, tmp_path / "net.pt")
    torch.save(args, tmp_path / "inputs.pt")
    script = textwrap.dedent(
        f"""
        import sys, torch
        gm = torch.load({str(tmp_path / "net.pt")!r}, weights_only=False)
        assert "torch_plugin" in sys.modules
        args = torch.load({str(tmp_path / "inputs.pt")!r})
        torch.save(gm(*args), {str(tmp_path / "outputs.pt")!r})
        from torch_plugin import _C
        print("compiled", _C._compiler.kernel_cache_stats()["compiled"])
        """
    )
    cache = tmp_path / "fresh_cache"
    env = dict(os.environ, TORCH_PLUGIN_CACHE_DIR=str(cache), PYTHONPATH=REPO)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"compiled {n_kernels}" in proc.stdout
    assert len(list(cache.glob("*.kernel"))) == n_kernels
    (got,) = torch.load(tmp_path / "outputs.pt")
    torch.testing.assert_close(got, net(*args), rtol=1e-4, atol=1e-5)


def test_multi_output_aten_node():
    """An ATen call with several returns becomes one call and getitem nodes."""

    def fn(x):
        values, indices = torch.sort(x, dim=1)
        return (values * 2.0, indices)

    x = torch.randn(4, 7)
    compiled = compile_graph(make_fx(fn)(x))
    gm = to_graph_module(compiled)
    assert operator.getitem in targets(gm)
    x = torch.randn(4, 7)
    got, want = gm(x), fn(x)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])


def test_compile_to_graph_module_captures_a_model(tmp_path):
    """A plain nn.Module goes through torch_plugin.export (capture) first."""
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4), torch.nn.Tanh()
    ).eval()
    gm = compile_to_graph_module(model, torch.randn(8, 16))
    if _C._compiler.has_onednn:
        assert torch.ops.torch_plugin.linear_pointwise.default in targets(gm)
    x = torch.randn(8, 16)
    (got,) = gm(x)
    torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-5)


def test_aten_constants_round_trip():
    """dtype, memory-format and device constants come back as torch objects; keyword-only
    arguments stay keywords; defaults are left out."""

    def fn(x):
        return (
            x.sum(dim=1, dtype=torch.float64),
            F.gelu(x, approximate="tanh"),
            torch.ones_like(x, dtype=torch.int32, device="cpu"),
            x.unsqueeze(0).contiguous(memory_format=torch.channels_last).relu(),
        )

    x = torch.randn(3, 5, 7)
    gm = to_graph_module(compile_graph(make_fx(fn)(x)))
    code = gm.code
    assert "dtype = torch.float64" in code and "approximate = 'tanh'" in code, code
    assert "torch.int32" in code and "device(type='cpu')" in code, code
    x = torch.randn(3, 5, 7)
    got, want = gm(x), fn(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        torch.testing.assert_close(g, w)


# --- the executor form: one torch.ops.torch_plugin.run_graph call ----------------------


def _compiled_for_executor_form():
    def fn(x, w):
        h = torch.relu(x @ w) * 2.0 + 1.0
        return h, h.t().sigmoid(), x.sum(dim=0)

    x, w = torch.randn(9, 5), torch.randn(5, 4)
    return fn, compile_graph(make_fx(fn)(x, w))  # not frozen: w stays an input


def test_executor_form_runs_the_executor_through_the_dispatcher():
    fn, compiled = _compiled_for_executor_form()
    gm = compiled.executor_graph_module
    assert "torch.ops.torch_plugin.run_graph.default" in gm.code
    assert targets(gm) == {torch.ops.torch_plugin.run_graph.default, operator.getitem}
    assert isinstance(gm.executor, torch.ScriptObject)
    for _ in range(2):
        x, w = torch.randn(9, 5), torch.randn(5, 4)
        got = gm(x, w)
        assert isinstance(got, tuple) and len(got) == 3
        for g, e, want in zip(got, compiled([x, w]), fn(x, w)):
            assert g.stride() == e.stride()
            torch.testing.assert_close(g, e)
            torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-5)


def test_executor_form_retraces_through_its_meta_kernel():
    _, compiled = _compiled_for_executor_form()
    gm = compiled.executor_graph_module
    x, w = torch.randn(9, 5), torch.randn(5, 4)
    with FakeTensorMode() as mode:
        fx, fw = mode.from_tensor(x), mode.from_tensor(w)
        fake = gm(fx, fw)
    for f, real in zip(fake, gm(x, w)):
        assert f.shape == real.shape and f.dtype == real.dtype and f.stride() == real.stride()
    retraced = make_fx(gm, tracing_mode="fake")(x, w)
    assert torch.ops.torch_plugin.run_graph.default in targets(retraced)


def test_executor_form_rejects_other_inputs_and_pickling():
    _, compiled = _compiled_for_executor_form()
    gm = compiled.executor_graph_module
    with pytest.raises(RuntimeError, match=r"input 0 has sizes \[8, 5\].*\[9, 5\]"):
        gm(torch.randn(8, 5), torch.randn(5, 4))
    with pytest.raises(RuntimeError, match="input 1 has dtype Double"):
        gm(torch.randn(9, 5), torch.randn(5, 4, dtype=torch.float64))
    with pytest.raises(RuntimeError, match="takes 2 inputs, got 1"):
        torch.ops.torch_plugin.run_graph(gm.executor, [torch.randn(9, 5)])
    with pytest.raises(TypeError, match="cannot be saved"):
        torch.save(gm, io.BytesIO())
