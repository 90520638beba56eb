"""Benchmark: the "plugin" compiler's generated reduction/norm kernels vs eager vs Inductor, CPU.

Cases (fp32, inference, random weights):
- ``bert_layer``: a BERT-layer-like block without attention, hidden 768, seq 128, batch 1:
  ``h = LayerNorm(x + attn); out = LayerNorm(Linear(GELU(Linear(h))) + h)`` (3072 inner);
  the plugin compiler runs the Linears through oneDNN and the residual adds, LayerNorms and
  GELU (where not a oneDNN post-op) as generated kernels.
- ``softmax``: ``softmax(x * 0.125 + mask, -1)`` over ``[8, 12, 128, 128]`` (attention
  scores; scale and mask fused into the softmax kernel).
- ``rms_norm``: ``F.rms_norm(x, (768,), w)`` on ``[8, 128, 768]`` (decomposed by PyTorch into
  pow/mean/add/rsqrt/mul/mul: one generated kernel).
- ``shared_mask_bcast`` / ``shared_mask_same``: a mask (comparisons) read by two kernels,
  recomputed in each; the ``mask returned`` rows return it too, so it is stored once and read
  by each kernel (the plan before the fusion pass shared producers).

For each case and backend (eager, ``optimize("inductor")``, ``optimize("plugin")``, and
``optimize("plugin")`` with ``TORCH_PLUGIN_FUSION=0``: the same graph with reductions and
norms as ATen calls, i.e. before these kernels), measured
side by side in one process: the first call (compile, caches as found) and the median of
``--runs`` calls after 3 warm-up calls. The machine may be shared: numbers are rough.

    python3 benchmarks/fused_kernels.py [--runs 20] [--threads N]
    python3 benchmarks/fused_kernels.py --cpu-time [--runs 20]
    python3 benchmarks/fused_kernels.py --single-ops [--runs 20]
    python3 benchmarks/fused_kernels.py --device cuda --only shared_mask

``--cpu-time``: the same cases on one thread, timed as process CPU time (minimum over
``--runs`` calls).

``--single-ops``: one reduction/norm op alone, as the generated kernel vs the same graph with
``TORCH_PLUGIN_FUSION=0`` (an ATen call in the executor) vs eager, on one thread, timed as
process CPU time (minimum over ``--runs`` calls): robust on a shared, overloaded machine,
where wall-clock medians only show the scheduler's time slices.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch
import torch.nn.functional as F

import torch_plugin


class BertLayerNoAttention(torch.nn.Module):
    def __init__(self, hidden: int = 768, inner: int = 3072) -> None:
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(hidden)
        self.fc1 = torch.nn.Linear(hidden, inner)
        self.fc2 = torch.nn.Linear(inner, hidden)
        self.ln2 = torch.nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x + attn)
        return self.ln2(self.fc2(F.gelu(self.fc1(h))) + h)


def softmax_case(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x * 0.125 + mask, -1)


def rms_case(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return F.rms_norm(x, (768,), w, 1e-6)


def shared_mask_bcast(mask, s1, s2, keep_mask=False):
    """A [B, 1, 1, S] padding mask applied to two score tensors (two kernels)."""
    keep = (mask > 0.5) & (mask < 2.0)
    out = (torch.where(keep, s1, -1e4), torch.where(keep, s2, 0.0) * 2)
    return (*out, keep) if keep_mask else out


def shared_mask_same(x, w, keep_mask=False):
    """``x > 0`` read by two kernels of x's sizes that a matrix product keeps apart."""
    m = x > 0
    a = torch.where(m, x, 0.0) * 3
    out = (a, torch.where(m, a @ w, -1.0) + 1)
    return (*out, m) if keep_mask else out


def cases() -> dict:
    mask = torch.zeros(128, 128)
    mask[:, 100:] = -10000.0
    bcast = (
        (torch.rand(8, 1, 1, 128) < 0.8).float(),
        torch.randn(8, 12, 128, 128),
        torch.randn(8, 12, 128, 128),
    )
    same = (torch.randn(4096, 256), torch.randn(256, 256))
    return {
        "bert_layer (1x128x768)": (
            BertLayerNoAttention().eval(),
            (torch.randn(1, 128, 768), torch.randn(1, 128, 768)),
        ),
        "softmax (8x12x128x128)": (softmax_case, (torch.randn(8, 12, 128, 128), mask)),
        "rms_norm (8x128x768)": (rms_case, (torch.randn(8, 128, 768), torch.randn(768))),
        # A mask read by two kernels is recomputed in each (passes/fusion_share.h); returned
        # as well, it is stored once and read by each (the plan before issue #27's sharing).
        "shared_mask_bcast (8x12x128x128)": (shared_mask_bcast, bcast),
        "shared_mask_bcast, mask returned": (
            lambda *a: shared_mask_bcast(*a, keep_mask=True),
            bcast,
        ),
        "shared_mask_same (4096x256)": (shared_mask_same, same),
        "shared_mask_same, mask returned": (
            lambda *a: shared_mask_same(*a, keep_mask=True),
            same,
        ),
    }


def single_op_cases() -> dict:
    return {
        "sum(-1) 4096x1024": (lambda x: x.sum(-1), (torch.randn(4096, 1024),)),
        "sum(0) 4096x1024": (lambda x: x.sum(0), (torch.randn(4096, 1024),)),
        "mean(2,3) channels_last 8x256x28x28": (
            lambda x: x.mean((2, 3)),
            (torch.randn(8, 256, 28, 28).to(memory_format=torch.channels_last),),
        ),
        "var(-1) 4096x768": (lambda x: x.var(-1), (torch.randn(4096, 768),)),
        "layer_norm 4096x768": (
            lambda x, w, b: F.layer_norm(x, (768,), w, b),
            (torch.randn(4096, 768), torch.randn(768), torch.randn(768)),
        ),
        "log_softmax(-1) 4096x1000": (
            lambda x: torch.log_softmax(x, -1),
            (torch.randn(4096, 1000),),
        ),
        "sum() 4M": (lambda x: x.sum(), (torch.randn(4 * 1024 * 1024),)),
    }


def cpu_time(fn, args, runs: int) -> float:
    for _ in range(3):
        fn(*args)
    times = []
    for _ in range(runs):
        t0 = time.process_time()
        fn(*args)
        times.append(time.process_time() - t0)
    return min(times)


def single_ops(runs: int) -> None:
    torch.set_num_threads(1)  # also the generated kernels' OpenMP (one libgomp per process)
    print(f"torch {torch.__version__}, 1 thread, process CPU time, min of {runs} runs\n")
    print("| op | eager ms | plugin, ATen call (fusion off) ms | plugin, generated kernel ms |")
    print("|---|---|---|---|")
    with torch.no_grad():
        for name, (fn, args) in single_op_cases().items():
            row = [cpu_time(fn, args, runs)]
            for fusion in ("0", "1"):
                os.environ["TORCH_PLUGIN_FUSION"] = fusion
                torch_plugin.reset()
                opt = torch_plugin.optimize("plugin")(fn)
                torch.testing.assert_close(opt(*args), fn(*args), rtol=1e-4, atol=1e-3)
                row.append(cpu_time(opt, args, runs))
            print(f"| {name} | " + " | ".join(f"{v * 1e3:.3f}" for v in row) + " |")


CPU_TIME = False  # --cpu-time: one thread, process CPU time, minimum instead of median


def _sync() -> None:
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


def measure(fn, args, runs: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    fn(*args)
    _sync()
    first = time.perf_counter() - t0
    for _ in range(3):
        fn(*args)
    clock = time.process_time if CPU_TIME else time.perf_counter
    times = []
    for _ in range(runs):
        _sync()
        t0 = clock()
        fn(*args)
        _sync()
        times.append(clock() - t0)
    return first, (min(times) if CPU_TIME else statistics.median(times))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--single-ops", action="store_true")
    p.add_argument("--cpu-time", action="store_true")
    p.add_argument("--device", default="cpu", help="cuda: the cases on the GPU (wall clock)")
    p.add_argument("--only", default="", help="run the cases whose name contains this")
    a = p.parse_args()
    global CPU_TIME
    CPU_TIME = a.cpu_time
    if a.cpu_time:
        a.threads = 1
    if a.single_ops:
        single_ops(a.runs)
        return
    if a.threads:
        torch.set_num_threads(a.threads)
    print(
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} threads, "
        + (
            f"process CPU time, min of {a.runs} runs\n"
            if CPU_TIME
            else f"median of {a.runs} runs\n"
        )
    )
    stat = "min CPU ms" if CPU_TIME else "median ms"
    print(f"| case | backend | {stat} | vs eager | first call s | max abs err |")
    print("|---|---|---|---|---|---|")
    with torch.no_grad():
        for name, (fn, args) in cases().items():
            if a.only not in name:
                continue
            args = tuple(t.to(a.device) for t in args)
            if isinstance(fn, torch.nn.Module):
                fn = fn.to(a.device)
            want = fn(*args)
            _, eager_ms = measure(fn, args, a.runs)
            print(f"| {name} | eager | {eager_ms * 1e3:.3f} | 1.00 | - | - |")
            for backend in ("inductor", "plugin", "plugin (fusion off)"):
                os.environ["TORCH_PLUGIN_FUSION"] = "0" if "off" in backend else "1"
                torch_plugin.reset()  # recompile: the options are read at compile time
                opt = torch_plugin.optimize(backend.split()[0])(fn)
                first, med = measure(opt, args, a.runs)
                got = opt(*args)
                pairs = zip(got, want) if isinstance(want, tuple) else [(got, want)]
                err = max((g.double() - w.double()).abs().max().item() for g, w in pairs)
                print(
                    f"| {name} | {backend} | {med * 1e3:.3f} | {eager_ms / med:.2f} | "
                    f"{first:.2f} | {err:.1e} |"
                )


if __name__ == "__main__":
    main()
