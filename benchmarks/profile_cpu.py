"""Where the CPU time goes: torch.profiler's table per backend, one CPU model, one process.

For a model of benchmarks/plugin_models.py, compiles each backend (``--backends``, default
plugin and inductor), warms it up, then profiles ``--runs`` calls and prints the ``--top``
entries by self CPU time per call, with their share of the profiled wall time. The plugin
executor's steps appear as "torch_plugin: ..." ranges (a generated kernel, a oneDNN step with
its implementation name, an ATen fallback); Inductor's kernels as its graph's ops and
``kernel_cpp_*`` ranges. Used to explain a latency gap between two backends (issue #27).

    OMP_NUM_THREADS=2 python3 benchmarks/profile_cpu.py --model gpt2 --batch 1
        [--backends plugin,inductor] [--runs 20] [--top 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from plugin_models import MODELS, build


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, choices=MODELS)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--backends", default="plugin,inductor")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    import torch_plugin

    print(f"$ python3 {' '.join(sys.argv)}")
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    model, x = build(args.model, args.batch)
    with torch.no_grad():
        for backend in args.backends.split(","):
            fn = model if backend == "eager" else torch_plugin.optimize(backend)(model)
            for _ in range(5):
                fn(x)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                start = time.perf_counter()
                for _ in range(args.runs):
                    fn(x)
                wall = (time.perf_counter() - start) / args.runs * 1e6
            rows = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)[
                : args.top
            ]
            print(
                f"\n## {backend} ({args.model}, batch {args.batch}): {wall / 1e3:.2f} ms per "
                "call (profiled)\n"
            )
            print("| name | calls per call | self us per call | share |")
            print("|---|---|---|---|")
            for e in rows:
                us = e.self_cpu_time_total / args.runs
                print(f"| {e.key[:90]} | {e.count / args.runs:g} | {us:.0f} | {us / wall:.1%} |")


if __name__ == "__main__":
    main()
