"""``mode="max-autotune"`` of the "plugin" compiler: a timed choice, for each inference graph,
between its library plan and generated kernels (issue #32).

The library plan is the graph as the compiler builds it by default: convolutions and matrix
products become library calls (oneDNN on the CPU, cuBLASLt and cuDNN on CUDA) with their bias,
residual and activation fused in (the ``library_patterns`` pass). The alternative is the same
graph compiled with ``library_patterns`` off: the products stay ATen calls and the ops around
them join the generated kernels. Both are timed on the graph's example inputs and the faster
one runs from then on; a line on the ``torch_plugin.backends.plugin`` logger says which and
the times, and the compile trace gets an ``autotune`` event.

The alternative is built and timed only when that is safe and can differ:

- the graph is an inference graph (no gradient needed) whose ATen graph is pure (it mutates no
  input and draws no random numbers: ``facts["pure"]``, so running it more times on the
  example inputs is unobservable) and whose example inputs all have values (a graph with
  symbolic sizes is timed on the sizes seen at capture);
- its captured graph has a convolution or matrix product (else both builds are the same);
- ``library_patterns`` is on.

Otherwise the library plan runs, and the log says why. Both builds are correct; the choice is
only about speed. On CUDA, the chosen one is then timed against the eager graph as in
``"default"`` (``torch_plugin.compiler.pipeline``).

Key names: :func:`copy_graph`, :func:`wants_alternative`, :func:`choose`.
"""

from __future__ import annotations

import functools
import gc
import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from torch_plugin import trace
from torch_plugin.compiler.cuda_graphs import median_cuda_ms

log = logging.getLogger("torch_plugin.backends.plugin")

# Target names of the captured ops that the library patterns may turn into library calls.
_PRODUCT_NAMES = ("conv", "linear", "matmul", "mm", "addmm", "bmm", "baddbmm", "einsum")


def copy_graph(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm``'s graph over the same attributes (parameters and buffers shared, not
    copied: the frozen-parameter guards see the user's tensors), for a second build (the
    compiler rewrites the graph it compiles: its outputs are flattened)."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return torch.fx.GraphModule(gm, graph, class_name=type(gm).__name__)


def _has_product(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` calls a convolution or a matrix product (a function, a method or a
    module such as ``nn.Linear``/``nn.Conv2d``)."""
    for node in gm.graph.nodes:
        if node.op == "call_module":
            name = type(gm.get_submodule(node.target)).__name__.lower()
        elif node.op in ("call_function", "call_method"):
            target = node.target
            name = (target if isinstance(target, str) else getattr(target, "__name__", "")).lower()
        else:
            continue
        if name == "__matmul__" or any(p in name for p in _PRODUCT_NAMES):
            return True
    return False


def wants_alternative(gm: torch.fx.GraphModule, library_patterns: bool) -> str | None:
    """Why ``gm`` is not worth a second build (None: it is): no product, or the library
    patterns off already. Read before the first build (which rewrites ``gm``)."""
    if not library_patterns:
        return "library_patterns is off"
    if not _has_product(gm):
        return "no convolution or matrix product"
    return None


def _median_ms(call: Callable[[], Any], cuda: bool) -> float:
    """Median milliseconds of ``call()``: CUDA events on CUDA (``median_cuda_ms``), else the
    wall clock; 10 calls, or fewer (at least 5) once they have taken 25 ms together."""
    if cuda:
        return median_cuda_ms(call, runs=10, min_runs=5, budget_ms=25.0)
    times: list[float] = []
    while len(times) < 10 and (len(times) < 5 or sum(times) < 25.0):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


def choose(
    library: Callable[..., Any],
    build_alternative: Callable[[], Callable[..., Any] | None],
    example_inputs: list[Any],
    facts: dict[str, Any],
    cuda: bool,
) -> Callable[..., Any]:
    """``library`` (the graph built with the library patterns) or the graph
    ``build_alternative()`` builds without them (None when it does not lower), whichever runs
    ``example_inputs`` faster; ``library`` when timing is not safe (see the module
    docstring: ``facts`` is the library build's). A second build or a timing that fails
    keeps ``library``."""
    why = facts.get("impure")
    example_inputs = [getattr(a.node, "hint", None) if isinstance(a, torch.SymInt) else a
                      for a in example_inputs]  # fmt: skip
    if why is None and None in example_inputs:
        why = "a symbolic example input has no value"
    if why is None and "pure" not in facts:
        why = "unknown purity"
    if why is not None:
        log.info("plugin: max-autotune: not timing generated kernels (%s): library plan", why)
        return library
    try:
        alternative = build_alternative()
    except Exception as e:  # noqa: BLE001 - the second build is optional; the first stands
        log.info("plugin: max-autotune: the build without library patterns failed (%s)", e)
        return library
    if alternative is None:
        log.info("plugin: max-autotune: the graph without library patterns does not lower")
        return library
    try:
        with torch.no_grad():
            for run in (library, alternative):  # warm-up: first-call work, arenas
                for _ in range(2):
                    run(*example_inputs)
            t_library = _median_ms(functools.partial(library, *example_inputs), cuda)
            t_kernels = _median_ms(functools.partial(alternative, *example_inputs), cuda)
    except Exception as e:  # noqa: BLE001 - timing is advisory; the library plan stays
        log.info("plugin: max-autotune: timing failed (%s): library plan", e)
        return library
    chosen = "library plan" if t_library <= t_kernels else "generated kernels"
    log.info(
        "plugin: max-autotune: library plan %.3f ms, generated kernels %.3f ms: running the %s",
        t_library, t_kernels, chosen,
    )  # fmt: skip
    trace.emit("autotune", library_ms=t_library, kernels_ms=t_kernels, chosen=chosen)
    loser = alternative if chosen == "library plan" else library
    winner = library if chosen == "library plan" else alternative
    # A compiled graph's call and its Python object hold each other (GraphCall's
    # callbacks): collect the loser now, with its constants and arena.
    del loser, library, alternative
    gc.collect()
    return winner
