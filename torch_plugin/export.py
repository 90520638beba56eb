"""Whole-graph capture: ``torch_plugin.export(fn_or_module, *args, **kwargs)``.

:func:`export` runs the call once under capture with ``nopython=True`` (a graph break
raises :class:`torch_plugin.CaptureError` with the reason and the user's file and line),
then turns the one captured graph into a standalone ``torch.fx.GraphModule``:

- it takes the call's arguments in the user's structure (``exported(*args, **kwargs)``);
  tensors are matched to graph inputs by identity, other arguments were specialized
  (``guards`` says to which values);
- it returns the user's structure (nested tuples, lists, dicts, named tuples, constants);
  objects the code builds (an HF ``DynamicCache`` with ``use_cache=True``) and ModelOutputs
  are built anew by each call from the graph's tensors (:class:`ExportedOutput`, the
  submodule ``_export_output`` that the graph calls last);
- parameters and buffers are attributes of the module (the originals, not copies);
- it runs with no hook, and survives ``torch.save`` / ``torch.load(weights_only=False)``.

The pytree handling of inputs and outputs is FX's own (``torch.fx.graph._PyTreeCodeGen``),
the mechanism ``torch._dynamo.export`` uses.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from .capture import convert_frame
from .capture.output_structure import rebuild, spec_has
# ExportedOutput and tensor_setitem: also the names files saved before they moved use.
from .exported.graph_module import ExportedGraph, ExportedOutput, tensor_setitem


class ExportError(RuntimeError):
    """The call cannot be exported as one graph (reason in the message)."""


def export(
    fn: Callable | torch.nn.Module, *args: Any, **kwargs: Any
) -> tuple[torch.fx.GraphModule, list[str]]:
    """Capture ``fn(*args, **kwargs)`` as one FX graph.

    Args:
        fn: a function or an nn.Module (its forward is captured, hooks are not).
        args, kwargs: example inputs; tensors among them (at any depth of tuples, lists and
            dicts) become the graph's inputs, other values are specialized.

    Returns:
        ``(graph_module, guards)``: ``graph_module(*args, **kwargs)`` recomputes the call for
        new tensors of the same shapes/dtypes; ``guards`` lists, in source terms, the
        conditions the capture assumed (``L['x']: tensor dtype=torch.float32, ...``).

    Raises:
        torch_plugin.CaptureError: a graph break (the message names the reason and the
            user's file and line).
        ExportError: nothing was captured (e.g. the code is skipped), more than one graph was
            captured, or the call has side effects a standalone graph cannot hold.
    """
    from . import optimize

    graphs: list[tuple[torch.fx.GraphModule, list]] = []
    records: list = []

    def export_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    convert_frame.listeners.append(records.append)
    try:
        optimize(export_backend, nopython=True)(fn)(*args, **kwargs)
    finally:
        convert_frame.listeners.remove(records.append)
    captured = [r for r in records if r.graph is not None]
    name = getattr(fn, "__qualname__", type(fn).__name__)
    if not captured:
        raise ExportError(
            f"export of {name}: nothing was captured (the code may be skipped, e.g. standard "
            f"library or PyTorch internals, or have no tensor operation); failures: "
            f"{convert_frame.stats.failures[-3:]}"
        )
    if len(captured) != 1 or len(graphs) != 1:
        raise ExportError(
            f"export of {name}: captured {len(captured)} graphs "
            f"({', '.join(r.code.co_qualname for r in captured)}); export needs exactly one"
        )
    record = captured[0]
    if record.visible_side_effects or record.returns_runtime_args:
        what = ", ".join(record.visible_side_effects) or "returns objects from its inputs"
        raise ExportError(
            f"export of {name}: the code mutates state the caller can see ({what}), which an "
            "exported graph cannot replay"
        )
    gm, example_inputs = graphs[0]
    return _standalone(gm, example_inputs, record.output_spec, args, kwargs), list(record.guards)


def _standalone(gm, example_inputs, spec, args, kwargs) -> torch.fx.GraphModule:
    flat_args, in_spec = pytree.tree_flatten((args, kwargs))
    graph = torch.fx.Graph()
    arg_nodes = [graph.placeholder(f"leaf{i}") for i in range(len(flat_args))]
    root = torch.nn.Module()
    for name, module in gm.named_children():
        root.add_module(name, module)
    for name, param in gm.named_parameters(recurse=False):
        root.register_parameter(name, param)
    for name, buf in gm.named_buffers(recurse=False):
        root.register_buffer(name, buf)
    env: dict = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, (node, example) in enumerate(zip(placeholders, example_inputs)):
        position = next((j for j, a in enumerate(flat_args) if a is example), None)
        if position is not None:
            env[node] = arg_nodes[position]
        else:  # a tensor not among the arguments (a global, say): a constant of the export
            const_name = f"_export_constant_{i}"
            root.register_buffer(const_name, example)
            env[node] = graph.get_attr(const_name)
    out = graph.graph_copy(gm.graph, env)
    for node in graph.nodes:
        if node.op == "call_function" and node.target is operator.setitem:
            node.target = tensor_setitem
    out_nodes = list(out) if isinstance(out, (tuple, list)) else [out]
    if spec_has(spec, "object") or spec_has(spec, "model_output"):
        # Rebuilt by a submodule: FX's pytree output handles only registered types, and loses
        # the ModelOutput subclass in torch.save/torch.load.
        root.add_module("_export_output", ExportedOutput(spec))
        built = graph.call_module("_export_output", tuple(out_nodes))
        out_leaves, out_spec = [built], pytree.tree_flatten(0)[1]  # one leaf
    else:
        structured = rebuild(spec, out_nodes)
        out_leaves, out_spec = pytree.tree_flatten(structured)
    graph.output(out_leaves)
    graph._codegen = torch.fx.graph._PyTreeCodeGen(
        torch.fx.graph._PyTreeInfo(
            [f"arg{i}" for i in range(len(args))] + list(kwargs), in_spec, out_spec
        )
    )
    exported = ExportedGraph(root, graph, class_name="ExportedGraph")
    exported.recompile()
    return exported
