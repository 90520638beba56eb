"""The "plugin" compiler's driver: a captured graph to a callable, through the stages of
:mod:`torch_plugin.compiler.stages` (captured → lowered → compiled), with the inference
stages (:mod:`.inference`: freezing, the graph cache, one call) and the training stages
(:mod:`.training`: forward and backward graphs) side by side.

AOTAutograd (``aot_module_simplified``) traces the captured graph into ATen graphs with the
decomposition table of :mod:`torch_plugin.compiler.decompositions`, and calls the inference
compiler or the forward/backward compilers; a graph-cache hit skips it.

On CUDA (any example input, parameter or buffer on a CUDA device) three more rules apply
(issue #11):

- *Never slower than eager.* A graph that needs gradients is compiled as on the CPU
  (AOTAutograd's forward and backward graphs, :mod:`.training`) but without CUDA graphs,
  and runs as the eager graph when its forward graph does not lower; an inference graph
  the compiler cannot lower runs as the eager graph too (as on the CPU). For an inference
  graph, the compiled graph and the eager graph are both timed at compile time on the example
  inputs when that is safe (the ATen graph mutates no input and draws no random numbers), and
  the faster one runs from then on; a log line on ``torch_plugin.backends.plugin`` says which
  and why.
- *CUDA graphs.* A compiled inference graph is captured into a CUDA graph on its second call
  and replayed after (:mod:`torch_plugin.compiler.cuda_graphs`) unless it cannot be (ops that
  synchronize, draw random numbers or write an input; the log says which);
  ``TORCH_PLUGIN_CUDA_GRAPHS=0`` turns that off.
- ``mode="reduce-overhead"`` keeps the CUDA graph whenever it can be captured, without the
  timing.

``mode="max-autotune"`` (CPU and CUDA): an inference graph with a convolution or matrix
product is also built with the library patterns off, and the faster of the two builds runs
(:mod:`.autotune`); on CUDA that one is then timed against the eager graph.

Key parts: :func:`compile_captured` (the "plugin" backend's body), :data:`MODES`.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
from collections.abc import Callable
from typing import Any

import torch

from torch_plugin import _C, config, trace
from torch_plugin.compiler import autotune, options, training
from torch_plugin.compiler.backward_graphs import random_ops_kept
from torch_plugin.compiler.cuda_graphs import median_cuda_ms
from torch_plugin.compiler.graph_outputs import flatten_graph_outputs
from torch_plugin.compiler.inference import InferenceStages
from torch_plugin.compiler.stages import Captured

log = logging.getLogger("torch_plugin.backends.plugin")

MODES = ("default", "reduce-overhead", "max-autotune")

# Captured graphs the backend returned as the eager graph (any reason above), in this
# process: tests assert that a run compiled every graph.
counters = {"eager_graphs": 0}


def compile_captured(
    gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor], mode: str = "default"
) -> Callable[..., Any]:
    """Compile the captured graph ``gm`` with the "plugin" compiler (see the module docstring).

    ``mode``: "default", "reduce-overhead" or "max-autotune". Raises ValueError for another
    mode.
    """
    if mode not in MODES:
        raise ValueError(f"plugin: unknown mode {mode!r}; modes: {', '.join(MODES)}")
    captured = Captured.of(gm, example_inputs, mode)
    cuda = captured.cuda
    # max-autotune's second build compiles a copy of the graph, made before the first build
    # rewrites gm (autotune.copy_graph).
    second = None
    if mode == "max-autotune" and not captured.needs_grad:
        why_not = autotune.wants_alternative(gm, options.current().library_patterns)
        if why_not is None:
            second = autotune.copy_graph(gm)
        else:
            log.info("plugin: max-autotune: one build (%s)", why_not)
    # Bound now: the compiler below rewrites gm's outputs (flatten_graph_outputs).
    eager = _C.disable_wrapper(gm.forward)
    facts: dict[str, Any] = {}
    if cuda and captured.needs_grad:
        # Training on CUDA (issue #30): AOTAutograd's forward and backward graphs through the
        # compiler, without CUDA graphs (a replay would overwrite the saved activations of a
        # forward whose backward has not run); the eager graph when the forward graph does
        # not lower (a backward graph that does not lower runs as its ATen graph).
        with options.overridden({"cuda_graphs": False}):
            compiled = _compile(captured, facts)
        if "unlowered_forward" in facts:
            log.info(
                "plugin: the training graph runs as the eager graph: %s",
                facts["unlowered_forward"],
            )
            counters["eager_graphs"] += 1
            return eager
        return compiled
    compiled = _compile(captured, facts)
    if "unlowered" in facts:
        # The ATen graph would run op by op from Python: the captured graph is never slower.
        log.info("plugin: the inference graph runs as the eager graph: %s", facts["unlowered"])
        counters["eager_graphs"] += 1
        return eager
    if second is not None:
        compiled = autotune.choose(
            compiled,
            functools.partial(_without_library_patterns, second, example_inputs, mode),
            example_inputs,
            facts,
            cuda,
        )
    if not cuda or mode == "reduce-overhead":
        return compiled
    return _faster_of(compiled, eager, example_inputs, facts)


def _without_library_patterns(
    gm: torch.fx.GraphModule, example_inputs: list[Any], mode: str
) -> Callable[..., Any] | None:
    """``gm`` compiled with the library patterns off (max-autotune's second build), or None
    when its inference graph does not lower."""
    facts: dict[str, Any] = {}
    with options.overridden({"library_patterns": False}):
        compiled = _compile(Captured.of(gm, example_inputs, mode), facts)
        # Later compiles of this build (a new size of a graph with symbolic sizes): the same.
        return None if "unlowered" in facts else options.bound(compiled)


def _compile(captured: Captured, facts: dict[str, Any]) -> Callable[..., Any]:
    """The compiler proper (CPU and CUDA): the graph cache, else AOTAutograd with the
    inference and training compilers. ``facts`` receives ``"pure"``/``"impure"`` (why) and
    ``"unlowered"`` about the inference graph. An unused random op stays in the graphs (it
    advances the generator), also with symbolic sizes (:func:`random_ops_kept`)."""
    with random_ops_kept():
        return _compile_graphs(captured, facts)


def _compile_graphs(captured: Captured, facts: dict[str, Any]) -> Callable[..., Any]:
    gm = captured.gm
    rebuild = flatten_graph_outputs(gm)
    inference = InferenceStages(captured, rebuild, facts)
    with trace.stage("graph_cache"):
        cached = inference.from_cache()
    trace.emit("graph_cache", hit=cached is not None)
    if cached is not None:
        return cached

    # Imported here, not above: a graph cache hit never needs AOTAutograd, whose first
    # import takes about 0.3 s.
    from torch._functorch.aot_autograd import aot_module_simplified

    from torch_plugin.compiler.attention import LeafAttention, training_backends
    from torch_plugin.compiler.decompositions import decomposition_table

    # On CUDA, attention is traced as a leaf op (torch_plugin.compiler.attention says why),
    # and in a training graph the calls the leaf does not take as ATen's math path.
    tracing = contextlib.ExitStack()
    if captured.cuda:
        tracing.enter_context(LeafAttention("cuda"))
        if captured.needs_grad:
            tracing.enter_context(training_backends())
    with tracing, trace.stage("aot_autograd"):
        compiled = aot_module_simplified(
            gm,
            captured.example_inputs,
            fw_compiler=functools.partial(training.forward_compiler, facts=facts),
            # Compiled at the first backward(): with this compile's options (optimize(options=)).
            bw_compiler=options.bound(training.backward_compiler),
            inference_compiler=inference,
            decompositions=decomposition_table(cuda=captured.cuda),
            keep_inference_input_mutations=True,
        )
    if inference.direct is not None:
        # AOTAutograd's wrapper would do nothing: the compiled graph's own call runs it.
        return inference.direct

    def run(*args: Any) -> Any:
        return rebuild(compiled(*args))

    return run


def _faster_of(
    compiled: Callable[..., Any],
    eager: Callable[..., Any],
    example_inputs: list[torch.Tensor],
    facts: dict[str, Any],
) -> Callable[..., Any]:
    """``compiled`` or ``eager``, whichever runs ``example_inputs`` faster on the GPU; only
    measured when running the graph twice more is unobservable (``facts["pure"]``: no input
    mutation, no random op in the ATen graph); otherwise ``compiled``, and always with
    ``config.always_run_compiled`` (``config.run_compiled_always``)."""
    if config.run_compiled_always():
        log.info("plugin: running the compiled graph (config.always_run_compiled)")
        return compiled
    why = facts.get("impure")
    # A graph with symbolic sizes has SymInt example inputs (the capture's symbols): time it
    # on their values at capture.
    example_inputs = [getattr(a.node, "hint", None) if isinstance(a, torch.SymInt) else a
                      for a in example_inputs]  # fmt: skip
    if why is None and None in example_inputs:
        why = "a symbolic example input has no value"
    if why is not None or "pure" not in facts:
        log.info("plugin: not timing the compiled graph against eager (%s)", why or "unknown")
        return compiled
    # Eager first: the compiled graph keeps what its later calls reuse (its arena of
    # activations, a CUDA graph's buffers) from its first call on; timed second, those are
    # not held while the eager graph's activations are (peak memory at most eager's).
    # Warm-up: 1 eager call, 3 compiled ones (they let the compiled graph capture its CUDA
    # graph); then 10 timed calls, or fewer (at least 5) once they have taken 25 ms together
    # (ViT-B/16 batch 32: 30 ms a call), so that timing does not dominate the compile time.
    try:
        with torch.no_grad():
            eager(*example_inputs)
            t_eager = median_cuda_ms(
                functools.partial(eager, *example_inputs), runs=10, min_runs=5, budget_ms=25.0
            )
            for _ in range(3):
                compiled(*example_inputs)
            t_compiled = median_cuda_ms(
                functools.partial(compiled, *example_inputs), runs=10, min_runs=5, budget_ms=25.0
            )
    except Exception as e:  # noqa: BLE001 - timing is advisory; the compiled graph stays
        log.info("plugin: timing against eager failed (%s); keeping the compiled graph", e)
        return compiled
    if t_compiled <= t_eager:
        log.info(
            "plugin: compiled graph %.3f ms, eager graph %.3f ms: running the compiled graph",
            t_compiled, t_eager,
        )  # fmt: skip
        return compiled
    log.info(
        "plugin: compiled graph %.3f ms is slower than the eager graph %.3f ms: running the "
        "eager graph",
        t_compiled, t_eager,
    )  # fmt: skip
    counters["eager_graphs"] += 1
    # The compiled graph's call and its Python object hold each other (GraphCall's callbacks):
    # collect it now, with its constants, arena and CUDA graph, rather than at some later
    # collection.
    del compiled
    gc.collect()
    return eager
