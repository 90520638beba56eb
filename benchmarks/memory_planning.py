"""Benchmark: the memory_planning pass on or off (TORCH_PLUGIN_MEMORY_PLANNING), CPU.

For each model (torchvision, random weights, eval, no_grad) it compiles the graph twice
through the "plugin" backend (torch.fx.symbolic_trace as the front, so capture is not
measured), once per setting, and reports per run: tensor allocations (torch.profiler's
raw memory events with a positive size) and the median latency over ``--runs`` runs (after 3 warm-up runs), interleaving the two
settings to share the machine's load.

    python3 benchmarks/memory_planning.py [--models resnet50] [--batch 1] [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def compile_model(name: str, batch: int, planning: bool):
    import torch
    import torchvision

    from torch_plugin.backends.plugin import plugin

    os.environ["TORCH_PLUGIN_MEMORY_PLANNING"] = "1" if planning else "0"
    os.environ["TORCH_PLUGIN_GRAPH_CACHE"] = "0"
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    x = torch.randn(batch, 3, 224, 224)
    with torch.no_grad():
        compiled = plugin(torch.fx.symbolic_trace(model), [x])
        compiled(x)
    return compiled, x


def allocations(fn, x) -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as p:
        fn(x)
    events = p.profiler.kineto_results.events()
    return sum(1 for e in events if e.name() == "[memory]" and e.nbytes() > 0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet50")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--runs", type=int, default=30)
    args = p.parse_args()
    import torch

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print("| model | batch | planning | allocations/run | median ms |")
    print("|---|---|---|---|---|")
    for name in args.models.split(","):
        fns = {on: compile_model(name, args.batch, on) for on in (False, True)}
        times: dict[bool, list[float]] = {False: [], True: []}
        with torch.no_grad():
            for on, (fn, x) in fns.items():
                for _ in range(3):
                    fn(x)
            for _ in range(args.runs):
                for on, (fn, x) in fns.items():
                    start = time.perf_counter()
                    fn(x)
                    times[on].append(time.perf_counter() - start)
        for on, (fn, x) in fns.items():
            print(
                f"| {name} | {args.batch} | {'on' if on else 'off'} | {allocations(fn, x)} "
                f"| {statistics.median(times[on]) * 1e3:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
