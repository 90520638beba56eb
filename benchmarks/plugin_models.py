"""Benchmark: eager vs optimize("inductor") vs optimize("plugin") on real models, CPU.

Models (random weights): torchvision resnet18, resnet50, mobilenet_v3_large, vit_b_16
(224x224 images) and HF BERT / GPT-2 (small configs, 128 tokens), at each batch size of
``--batches``. For every (model, batch, backend) it runs two child processes sharing one
fresh pair of cache directories (Inductor's and plugin's): the first measures the cold
compile (empty caches), the second the warm compile (disk caches filled) and the median
latency. "compile s" is the first call's time minus one steady-state call; "peak MB" is the
warm child's peak resident memory (ru_maxrss: imports, model, compiling, calls). All rows are
measured side by side in one run and printed as a markdown table, with the command line,
versions and thread count.

    python3 benchmarks/plugin_models.py [--models resnet18,resnet50] [--batches 1,8]
        [--runs 20] [--timeout SECONDS] [--front optimize|torch.compile] [--json PATH]

``--timeout`` bounds each row (its five child processes together); a child still running
when the row's time is up is killed and its cells read "timeout". "plugin/inductor" is
plugin's median latency over Inductor's (target <= 1.0), "cold ratio" plugin's cold compile
time over Inductor's (target <= 0.2). The "plugin" warm compile replays the lowered graph
from the graph cache (torch_plugin/compiler/graph_cache.py) instead of tracing it.

``--front torch.compile`` uses torch.compile (Dynamo) as the capture front instead of
torch_plugin.optimize, to measure the backends alone.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

MODELS = ["resnet18", "resnet50", "mobilenet_v3_large", "vit_b_16", "bert", "gpt2"]


def build(name: str, batch: int):
    import torch

    torch.manual_seed(0)
    if name in ("bert", "gpt2"):
        import transformers

        if name == "bert":
            cfg = transformers.BertConfig(
                hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024
            )
            model = transformers.BertModel(cfg)
        else:
            cfg = transformers.GPT2Config(n_embd=256, n_layer=4, n_head=4)
            model = transformers.GPT2Model(cfg)
        x = torch.randint(0, 1000, (batch, 128))
    else:
        import torchvision

        model = getattr(torchvision.models, name)(weights=None)
        x = torch.randn(batch, 3, 224, 224)
    return model.eval(), x


def child(args: argparse.Namespace) -> None:
    """One measurement in this process; prints one JSON line."""
    import resource

    import torch

    model, x = build(args.model, args.batch)
    fn = model
    if args.backend != "eager":
        if args.front == "torch.compile":
            if args.backend == "plugin":
                from torch_plugin.backends.plugin import plugin as backend
            else:
                backend = "inductor"
            fn = torch.compile(model, backend=backend)
        else:
            import torch_plugin

            fn = torch_plugin.optimize(args.backend)(model)
    with torch.no_grad():
        start = time.perf_counter()
        fn(x)
        first = time.perf_counter() - start
        for _ in range(2):
            fn(x)
        times = []
        for _ in range(args.runs):
            start = time.perf_counter()
            fn(x)
            times.append(time.perf_counter() - start)
    median = statistics.median(times)
    # The process's peak resident memory (imports, model, compiling, calls): what a user's
    # machine must hold. Linux reports kilobytes.
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "first_s": first,
                "compile_s": max(first - median, 0.0),
                "median_ms": median * 1e3,
                "peak_mb": peak_mb,
            }
        )
    )


def run_child(
    model: str, batch: int, backend: str, env: dict, args: argparse.Namespace, deadline: float
) -> dict:
    """One child measurement; ``{"error": ...}`` when it fails or passes ``deadline``
    (a ``time.monotonic()`` value)."""
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--model",
        model,
        "--batch",
        str(batch),
        "--backend",
        backend,
        "--runs",
        str(args.runs),
        "--front",
        args.front,
    ]
    left = deadline - time.monotonic()
    if left <= 0:
        return {"error": "timeout"}
    try:
        out = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=left, check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": "timeout"}
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _table_row(row: dict) -> str:
    """One markdown row of the table; a missing number reads "error" or "timeout" (the
    reasons are listed under the table)."""

    def g(key: str, field: str) -> float | None:
        return row[key].get(field)

    def f(v: float | None, fmt: str = "{:.2f}") -> str:
        if v is not None:
            return fmt.format(v)
        errors = [r.get("error") for r in row.values() if isinstance(r, dict)]
        return "timeout" if "timeout" in errors else "error"

    e, i, pl = g("eager", "median_ms"), g("inductor", "median_ms"), g("plugin", "median_ms")
    ic, pc = g("inductor_cold", "compile_s"), g("plugin_cold", "compile_s")
    return (
        f"| {row['model']} | {row['batch']} | {f(e)} | {f(i)} | {f(pl)} "
        f"| {f(pl / i if pl and i else None)} | {f(e / pl if e and pl else None)}x "
        f"| {f(ic, '{:.1f}')} | {f(pc, '{:.1f}')} | {f(pc / ic if pc and ic else None)} "
        f"| {f(g('inductor', 'compile_s'))} | {f(g('plugin', 'compile_s'))} "
        f"| {f(g('eager', 'peak_mb'), '{:.0f}')} | {f(g('inductor', 'peak_mb'), '{:.0f}')} "
        f"| {f(g('plugin', 'peak_mb'), '{:.0f}')} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--batches", default="1,8")
    p.add_argument("--runs", type=int, default=20)
    p.add_argument(
        "--timeout",
        type=float,
        default=1800.0,
        help="seconds per row (model x batch, all backends); default 1800",
    )
    p.add_argument("--front", default="optimize", choices=["optimize", "torch.compile"])
    p.add_argument("--json")
    p.add_argument("--child", action="store_true")
    p.add_argument("--model")
    p.add_argument("--batch", type=int)
    p.add_argument("--backend")
    args = p.parse_args()
    if args.child:
        child(args)
        return
    import torch

    print(f"$ python3 {' '.join(shlex.quote(a) for a in sys.argv)}")
    print(
        f"Python {platform.python_version()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
    )
    print()
    print(
        "| model | batch | eager ms | inductor ms | plugin ms | plugin/inductor | plugin speedup "
        "| inductor cold s | plugin cold s | cold ratio | inductor warm s | plugin warm s "
        "| eager peak MB | inductor peak MB | plugin peak MB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for model in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            row: dict = {"model": model, "batch": batch}
            deadline = time.monotonic() + args.timeout
            row["eager"] = run_child(model, batch, "eager", dict(os.environ), args, deadline)
            for backend in ("inductor", "plugin"):
                with tempfile.TemporaryDirectory() as d:
                    env = dict(
                        os.environ,
                        TORCHINDUCTOR_CACHE_DIR=os.path.join(d, "inductor"),
                        TORCH_PLUGIN_CACHE_DIR=os.path.join(d, "plugin"),
                    )
                    row[backend + "_cold"] = run_child(model, batch, backend, env, args, deadline)
                    row[backend] = run_child(model, batch, backend, env, args, deadline)
            rows.append(row)
            print(_table_row(row), flush=True)
    errors = [
        (r["model"], r["batch"], k, v["error"])
        for r in rows
        for k, v in r.items()
        if isinstance(v, dict) and "error" in v
    ]
    if errors:
        print()
        for model, batch, key, err in errors:
            print(f"- {model} batch {batch}, {key}: {err}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
