"""Benchmark: eager PyTorch vs optimize("eager") vs optimize("inductor"), ResNet-18, batch 1, CPU.

For each backend it measures, in one process and in this order:
- capture time: the translator's time on the first call (``capture.stats.translate_time_s``);
- compile time: the backend's time on the first call (``capture.stats.backend_compile_time_s``);
- first call: the whole first call (capture + compile + guards + one run);
- median latency over ``--runs`` calls after ``--warmup`` calls, and the speedup over eager;
- the number of graphs captured and the largest absolute difference from eager.

It prints a markdown table, with the command line, Python/torch versions and thread count.

    python3 benchmarks/resnet18_cpu.py [--runs 50] [--backends eager,inductor]
                                       [--threads N] [--cold] [--json results.json]

``--cold`` points Inductor at an empty cache directory, so its compile time is a cold one;
without it Inductor reuses kernels from earlier runs (``/tmp/torchinductor_$USER``).
"""

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time

import torch
import torchvision

import torch_plugin


def time_calls(fn, x: torch.Tensor, warmup: int, runs: int) -> list[float]:
    """Wall times of ``runs`` calls of ``fn(x)`` in seconds, after ``warmup`` calls."""
    for _ in range(warmup):
        fn(x)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - start)
    return times


def run_backend(model, x, expected, backend: str, args) -> dict:
    torch_plugin.reset()
    compiled = torch_plugin.optimize(backend)(model)
    start = time.perf_counter()
    out = compiled(x)
    first_call_s = time.perf_counter() - start
    stats = torch_plugin.capture.stats
    result = {
        "name": f'optimize("{backend}")',
        "graphs": stats.graphs_compiled,
        "capture_s": stats.translate_time_s,
        "compile_s": stats.backend_compile_time_s,
        "first_call_s": first_call_s,
        "max_abs_error": (out - expected).abs().max().item(),
    }
    times = time_calls(compiled, x, args.warmup, args.runs)
    result["median_ms"] = statistics.median(times) * 1e3
    result["recompiles"] = stats.recompiles
    return result


def _cell(result: dict, key: str, fmt: str) -> str:
    return "-" if result.get(key) is None else format(result[key], fmt)


def markdown_table(results: list[dict], eager_ms: float) -> str:
    rows = [
        "| model | graphs | capture s | compile s | first call s | median ms | speedup | max abs err |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        rows.append(
            f"| {r['name']} | {_cell(r, 'graphs', 'd')} | {_cell(r, 'capture_s', '.3f')} | "
            f"{_cell(r, 'compile_s', '.2f')} | {_cell(r, 'first_call_s', '.2f')} | "
            f"{r['median_ms']:.2f} | {eager_ms / r['median_ms']:.2f}x | "
            f"{_cell(r, 'max_abs_error', '.1e')} |"
        )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="timed calls per model (default 50)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls first (default 5)")
    parser.add_argument(
        "--backends", default="eager,inductor", help="comma-separated (default eager,inductor)"
    )
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--cold", action="store_true", help="use an empty Inductor cache")
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args()

    if args.cold:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="torchinductor_cold_")
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)

    with torch.no_grad():
        expected = model(x)
        eager_times = time_calls(model, x, args.warmup, args.runs)
        eager_ms = statistics.median(eager_times) * 1e3
        results = [{"name": "eager PyTorch", "median_ms": eager_ms}]
        for backend in args.backends.split(","):
            results.append(run_backend(model, x, expected, backend, args))

    environment = {
        "command": shlex.join([os.path.basename(sys.executable)] + sys.argv),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "inductor_cache": "cold" if args.cold else "warm or cold (shared on-disk cache)",
        "runs": args.runs,
        "warmup": args.warmup,
    }
    print("ResNet-18 (random weights), batch 1x3x224x224, CPU, eval, torch.no_grad\n")
    print(f"`{environment['command']}`  ")
    print(
        f"Python {environment['python']}, torch {environment['torch']}, "
        f"torchvision {environment['torchvision']}, {environment['threads']} threads, "
        f"{environment['cpus']} CPUs, Inductor cache: {environment['inductor_cache']}\n"
    )
    print(markdown_table(results, eager_ms))
    print(
        "\ncapture s: translator time; compile s: backend time; first call s: whole first "
        f"call; median of {args.runs} calls after {args.warmup} warm-up calls; "
        "speedup: eager median / this median."
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"environment": environment, "results": results}, f, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
