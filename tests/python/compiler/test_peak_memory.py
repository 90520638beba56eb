"""Peak memory of compiled graphs: no weight held twice (CPU), at most eager's peak (GPU).

Differential: every compiled model is compared with eager over several calls on fresh random
inputs; then what the compiled artifact holds is counted. CPU: the executor's constants
(``Executor.constants()``) hold no tensor of a weight's size that is not a module parameter's
own memory (a folded conv weight that oneDNN prepacked is held once, by its step). GPU (skips
without one): ``torch.cuda.max_memory_allocated`` from before the first call (compile included)
through steady calls stays within eager's plus a small slack.
"""

from __future__ import annotations

import gc

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

import torch_plugin
from torch_plugin import _C
from torch_plugin.compiler.decompositions import decomposition_table
from torch_plugin.compiler.stages import compile_graph


@pytest.fixture(autouse=True)
def _no_tf32(no_tf32):
    """fp32 convolutions and products in full fp32 (conftest.no_tf32): with TF32 (cuDNN's
    default) two algorithms for the same convolution differ by about 1e-3, above the
    tolerance these tests compare outputs with (the cuDNN graph's engine is not ATen's)."""


class ConvBn(torch.nn.Module):
    """conv -> batch norm -> relu, twice: conv-bn folding makes new weights."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.b1 = torch.nn.BatchNorm2d(16)
        self.c2 = torch.nn.Conv2d(16, 16, 3, padding=1, bias=False)
        self.b2 = torch.nn.BatchNorm2d(16)
        for bn in (self.b1, self.b2):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)
            bn.weight.data.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(x)))


class GroupedConvBn(torch.nn.Module):
    """A grouped and a depthwise convolution, each with a batch norm and a residual add: the
    borrowed weight is described as [G, OC/G, IC/G, KH, KW] by its strides."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=2, bias=False)
        self.b1 = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
        self.b2 = torch.nn.BatchNorm2d(8)
        for bn in (self.b1, self.b2):
            bn.running_mean.uniform_(-1, 1)
            bn.running_var.uniform_(0.5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)) + x)
        return torch.relu(self.b2(self.c2(y)) + y)


def _channels_last(make):
    """``make``'s model with its 4-d parameters in channels_last memory (strided weights)."""

    def build() -> torch.nn.Module:
        return make().to(memory_format=torch.channels_last)

    return build


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(32, 64)
        self.l2 = torch.nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(torch.nn.functional.gelu(self.l1(x))) + x


MODELS = [
    pytest.param(ConvBn, (2, 8, 12, 12), id="conv_bn"),
    pytest.param(_channels_last(ConvBn), (2, 8, 12, 12), id="conv_bn_channels_last"),
    pytest.param(GroupedConvBn, (2, 8, 10, 9), id="grouped_conv_bn"),
    pytest.param(Mlp, (16, 32), id="mlp"),
]


def _frozen_compile(model: torch.nn.Module, x: torch.Tensor):
    """The model's inference ATen graph (the backend's decompositions) compiled with its
    parameters and buffers frozen, as the plugin backend compiles it (frozen arguments
    first)."""
    named = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    names, params = list(named), list(named.values())

    def fn(*args: torch.Tensor) -> tuple[torch.Tensor]:
        state = dict(zip(names, args[: len(names)]))
        return (torch.func.functional_call(model, state, args[len(names) :]),)

    with torch.no_grad():
        gm = make_fx(fn, decomposition_table=decomposition_table())(*params, x)
    return compile_graph(gm, params, inference=True), params


def _storages(tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors}


class AsTuple(torch.nn.Module):
    """``model``'s output as a one-element tuple: the backend then returns the compiled
    graph's own call (``GraphCall.flat``), whose executor a test can inspect."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (self.model(x),)


@pytest.mark.parametrize(("make", "shape"), MODELS)
def test_cpu_constants_held_once(make, shape, compile_plugin) -> None:
    torch.manual_seed(0)
    model = make().eval()
    with torch.no_grad():
        compiled = compile_plugin(AsTuple(model), torch.randn(shape))
        for _ in range(3):  # several calls: the arena and the steps are reused
            x = torch.randn(shape)
            torch.testing.assert_close(compiled(x)[0], model(x), rtol=1e-4, atol=1e-5)
    executor = compiled.__self__.executor  # GraphCall.flat, bound
    # What the executor holds beyond the module's own tensors: nothing as large as a weight
    # (a folded conv weight is held once, by oneDNN's prepacked copy).
    module = _storages([*model.parameters(), *model.buffers()])
    smallest_weight = min(p.numel() for p in model.parameters() if p.dim() > 1)
    extra = [
        tuple(t.shape)
        for t in executor.constants()
        if t.untyped_storage().data_ptr() not in module and t.numel() >= smallest_weight
    ]
    steps = executor.describe()
    if _C._compiler.has_onednn:
        assert "onednn" in steps, steps
        assert extra == [], f"weight-sized copies held by the executor: {extra}\n{steps}"
        # The oneDNN steps read the module's own weights (borrowed, not prepacked): the
        # executor holds each weight tensor itself, and no batch norm was folded into a copy.
        held = _storages(executor.constants())
        weights = [p for p in model.parameters() if p.dim() > 1]
        assert all(w.untyped_storage().data_ptr() in held for w in weights), steps


def test_cpu_step_form_after_release() -> None:
    """The executor released its IR's constants (the conv weights oneDNN prepacked); the IR
    and the step form are lowered again on demand and compute what the executor does."""
    torch.manual_seed(1)
    model = ConvBn().eval()
    x = torch.randn(2, 8, 12, 12)
    compiled, params = _frozen_compile(model, x)
    (got,) = compiled([*params, x])
    assert compiled.lowered.ir_graph is None
    assert "inputs" in compiled.ir_graph.export()
    (step_form,) = compiled.graph_module(x)
    torch.testing.assert_close(step_form, got, rtol=1e-4, atol=1e-5)


def test_cpu_refreeze_after_release() -> None:
    """A parameter changed in place recompiles (lowering again, a new executor) after the
    first executor released its IR's constants."""
    torch.manual_seed(2)
    model = ConvBn().eval()
    x = torch.randn(2, 8, 12, 12)
    compiled, params = _frozen_compile(model, x)
    compiled([*params, x])
    with torch.no_grad():
        model.c1.weight.mul_(0.5)
        want = model(x)
    (got,) = compiled([*params, x])
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def _peak_mb(fn, x: torch.Tensor, calls: int = 4) -> float:
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    with torch.no_grad():
        for _ in range(calls):
            out = fn(x)
            del out
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**20


def _eager_and_plugin_peaks_mb(model: torch.nn.Module, x: torch.Tensor) -> tuple[float, float]:
    """Peak MB of ``model`` eager and compiled with "plugin" on ``x`` (see :func:`_peak_mb`),
    after checking that the compiled output matches eager's."""
    gc.collect()
    eager_mb = _peak_mb(model, x)
    with torch.no_grad():
        want = model(x)
    torch_plugin.reset()
    compiled = torch_plugin.optimize("plugin")(model)
    gc.collect()
    torch.cuda.empty_cache()
    plugin_mb = _peak_mb(compiled, x)
    with torch.no_grad():
        got = compiled(x)
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    return eager_mb, plugin_mb


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(("make", "shape"), MODELS)
def test_gpu_peak_at_most_eager(make, shape) -> None:
    torch.manual_seed(0)
    big = tuple(s * 8 if i == 0 else s for i, s in enumerate(shape))  # activations dominate
    model = make().cuda().eval()
    x = torch.randn(big, device="cuda")
    eager_mb, plugin_mb = _eager_and_plugin_peaks_mb(model, x)
    # Slack: cuBLASLt's workspace beside cuBLAS's (eager's); no tuning buffer (the L2 flush
    # reads the weights, the tuning uses the weight and the workspace themselves).
    slack_mb = 32
    assert plugin_mb <= eager_mb + slack_mb, (plugin_mb, eager_mb)


class PoolConv(torch.nn.Module):
    """A max pool whose indices nothing reads (``max_pool2d_with_indices`` in the ATen graph),
    then convolutions: the indices must die at once, not at the end of the run."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = torch.nn.Conv2d(64, 256, 1)
        self.c2 = torch.nn.Conv2d(256, 64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.max_pool2d(x, 3, 2, 1)
        return self.c2(torch.relu(self.c1(y))) + y


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_unread_outputs_die_at_once() -> None:
    """ResNet-50's stem at batch 32: the max pool's int64 indices (51 MB, twice its output)
    held through the run put the compiled peak above eager's; eager drops them at once."""
    torch.manual_seed(0)
    model = PoolConv().cuda().eval()
    x = torch.randn(32, 64, 112, 112, device="cuda")
    eager_mb, plugin_mb = _eager_and_plugin_peaks_mb(model, x)
    # Slack as above (a workspace); the indices alone are 49 MiB.
    assert plugin_mb <= eager_mb + 32, (plugin_mb, eager_mb)


@pytest.mark.parametrize(
    ("out_bytes", "activation_bytes", "keep", "captures"),
    [
        (1 << 10, 0, "faster", True),
        ("over", 0, "faster", False),  # static buffers above the limit: not captured
        ("over", "twice", "faster", True),  # within the graph's own activations
        ("over", 0, "always", True),  # reduce-overhead captures whatever the size
    ],
)
def test_cuda_graph_static_buffer_budget(out_bytes, activation_bytes, keep, captures) -> None:
    """The decision on the first (warm-up) call, from the bytes of the outputs a
    captured graph would hold; the runner only runs ``run`` here (no GPU needed)."""
    from torch_plugin.compiler.cuda_graphs import STATIC_BYTES_LIMIT, CudaGraphRunner

    n = STATIC_BYTES_LIMIT + 4 if out_bytes == "over" else out_bytes
    out = torch.zeros(n // 4)
    act = 2 * n if activation_bytes == "twice" else activation_bytes
    runner = CudaGraphRunner(lambda args: [out], "test graph", keep, act)
    x = torch.ones(4)
    assert runner([x])[0] is out
    assert (runner.failed is None) == captures, runner.failed
    if not captures:
        assert runner([x])[0] is out  # later calls run uncaptured
        assert runner.graph is None


class BigOutput(torch.nn.Module):
    """A product whose output (64 MiB at batch 4096) dwarfs everything else it computes."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(64, 4096)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_large_output_not_held_by_a_cuda_graph() -> None:
    from torch_plugin.compiler import cuda_graphs

    torch.manual_seed(0)
    model = BigOutput().cuda().eval()
    x = torch.randn(4096, 64, device="cuda")
    eager_mb = _peak_mb(model, x)
    torch_plugin.reset()
    before = dict(cuda_graphs.counters)
    compiled = torch_plugin.optimize("plugin")(model)
    plugin_mb = _peak_mb(compiled, x)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-3, atol=1e-3)
    assert cuda_graphs.counters["captured"] == before["captured"]
    assert plugin_mb <= eager_mb + 2 * 64 + 32, (plugin_mb, eager_mb)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_conv_bn_holds_no_folded_weight_and_no_arena() -> None:
    """CUDA: a batch norm becomes a scale and shift in the next generated kernel (no folded
    copy of the convolution's weight), and no arena is kept between calls."""
    torch.manual_seed(0)
    model = ConvBn().cuda().eval()
    x = torch.randn(4, 8, 12, 12, device="cuda")
    compiled, params = _frozen_compile(model, x)
    with torch.no_grad():
        for _ in range(4):  # warm-up, capture (or not), steady calls
            x = torch.randn_like(x)
            (got,) = compiled([*params, x])
            torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
    executor = compiled.executor
    assert executor.arena_bytes() == 0
    assert "batch_norm" not in compiled.ir, compiled.ir
    module = _storages([*model.parameters(), *model.buffers()])
    smallest_weight = min(p.numel() for p in model.parameters() if p.dim() > 1)
    extra = [
        tuple(t.shape)
        for t in executor.constants()
        if t.untyped_storage().data_ptr() not in module and t.numel() >= smallest_weight
    ]
    assert extra == [], f"weight-sized copies held by the executor: {extra}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_compile_and_capture_leave_no_workspace_behind() -> None:
    """What a compiled graph leaves allocated after its calls (compile, cuBLASLt tuning, CUDA
    graph capture, replays): its static buffers only; no cuBLAS workspace of a build thread
    or a capture stream (32 MiB each on Hopper), no tuning buffer, no arena."""
    torch.manual_seed(0)
    model = Mlp().cuda().eval()
    x = torch.randn(16, 32, device="cuda")
    with torch.no_grad():
        model(x)  # eager's own cuBLAS workspace, before the baseline
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    compiled, params = _frozen_compile(model, x)
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn_like(x)
            (got,) = compiled([*params, x])
            torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
            del got
    torch.cuda.synchronize()
    left = torch.cuda.memory_allocated() - before
    assert left < 8 << 20, f"{left / 2**20:.1f} MiB left allocated"
