"""The inference stages of the "plugin" compiler: freezing, the graph cache and one call.

An inference graph (no input or parameter needs a gradient, or grad mode is off) is frozen:
the parameters and buffers that AOTAutograd lifts into its first inputs become constants,
guarded on identity and version by the compiled graph's call (in C++); except when the
capture layer marks the graph's parameters as changing without version bumps
(``gm.meta[UNVERSIONED_PARAMETERS]``: FSDP2), where they stay inputs read on every call.

*One runtime wrapper.* When AOTAutograd's runtime wrapper of the traced graph does nothing
(:func:`~torch_plugin.compiler.graph_cache.trivially_wrapped`: the placeholders are exactly
the parameters, buffers and inputs, no mutation, every output fresh or a view of a fresh
intermediate of its own), the graph is
called without it: the compiled graph's C++ call (``GraphCall.flat``) takes the inputs,
holds the parameters itself, checks the frozen ones, and runs the executor under
AOTAutograd's inference modes (grad off; autocast off when it was on at compile time, as
AOTAutograd's ``disable_amp``), returning the outputs as the tuple the captured graph
returns. Otherwise AOTAutograd's wrapper calls the compiled graph.

*Graph cache.* Such a graph is also stored in the graph cache
(:mod:`torch_plugin.compiler.graph_cache`, under ``TORCH_PLUGIN_CACHE_DIR``) as its lowered
IR; compiling the same graph again (same code, parameter and input metadata, options and
versions) builds it from the cache instead of tracing with AOTAutograd. Weights are never
cached: they come from the live module.

Key parts: :class:`InferenceStages` (AOTAutograd's ``inference_compiler`` for one captured
graph, the cache lookup, the one call), :func:`aten_graph_impurity`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import Any

import torch

from torch_plugin.compiler import graph_cache, options, stages
from torch_plugin.compiler.size_variants import SizeVariants

log = logging.getLogger("torch_plugin.backends.plugin")


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


def _entry_impurity(entry: dict[str, Any]) -> str | None:
    """:func:`aten_graph_impurity` for a graph-cache entry (its nodes)."""
    from torch_plugin.compiler.cuda_graphs import op_impurity

    for op, overload, _, _ in entry["nodes"]:
        why = op_impurity(f"{op}.{overload}" if overload else op)
        if why:
            return why
    return None


class InferenceStages:
    """The inference path of one captured graph (see the module docstring).

    ``rebuild``: maps the flat outputs back to what the captured graph returns (``tuple``
    when it returns a flat tuple). ``facts`` receives ``"pure"`` or ``"impure"`` (why) about
    the inference graph, and ``"unlowered"`` (why) when it runs unmodified.
    """

    def __init__(
        self, captured: stages.Captured, rebuild: Callable[..., Any], facts: dict[str, Any]
    ) -> None:
        # Not the Captured itself: AOTAutograd keeps its inference compiler for as long as the
        # compiled graph lives, and the captured graph's example inputs are the caller's
        # tensors (an FSDP2 layer's input reaches the model through its autograd hooks).
        self.mode = captured.mode
        self.cuda = captured.cuda
        self.rebuild = rebuild
        self.facts = facts
        self.options = options.current()
        # AOTAutograd's disable_amp, read before tracing (its compilers run with autocast off).
        self.disable_autocast = torch._C._is_any_autocast_enabled()
        self.params_flat = captured.params_flat
        self.unversioned = captured.unversioned
        if self.unversioned:
            log.info("plugin: parameters change without version bumps (FSDP2): not frozen")
        self.key = None
        # Parameters that change without a version bump are read on every call: no
        # freezing, and no graph cache (whose entries are frozen graphs).
        if self.options.graph_cache and not self.unversioned and not captured.needs_grad:
            self.key = graph_cache.graph_key(
                captured.gm,
                captured.example_inputs,
                captured.params,
                dataclasses.asdict(self.options),
            )
        gm = captured.gm
        self.num_args = len(self.params_flat) + len(captured.example_inputs)
        self.num_outputs = len(
            next(n for n in reversed(gm.graph.nodes) if n.op == "output").args[0]
        )
        # The one call of the compiled graph, when AOTAutograd's wrapper is not needed; only
        # for plain dense tensors, each passed once (subclasses and duplicates are
        # AOTAutograd's wrapper's work).
        self.direct: Callable[..., Any] | None = None
        # A parameter tied to another (GPT-2's LM head) is passed twice as AOTAutograd is:
        # not mutated, AOTAutograd traces it as two arguments and passes both through.
        tensors = [*self.params_flat, *captured.example_inputs]
        self.plain = graph_cache.tied_parameters(
            self.params_flat, captured.example_inputs
        ) is not None and all(
            type(t) in (torch.Tensor, torch.nn.Parameter) and not t.is_sparse for t in tensors
        )

    def _one_call(self, compiled: stages.CompiledGraph | SizeVariants) -> Callable[..., Any]:
        flat = compiled.flat if isinstance(compiled, SizeVariants) else compiled.call.flat
        if self.rebuild is tuple:
            return flat
        rebuild = self.rebuild
        return lambda *args: rebuild(flat(*args))

    def from_cache(self) -> Callable[..., Any] | None:
        """The compiled graph built from the graph cache, or None (no entry, or not cached)."""
        if self.key is None:
            logging.getLogger("torch_plugin.cache").info(
                "graph cache: not looked up (off, or a graph it cannot hold)"
            )
            return None
        entry = graph_cache.load(self.options.cache_dir, self.key)
        if entry is None:
            return None
        try:
            compiled = stages.compile_cached(
                entry,
                self.params_flat,
                mode=self.mode,
                inference=True,
                disable_autocast=self.disable_autocast,
                leading=self.params_flat,
                as_tuple=self.rebuild is tuple,
            )
        except ValueError as e:
            log.warning("plugin: graph cache entry %s not used: %s", self.key, e)
            return None
        log.info("plugin: graph cache hit %s", self.key)
        impure = _entry_impurity(entry)
        self.facts["impure" if impure else "pure"] = impure or True
        return self._one_call(compiled)

    def __call__(self, fx_graph: torch.fx.GraphModule, inputs: list[Any]) -> Any:
        """AOTAutograd's ``inference_compiler``."""
        from torch_plugin.compiler.attention import fused_attention_to_leaf

        freeze = not self.unversioned and _placeholders_match(fx_graph, self.params_flat)
        frozen = self.params_flat if freeze else []
        if self.cuda:
            rewritten = fused_attention_to_leaf(fx_graph)
            if rewritten:
                log.info("plugin: %d fused attention call(s) became the leaf op", rewritten)
        impure = aten_graph_impurity(fx_graph)
        self.facts["impure" if impure else "pure"] = impure or True
        why_not = graph_cache.trivially_wrapped(fx_graph, self.num_args, self.num_outputs)
        on_exported = None
        if self.key is not None:
            if why_not is None:
                on_exported = functools.partial(graph_cache.store, self.options.cache_dir, self.key)
            else:
                log.info("plugin: graph not cached: %s", why_not)
        # Not for parameters that change without a version bump (FSDP2): the one call would
        # hold them as its leading arguments; they stay with AOTAutograd's wrapper, which gets
        # them from capture on every call, as before.
        direct = why_not is None and self.plain and not self.unversioned
        result = stages.compile_graph(
            fx_graph,
            frozen,
            on_exported,
            mode=self.mode,
            inference=True,
            disable_autocast=self.disable_autocast,
            leading=self.params_flat if direct else (),
            as_tuple=direct and self.rebuild is tuple,
        )
        unlowered = getattr(result, "unlowered", None)
        if unlowered is not None:
            self.facts["unlowered"] = unlowered
        elif direct and isinstance(result, (stages.CompiledGraph, SizeVariants)):
            self.direct = self._one_call(result)
        return result


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
