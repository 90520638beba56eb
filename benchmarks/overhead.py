"""Per-call overhead of an optimized function: torch_plugin vs torch.compile(backend="eager").

What is measured: the time of one call of an optimized function minus the time of the same
call run eagerly, on tiny CPU tensors, so that the difference is the cost of the machinery
(guard check, jump into cached code, the wrapper around the compiled graph), not of the
work. Both compilers use their "eager" backend (the captured FX graph runs as is), and are
measured side by side in one process, interleaved, after warm-up (no compile is timed).

Cases:
- ``1 input``, ``10 inputs``, ``100 inputs``: ``f(x0, ..., xn) = x0 + ... + xn + 1`` on
  one-element tensors (every input is read, so every input is guarded);
- ``20-layer module``: an nn.Module applying 20 ``nn.Linear(1, 1)`` in sequence to a
  ``(1, 1)`` tensor (module identity, ``training`` and parameter guards).

Everything runs under ``torch.no_grad()`` with one intra-op thread. Each timing is the
median over ``--repeats`` rounds of ``--number`` calls; the table also gives the ratio of
torch_plugin's added time to torch.compile's (the target is <= 0.5).

Usage: ``python benchmarks/overhead.py [--number 2000] [--repeats 15] [--out FILE.md]``
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

import torch_plugin


def make_sum_function(n: int) -> Callable:
    """``f(x0, ..., x{n-1}) = x0 + ... + x{n-1} + 1`` as a plain Python function."""
    params = ", ".join(f"x{i}" for i in range(n))
    body = " + ".join(f"x{i}" for i in range(n)) + " + 1"
    scope: dict = {}
    exec(f"def f_{n}({params}):\n    return {body}\n", scope)  # noqa: S102 - benchmark code
    return scope[f"f_{n}"]


class Layers(torch.nn.Module):
    def __init__(self, n: int = 20) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(1, 1) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def per_call_us(fn: Callable, args: tuple, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn(*args)
    return (time.perf_counter() - start) / number * 1e6


def measure(variants: dict[str, Callable], args: tuple, number: int, repeats: int) -> dict:
    """Median per-call microseconds of each variant, measured in interleaved rounds."""
    for fn in variants.values():  # warm up: compile, fill caches
        for _ in range(20):
            fn(*args)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, fn in variants.items():
            samples[name].append(per_call_us(fn, args, number))
    return {name: statistics.median(values) for name, values in samples.items()}


def cases() -> list[tuple[str, Callable, tuple]]:
    out = []
    for n in (1, 10, 100):
        label = "1 input" if n == 1 else f"{n} inputs"
        out.append((label, make_sum_function(n), tuple(torch.randn(1) for _ in range(n))))
    out.append(("20-layer module", Layers(20).eval(), (torch.randn(1, 1),)))
    return out


def check_same(name: str, variants: dict[str, Callable], args: tuple) -> None:
    expected = variants["eager"](*args)
    for label, fn in variants.items():
        got = fn(*args)
        if not torch.allclose(got, expected):
            raise SystemExit(f"{name}: {label} returned {got}, eager {expected}")


def git_commit() -> str:
    """The checkout's commit (or $TORCH_PLUGIN_COMMIT where the copy has no .git)."""
    if os.environ.get("TORCH_PLUGIN_COMMIT"):
        return os.environ["TORCH_PLUGIN_COMMIT"]
    try:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        return subprocess.run(
            ["git", "-C", root, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--number", type=int, default=2000, help="calls per round")
    parser.add_argument("--repeats", type=int, default=15, help="rounds (median is reported)")
    parser.add_argument("--out", help="also write the markdown report to this file")
    opts = parser.parse_args()

    torch.set_num_threads(1)
    torch._dynamo.config.cache_size_limit = 64
    rows = []
    with torch.no_grad():
        for name, fn, args in cases():
            torch._dynamo.reset()
            torch_plugin.reset()
            variants = {
                "eager": fn,
                "torch_plugin": torch_plugin.optimize("eager")(fn),
                "torch.compile": torch.compile(fn, backend="eager"),
            }
            check_same(name, variants, args)
            t = measure(variants, args, opts.number, opts.repeats)
            ours = t["torch_plugin"] - t["eager"]
            theirs = t["torch.compile"] - t["eager"]
            rows.append((name, t["eager"], t["torch_plugin"], ours, t["torch.compile"], theirs))
            if torch_plugin.stats.recompiles:
                raise SystemExit(f"{name}: torch_plugin recompiled while being measured")

    lines = [
        (
            "| case | eager µs | torch_plugin µs | added µs | torch.compile(eager) µs | added µs "
            "| ours / theirs |"
        ),
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, eager, tp, ours, tc, theirs in rows:
        ratio = ours / theirs if theirs > 0 else float("nan")
        lines.append(
            f"| {name} | {eager:.2f} | {tp:.2f} | {ours:.2f} | {tc:.2f} | {theirs:.2f} "
            f"| {ratio:.2f} |"
        )
    header = [
        '# Per-call overhead: torch_plugin vs torch.compile(backend="eager")',
        "",
        f"Command: `python {' '.join(sys.argv)}`",
        "",
        (
            f"- Python {platform.python_version()}, torch {torch.__version__}, "
            f"torch_plugin {torch_plugin.__version__} (git {git_commit()})"
        ),
        f"- CPU: {cpu_model()}, torch threads: {torch.get_num_threads()}",
        (
            f"- per-call time: median of {opts.repeats} rounds x {opts.number} calls; "
            "added = optimized - eager"
        ),
        "",
    ]
    report = "\n".join(header + lines) + "\n"
    print(report)
    if opts.out:
        with open(opts.out, "w") as f:
            f.write(report)


if __name__ == "__main__":
    main()
