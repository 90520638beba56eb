"""Per-call time of a warm compiled call, two (or more) source trees side by side in one run.

Each case runs in a fresh subprocess per tree with ``PYTHONPATH`` set to that tree, the trees
alternating, for several rounds; the table gives the median over rounds of each process's
per-call time (the minimum over a few timed batches of ``--calls`` calls, after a warm-up).
Cases: ``add`` (``optimize()(lambda x: x + 1)`` on a one-element CPU tensor), ``resnet50``
(torchvision ResNet-50, batch 1, CPU, eval, no_grad), ``bert`` (HF BERT-base, batch 1,
128 tokens, CUDA; skipped without a GPU). Columns: eager, ``torch.compile`` (``add`` only,
or every case with ``--torch-compile``), then one per tree. By default the graph is traced
(the graph cache is off: ``TORCH_PLUGIN_GRAPH_CACHE=0``); ``--cached`` also times the call
of a graph built from a warm graph cache (a second compile in the same process).

Usage::

    python3 benchmarks/hot_path.py --tree before=/path/to/old --tree after=/path/to/new \\
        [--cases add,resnet50,bert] [--rounds 7] [--calls 2000] [--threads 1] [--cached]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CASES = ("add", "resnet50", "bert")


def _model(case: str):
    import torch

    if case == "add":
        return (lambda x: x + 1), (torch.ones(1),), "cpu"
    if case == "resnet50":
        import torchvision

        model = torchvision.models.resnet50().eval()
        return model, (torch.randn(1, 3, 224, 224),), "cpu"
    import transformers

    model = transformers.BertModel(transformers.BertConfig()).cuda().eval()
    ids = torch.randint(0, 30000, (1, 128), device="cuda")
    return model, (ids,), "cuda"


def _time_per_call(fn, args, calls: int, device: str, batches: int = 5) -> float:
    import torch

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    best = float("inf")
    for _ in range(batches):
        sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        sync()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best


def worker(case: str, variant: str, calls: int) -> dict:
    """Runs in the subprocess: one case, one variant ("eager", "torch.compile", "plugin",
    "plugin-cached"); returns seconds per call."""
    import torch

    model, args, device = _model(case)
    if device == "cuda" and not torch.cuda.is_available():
        return {"skipped": "no GPU"}
    with torch.no_grad():
        if variant == "eager":
            fn = model
        elif variant == "torch.compile":
            fn = torch.compile(model)
        else:
            import torch_plugin

            fn = torch_plugin.optimize()(model)
            if variant == "plugin-cached":
                for _ in range(3):
                    fn(*args)  # compiles and stores the graph
                torch_plugin.reset()
                fn = torch_plugin.optimize()(model)
        for _ in range(max(3, min(calls // 10, 50))):
            fn(*args)
        return {"s_per_call": _time_per_call(fn, args, calls, device)}


def _run(tree: str | None, case: str, variant: str, calls: int, threads: int, cache: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), TORCH_PLUGIN_CACHE_DIR=cache)
    env["TORCH_PLUGIN_GRAPH_CACHE"] = "1" if variant == "plugin-cached" else "0"
    if tree is not None:  # ahead of what PYTHONPATH holds already (e.g. a wheel's --target)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (tree, os.environ.get("PYTHONPATH")) if p)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", case, variant, str(calls)]
    out = subprocess.run(
        cmd, check=False, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True
    )
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _fmt(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.3f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--tree", action="append", default=[], help="name=path (repeatable)")
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=0, help="calls per timed batch")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--torch-compile", action="store_true")
    parser.add_argument("--cached", action="store_true")
    ns = parser.parse_args(argv)
    if ns.worker:
        case, variant, calls = ns.worker
        print(json.dumps(worker(case, variant, int(calls))))
        return 0
    trees = [t.split("=", 1) for t in ns.tree]
    if not trees:
        parser.error("give at least one --tree name=path")
    cases = [c for c in ns.cases.split(",") if c]
    variants = ["plugin"] + (["plugin-cached"] if ns.cached else [])
    rows = []
    for case in cases:
        calls = ns.calls or {"add": 5000, "resnet50": 20, "bert": 200}[case]
        columns: dict[str, list[float]] = {}
        errors: dict[str, str] = {}
        plan = [("eager", None, "eager")]
        if case == "add" or ns.torch_compile:
            plan.append(("torch.compile", None, "torch.compile"))
        for variant in variants:
            suffix = " (cached)" if variant == "plugin-cached" else ""
            plan += [(name + suffix, path, variant) for name, path in trees]
        caches = {label: tempfile.mkdtemp(prefix="hot_path-") for label, _, _ in plan}
        for r in range(ns.rounds):
            for label, path, variant in plan if r % 2 == 0 else list(reversed(plan)):
                result = _run(path, case, variant, calls, ns.threads, caches[label])
                if "s_per_call" in result:
                    columns.setdefault(label, []).append(result["s_per_call"])
                else:
                    errors[label] = result.get("skipped") or result.get("error", "?")
            print(f"# {case}: round {r + 1}/{ns.rounds} done", file=sys.stderr)
        rows.append((case, {k: statistics.median(v) for k, v in columns.items()}, errors))
    labels = [label for label, _, _ in plan]
    print(f"\nper-call time, median of {ns.rounds} processes ({ns.threads} thread(s))")
    print("| case | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    for case, medians, errors in rows:
        cells = [
            _fmt(medians.get(label)) if label in medians else errors.get(label, "-")
            for label in labels
        ]
        print(f"| {case} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
