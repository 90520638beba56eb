"""The "plugin" backend: the project's own compiler (torch_plugin/compiler, csrc/compiler).

AOTAutograd (``aot_module_simplified``) traces the captured graph into ATen graphs with the
decomposition table of :mod:`torch_plugin.compiler.decompositions`; each graph is compiled by
:func:`torch_plugin.compiler.compile.compile_graph`. An inference graph (no input or
parameter needs a gradient, or grad mode is off) is frozen: the parameters and buffers that
AOTAutograd lifts into its first inputs become constants, guarded on identity and version;
except when the capture layer marks the graph's parameters as changing without version bumps
(``gm.meta[UNVERSIONED_PARAMETERS]``: FSDP2), where they stay inputs read on every call.
Forward and backward graphs of training are compiled without freezing; the backward graph is
compiled lazily, with capture off (see ``aot_eager``).

Warm compiles: an inference graph whose AOTAutograd wrapper does nothing is stored as a
lowering recipe in the graph cache (:mod:`torch_plugin.compiler.graph_cache`, under
``TORCH_PLUGIN_CACHE_DIR``); compiling the same graph again (same code, parameter and
input metadata, options and versions) replays the recipe instead of tracing with
AOTAutograd. Weights are never cached: they come from the live module.

On CUDA (any example input on a CUDA device) three more rules apply (issue #11):

- *Never slower than eager.* A graph that needs gradients runs as the eager graph (the
  captured FX graph as it is; GPU training is compiled by a later part), and so does an
  inference graph the compiler cannot lower (as on the CPU). For an inference
  graph, the compiled graph and the eager graph are both timed at compile time on the example
  inputs when that is safe (the ATen graph mutates no input and draws no random numbers), and
  the faster one runs from then on; a log line on ``torch_plugin.backends.plugin`` says which
  and why.
- *CUDA graphs.* A compiled inference graph is captured into a CUDA graph on its second call
  and replayed after (:mod:`torch_plugin.compiler.cuda_graphs`) unless it cannot be (ops that
  synchronize, draw random numbers or write an input; the log says which);
  ``TORCH_PLUGIN_CUDA_GRAPHS=0`` turns that off.
- ``mode="reduce-overhead"`` (``optimize("plugin", mode="reduce-overhead")``) keeps the CUDA
  graph whenever it can be captured, without the timing.

Key parts:
- :func:`plugin`: the backend, registered as ``"plugin"`` and exposed to ``torch.compile``
  through the ``torch_dynamo_backends`` entry-point group (pyproject.toml).
- :func:`plugin_reduce_overhead`: the backend with ``mode="reduce-overhead"``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import Any

import torch

from torch_plugin.backends.aot_eager import flatten_graph_outputs, without_capture
from torch_plugin.backends.registry import register_backend
from torch_plugin.contract import UNVERSIONED_PARAMETERS

log = logging.getLogger(__name__)


MODES = ("default", "reduce-overhead")


def plugin(
    gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor], *, mode: str = "default"
) -> Callable[..., Any]:
    """Compile ``gm`` with the "plugin" compiler.

    ``mode``: "default", or "reduce-overhead" (CUDA graphs wherever they can be captured; see
    the module docstring). Raises ValueError for another mode.
    """
    if mode not in MODES:
        raise ValueError(f"plugin: unknown mode {mode!r}; modes: {', '.join(MODES)}")
    cuda = any(isinstance(t, torch.Tensor) and t.is_cuda for t in example_inputs) or any(
        t.is_cuda for t in [*gm.parameters(), *gm.buffers()]
    )
    # Bound now: the compiler below rewrites gm's outputs (flatten_graph_outputs).
    eager = without_capture(gm.forward)
    needs_grad = torch.is_grad_enabled() and any(
        isinstance(t, torch.Tensor) and t.requires_grad
        for t in [*gm.parameters(), *gm.buffers(), *example_inputs]
    )
    if cuda and needs_grad:
        log.info("plugin: a CUDA graph that needs gradients runs as the eager graph")
        return eager
    facts: dict[str, Any] = {}
    compiled = _plugin(gm, example_inputs, mode, facts)
    if "unlowered" in facts:
        # The ATen graph would run op by op from Python: the captured graph is never slower.
        log.info("plugin: the inference graph runs as the eager graph: %s", facts["unlowered"])
        return eager
    if not cuda:
        return compiled
    if mode == "reduce-overhead":
        return compiled
    return _faster_of(compiled, eager, example_inputs, facts)


def plugin_reduce_overhead(
    gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]
) -> Callable[..., Any]:
    """:func:`plugin` with ``mode="reduce-overhead"``."""
    return plugin(gm, example_inputs, mode="reduce-overhead")


def register() -> None:
    """Register :func:`plugin` as the backend ``"plugin"``, with the mode "reduce-overhead"
    (:func:`plugin_reduce_overhead`)."""
    register_backend(plugin, "plugin", modes={"reduce-overhead": plugin_reduce_overhead})


def _faster_of(
    compiled: Callable[..., Any],
    eager: Callable[..., Any],
    example_inputs: list[torch.Tensor],
    facts: dict[str, Any],
) -> Callable[..., Any]:
    """``compiled`` or ``eager``, whichever runs ``example_inputs`` faster on the GPU; only
    measured when running the graph twice more is unobservable (``facts["pure"]``: no input
    mutation, no random op in the ATen graph); otherwise ``compiled``."""
    why = facts.get("impure")
    if why is not None or "pure" not in facts:
        log.info("plugin: not timing the compiled graph against eager (%s)", why or "unknown")
        return compiled
    try:
        with torch.no_grad():
            t_compiled = _median_ms(compiled, example_inputs, warmup=3)
            t_eager = _median_ms(eager, example_inputs, warmup=1)
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
    return eager


def _median_ms(
    fn: Callable[..., Any], args: list[Any], warmup: int, runs: int = 10, budget_ms: float = 25.0
) -> float:
    """Median CUDA-event milliseconds of ``fn(*args)`` after ``warmup`` calls (3 let the
    compiled graph capture its CUDA graph): ``runs`` calls, or fewer (at least 5) once they
    have taken ``budget_ms`` together, so that timing a slow graph does not dominate its
    compile time (ViT-B/16 batch 32: 30 ms a call)."""
    import statistics

    for _ in range(warmup):
        fn(*args)
    times: list[float] = []
    while len(times) < runs and (len(times) < 5 or sum(times) < budget_ms):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def aten_graph_impurity(fx_graph: torch.fx.GraphModule) -> str | None:
    """Why running ``fx_graph`` (an ATen graph from AOTAutograd) an extra time would be
    observable: the first op that mutates an argument or draws random numbers; None if none."""
    from torch_plugin.compiler.cuda_graphs import op_impurity

    for node in fx_graph.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            why = op_impurity(node.target.name())
            if why:
                return why
    return None


def _recipe_impurity(recipe: Any) -> str | None:
    """:func:`aten_graph_impurity` for a cached lowering recipe (its ``add_node`` calls)."""
    from torch_plugin.compiler.cuda_graphs import op_impurity

    for method, args, _ in recipe.calls:
        if method == "add_node":
            why = op_impurity(f"{args[0]}.{args[1]}" if args[1] else args[0])
            if why:
                return why
    return None


def _plugin(
    gm: torch.fx.GraphModule,
    example_inputs: list[torch.Tensor],
    mode: str,
    facts: dict[str, Any] | None,
) -> Callable[..., Any]:
    """The compiler proper (CPU and CUDA). ``facts``, when given, receives ``"pure"`` or
    ``"impure"`` (why) about the inference graph."""
    from torch_plugin.compiler import graph_cache, options
    from torch_plugin.compiler.compile import compile_graph, compile_recipe

    # AOTAutograd's graphs take the module's parameters, then its buffers, then the inputs.
    params = {
        **dict(gm.named_parameters(remove_duplicate=False)),
        **dict(gm.named_buffers(remove_duplicate=False)),
    }
    params_flat = list(params.values())

    def training_compiler(fx_graph: torch.fx.GraphModule, inputs: list[Any]) -> Any:
        return compile_graph(fx_graph)

    rebuild = flatten_graph_outputs(gm)
    opts = options.current()
    key = None
    inputs_need_grad = any(
        isinstance(t, torch.Tensor) and t.requires_grad for t in [*params_flat, *example_inputs]
    )
    # Parameters that change without a version bump (FSDP2) are read on every call: no
    # freezing, and no graph cache (whose recipes are frozen graphs).
    unversioned = bool(gm.meta.get(UNVERSIONED_PARAMETERS, False))
    if unversioned:
        log.info("plugin: parameters change without version bumps (FSDP2): not frozen")
    if opts.graph_cache and not unversioned and not (torch.is_grad_enabled() and inputs_need_grad):
        key = graph_cache.graph_key(gm, example_inputs, params, dataclasses.asdict(opts))
    if key is not None:
        recipe = graph_cache.load(opts.cache_dir, key)
        if recipe is not None:
            try:
                cached = compile_recipe(recipe, params_flat, mode=mode)
            except ValueError as e:
                log.warning("plugin: graph cache entry %s not used: %s", key, e)
            else:
                log.info("plugin: graph cache hit %s", key)
                if facts is not None:
                    impure = _recipe_impurity(recipe)
                    facts["impure" if impure else "pure"] = impure or True
                cached_run = without_capture(_run_flat(cached, params_flat))
                return lambda *args: rebuild(cached_run(*args))

    from torch_plugin.compiler.attention import LeafAttention, fused_attention_to_leaf

    # On CUDA, attention is traced as a leaf op (torch_plugin.compiler.attention says why).
    cuda = any(isinstance(t, torch.Tensor) and t.is_cuda for t in [*params_flat, *example_inputs])
    num_args = len(params_flat) + len(example_inputs)
    num_outputs = len(next(n for n in reversed(gm.graph.nodes) if n.op == "output").args[0])

    def inference_compiler(fx_graph: torch.fx.GraphModule, inputs: list[Any]) -> Any:
        freeze = not unversioned and _placeholders_match(fx_graph, params_flat)
        frozen = params_flat if freeze else []
        if cuda:
            rewritten = fused_attention_to_leaf(fx_graph)
            if rewritten:
                log.info("plugin: %d fused attention call(s) became the leaf op", rewritten)
        if facts is not None:
            impure = aten_graph_impurity(fx_graph)
            facts["impure" if impure else "pure"] = impure or True
        on_lowered = None
        if key is not None:
            why_not = graph_cache.trivially_wrapped(fx_graph, num_args, num_outputs)
            if why_not is None:
                on_lowered = functools.partial(graph_cache.store, opts.cache_dir, key)
            else:
                log.info("plugin: graph not cached: %s", why_not)
        result = compile_graph(fx_graph, frozen, on_lowered, mode=mode)
        unlowered = getattr(result, "unlowered", None)
        if unlowered is not None and facts is not None:
            facts["unlowered"] = unlowered
        return result

    # Imported here, not above: a graph cache hit never needs AOTAutograd, whose first
    # import takes about 0.3 s.
    from torch._functorch.aot_autograd import aot_module_simplified

    from torch_plugin.compiler.decompositions import decomposition_table

    tracing = LeafAttention("cuda") if cuda else contextlib.nullcontext()
    with tracing:
        compiled = aot_module_simplified(
            gm,
            example_inputs,
            fw_compiler=training_compiler,
            bw_compiler=without_capture(training_compiler),
            inference_compiler=inference_compiler,
            decompositions=decomposition_table(),
            keep_inference_input_mutations=True,
        )

    def run(*args: Any) -> Any:
        return rebuild(compiled(*args))

    return run


def _run_flat(compiled: Callable[[list[Any]], Any], params: list[torch.Tensor]) -> Any:
    """``compiled`` (boxed, parameters first) called as AOTAutograd's inference wrapper
    would call it for a trivially wrapped graph: ``run(*inputs) -> list of outputs``.

    Like that wrapper (``disable_amp`` in torch/_functorch/_aot_autograd/runtime_wrappers.py),
    it runs the graph with autocast off when autocast was on at compile time: the traced
    graph has autocast's casts written out, and its ATen calls must not be cast again (an
    fp32 product inside ``autocast(enabled=False)``, HF Llama's rotary angles, would run in
    bf16 under the caller's autocast). Dynamo's guards and the graph key include the
    autocast state, so the state at run time is the state at compile time."""
    disable_amp = torch._C._is_any_autocast_enabled()

    def run(*args: Any) -> Any:
        with torch.no_grad():
            if disable_amp:
                with torch._C._DisableAutocast():
                    return compiled([*params, *args])
            return compiled([*params, *args])

    return run


def _placeholders_match(fx_graph: torch.fx.GraphModule, params: list[torch.Tensor]) -> bool:
    """Whether the graph's first placeholders have the parameters' shapes and dtypes (and so
    are the parameters, lifted by AOTAutograd in this order)."""
    placeholders = [n for n in fx_graph.graph.nodes if n.op == "placeholder"]
    if len(placeholders) < len(params):
        return False
    for node, p in zip(placeholders, params):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.shape != p.shape or val.dtype != p.dtype:
            return False
    return True
