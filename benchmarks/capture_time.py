"""Benchmark: capture time per model, torch_plugin.optimize("eager") beside
torch.compile(backend="eager"), in one run (issue #12: target at most half of torch.compile's).

Both use the trivial "eager" backend, so the time is capture: bytecode analysis, tracing
into FX graphs, guards (and, for torch.compile, Dynamo's FakeTensor propagation, which
torch_plugin does too). For each model of benchmarks/zoo_correctness.py (same small configs,
random weights, inference under ``torch.no_grad()``) it measures, in one child process per
model and front: the first call's time minus the median of three steady calls (the capture
time, which includes each front's one-time set-up in a fresh process, as a user's first call
does), the number of graphs and graph breaks, and whether a later call with new inputs of the
same shapes compiled anything.

    OMP_NUM_THREADS=2 python3 benchmarks/capture_time.py [--models resnet18,bert] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def child(model_name: str, front: str) -> dict:
    import torch

    sys.path.insert(0, HERE)
    from zoo_correctness import MODELS

    model, inputs, _ = MODELS[model_name]()
    model.eval()
    graphs = breaks = 0
    if front == "torch_plugin":
        import torch_plugin

        torch_plugin.reset()
        fn = torch_plugin.optimize("eager")(model)
    else:
        import torch._dynamo

        torch._dynamo.reset()
        counts = {"graphs": 0}

        def counting(gm, example_inputs):
            counts["graphs"] += 1
            return gm.forward

        fn = torch.compile(model, backend=counting)
    with torch.no_grad():
        args, kwargs = inputs()
        start = time.perf_counter()
        fn(*args, **kwargs)
        first = time.perf_counter() - start
        if front == "torch_plugin":
            compiled_before = torch_plugin.stats.graphs_compiled
        else:
            compiled_before = counts["graphs"]
        steady = []
        for _ in range(3):
            args, kwargs = inputs()
            start = time.perf_counter()
            fn(*args, **kwargs)
            steady.append(time.perf_counter() - start)
    if front == "torch_plugin":
        graphs = torch_plugin.stats.graphs_compiled
        breaks = len(torch_plugin.stats.graph_breaks)
        recompiled = graphs > compiled_before
        graphs = compiled_before
    else:
        import torch._dynamo.utils

        graphs = compiled_before
        recompiled = counts["graphs"] > compiled_before
        breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    return {
        "capture_s": max(first - statistics.median(steady), 0.0),
        "graphs": graphs,
        "breaks": breaks,
        "recompiled": recompiled,
    }


def main() -> None:
    sys.path.insert(0, HERE)
    from zoo_correctness import MODELS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--json")
    ap.add_argument("--child", nargs=2, metavar=("MODEL", "FRONT"))
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    import torch

    print(f"$ {' '.join(sys.argv)}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print()
    print(
        "| model | torch_plugin capture s | torch.compile capture s | ratio | graphs (tp / tc) "
        "| breaks (tp / tc) | 2nd call compiles (tp / tc) |"
    )
    print("|---|---|---|---|---|---|---|")
    rows = []
    for name in args.models.split(","):
        row = {"model": name}
        for front in ("torch_plugin", "torch.compile"):
            out = subprocess.run(
                [sys.executable, __file__, "--child", name, front],
                capture_output=True,
                text=True,
                check=False,
            )
            lines = out.stdout.strip().splitlines()
            if out.returncode != 0 or not lines:
                tail = out.stderr.strip().splitlines()[-1:] or ["failed"]
                row[front] = {"error": tail[0][:120]}
            else:
                row[front] = json.loads(lines[-1])
        rows.append(row)
        tp, tc = row["torch_plugin"], row["torch.compile"]

        def cell(r: dict, key: str, fmt: str = "{}") -> str:
            return fmt.format(r[key]) if key in r else "error"

        ratio = (
            f"{tp['capture_s'] / tc['capture_s']:.2f}"
            if "capture_s" in tp and "capture_s" in tc and tc["capture_s"] > 0
            else "-"
        )
        print(
            f"| {name} | {cell(tp, 'capture_s', '{:.2f}')} | {cell(tc, 'capture_s', '{:.2f}')} "
            f"| {ratio} | {cell(tp, 'graphs')} / {cell(tc, 'graphs')} "
            f"| {cell(tp, 'breaks')} / {cell(tc, 'breaks')} "
            f"| {cell(tp, 'recompiled')} / {cell(tc, 'recompiled')} |",
            flush=True,
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
