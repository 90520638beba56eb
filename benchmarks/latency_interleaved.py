"""Benchmark: eager vs optimize("inductor") vs optimize("plugin") latency, interleaved in one
process, for one model of benchmarks/plugin_models.py.

plugin_models.py measures each backend in its own process, one after the other; on a
2-core machine a process's median can move by 10% from one process to the next (thread
placement, what else runs). This script compiles all three in one process and then times
them in turns: ``--rounds`` rounds, each timing every backend for ``--runs`` calls (median),
so the backends share the machine's state. It prints each backend's round medians and their
median, and plugin/inductor.

    OMP_NUM_THREADS=2 python3 benchmarks/latency_interleaved.py --model bert --batch 1
        [--rounds 5] [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import torch

import torch_plugin

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from plugin_models import MODELS, build


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, choices=MODELS)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--runs", type=int, default=30, help="timed calls per backend per round")
    args = p.parse_args()
    print(f"$ python3 {' '.join(sys.argv)}")
    print(
        f"Python {platform.python_version()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    model, x = build(args.model, args.batch)
    fns = {
        "eager": model,
        "inductor": torch_plugin.optimize("inductor")(model),
        "plugin": torch_plugin.optimize("plugin")(model),
    }
    rounds: dict[str, list[float]] = {k: [] for k in fns}
    with torch.no_grad():
        for fn in fns.values():  # compile, then warm up
            for _ in range(3):
                fn(x)
        for _ in range(args.rounds):
            for name, fn in fns.items():
                times = []
                for _ in range(args.runs):
                    start = time.perf_counter()
                    fn(x)
                    times.append(time.perf_counter() - start)
                rounds[name].append(statistics.median(times) * 1e3)
    print(f"\n| backend ({args.model}, batch {args.batch}) | round medians ms | median ms |")
    print("|---|---|---|")
    medians = {}
    for name, values in rounds.items():
        medians[name] = statistics.median(values)
        print(f"| {name} | {' '.join(f'{v:.2f}' for v in values)} | {medians[name]:.2f} |")
    print(f"\nplugin/inductor {medians['plugin'] / medians['inductor']:.2f}")


if __name__ == "__main__":
    main()
