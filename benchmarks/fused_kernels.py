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

For each case and backend (eager, ``optimize("inductor")``, ``optimize("plugin")``, and
``optimize("plugin")`` with ``TORCH_PLUGIN_FUSION=0``: the same graph with reductions and
norms as ATen calls, i.e. before these kernels), measured
side by side in one process: the first call (compile, caches as found) and the median of
``--runs`` calls after 3 warm-up calls. The machine may be shared: numbers are rough.

    python3 benchmarks/fused_kernels.py [--runs 20] [--threads N]
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


def cases() -> dict:
    mask = torch.zeros(128, 128)
    mask[:, 100:] = -10000.0
    return {
        "bert_layer (1x128x768)": (
            BertLayerNoAttention().eval(),
            (torch.randn(1, 128, 768), torch.randn(1, 128, 768)),
        ),
        "softmax (8x12x128x128)": (softmax_case, (torch.randn(8, 12, 128, 128), mask)),
        "rms_norm (8x128x768)": (rms_case, (torch.randn(8, 128, 768), torch.randn(768))),
    }


def measure(fn, args, runs: int) -> tuple[float, float]:
    t0 = time.perf_counter()
    fn(*args)
    first = time.perf_counter() - t0
    for _ in range(3):
        fn(*args)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    print(
        f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
        f"{torch.get_num_threads()} threads, median of {a.runs} runs\n"
    )
    print("| case | backend | median ms | vs eager | first call s | max abs err |")
    print("|---|---|---|---|---|---|")
    with torch.no_grad():
        for name, (fn, args) in cases().items():
            want = fn(*args)
            _, eager_ms = measure(fn, args, a.runs)
            print(f"| {name} | eager | {eager_ms * 1e3:.3f} | 1.00 | - | - |")
            for backend in ("inductor", "plugin", "plugin (fusion off)"):
                os.environ["TORCH_PLUGIN_FUSION"] = "0" if "off" in backend else "1"
                torch_plugin.reset()  # recompile: the options are read at compile time
                opt = torch_plugin.optimize(backend.split()[0])(fn)
                first, med = measure(opt, args, a.runs)
                err = (opt(*args) - want).abs().max().item()
                print(
                    f"| {name} | {backend} | {med * 1e3:.3f} | {eager_ms / med:.2f} | "
                    f"{first:.2f} | {err:.1e} |"
                )


if __name__ == "__main__":
    main()
