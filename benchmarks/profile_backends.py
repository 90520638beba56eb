"""Where the GPU time goes: torch.profiler's CUDA kernel table per backend, one model, one process.

For a row of benchmarks/gpu_models.py, runs each backend (compile, warm-up, then ``--runs``
profiled calls) and prints the ``--top`` kernels by total CUDA time, the number of kernel
launches per call and the total CUDA time per call. Used to explain a latency gap between two
backends (e.g. ``optimize("inductor")`` against ``torch.compile``, issue #11).

    python3 benchmarks/profile_backends.py --row resnet50 --batch 32 [--dtype fp32]
        [--backends compile,inductor] [--runs 5] [--top 15] [--matmul-precision high]

``--matmul-precision`` is ``torch.set_float32_matmul_precision``'s argument, "high" by default as
in gpu_models.py's table (fp32 products and convolutions may use TF32); "highest" profiles FFMA.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_models import build, compiled


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--row", default="resnet50")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--backends", default="eager,compile,inductor")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--matmul-precision", default="high", choices=("highest", "high", "medium"))
    ap.add_argument("--width", type=int, default=110, help="characters of each kernel name")
    args = ap.parse_args()
    import torch

    torch.set_float32_matmul_precision(args.matmul_precision)
    from torch.profiler import ProfilerActivity, profile

    fn, inputs = build(args.row, args.batch, "cuda")
    autocast = (
        torch.autocast("cuda", torch.bfloat16) if args.dtype == "bf16" else contextlib.nullcontext()
    )
    for backend in args.backends.split(","):
        f = compiled(backend, fn)
        with torch.no_grad(), autocast:
            for _ in range(3):
                f(*inputs)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.runs):
                    f(*inputs)
                torch.cuda.synchronize()
        events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
        total = sum(e.self_device_time_total for e in events) / args.runs / 1e3
        launches = sum(e.count for e in events) / args.runs
        print(f"\n== {backend}: {total:.3f} ms CUDA time per call, {launches:.0f} kernels per call")
        for e in sorted(events, key=lambda e: -e.self_device_time_total)[: args.top]:
            per_call = e.self_device_time_total / args.runs / 1e3
            print(f"  {per_call:8.3f} ms  x{e.count // args.runs:<4d} {e.key[: args.width]}")
        torch._dynamo.reset()


if __name__ == "__main__":
    main()
