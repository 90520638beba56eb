"""The compiler is device-neutral (issue #11): lowering takes CUDA graphs (one device per
graph), the pass pipeline is chosen by the graph's device, a CUDA fusion group without a
CUDA kernel is put back as its ATen ops, and the graph cache records devices. Graphs on
CUDA are traced on FakeTensors, so all but the last test run without a GPU (nothing
executes on it); the last one runs a CUDA graph and is skipped without a GPU."""

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from torch_plugin import _C
from torch_plugin.compiler import graph_format, lowering


def _fn(x, y):
    return torch.relu(x * y + 1).sum(-1), torch.tanh(x).to(torch.float16) * 2


def _cuda_graph():
    with FakeTensorMode():
        x = torch.empty(4, 8, device="cuda")
        y = torch.empty(8, device="cuda")
        return make_fx(_fn)(x, y)


def test_pass_names_per_device():
    names = _C._compiler.pass_names("cuda")
    cpu = _C._compiler.pass_names("cpu")
    assert cpu == _C._compiler.pass_names()
    # CUDA runs broadcast_matmul (the autocast bmm of a transposed query as one product) and
    # attention_patterns (op-by-op attention to one fused call) before the rest, and no
    # memory_planning (the caching allocator serves each step).
    assert cpu[-1] == "memory_planning"
    assert names == [*cpu[:4], "broadcast_matmul", "attention_patterns", *cpu[4:-1]]
    assert names.index("codegen") == names.index("fusion") + 1
    assert "fusion" not in _C._compiler.pass_names("meta")


def test_cuda_graph_lowers_with_its_device_and_groups_without_kernel_are_unfused():
    g = lowering.lower(_cuda_graph(), {})
    assert g.device() == "cuda:0"
    g.run_pipeline({"freeze": False, "verify": True})
    exported = g.export()
    for node in exported["nodes"]:
        assert not node["op"].startswith("torch_plugin::") or (
            node["op"] == "torch_plugin::fused" and node["attrs"]["target"] == "cuda"
        ), node["op"]
    if torch.cuda.is_available():  # building compiles its CUDA kernels for the GPU's arch
        executor = _C._compiler.Executor(g)
        assert executor.num_outputs() == 2


def test_cpu_graph_keeps_its_kernels():
    gm = make_fx(_fn)(torch.randn(4, 8), torch.randn(8))
    g = lowering.lower(gm, {})
    assert g.device() == "cpu"
    g.run_pipeline({"verify": True})
    fused = [n for n in g.export()["nodes"] if n["op"] == "torch_plugin::fused"]
    assert fused and all(n["attrs"]["target"] == "cpp" for n in fused)


def test_several_devices_or_other_device_types_are_unsupported():
    with FakeTensorMode():
        x = torch.empty(4, device="cuda")
        y = torch.empty(4)
        gm = make_fx(lambda a, b: a + b.sum())(x, y)
    with pytest.raises(lowering.Unsupported, match="one device per graph"):
        lowering.lower(gm, {})
    meta = make_fx(lambda a: a * 2)(torch.empty(4, device="meta"))
    with pytest.raises(lowering.Unsupported, match="cpu and cuda only"):
        lowering.lower(meta, {})


def test_graph_cache_entry_records_the_device():
    g = lowering.lower(_cuda_graph(), {})
    entry = graph_format.entry_of(g.export(), [], g.device())
    assert entry is not None and entry["device"] == "cuda:0"
    built = graph_format.build(graph_format.loads(graph_format.dumps(entry, "k"), "k"), [])
    assert built.device() == "cuda:0" and str(built) == str(g)


def test_builder_rejects_a_bad_device():
    g = _C._compiler.Graph()
    with pytest.raises(ValueError, match="not a device"):
        g.add_input(6, [2], [1], "gpu7")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_runs_and_matches_eager():
    from torch_plugin.backends.plugin import plugin

    x, y = torch.randn(64, 33, device="cuda"), torch.randn(33, device="cuda")
    gm = torch.fx.symbolic_trace(_fn)
    compiled = plugin(gm, [x, y])
    for _ in range(2):
        got, want = compiled(x, y), _fn(x, y)
        torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got[1], want[1], rtol=1e-3, atol=1e-3)
        x = torch.randn(64, 33, device="cuda")
