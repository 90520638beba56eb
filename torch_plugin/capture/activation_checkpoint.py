"""``torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False)`` captured as one node.

Before, the call was a graph break running ``checkpoint`` with capture off. Now, as
torch.compile does, the checkpointed function is traced into the frame's graph, its new
nodes are cut out into a subgraph (``conditional_outputs._subgraph``) and one
``torch.ops.higher_order.tag_activation_checkpoint(body, *operands, use_reentrant=False)``
node takes their place, with one ``getitem`` per output. The higher-order op runs the body
when the graph runs in eager (the "eager" backend), and under AOTAutograd its nodes are
tagged for recomputation by the partitioner. Either way the forward values and gradients
are those of eager's checkpoint: the body is deterministic and checkpoint's recomputation
gives the same values (only the memory kept for backward differs).

Captured only where that holds; otherwise (:class:`~.exc.Unsupported`, the frame is traced
again and the call is the graph break it was): ``use_reentrant`` given as the constant False
(``True`` runs a different autograd path; omitted, checkpoint warns or raises), no other
checkpoint option but defaults (``preserve_rng_state=True``, ``determinism_check="default"``,
``debug=False``, no ``context_fn``: selective checkpointing), and a body that has no effect
outside the graph (side effects, changed Python values, in-place writes to tensors from
before the call: checkpoint would write them again in the recomputation), draws no random
numbers, switches no grad mode or autocast, calls no module as a graph node, and returns a
tensor or a tuple / list of tensors that are new (not its inputs, not sharing memory with
them or each other).

Key function: :func:`capture_checkpoint`, called by :class:`CheckpointVariable`.
"""

from __future__ import annotations

import operator

import torch
import torch.fx

from . import graph_break_types as gbt
from .conditional_outputs import _aliasing_outputs, _erase, _subgraph
from .conditionals import _GLOBAL_STATE_TARGETS, _RandomOps, _Snapshot
from .exc import Unsupported, unimplemented
from .variables import builder as _builder
from .variables.base import VariableTracker
from .variables.functions import DisabledFunctionVariable
from .variables.lists import ListVariable, TupleVariable
from .variables.tensor import TensorVariable

# checkpoint's own keyword arguments and the values captured (its defaults)
_DEFAULTS = {
    "preserve_rng_state": True,
    "determinism_check": "default",
    "debug": False,
    "context_fn": None,
}


def _refuse(detail: str) -> None:
    unimplemented(gbt.RUNS_OUTSIDE_CAPTURE, f"torch.utils.checkpoint not captured: {detail}")


def _checkpoint_kwargs(kwargs: dict) -> dict:
    """The body's keyword arguments, after checking checkpoint's own (module docstring)."""
    from torch.utils.checkpoint import noop_context_fn

    body = dict(kwargs)
    reentrant = body.pop("use_reentrant", None)
    if (
        reentrant is None
        or not reentrant.is_python_constant()
        or reentrant.as_python_constant() is not False
    ):
        _refuse("use_reentrant is not given as False")
    for name, default in _DEFAULTS.items():
        if name not in body:
            continue
        var = body.pop(name)
        value = var.as_python_constant() if var.is_python_constant() else var
        if name == "context_fn" and value is noop_context_fn:
            continue
        if value is not default and not (
            isinstance(default, (bool, str)) and type(value) is type(default) and value == default
        ):
            _refuse(f"{name}={value!r} (only the default is captured)")
    return body


def _results(result: VariableTracker) -> list[TensorVariable]:
    if isinstance(result, TensorVariable):
        return [result]
    if (
        type(result) in (TupleVariable, ListVariable)
        and result.items
        and all(isinstance(v, TensorVariable) for v in result.items)
    ):
        return list(result.items)
    _refuse(f"the checkpointed function returns {result} (only tensors are captured)")


def capture_checkpoint(tx, fn: VariableTracker, args, kwargs) -> VariableTracker:
    """``checkpoint(fn, *args, use_reentrant=False, **body_kwargs)`` as one
    ``tag_activation_checkpoint`` node (module docstring); raises Unsupported otherwise."""
    body_kwargs = _checkpoint_kwargs(kwargs)
    output = tx.output
    graph = output.graph
    known = set(graph.nodes)
    anchor = graph._root.prev
    versions = {
        n: n.meta["example_value"]._version
        for n in known
        if isinstance(n.meta.get("example_value"), torch.Tensor)
        and not n.meta["example_value"].is_inference()
    }
    snapshot = _Snapshot(tx)
    random_ops = _RandomOps()
    saved_mode = output.branch_dispatch_mode
    output.branch_dispatch_mode = random_ops
    try:
        result = fn.call_function(tx, list(args), body_kwargs)
    finally:
        output.branch_dispatch_mode = saved_mode
    if random_ops.seen:
        _refuse(f"the checkpointed function draws random numbers ({random_ops.seen[0]})")
    reason = snapshot.changed(tx)
    if reason is not None:
        _refuse(f"the checkpointed function has an effect outside the graph: {reason}")
    for node, version in versions.items():
        if node.meta["example_value"]._version != version:
            _refuse(f"the checkpointed function writes in place to {node.name}")
    for node in graph.nodes:
        example = node.meta.get("example_value")
        if (
            node not in known
            and node.op in ("placeholder", "get_attr")
            and isinstance(example, torch.Tensor)
            and not example.is_inference()
            and example._version != 0
        ):
            _refuse(f"the checkpointed function writes in place to {node.name}")
    new = []
    node = anchor.next
    while node is not graph._root:
        new.append(node)
        node = node.next
    for n in new:
        if n.op == "call_module":
            _refuse(f"the checkpointed function calls the module {n.target} as a graph node")
        if n.op == "call_function" and n.target in _GLOBAL_STATE_TARGETS:
            _refuse("the checkpointed function switches grad mode")
        if n.op in ("call_function", "call_method") and n.meta.get("example_value") is None:
            _refuse(f"the checkpointed function writes a tensor in place ({n.target})")
        if "autocast" in str(getattr(n.target, "__name__", "")):
            _refuse("the checkpointed function enters an autocast region")
    nodes = [n for n in new if n.op != "get_attr"]
    outs = _results(result)
    inside = set(nodes)
    operands: list[torch.fx.Node] = []

    def note(arg):
        if isinstance(arg, torch.fx.Node) and arg not in inside and arg not in operands:
            operands.append(arg)
        return arg

    for n in nodes:
        torch.fx.map_arg((n.args, n.kwargs), note)
    results = [v.node for v in outs]
    if any(r not in inside for r in results):
        _refuse("the checkpointed function returns a tensor from before the call")
    aliasing, _ = _aliasing_outputs(results, operands)
    if aliasing:
        _refuse("an output of the checkpointed function is, or shares memory with, another")
    fakes = [r.meta["example_value"] for r in results]
    body = _subgraph(output, nodes, results, operands)
    _erase(output, inside)
    name = output._unique("checkpoint_body")
    output.root.add_module(name, body)
    ref = graph.get_attr(name)
    call = graph.call_function(
        torch.ops.higher_order.tag_activation_checkpoint,
        (ref, *operands),
        {"use_reentrant": False},
    )
    call.meta["example_value"] = tuple(fakes)
    call.meta["stack_trace"] = tx.current_location_text()
    new_vars = []
    for i, fake in enumerate(fakes):
        item = graph.call_function(operator.getitem, (call, i))
        item.meta["example_value"] = fake
        new_vars.append(TensorVariable(item, fake, None))
    if isinstance(result, TensorVariable):
        return new_vars[0]
    if isinstance(result, TupleVariable):
        return TupleVariable(new_vars)
    return ListVariable(new_vars, mutable_local=True)


class CheckpointVariable(DisabledFunctionVariable):
    """``torch.utils.checkpoint.checkpoint``: :func:`capture_checkpoint`; where that refuses,
    the graph break of a function run with capture off (the disabled wrapper is what the
    break calls, through this variable's source)."""

    def call_function(self, tx, args, kwargs):
        if not args:
            _refuse("no function given")
        try:
            return capture_checkpoint(tx, args[0], list(args[1:]), dict(kwargs))
        except Unsupported as e:
            unimplemented(gbt.RUNS_OUTSIDE_CAPTURE, str(e.reason))


# variables/builder.py wraps torch.utils.checkpoint.checkpoint with this class (registered
# here, not imported there: variables/ does not depend on the stages above it).
_builder.checkpoint_variable = CheckpointVariable
