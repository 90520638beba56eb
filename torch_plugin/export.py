"""Whole-graph capture: ``torch_plugin.export(fn_or_module, *args, **kwargs)``.

:func:`export` runs the call once under capture with ``nopython=True`` (a graph break
raises :class:`torch_plugin.CaptureError` with the reason and the user's file and line),
then turns the one captured graph into a standalone ``torch.fx.GraphModule``:

- it takes the call's arguments in the user's structure (``exported(*args, **kwargs)``);
  tensors are matched to graph inputs by where they are in it, other arguments were specialized
  (``guards`` says to which values);
- it returns the user's structure (nested tuples, lists, dicts, named tuples, constants);
  objects the code builds (an HF ``DynamicCache`` with ``use_cache=True``) and ModelOutputs
  are built anew by each call from the graph's tensors (:class:`ExportedOutput`, the
  submodule ``_export_output`` that the graph calls last);
- parameters and buffers are attributes of the module (the originals, not copies);
- it checks its guards on every call before computing (:mod:`torch_plugin.exported.guards`);
- it runs with no hook, and survives ``torch.save`` / ``torch.load`` with torch.load's
  defaults (``weights_only=True``; import torch_plugin first, see
  :mod:`torch_plugin.exported.serialization`).

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

from .api import optimize
from .capture import convert_frame
from .capture.output_structure import rebuild, spec_has
from .capture.sources import AttrSource, ItemSource, LocalSource

# ExportedOutput and tensor_setitem: also the names files saved before they moved use.
from .exported.graph_module import ExportCodeGen, ExportedGraph, ExportedOutput, tensor_setitem
from .exported.guards import export_guards, source_path


class ExportError(RuntimeError):
    """The call cannot be exported as one graph (reason in the message)."""


def export(
    fn: Callable | torch.nn.Module, *args: Any, dynamic: bool | None = None, **kwargs: Any
) -> tuple[torch.fx.GraphModule, list[str]]:
    """Capture ``fn(*args, **kwargs)`` as one FX graph that checks its guards on every call.

    Args:
        fn: a function or an nn.Module (its forward is captured, hooks are not).
        args, kwargs: example inputs; tensors among them (at any depth of tuples, lists and
            dicts) become the graph's inputs, other values are specialized.
        dynamic: ``None`` or ``False`` (the default): static sizes, except the dims marked
            with :func:`torch_plugin.mark_dynamic` on the example inputs; ``True``: every
            dim of every input tensor symbolic. What earlier ``optimize()`` calls learned
            (automatic dynamic) never leaks into an export: the result depends only on the
            arguments and these options. (A keyword argument of ``fn`` named ``dynamic``
            cannot be passed through export.)

    Returns:
        ``(graph_module, guards)``. ``graph_module(*args, **kwargs)`` recomputes the call for
        new inputs. Before computing, it checks what the capture assumed about them (the
        submodule ``graph_module._export_guards``): the structure of nested inputs (types,
        lengths, dict keys), each tensor's dtype, device, layout, requires_grad, sizes and
        strides (symbolic ones: the relations the capture recorded, e.g. ``s0 >= 2``),
        and the values of non-tensor inputs the code read (ints, strings, None ...). A call
        that violates one raises :class:`~torch_plugin.exported.guards.ExportGuardError`,
        naming the input (``L['x'].size()[0]``), the value seen and the value assumed.
        Guards a bare call cannot check (on ``self`` of a module, globals, closure
        variables, the global torch state) are listed in
        ``graph_module._export_guards.unchecked``: the graph keeps their values from
        export. ``guards`` lists every guard of the capture in source terms
        (``L['x']: tensor dtype=torch.float32, ...``). The graph module survives
        ``torch.save`` / ``torch.load`` with torch.load's defaults (``weights_only=True``;
        import torch_plugin before loading) and still checks its guards after loading.

    Raises:
        torch_plugin.CaptureError: a graph break (the message names the reason and the
            user's file and line).
        ExportError: nothing was captured (e.g. the code is skipped), more than one graph was
            captured, the call has side effects a standalone graph cannot hold, or its guards
            cannot be checked on a call of the graph (a wrapper of ``fn`` was captured).
    """
    graphs: list[tuple[torch.fx.GraphModule, list]] = []
    records: list = []

    def export_backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        graphs.append((gm, list(example_inputs)))
        return gm.forward

    convert_frame.listeners.append(records.append)
    try:
        # dynamic=False: only marked dims are symbolic, and automatic dynamic's sizes from
        # earlier optimize() calls are neither read nor updated.
        with convert_frame.keep_guard_sets():
            optimize(export_backend, nopython=True, dynamic=bool(dynamic))(fn)(*args, **kwargs)
    finally:
        convert_frame.listeners.remove(records.append)
    captured = [r for r in records if r.graph is not None]
    name = getattr(fn, "__qualname__", type(fn).__name__)
    if not captured and any(
        f[1] == "no tensor operations to capture" for f in convert_frame.stats.failures[-1:]
    ):
        # Chosen for issue #31: the call ran (as plain Python, as torch.compile with
        # fullgraph=True runs it) but there is no graph to return; torch.export would
        # return a graph of placeholders and constants, which here is the function itself.
        raise ExportError(
            f"export of {name}: the call has no tensor operation, so there is no graph to "
            "export (it ran as plain Python; call the function itself)"
        )
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
    in_spec = pytree.tree_structure((args, kwargs))
    try:
        guards = export_guards(
            record.guard_set,
            record.shape_env,
            record.shape_bindings,
            fn,
            record.code,
            args,
            kwargs,
            in_spec,
        )
    except ValueError as e:
        raise ExportError(f"export of {name}: its guards cannot be checked on a call: {e}") from e
    positions = _input_positions(record.input_sources, guards.recipe, args, kwargs)
    checked = {path for kind, path, _, _ in guards.checks if kind in ("tensor", "equals", "symbol")}
    for source, position in zip(record.input_sources, positions):
        if position is not None and source_path(source) not in checked:
            raise ExportError(
                f"export of {name}: the graph input {source.name()} would not be checked on a"
                " call of the exported graph (internal error: please report it)"
            )
    exported = _standalone(gm, example_inputs, positions, record.output_spec, args, kwargs, guards)
    return exported, list(record.guards)


def _input_positions(sources, recipe, args, kwargs) -> list[int | None]:
    """For each graph input (read by the capture from ``sources``, see capture/sources.py),
    its index among the pytree leaves of the call's ``(args, kwargs)``, or None when it is not
    one of them (a global, say). Matched by path, not identity: one tensor passed twice, or
    an int equal to another, still maps to its own position."""
    flat = pytree.tree_flatten_with_path((args, kwargs))[0]
    index = {tuple(path): i for i, (path, _) in enumerate(flat)}

    def key_path(source) -> tuple | None:
        if isinstance(source, LocalSource):
            if source.slot >= len(recipe):
                return None
            how, *arg = recipe[source.slot]
            if how == "arg":
                return (pytree.SequenceKey(0), pytree.SequenceKey(arg[0]))
            if how == "kw":
                return (pytree.SequenceKey(1), pytree.MappingKey(arg[0]))
            if how == "varargs":
                return ("varargs", (arg[0], arg[1]))
            return ("varkw", arg[0]) if how == "varkw" else None
        if isinstance(source, (ItemSource, AttrSource)):
            base = key_path(source.base)
            if base is None:
                return None
            if base[0] == "varargs" and isinstance(source, ItemSource):
                start, with_self = base[1]
                index = start + source.key - with_self
                if index < start:  # the bound self
                    return None
                return (pytree.SequenceKey(0), pytree.SequenceKey(index))
            if base[0] == "varkw" and isinstance(source, ItemSource):
                return (pytree.SequenceKey(1), pytree.MappingKey(source.key))
            if isinstance(source, AttrSource):
                return (*base, pytree.GetAttrKey(source.attr))
            key = source.key
            step = pytree.SequenceKey(key) if isinstance(key, int) else pytree.MappingKey(key)
            return (*base, step)
        return None

    out = []
    for source in sources:
        path = key_path(source)
        out.append(
            index.get(path) if path is not None and path[0] not in ("varargs", "varkw") else None
        )
    return out


def _standalone(gm, example_inputs, positions, spec, args, kwargs, guards) -> torch.fx.GraphModule:
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
        position = positions[i] if i < len(positions) else None
        if position is None and isinstance(example, torch.Tensor):
            position = next((j for j, a in enumerate(flat_args) if a is example), None)
        if position is not None:
            env[node] = arg_nodes[position]
        elif not isinstance(example, torch.Tensor):
            raise ExportError(
                f"export: graph input {node.name} (a symbolic {type(example).__name__}) is not"
                " one of the call's arguments"
            )
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
    graph._codegen = ExportCodeGen(
        torch.fx.graph._PyTreeInfo(
            [f"arg{i}" for i in range(len(args))] + list(kwargs), in_spec, out_spec
        )
    )
    exported = ExportedGraph(root, graph, class_name="ExportedGraph")
    # Called by the generated forward (ExportCodeGen), not by a graph node.
    exported.add_module("_export_guards", guards)
    exported.recompile()
    return exported
