"""The optimizer step compiled by the plugin compiler (torch_plugin.compiler.optimizer_step)
equals eager's optimizer: parameters, gradients and state (momentum_buffer, exp_avg,
exp_avg_sq, step) after every step, over several steps with an LR scheduler stepping between
calls (a changed learning rate must reach the compiled update, never a stale constant), with
no recompilation for a changed learning rate. Unsupported configurations run eager's step.
On CUDA the same checks run on the GPU (skipped without one)."""

from __future__ import annotations

import copy

import pytest
import torch

import torch_plugin
from torch_plugin.compiler import multi_tensor, optimizer_step

pytestmark = pytest.mark.usefixtures("fresh_capture")

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

OPTIMIZERS = {
    "sgd": lambda p: torch.optim.SGD(p, lr=0.1),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1),
    "sgd_nesterov_wd": lambda p: torch.optim.SGD(
        p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01
    ),
    "adam": lambda p: torch.optim.Adam(p, lr=0.01),
    "adam_wd": lambda p: torch.optim.Adam(p, lr=0.01, betas=(0.8, 0.95), weight_decay=0.1),
    "adamw": lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.05),
    "adam_foreach": lambda p: torch.optim.Adam(p, lr=0.01, foreach=True),
    "sgd_nesterov_foreach": lambda p: torch.optim.SGD(
        p, lr=0.1, momentum=0.9, nesterov=True, foreach=True
    ),
}


def _model(device: str, dtype=torch.float32) -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4, bias=False)
    ).to(device, dtype)


def _assert_state_equal(o1, o2, m1, m2, what, tol=1e-6):
    for (name, p), q in zip(m1.named_parameters(), m2.parameters()):
        torch.testing.assert_close(q, p, rtol=tol, atol=tol, msg=f"{what} {name}")
        assert (p.grad is None) == (q.grad is None), f"{what} {name}: grad"
        if p.grad is not None:  # foreach SGD with nesterov writes the gradients
            torch.testing.assert_close(
                q.grad, p.grad, rtol=tol, atol=tol, msg=f"{what} {name} grad"
            )
        s1, s2 = o1.state.get(p, {}), o2.state.get(q, {})
        assert s1.keys() == s2.keys(), f"{what} {name}: state keys"
        for k in s1:
            a, b = s1[k], s2[k]
            if isinstance(a, torch.Tensor):
                assert a.device == b.device and a.dtype == b.dtype, f"{what} {name} {k}"
                torch.testing.assert_close(b, a, rtol=tol, atol=tol, msg=f"{what} {name} {k}")
            else:
                assert a == b
    assert [g["lr"] for g in o1.param_groups] == [g["lr"] for g in o2.param_groups]


def _steps_through_run(device, make, steps=5, dtype=torch.float32, tol=1e-6):
    """Eager optimizer vs optimizer_step.run on equal gradients (eager gradients for both)."""
    torch.manual_seed(0)
    m1 = _model(device, dtype)
    m2 = copy.deepcopy(m1)
    o1, o2 = make(m1.parameters()), make(m2.parameters())
    s1 = torch.optim.lr_scheduler.StepLR(o1, step_size=1, gamma=0.7)
    s2 = torch.optim.lr_scheduler.StepLR(o2, step_size=1, gamma=0.7)
    for step in range(steps):
        x = torch.randn(4, 8, device=device, dtype=dtype)
        for m in (m1, m2):
            m(x).float().square().mean().backward()
        o1.step()
        optimizer_step.run(o2.step)  # o2.step: the scheduler's counting wrapper
        _assert_state_equal(o1, o2, m1, m2, f"step {step}", tol)
        o1.zero_grad()
        o2.zero_grad()
        s1.step()
        s2.step()
    assert o2._opt_called


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_compiled_update_equals_eager(device, name):
    before = dict(optimizer_step.counters)
    _steps_through_run(device, OPTIMIZERS[name])
    compiled = optimizer_step.counters["compiled_steps"] - before["compiled_steps"]
    # the first step creates the state in eager (momentum buffers, moments); the rest compile
    assert compiled >= 4 if name != "sgd" else compiled == 5
    # one graph for all steps: the learning rate changed every step and never recompiled
    assert optimizer_step.counters["graphs_compiled"] - before["graphs_compiled"] == 1


@pytest.mark.parametrize(
    "make,why",
    [
        (lambda p: torch.optim.Adam(p, lr=0.01, amsgrad=True), "amsgrad"),
        (lambda p: torch.optim.SGD(p, lr=0.1, maximize=True), "maximize"),
        (lambda p: torch.optim.RMSprop(p, lr=0.01), "RMSprop"),
        (lambda p: torch.optim.Adam(p, lr=torch.tensor(0.01)), "lr is a tensor"),
    ],
)
def test_unsupported_runs_eager(make, why):
    before = dict(optimizer_step.counters)
    _steps_through_run("cpu", make, steps=3)
    assert optimizer_step.counters["compiled_steps"] == before["compiled_steps"], why


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_kernels_turned_off_by_the_environment(monkeypatch):
    """TORCH_PLUGIN_CUDA_OPTIMIZER_KERNELS=0 (optimizer_step.CUDA_KERNELS_ENV) makes a CUDA
    parameter group take the optimizer's own step, with eager's results."""
    monkeypatch.setenv(optimizer_step.CUDA_KERNELS_ENV, "0")
    before = dict(optimizer_step.counters)
    _steps_through_run("cuda", OPTIMIZERS["adam"])
    assert optimizer_step.counters["compiled_steps"] == before["compiled_steps"]


def test_hooks_and_closure_run_eager():
    torch.manual_seed(0)
    m = _model("cpu")
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    m(torch.randn(2, 8)).sum().backward()
    opt.step()
    calls = []
    handle = opt.register_step_post_hook(lambda *a: calls.append(1))
    m(torch.randn(2, 8)).sum().backward()
    assert optimizer_step.why_eager(opt, (), {}) == "the optimizer has step hooks"
    optimizer_step.run(opt.step)
    assert calls == [1]
    handle.remove()
    assert optimizer_step.why_eager(opt, (), {}) is None
    loss = optimizer_step.run(opt.step, lambda: torch.tensor(3.0))  # a closure: eager's step
    assert loss.item() == 3.0


def _training_step(model, opt):
    def step(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step


@pytest.mark.parametrize("name", ["sgd_nesterov_wd", "adamw"])
@pytest.mark.parametrize("backend", ["plugin", "eager"])
def test_whole_training_step_under_optimize(name, backend):
    """optimize() on forward, loss, backward, step and zero_grad: the step runs compiled
    under "plugin" (as eager's step under "eager"), results equal eager's after every
    step, with an LR scheduler between calls and no recompilation."""
    torch.manual_seed(0)
    m1 = _model("cpu")
    m2 = copy.deepcopy(m1)
    o1, o2 = OPTIMIZERS[name](m1.parameters()), OPTIMIZERS[name](m2.parameters())
    s1 = torch.optim.lr_scheduler.StepLR(o1, step_size=1, gamma=0.5)
    s2 = torch.optim.lr_scheduler.StepLR(o2, step_size=1, gamma=0.5)
    eager_step = _training_step(m1, o1)
    compiled_step = torch_plugin.optimize(_training_step(m2, o2), backend=backend)
    before = dict(optimizer_step.counters)
    for step in range(5):
        x, y = torch.randn(4, 8), torch.randn(4, 4)
        torch.testing.assert_close(compiled_step(x, y), eager_step(x, y), rtol=1e-4, atol=1e-5)
        # plugin's forward and backward round differently from eager's: 1e-4
        _assert_state_equal(o1, o2, m1, m2, f"step {step}", tol=1e-4)
        for p in m2.parameters():
            assert p.grad is None  # zero_grad ran (set_to_none)
        s1.step()
        s2.step()
    compiled = optimizer_step.counters["compiled_steps"] - before["compiled_steps"]
    if backend == "plugin":
        assert compiled >= 4
        assert optimizer_step.counters["graphs_compiled"] - before["graphs_compiled"] == 1
    else:
        assert compiled == 0
    assert torch_plugin.stats.recompiles == 0
    assert any("optimizer.step()" in b[1] for b in torch_plugin.stats.graph_breaks)


def test_optimizer_only_frame():
    """A frame that only calls opt.step() (no tensor before it) still runs the compiled step;
    changing betas and lr between calls reaches it without recompiling."""
    torch.manual_seed(0)
    m1 = _model("cpu")
    m2 = copy.deepcopy(m1)
    o1, o2 = OPTIMIZERS["adam_wd"](m1.parameters()), OPTIMIZERS["adam_wd"](m2.parameters())

    def update(opt):
        opt.step()

    compiled_update = torch_plugin.optimize(update)
    before = dict(optimizer_step.counters)
    for step in range(4):
        x = torch.randn(4, 8)
        for m in (m1, m2):
            m(x).square().mean().backward()
        update(o1)
        compiled_update(o2)
        _assert_state_equal(o1, o2, m1, m2, f"step {step}")
        for o in (o1, o2):
            o.zero_grad()
            o.param_groups[0]["lr"] *= 0.5
            o.param_groups[0]["betas"] = (0.7 + 0.05 * step, 0.9 + 0.01 * step)
    assert optimizer_step.counters["compiled_steps"] - before["compiled_steps"] == 3
    assert optimizer_step.counters["graphs_compiled"] - before["graphs_compiled"] == 1
    assert torch_plugin.stats.recompiles == 0


@pytest.mark.parametrize("device", DEVICES)
def test_param_groups_dtypes_and_missing_grads(device):
    """Two param groups with their own learning rates and weight decay, fp32 and bf16
    parameters (two graphs: one per dtype), a parameter without a gradient (left alone), and
    a state_dict round trip: loading the compiled optimizer's state into a fresh eager one
    continues equal."""
    torch.manual_seed(0)

    def build():
        torch.manual_seed(0)
        return torch.nn.ModuleDict(
            {
                "a": torch.nn.Linear(8, 8).to(device),
                "b": torch.nn.Linear(8, 8).to(device, torch.bfloat16),
                "unused": torch.nn.Linear(8, 8).to(device),
            }
        )

    def opt_of(m):
        return torch.optim.AdamW(
            [
                {"params": m["a"].parameters(), "lr": 0.01},
                {"params": [*m["b"].parameters(), *m["unused"].parameters()], "lr": 0.02,
                 "weight_decay": 0.0},
            ],
            lr=0.05,
        )  # fmt: skip

    m1, m2 = build(), build()
    o1, o2 = opt_of(m1), opt_of(m2)
    before = dict(optimizer_step.counters)
    for step in range(4):
        x = torch.randn(4, 8, device=device)
        for m in (m1, m2):
            (m["a"](x).square().mean() + m["b"](x.bfloat16()).float().square().mean()).backward()
        o1.step()
        optimizer_step.run(o2.step)
        # bf16 parameters: each op of the compiled update rounds to bf16 (eager's foreach
        # keeps fp32 inside each op): one bf16 ulp
        _assert_state_equal(o1, o2, m1, m2, f"step {step}", tol=1e-2)
        for o in (o1, o2):
            o.zero_grad()
    assert optimizer_step.counters["graphs_compiled"] - before["graphs_compiled"] == 2
    assert not o2.state.get(m2["unused"].weight)
    o3 = opt_of(m2)
    o3.load_state_dict(o2.state_dict())
    x = torch.randn(4, 8, device=device)
    for m in (m1, m2):
        (m["a"](x).square().mean() + m["b"](x.bfloat16()).float().square().mean()).backward()
    o1.step()
    o3.step()
    _assert_state_equal(o1, o3, m1, m2, "after load_state_dict", tol=1e-2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["sgd_momentum", "adamw"])
def test_cuda_compiled_step_does_not_synchronize(name):
    """After warm-up (compiling, CUDA-graph decisions), a compiled CUDA step makes no host
    synchronisation (torch.cuda.set_sync_debug_mode("error") raises on one) and still equals
    eager."""
    torch.manual_seed(0)
    m1 = _model("cuda")
    m2 = copy.deepcopy(m1)
    o1, o2 = OPTIMIZERS[name](m1.parameters()), OPTIMIZERS[name](m2.parameters())

    def update(opt):
        opt.step()

    compiled_update = torch_plugin.optimize(update)
    for step in range(8):
        x = torch.randn(4, 8, device="cuda")
        for m in (m1, m2):
            m(x).square().mean().backward()
        update(o1)
        if step >= 6:
            torch.cuda.set_sync_debug_mode("error")
        try:
            compiled_update(o2)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        _assert_state_equal(o1, o2, m1, m2, f"step {step}")
        for o in (o1, o2):
            o.zero_grad()


def test_adam_parameters_of_one_group_at_different_steps():
    """Parameters of one group whose step counts differ (state loaded or set per parameter)
    each get their own bias corrections: one hyperparameter row per step count, chosen per
    tensor by the kernel's table (data: no new kernel)."""
    torch.manual_seed(0)
    m1 = _model("cpu")
    m2 = copy.deepcopy(m1)
    o1, o2 = OPTIMIZERS["adam"](m1.parameters()), OPTIMIZERS["adam"](m2.parameters())
    before = dict(optimizer_step.counters)
    for step in range(4):
        x = torch.randn(4, 8)
        for m in (m1, m2):
            m(x).square().mean().backward()
        o1.step()
        optimizer_step.run(o2.step)
        _assert_state_equal(o1, o2, m1, m2, f"step {step}")
        if step == 1:
            for o, m in ((o1, m1), (o2, m2)):
                o.state[m[0].weight]["step"].fill_(10.0)
        for o in (o1, o2):
            o.zero_grad()
    assert optimizer_step.counters["compiled_steps"] - before["compiled_steps"] == 3
    assert optimizer_step.counters["graphs_compiled"] - before["graphs_compiled"] == 1


def test_compile_failure_falls_back_to_eager(monkeypatch):
    """A kernel that fails to compile runs eager's step (equal results), and is not tried
    again."""
    calls = []

    def broken(*args):
        calls.append(1)
        raise RuntimeError("boom")

    monkeypatch.setattr(multi_tensor, "warm_up", broken)
    before = dict(optimizer_step.counters)
    _steps_through_run("cpu", OPTIMIZERS["adamw"], steps=4)
    assert optimizer_step.counters["compiled_steps"] == before["compiled_steps"]
    assert calls == [1]


@pytest.mark.parametrize("name", ["sgd_momentum", "adamw"])
def test_small_chunks_and_threads(monkeypatch, name):
    """Tensors cut into many chunks (a partial last one; chunks of one tensor on different
    OpenMP threads): the table's block map covers every element once."""
    monkeypatch.setattr(multi_tensor, "CPU_CHUNK", 7)
    monkeypatch.setattr(multi_tensor, "CPU_PARALLEL_MIN", 0)
    before = dict(optimizer_step.counters)
    _steps_through_run("cpu", OPTIMIZERS[name], steps=4)
    assert optimizer_step.counters["compiled_steps"] - before["compiled_steps"] == 3


MIXED_OPTIMIZERS = {
    "adam": lambda p, f: torch.optim.Adam(p, lr=0.01, betas=(0.6, 0.95), foreach=f),
    "adam_wd": lambda p, f: torch.optim.Adam(p, lr=0.01, weight_decay=0.1, foreach=f),
    "adamw": lambda p, f: torch.optim.AdamW(p, lr=0.01, weight_decay=0.05, foreach=f),
    "adamw_eps": lambda p, f: torch.optim.AdamW(p, lr=0.01, eps=1e-3, weight_decay=0.05, foreach=f),
    "sgd_momentum_wd": lambda p, f: torch.optim.SGD(
        p, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01, foreach=f
    ),
    "sgd_nesterov": lambda p, f: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, foreach=f),
}
# (70001,): two CUDA chunks, the second partial and not a multiple of the vector width
MIXED_SHAPES = [(1,), (5,), (37, 3), (64, 64), (3, 7, 11), (20003,), (128, 300), (70001,)]
# bf16/fp16: a few ulps after a few steps in a few elements (the scalar tails of ATen's
# vectorized CPU loops round the bf16/fp16 scalars unlike their vector bodies, which the kernel
# follows); fp32/fp64: ATen's CPU sqrt is not correctly rounded, the kernel's is.
DTYPE_TOL = {torch.float32: 1e-6, torch.float64: 1e-12, torch.bfloat16: 3e-2, torch.float16: 4e-3}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("foreach", [True, False])
@pytest.mark.parametrize("name", list(MIXED_OPTIMIZERS))
def test_mixed_dtypes_and_sizes(device, foreach, name):
    """Many tensors of mixed sizes (1 element to several chunks) and dtypes (fp32, fp64, bf16,
    fp16: one kernel each) in two param groups, against eager's foreach and for-loop
    optimizers on equal fresh gradients over several steps with an LR scheduler: parameters,
    gradients, state and step counts equal to rounding (DTYPE_TOL says why not bit for bit), one
    kernel per dtype for all steps, and the version counters of what the step wrote move."""
    torch.manual_seed(0)
    dtypes = list(DTYPE_TOL)
    if name in ("adam", "adam_wd", "adamw"):  # eps=1e-8 is 0 in fp16: 0/0, eager and here
        dtypes.remove(torch.float16)
    ref = [
        torch.nn.Parameter(torch.randn(s, device=device, dtype=dtypes[i % len(dtypes)]))
        for i, s in enumerate(MIXED_SHAPES * 2)
    ]
    got = [torch.nn.Parameter(p.detach().clone()) for p in ref]

    def groups(ps):
        return [{"params": ps[::2]}, {"params": ps[1::2], "lr": 0.03}]

    o1 = MIXED_OPTIMIZERS[name](groups(ref), foreach)
    o2 = MIXED_OPTIMIZERS[name](groups(got), foreach)
    s1 = torch.optim.lr_scheduler.StepLR(o1, step_size=1, gamma=0.8)
    s2 = torch.optim.lr_scheduler.StepLR(o2, step_size=1, gamma=0.8)
    before = dict(optimizer_step.counters)
    for step in range(4):
        for p, q in zip(ref, got):
            grad = torch.randn_like(p)
            p.grad, q.grad = grad.clone(), grad.clone()
        versions = [q._version for q in got]
        o1.step()
        optimizer_step.run(o2.step)
        if step > 0:
            assert all(q._version > v for q, v in zip(got, versions)), "version counters"
        for i, (p, q) in enumerate(zip(ref, got)):
            tol = DTYPE_TOL[p.dtype]
            what = f"step {step} tensor {i} {p.dtype}"
            torch.testing.assert_close(q, p, rtol=tol, atol=tol, msg=what)
            torch.testing.assert_close(q.grad, p.grad, rtol=tol, atol=tol, msg=what + " grad")
            assert o1.state[p].keys() == o2.state[q].keys()
            for k, a in o1.state[p].items():
                b = o2.state[q][k]
                assert a.device == b.device and a.dtype == b.dtype, what + k
                torch.testing.assert_close(b, a, rtol=tol, atol=tol, msg=f"{what} {k}")
        s1.step()
        s2.step()
    assert optimizer_step.counters["compiled_steps"] - before["compiled_steps"] == 3
    assert optimizer_step.counters["graphs_compiled"] - before["graphs_compiled"] == len(dtypes)


def test_fp32_update_is_close_to_exact():
    """fp32 Adam and SGD over a large tensor: SGD bit-exact with eager's foreach step; Adam's
    parameters differ from eager's in few elements, by one ulp (ATen's CPU sqrt, not correctly
    rounded, is the only difference), its moments bit-exact."""
    torch.manual_seed(0)
    for make, exact in (
        (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01, foreach=True), 1),
        (lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.05, foreach=True), 0),
    ):
        p = torch.nn.Parameter(torch.randn(50000))
        q = torch.nn.Parameter(p.detach().clone())
        o1, o2 = make([p]), make([q])
        for _ in range(3):
            grad = torch.randn_like(p)
            p.grad, q.grad = grad.clone(), grad.clone()
            o1.step()
            optimizer_step.run(o2.step)
        for k, a in o1.state[p].items():
            assert torch.equal(a, o2.state[q][k]), k
        differ = (p != q).sum().item()
        if exact:
            assert differ == 0
        else:
            assert differ < p.numel() * 0.02
            torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-7)


def test_unsupported_layouts_run_eager():
    """A non-contiguous gradient (or state) is not in the kernels' flat layout: eager's step,
    equal results."""
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(8, 6))
    q = torch.nn.Parameter(p.detach().clone())
    o1, o2 = torch.optim.Adam([p], lr=0.01), torch.optim.Adam([q], lr=0.01)
    for step in range(3):
        grad = torch.randn(6, 8).t()
        p.grad, q.grad = grad.clone(), grad.clone()
        before = optimizer_step.counters["compiled_steps"]
        o1.step()
        optimizer_step.run(o2.step)
        assert optimizer_step.counters["compiled_steps"] == before
        torch.testing.assert_close(q, p, rtol=0, atol=0)


cuda_rt = getattr(torch_plugin._C, "_cuda", None)


@pytest.mark.skipif(cuda_rt is None, reason="torch_plugin built without its CUDA parts")
@pytest.mark.parametrize("dtype", sorted(multi_tensor.SUPPORTED_DTYPES, key=str))
def test_cuda_kernels_compile_with_nvrtc(dtype):
    """Every CUDA kernel variant compiles with NVRTC (no GPU needed): SGD with and without
    weight decay, momentum, nesterov, gradient write-back; Adam and AdamW with and without
    weight decay; each with its entry point in the PTX and the vectorized (ILP) path."""
    import itertools

    variants = [("sgd", s) for s in itertools.product((0, 1), repeat=5)]
    variants += [("adam", s) for s in itertools.product((0, 1), repeat=3)]
    for kind, structure in variants:
        source, entry = multi_tensor.kernel_source(kind, structure, dtype, "cuda")
        ptx = cuda_rt.nvrtc_compile_check(source, "sm_90")
        assert f".entry {entry}" in ptx, (kind, structure)


def test_block_map():
    """Every chunk of every tensor once; empty tensors have none."""
    bm = multi_tensor.block_map([5, 0, 16, 1], 8)
    assert bm == [0, (2 << 32), (2 << 32) | 1, (3 << 32)]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", list(MIXED_OPTIMIZERS))
def test_cuda_misaligned_tensors(name):
    """Parameters at addresses not aligned for the vector path (views into one flat buffer at
    odd offsets) take the scalar path: equal to eager."""
    torch.manual_seed(0)
    flat = torch.randn(80000, device="cuda")
    flat2 = flat.clone()
    spans = [(1, 3), (5, 1001), (1009, 4000), (5011, 70001)]  # (offset, size), disjoint
    ref = [torch.nn.Parameter(flat[o : o + n]) for o, n in spans]
    got = [torch.nn.Parameter(flat2[o : o + n]) for o, n in spans]
    o1, o2 = MIXED_OPTIMIZERS[name](ref, True), MIXED_OPTIMIZERS[name](got, True)
    for step in range(3):
        for p, q in zip(ref, got):
            grad = torch.randn_like(p)
            p.grad, q.grad = grad.clone(), grad.clone()
        o1.step()
        optimizer_step.run(o2.step)
        for p, q in zip(ref, got):
            torch.testing.assert_close(q, p, rtol=1e-6, atol=1e-6)


# The CUDA kernel's source compiled as C++ for the CPU: CUDA's keywords as macros, the grid
# run block after block and thread after thread (the kernel has no barrier and no shared
# memory, so one thread at a time is a valid schedule). What it checks without a GPU: the
# table's indexing, the chunking, the vector (ILP) path and the scalar path, the stores.
_CUDA_ON_CPU_PRELUDE = r"""
#include <cmath>
#include <cstring>
using std::fma; using std::sqrt; using std::fabs;
#define __device__
#define __forceinline__ inline
#define __global__
#define __launch_bounds__(n)
#define __align__(n) alignas(n)
struct tp_dim { long long x; };
static tp_dim threadIdx, blockIdx, blockDim;
static inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
"""


def _cuda_source_on_cpu(source: str, entry: str) -> str:
    body = source[source.index("#define TP_INLINE") :]  # past the inline-PTX fp16 helpers
    return (
        _CUDA_ON_CPU_PRELUDE
        + "static inline float tp_load_bf16(unsigned short b) {"
        + " return __uint_as_float(((unsigned int)b) << 16); }\n"
        + "static inline unsigned short tp_store_bf16(float f) {"
        + " unsigned int u = __float_as_uint(f); if (f != f) return 0x7fc0u;"
        + " return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16); }\n"
        + body.replace("#define TP_INLINE __device__ __forceinline__", "#define TP_INLINE inline")
        + f"""
extern "C" void kernel(void** args) {{
  const long long* table = (const long long*)args[1];
  blockDim.x = {multi_tensor.CUDA_BLOCK};
  for (long long b = 0; b < table[1]; ++b)
    for (long long t = 0; t < blockDim.x; ++t) {{
      blockIdx.x = b; threadIdx.x = t;
      {entry}((long long*)args[0], table, (const double*)args[2]);
    }}
}}
"""
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", ["adam_wd", "adamw", "sgd_momentum_wd", "sgd_nesterov"])
def test_cuda_kernel_source_run_on_cpu(dtype, name):
    """The CUDA kernel (its text, run on the CPU as above) over tensors of mixed sizes (one
    element; a multiple of the vector width; two chunks, the second partial and odd) and
    alignments (views at odd offsets take the scalar path) equals eager's step on the CPU to
    rounding (the CUDA formulas differ from ATen's CPU ones in their last bits: addcdiv's
    order, lerp's form), over three steps; the tensors' neighbours stay untouched."""
    torch.manual_seed(0)
    foreach = True
    make = MIXED_OPTIMIZERS[name]
    # param / grad / state memory: views into padded flat buffers
    sizes, offsets = [1, 64, 70001, 33], [0, 0, 0, 1]
    flat = [torch.randn(s + 8, dtype=dtype) for s in sizes]
    ref = [torch.nn.Parameter(f[o : o + s].clone()) for f, o, s in zip(flat, offsets, sizes)]
    got_flat = [f.clone() for f in flat]
    got = [f[o : o + s] for f, o, s in zip(got_flat, offsets, sizes)]
    o1 = make(ref, foreach)
    kind = "sgd" if name.startswith("sgd") else "adam"
    group = o1.param_groups[0]
    compiler = optimizer_step.StepCompiler(type(o1).__name__.lower())
    state = None
    tol = DTYPE_TOL[dtype] * 4
    for step in range(3):
        grads = [torch.randn(s, dtype=dtype) for s in sizes]
        for p, g in zip(ref, grads):
            p.grad = g.clone()
        o1.step()
        if step == 0:  # eager's first step made the state: start the kernel's from it
            state = {k: [o1.state[p][k].clone() for p in ref] for k in o1.state[ref[0]]}
            with torch.no_grad():
                for p, q in zip(ref, got):
                    q.copy_(p)
            continue
        g_cp = [g.clone() for g in grads]
        if kind == "sgd":
            structure = (
                group["weight_decay"] != 0, True, group["nesterov"],
                group["nesterov"] and group["weight_decay"] == 0, foreach,
            )  # fmt: skip
            lists = [got, g_cp, state["momentum_buffer"]]
            classes = [(group, None)]
        else:
            structure = (group["weight_decay"] != 0, name == "adamw", foreach)
            lists = [got, g_cp, state["exp_avg"], state["exp_avg_sq"]]
            classes = [(group, o1.state[ref[0]]["step"].item())]
        source, entry = multi_tensor.kernel_source(kind, structure, dtype, "cuda")
        table = multi_tensor.build_table(
            lists, [0] * len(sizes), torch.device("cpu"), multi_tensor.CUDA_CHUNK
        )
        hyper = torch.tensor(
            optimizer_step._hyper_rows(compiler.kind, classes), dtype=torch.float64
        )
        torch.ops.torch_plugin.fused(
            [table, hyper], _cuda_source_on_cpu(source, entry),
            [list(table.shape), list(hyper.shape)], [[1], [hyper.shape[1], 1]],
            [torch.int64, torch.float64], [[1]], [[1]], [torch.int64], "cuda-on-cpu",
        )  # fmt: skip
        for i, (p, q) in enumerate(zip(ref, got)):
            what = f"step {step} tensor {i}"
            torch.testing.assert_close(q, p.detach(), rtol=tol, atol=tol, msg=what)
            torch.testing.assert_close(g_cp[i], p.grad, rtol=tol, atol=tol, msg=what + " grad")
            for k, ts in state.items():
                if k != "step":
                    torch.testing.assert_close(ts[i], o1.state[p][k], rtol=tol, atol=tol,
                                               msg=f"{what} {k}")  # fmt: skip
        for f, o, s in zip(got_flat, offsets, sizes):  # the neighbours of each view
            f0 = next(x for x in flat if x.numel() == f.numel())
            assert torch.equal(f[:o], f0[:o]) and torch.equal(f[o + s :], f0[o + s :])
