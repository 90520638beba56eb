"""Benchmark: issue #27's CPU table, plugin vs Inductor latency side by side, one command.

Rows: ResNet-50, ViT-B/16, BERT and GPT-2 (benchmarks/plugin_models.py's models and small
configs, random weights) at batch 1 and 8. Each row runs in its own child process with empty
Inductor and plugin caches: it compiles eager's model with ``optimize("inductor")`` and
``optimize("plugin")``, warms all three up, then times them **interleaved**: rounds in which
each backend runs a few calls in turn (the order rotates), until the row's time budget
(``--seconds``) is spent, at least ``--min-rounds`` rounds. A backend's latency is the median
of all its calls; plugin/inductor is the median over rounds of the round's plugin median over
its Inductor median, so both backends share whatever else the machine was doing, and the
"ratio p25-p75" column shows how much the rounds disagree (the noise). The header gives the
CPU's name and its AVX-512 / AMX flags, threads, versions and the load average.

    OMP_NUM_THREADS=2 python3 benchmarks/cpu_table.py
        [--models resnet50,vit_b_16,bert,gpt2] [--batches 1,8] [--seconds 30]
        [--timeout 300] [--json PATH]

On the 2-core development machine the whole table takes about 10-12 minutes (most of it
Inductor's cold compiles). "compile s" is each backend's first call (capture and compile,
empty caches) minus one steady call. Peak memory is measured per process by
plugin_models.py (and benchmarks/peak_memory.py), not here: the three backends share this
process.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BACKENDS = ("eager", "inductor", "plugin")


def cpu_description() -> str:
    """The CPU's model name and which of the flags that matter here it has."""
    name, flags = platform.processor() or "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name") and name in ("", "unknown CPU", "x86_64"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    wanted = ["avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"]
    have = [f for f in wanted if f in flags]
    return f"{name}; flags: {' '.join(have) if have else 'none of ' + ' '.join(wanted)}"


def child(args: argparse.Namespace) -> None:
    """One row in this process: compile, warm up, time interleaved; one JSON line."""
    import torch
    from plugin_models import build

    import torch_plugin

    model, x = build(args.model, args.batch)
    fns = {
        "eager": model,
        "inductor": torch_plugin.optimize("inductor")(model),
        "plugin": torch_plugin.optimize("plugin")(model),
    }
    first: dict[str, float] = {}
    calls: dict[str, list[float]] = {b: [] for b in BACKENDS}
    ratios: list[float] = []
    with torch.no_grad():
        for b, fn in fns.items():
            start = time.perf_counter()
            fn(x)
            first[b] = time.perf_counter() - start
            for _ in range(2):
                fn(x)
        # Calls per backend per round: about 0.2 s of the slowest backend, at least 1.
        start = time.perf_counter()
        for fn in fns.values():
            fn(x)
        slowest = (time.perf_counter() - start) / len(fns)
        per_round = max(1, int(0.2 / max(slowest, 1e-6)))
        deadline = time.monotonic() + args.seconds
        r = 0
        while r < args.min_rounds or time.monotonic() < deadline:
            med = {}
            order = BACKENDS[r % 3 :] + BACKENDS[: r % 3]
            for b in order:
                times = []
                for _ in range(per_round):
                    start = time.perf_counter()
                    fns[b](x)
                    times.append(time.perf_counter() - start)
                calls[b] += times
                med[b] = statistics.median(times)
            ratios.append(med["plugin"] / med["inductor"])
            r += 1
    median = {b: statistics.median(v) * 1e3 for b, v in calls.items()}
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    print(
        json.dumps(
            {
                "ms": median,
                "compile_s": {b: max(first[b] - median[b] / 1e3, 0.0) for b in BACKENDS},
                "ratio": statistics.median(ratios),
                "ratio_p25": q[0],
                "ratio_p75": q[2],
                "rounds": len(ratios),
                "calls_per_round": per_round,
            }
        )
    )


def run_row(model: str, batch: int, args: argparse.Namespace) -> dict:
    """One row's child process with fresh caches; ``{"error": ...}`` when it fails."""
    cmd = [sys.executable, __file__, "--child", "--model", model, "--batch", str(batch)]
    cmd += ["--seconds", str(args.seconds), "--min-rounds", str(args.min_rounds)]
    with tempfile.TemporaryDirectory() as d:
        env = dict(
            os.environ,
            TORCHINDUCTOR_CACHE_DIR=os.path.join(d, "inductor"),
            TORCH_PLUGIN_CACHE_DIR=os.path.join(d, "plugin"),
        )
        try:
            out = subprocess.run(
                cmd, env=env, capture_output=True, text=True, timeout=args.timeout, check=False
            )
        except subprocess.TimeoutExpired:
            return {"error": "timeout"}
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def table_row(model: str, batch: int, r: dict) -> str:
    if "error" in r:
        return f"| {model} | {batch} | {r['error']} |" + " |" * 8
    ms, c = r["ms"], r["compile_s"]
    return (
        f"| {model} | {batch} | {ms['eager']:.2f} | {ms['inductor']:.2f} | {ms['plugin']:.2f} "
        f"| **{r['ratio']:.2f}** | {r['ratio_p25']:.2f}-{r['ratio_p75']:.2f} "
        f"| {r['rounds']}x{r['calls_per_round']} | {c['inductor']:.1f} | {c['plugin']:.1f} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet50,vit_b_16,bert,gpt2")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--seconds", type=float, default=30.0, help="timing budget per row")
    p.add_argument("--min-rounds", type=int, default=5)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per row, all in")
    p.add_argument("--json")
    p.add_argument("--child", action="store_true")
    p.add_argument("--model")
    p.add_argument("--batch", type=int)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    import torch

    start = time.monotonic()
    print(f"$ python3 {' '.join(shlex.quote(a) for a in sys.argv)}")
    print(f"CPU: {cpu_description()}")
    print(
        f"Python {platform.python_version()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f} at start"
    )
    print()
    print(
        "| model | batch | eager ms | inductor ms | plugin ms | plugin/inductor "
        "| ratio p25-p75 | rounds x calls | inductor compile s | plugin compile s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for model in args.models.split(","):
        for batch in (int(b) for b in args.batches.split(",")):
            r = run_row(model, batch, args)
            rows.append({"model": model, "batch": batch, **r})
            print(table_row(model, batch, r), flush=True)
    print(
        f"\n{time.monotonic() - start:.0f} s in all; load {os.getloadavg()[0]:.1f} at the end. "
        "Target: plugin/inductor <= 0.8 on every row."
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
