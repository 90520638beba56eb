"""Per-call cost of the compiled artifact (an FX graph of torch.ops.torch_plugin.* calls)
next to the C++ executor that runs the same compiled graph, and eager PyTorch.

What is measured, for one pointwise chain ``gelu(x * y + b).sigmoid() - 1.5 * relu(x).sqrt()``
(one generated kernel plus nothing else) at a tiny and a medium size:

- ``eager``: the function, op by op;
- ``executor``: ``CompiledGraph([x, y, b])``, the "plugin" backend's runtime;
- ``graph module``: ``CompiledGraph.graph_module(x, y, b)``, the artifact (Python code
  calling ``torch.ops.torch_plugin.fused``);
- ``fused op``: one direct ``torch.ops.torch_plugin.fused.default(...)`` call with the same
  arguments (the op's own cost: argument parsing, kernel lookup by source, allocation).

Everything runs with one intra-op thread after warm-up (kernels compiled before timing).
Each number is the median over ``--repeats`` rounds of ``--number`` calls (a twentieth of
that at the medium size), in microseconds.

Usage: ``python benchmarks/artifact_overhead.py [--number 2000] [--repeats 15]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from torch_plugin.compiler.stages import compile_graph


def chain(x, y, b):
    return F.gelu(x * y + b).sigmoid() - 1.5 * torch.relu(x).sqrt()


def median_us(fn: Callable[[], object], number: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number * 1e6)
    return statistics.median(times)


def measure(shape: tuple[int, ...], number: int, repeats: int) -> list[float]:
    """Median microseconds per call of eager, executor, graph module and fused op."""
    x, y, b = torch.randn(shape), torch.randn(shape), torch.randn(shape[-1])
    compiled = compile_graph(make_fx(lambda *a: (chain(*a),))(x, y, b))  # returns a tuple
    gm = compiled.graph_module
    call = next(n for n in gm.graph.nodes if n.target is torch.ops.torch_plugin.fused.default)
    env = {"arg0": x, "arg1": y, "arg2": b}
    op_args = torch.fx.node.map_arg(
        call.args, lambda n: env[n.name] if n.op == "placeholder" else getattr(gm, n.target)
    )
    cases = [
        lambda: chain(x, y, b),
        lambda: compiled([x, y, b]),
        lambda: gm(x, y, b),
        lambda: torch.ops.torch_plugin.fused.default(*op_args),
    ]
    with torch.no_grad():
        for fn in cases:  # warm-up, and a check that all agree
            torch.testing.assert_close(torch.as_tensor(_first(fn())), chain(x, y, b))
        return [median_us(fn, number, repeats) for fn in cases]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| size | eager (us) | executor (us) | graph module (us) | fused op (us) |")
    print("|---|---|---|---|---|")
    for shape, number in [((8, 16), args.number), ((256, 1024), max(1, args.number // 20))]:
        row = measure(shape, number, args.repeats)
        print(f"| {list(shape)} | " + " | ".join(f"{t:.1f}" for t in row) + " |")


def _first(out: object) -> object:
    while isinstance(out, (list, tuple)):
        out = out[0]
    return out


if __name__ == "__main__":
    main()
