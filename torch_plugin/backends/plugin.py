"""The "plugin" backend: the project's own compiler (torch_plugin/compiler, csrc/compiler).

AOTAutograd (``aot_module_simplified``) traces the captured graph into ATen graphs with the
decomposition table of :mod:`torch_plugin.compiler.decompositions`; each graph is compiled by
:func:`torch_plugin.compiler.compile.compile_graph`. An inference graph (no input or
parameter needs a gradient, or grad mode is off) is frozen: the parameters and buffers that
AOTAutograd lifts into its first inputs become constants, guarded on identity and version.
Forward and backward graphs of training are compiled without freezing; the backward graph is
compiled lazily, with capture off (see ``aot_eager``).

Warm compiles: an inference graph whose AOTAutograd wrapper does nothing is stored as a
lowering recipe in the graph cache (:mod:`torch_plugin.compiler.graph_cache`, under
``TORCH_PLUGIN_CACHE_DIR``); compiling the same graph again (same code, parameter and
input metadata, options and versions) replays the recipe instead of tracing with
AOTAutograd. Weights are never cached: they come from the live module.

Key parts:
- :func:`plugin`: the backend, registered as ``"plugin"`` and exposed to ``torch.compile``
  through the ``torch_dynamo_backends`` entry-point group (pyproject.toml).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import Any

import torch

from torch_plugin.backends.aot_eager import flatten_graph_outputs, without_capture

log = logging.getLogger(__name__)


def plugin(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
    """Compile ``gm`` with the "plugin" compiler."""
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
    if opts.graph_cache and not (torch.is_grad_enabled() and inputs_need_grad):
        key = graph_cache.graph_key(gm, example_inputs, params, dataclasses.asdict(opts))
    if key is not None:
        recipe = graph_cache.load(opts.cache_dir, key)
        if recipe is not None:
            try:
                cached = compile_recipe(recipe, params_flat)
            except ValueError as e:
                log.warning("plugin: graph cache entry %s not used: %s", key, e)
            else:
                log.info("plugin: graph cache hit %s", key)
                cached_run = without_capture(_run_flat(cached, params_flat))
                return lambda *args: rebuild(cached_run(*args))

    num_args = len(params_flat) + len(example_inputs)
    num_outputs = len(next(n for n in reversed(gm.graph.nodes) if n.op == "output").args[0])

    def inference_compiler(fx_graph: torch.fx.GraphModule, inputs: list[Any]) -> Any:
        frozen = params_flat if _placeholders_match(fx_graph, params_flat) else []
        on_lowered = None
        if key is not None:
            why_not = graph_cache.trivially_wrapped(fx_graph, num_args, num_outputs)
            if why_not is None:
                on_lowered = functools.partial(graph_cache.store, opts.cache_dir, key)
            else:
                log.info("plugin: graph not cached: %s", why_not)
        return compile_graph(fx_graph, frozen, on_lowered)

    # Imported here, not above: a graph cache hit never needs AOTAutograd, whose first
    # import takes about 0.3 s.
    from torch._functorch.aot_autograd import aot_module_simplified

    from torch_plugin.compiler.decompositions import decomposition_table

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
    would call it for a trivially wrapped graph: ``run(*inputs) -> list of outputs``."""

    def run(*args: Any) -> Any:
        with torch.no_grad():
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
