"""The two ways of a captured tensor branch merged into one conditional (conditionals.py).

After both ways are traced to where they meet, :class:`Merge` pairs the values each left in
a live slot (stack, locals, cells): the same value stays; two tensors become one output of
the conditional; two different bools become a :class:`TensorBoolVariable` over the
predicate; anything else refuses the conditional. :func:`emit` then cuts each way's nodes
out of the graph into a subgraph and records the conditional: a ``torch.cond`` node, or a
call of a :class:`~.conditional_execution.Conditional` module (an eager ``if``) where
torch.cond would not be exact, among them an output that is, on some way, a tensor from
before the branch or shares memory with one. Such an output's identity depends on tensor
data (``TensorVariable.ambiguous_identity``); every output knows its ``ways``.

Key parts: :class:`Merge`, :func:`resolve`, :func:`emit`, :class:`TensorBoolVariable`.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from . import graph_break_types as gbt
from .exc import unimplemented
from .variables.base import VariableTracker
from .variables.constant import ConstantVariable
from .variables.lists import TupleVariable
from .variables.tensor import TensorVariable

__all__ = ["Merge", "TensorBoolVariable", "emit", "refuse", "resolve"]


def refuse(detail: str) -> None:
    unimplemented(
        gbt.DATA_DEPENDENT, f"data-dependent branch not captured as a conditional: {detail}"
    )


class TensorBoolVariable(VariableTracker):
    """A Python bool whose value depends on tensor data: a flag set on one way of a
    captured branch and not on the other (``to_drop = True`` in HF's BART/Whisper
    LayerDrop). It holds a one-element bool tensor; ``not`` gives another one, and a
    conditional jump on it is captured as a conditional again. Any other use (``is``,
    arithmetic, printing, passing it to a function) needs its value: Unsupported."""

    def __init__(self, tensor: TensorVariable) -> None:
        super().__init__()
        self.tensor = tensor

    def python_type(self) -> type:
        return bool

    def truthiness(self, tx) -> bool:
        unimplemented(gbt.DATA_DEPENDENT, "a bool set in a branch on a tensor, used as a value")

    def negated(self, tx) -> TensorBoolVariable:
        """``not self``, as a ``logical_not`` node."""
        return TensorBoolVariable(tx.output.call_function(tx, torch.logical_not, [self.tensor], {}))

    def __repr__(self) -> str:
        return f"TensorBoolVariable({self.tensor.node.name})"


# --- merging the two states ------------------------------------------------------------------
def _tensor_metadata(tx, var: TensorVariable) -> tuple:
    """What a tensor shows besides its values and identity: the class of the real object
    (a graph input's or parameter's), shape, strides, storage offset, dtype, device,
    requires_grad."""
    real = tx.output.real_tensor(var)
    t = var.example
    return (
        type(real) if real is not None else torch.Tensor,
        tuple(t.shape),
        t.stride(),
        t.storage_offset(),
        t.dtype,
        t.device,
        t.requires_grad,
    )


def _identical_constants(x: Any, y: Any) -> bool:
    """Whether two constants are the same Python value in every way a program can tell
    (``0.0`` and ``-0.0`` are equal but not the same: ``math.copysign``, ``1 / x``)."""
    if x is y:
        return True
    if type(x) is not type(y):
        return False
    if type(x) is tuple:
        return len(x) == len(y) and all(map(_identical_constants, x, y))
    if type(x) in (float, complex):
        return repr(x) == repr(y)  # -0.0, nan payloads aside
    if type(x) in (int, str, bytes):
        return x == y
    return False


class Merge:
    """Pairs of tensors that become the conditional's outputs. ``existing``: ids of the
    variables that existed before the branch (a container from before the branch on one way
    and another object on the other is a value whose identity depends on tensor data)."""

    def __init__(self, tx, existing: set[int]) -> None:
        self.tx = tx
        self.existing = existing
        self.pairs: list[tuple[TensorVariable, TensorVariable]] = []
        self.results: list[_CondOutput] = []

    def merge(self, a: VariableTracker | None, b: VariableTracker | None, what: str):
        if a is b:
            return a
        if isinstance(a, TensorVariable) and isinstance(b, TensorVariable):
            if a.node is b.node:
                return a
            fa, fb = a.example, b.example
            if (fa.shape, fa.dtype, fa.device) != (fb.shape, fb.dtype, fb.device):
                refuse(
                    f"{what} is a {fa.dtype} tensor of shape {tuple(fa.shape)} on one way and a"
                    f" {fb.dtype} tensor of shape {tuple(fb.shape)} on the other"
                )
            if a.__dict__.get("py_attrs") or b.__dict__.get("py_attrs"):
                # set in the frame (``t.tag = 1``): the merged tensor would not carry them
                refuse(f"{what} carries attributes set in the frame on one way")
            ma, mb = _tensor_metadata(self.tx, a), _tensor_metadata(self.tx, b)
            if ma != mb:
                # the compiled graph after the branch assumes one layout, and eager's
                # `requires_grad`, `stride()`, `type()` would depend on tensor data
                refuse(
                    f"{what} differs between the two ways in class, strides, storage offset or"
                    f" requires_grad ({ma} and {mb})"
                )
            self.pairs.append((a, b))
            out = _CondOutput(len(self.pairs) - 1)
            self.results.append(out)
            return out
        if (
            type(a) is ConstantVariable
            and type(b) is ConstantVariable
            and _identical_constants(a.value, b.value)
        ):
            return a
        if (
            type(a) is ConstantVariable
            and type(b) is ConstantVariable
            and type(a.value) is bool
            and type(b.value) is bool
        ):
            return _PredBool(negated=not a.value)  # True on the true way: pred itself
        if isinstance(a, TensorBoolVariable) and isinstance(b, TensorBoolVariable):
            return _BoolOf(self.merge(a.tensor, b.tensor, what))
        if (
            type(a) is TupleVariable
            and type(b) is TupleVariable
            and len(a.items) == len(b.items)
            and id(a) not in self.existing
            and id(b) not in self.existing
        ):
            # a tuple built on each way: a new object either way, item by item
            items = [self.merge(x, y, what) for x, y in zip(a.items, b.items)]
            return TupleVariable(items)
        refuse(f"{what} is {a} on one way and {b} on the other")


class _CondOutput:
    """Placeholder for output ``index`` of the conditional until its node exists."""

    def __init__(self, index: int) -> None:
        self.index = index


class _PredBool:
    """Placeholder for the predicate (or its negation) as a :class:`TensorBoolVariable`."""

    def __init__(self, negated: bool) -> None:
        self.negated = negated


class _BoolOf:
    """Placeholder for a :class:`TensorBoolVariable` over a conditional's output."""

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor


def resolve(value: Any, outputs: list[TensorVariable], tx=None, pred=None) -> Any:
    if isinstance(value, _CondOutput):
        return outputs[value.index]
    if isinstance(value, _PredBool):
        flag = TensorBoolVariable(_bool_tensor(tx, pred))
        return flag.negated(tx) if value.negated else flag
    if isinstance(value, _BoolOf):
        return TensorBoolVariable(resolve(value.tensor, outputs, tx, pred))
    if type(value) is TupleVariable:
        items = [resolve(v, outputs, tx, pred) for v in value.items]
        if all(x is y for x, y in zip(items, value.items)):
            return value
        return TupleVariable(items)
    return value


# --- the subgraphs ---------------------------------------------------------------------------
def _subgraph(
    output,
    nodes: list[torch.fx.Node],
    results: list[torch.fx.Node],
    operands: list[torch.fx.Node],
) -> torch.fx.GraphModule:
    """One way's nodes as a graph over ``operands`` returning ``results``."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for i, node in enumerate(operands):
        ph = graph.placeholder(f"arg{i}_{node.name}")
        ph.meta["example_value"] = node.meta.get("example_value")
        env[node] = ph
    for node in nodes:
        env[node] = graph.node_copy(node, lambda a: env[a])
    graph.output(tuple(env[node] for node in results))
    return torch.fx.GraphModule(output.root, graph)


def _shares_memory(a: Any, b: Any) -> bool:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    try:
        return a is b or torch._C._is_alias_of(a, b)
    except RuntimeError:  # a tensor kind without storage
        return False


def _aliasing_outputs(
    results: list[torch.fx.Node], operands: list[torch.fx.Node]
) -> tuple[set[int], list[torch.Tensor]]:
    """For one way: the indices of its outputs that are, or share memory with, an operand
    (a tensor from before the branch) or another of its outputs, and the operands' FakeTensors
    so shared. On the other way the output may be a new tensor: which object it is, and what
    an in-place write to it changes, depend on tensor data."""
    fakes = [n.meta.get("example_value") for n in results]
    operand_fakes = [n.meta.get("example_value") for n in operands]
    indices: set[int] = set()
    shared: list[torch.Tensor] = []
    for i, (node, fake) in enumerate(zip(results, fakes)):
        for op_node, op_fake in zip(operands, operand_fakes):
            if node is op_node or _shares_memory(fake, op_fake):
                indices.add(i)
                if isinstance(op_fake, torch.Tensor):
                    shared.append(op_fake)
        for j, other in enumerate(fakes):
            if j != i and (results[j] is node or _shares_memory(fake, other)):
                indices.add(i)
    return indices, shared


def _erase(output, nodes: set) -> None:
    """Erase the branches' nodes from the outer graph (users first), and forget symbolic
    sizes computed by one of them."""
    for node in reversed(list(output.graph.nodes)):
        if node in nodes:
            output.graph.erase_node(node)
    for expr, cached in list(output._sym_nodes.items()):
        if isinstance(cached, torch.fx.Node) and cached in nodes:
            del output._sym_nodes[expr]


def _bool_tensor(tx, pred: TensorVariable) -> TensorVariable:
    """``pred`` as a bool tensor (``pred != 0`` for another dtype)."""
    if pred.example.dtype == torch.bool:
        return pred
    return tx.output.call_function(tx, torch.ne, [pred, ConstantVariable(0)], {})


def emit(tx, pred, pairs, true_nodes, false_nodes, random: bool) -> list[TensorVariable]:
    """Cut the branches' nodes out of the graph into two subgraphs and add the conditional
    (a ``torch.cond`` node, or a :class:`~.conditional_execution.Conditional` module call
    where a branch draws random numbers, an operand requires grad, two operands share memory
    or an output is or shares memory with a tensor from before the branch) with one
    ``getitem`` per output pair;
    returns the outputs' variables (each with its ``ways``, see ``TensorVariable``)."""
    output = tx.output
    inside = set(true_nodes) | set(false_nodes)
    operands: list[torch.fx.Node] = []

    def note(arg):
        if isinstance(arg, torch.fx.Node) and arg not in inside and arg not in operands:
            operands.append(arg)
        return arg

    for node in [*true_nodes, *false_nodes]:
        torch.fx.map_arg((node.args, node.kwargs), note)
    for a, b in pairs:
        note(a.node)
        note(b.node)
    operand_fakes = [n.meta["example_value"] for n in operands]
    true_results = [a.node for a, _ in pairs]
    false_results = [b.node for _, b in pairs]
    true_aliasing, true_shared = _aliasing_outputs(true_results, operands)
    false_aliasing, false_shared = _aliasing_outputs(false_results, operands)
    ambiguous = true_aliasing | false_aliasing
    nested_module = any(n.op == "call_module" for n in inside)
    # operands sharing memory (``x`` and its view ``x[:, 0]``): AOTAutograd refuses a
    # torch.cond over them ("might be aliasing the input")
    operands_overlap = any(
        _shares_memory(f, g) for i, f in enumerate(operand_fakes) for g in operand_fakes[:i]
    )
    true_gm = _subgraph(output, true_nodes, true_results, operands)
    false_gm = _subgraph(output, false_nodes, false_results, operands)
    if (
        random
        or ambiguous
        or operands_overlap
        or nested_module
        or output.shape_env is not None
        or (
            torch.is_grad_enabled()
            and any(isinstance(f, torch.Tensor) and f.requires_grad for f in operand_fakes)
        )
    ):
        # an eager if: exact where torch.cond is not (see conditional_execution.py; an
        # output that is a tensor from before the branch stays that very object, as in
        # eager, and one that shares memory with it stays a view of it)
        results = _emit_conditional_module(tx, pred, pairs, true_gm, false_gm, operands, inside)
    else:
        results = _emit_cond(tx, pred, true_gm, false_gm, operands, operand_fakes, inside)
    for i, (var, (a, b)) in enumerate(zip(results, pairs)):
        var.ways = (a, b)
        if i in ambiguous:
            var.ambiguous_identity = True
            output.branch_aliased.append(var.example)
    output.branch_aliased.extend(true_shared + false_shared)
    return results


def _emit_cond(tx, pred, true_gm, false_gm, operands, operand_fakes, inside):
    """The conditional as a ``torch.cond`` node (no output of either way is or shares memory
    with an operand or another output: torch.cond refuses those)."""
    output = tx.output
    graph = output.graph
    pred_node = pred.node
    pred_fake = pred.example
    if pred_fake.dtype != torch.bool:
        pred_node = graph.call_function(torch.ne, (pred_node, 0))
        with output.fake_mode:
            pred_fake = torch.ne(pred.example, 0)
        pred_node.meta["example_value"] = pred_fake
    try:
        with output.fake_mode:
            fakes = torch.ops.higher_order.cond(pred_fake, true_gm, false_gm, tuple(operand_fakes))
    except Exception as e:  # noqa: BLE001 - torch.cond's own checks (metadata, aliasing)
        refuse(f"torch.cond refuses the branches: {type(e).__name__}: {e}")
    _erase(output, inside)
    true_name = output._unique("cond_true")
    false_name = output._unique("cond_false")
    output.root.add_module(true_name, true_gm)
    output.root.add_module(false_name, false_gm)
    true_ref = graph.get_attr(true_name)
    false_ref = graph.get_attr(false_name)
    cond = graph.call_function(
        torch.ops.higher_order.cond, (pred_node, true_ref, false_ref, tuple(operands))
    )
    cond.meta["example_value"] = list(fakes)
    cond.meta["stack_trace"] = tx.current_location_text()
    results = []
    for i, fake in enumerate(fakes):
        node = graph.call_function(operator.getitem, (cond, i))
        node.meta["example_value"] = fake
        results.append(TensorVariable(node, fake, None))
    return results


def _fresh_like(output, t: torch.Tensor) -> torch.Tensor:
    """A new FakeTensor with ``t``'s shape, strides, storage offset, dtype, device and
    requires_grad, sharing memory with nothing: the example of a conditional's output whose
    object depends on the branch (no FakeTensor of a way may stand for it)."""
    with output.fake_mode:
        if t.storage_offset() == 0:
            fresh = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
        else:
            span = t.storage_offset() + 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
            base = torch.empty(span, dtype=t.dtype, device=t.device)
            fresh = base.as_strided(t.shape, t.stride(), t.storage_offset())
        if t.requires_grad:
            fresh = fresh.detach().requires_grad_(True)
    return fresh


def _emit_conditional_module(tx, pred, pairs, true_gm, false_gm, operands, inside):
    """The conditional as a call of a :class:`~.conditional_execution.Conditional` module
    (an eager ``if`` when the graph runs)."""
    from .conditional_execution import Conditional

    output = tx.output
    graph = output.graph
    _erase(output, inside)
    name = output._unique("conditional")
    output.root.add_module(name, Conditional(true_gm, false_gm))
    fakes = [_fresh_like(output, a.example) for a, _ in pairs]  # the ways agree (_Merge)
    cond = graph.call_module(name, (pred.node, *operands))
    cond.meta["example_value"] = tuple(fakes)
    cond.meta["stack_trace"] = tx.current_location_text()
    results = []
    for i, fake in enumerate(fakes):
        node = graph.call_function(operator.getitem, (cond, i))
        node.meta["example_value"] = fake
        results.append(TensorVariable(node, fake, None))
    return results
