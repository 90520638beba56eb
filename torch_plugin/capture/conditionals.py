"""A branch on a one-element tensor captured as a conditional in the graph (``torch.cond``).

``if torch.rand([]) < p: continue`` (HF's LayerDrop) or ``if x.sum() > 0: y = f(y)`` is a
data-dependent jump: capture does not know which way it goes. Instead of breaking the graph
there, :func:`capture_branch` traces *both* ways from the jump to the point where they meet
again (the jump's immediate post-dominator in the code object's control-flow graph, copies
of one exit block taken as one: branch_joins.py), each
into the same FX graph, then cuts each branch's new nodes out into a subgraph and records
one ``torch.ops.higher_order.cond(pred, true_graph, false_graph, operands)`` node whose
outputs replace the values the two branches computed differently (live locals, the stack,
cell contents). The operands are the outer graph values (inputs, parameters through their
``get_attr`` nodes, earlier results) either branch reads: AOTAutograd then propagates
gradients to them through cond's autograd support.

Refused (:class:`~torch_plugin.capture.exc.Unsupported`; the caller breaks the graph at the
jump, as before) where a conditional could not reproduce eager exactly:

- the branches never meet again inside the function (they return or raise different
  things), or a branch fails to
  trace (any graph break inside it);
- a branch has a side effect outside the graph: a recorded side effect, a change to any
  value that existed before the jump (a list appended to, an attribute set on an object
  built in the frame), an in-place write to a tensor that existed before the jump, a grad
  mode or autocast switch, a ``call_module`` node, ``tensor.requires_grad = True``;
- a branch draws random numbers (an ATen op tagged ``nondeterministic_seeded``, such as
  dropout in training): torch.cond's backward re-runs the taken branch to get its
  gradients, which would draw again (other masks than the forward's, and the generator
  advanced where eager does not);
- the branches end with different kinds of values in a live slot (a tensor and None, two
  different objects), tensors of different shapes, dtypes or devices (torch.cond checks),
  or the capture has symbolic sizes.

Key function: :func:`capture_branch`, called by the translator's conditional jumps
(``symbolic_convert.InstructionTranslatorBase._jump_if``).
"""

from __future__ import annotations

import dis
import operator
from typing import Any

import torch
import torch.fx
from torch.utils._python_dispatch import TorchDispatchMode

from . import graph_break_types as gbt
from .branch_joins import join_point
from .exc import Unsupported, unimplemented
from .resume_execution import live_locals
from .variables.base import VariableTracker
from .variables.constant import ConstantVariable
from .variables.lists import TupleVariable
from .variables.tensor import TensorVariable

__all__ = ["capture_branch", "join_point"]

_GLOBAL_STATE_TARGETS = {torch._C._set_grad_enabled}


def _refuse(detail: str) -> None:
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


# --- what a branch may not change -----------------------------------------------------------
def _children(value: Any, out: list) -> None:
    if isinstance(value, VariableTracker):
        out.append(value)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            _children(v, out)
    elif isinstance(value, dict):
        for k, v in value.items():
            _children(k, out)
            _children(v, out)


def _shallow(value: Any) -> Any:
    """A copy of ``value`` good for an identity comparison later: containers copied one
    level (their items compared by identity), anything else the object itself."""
    if isinstance(value, list):
        return ("list", list(value))
    if isinstance(value, dict):
        return ("dict", list(value.items()))
    if isinstance(value, set):
        return ("set", set(map(id, value)))
    return value


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) and len(a) == 2 and a[0] in ("list", "dict", "set"):
        if not (isinstance(b, tuple) and len(b) == 2 and b[0] == a[0]):
            return False
        if a[0] == "set":
            return a[1] == b[1]
        return len(a[1]) == len(b[1]) and all(_same_item(x, y) for x, y in zip(a[1], b[1]))
    return a is b


def _same_item(x: Any, y: Any) -> bool:
    if isinstance(x, tuple) and isinstance(y, tuple):
        return len(x) == len(y) and all(p is q for p, q in zip(x, y))
    return x is y


class _Snapshot:
    """Every variable reachable from the translators' state, the capture's known objects
    and the side-effect log, each with a shallow copy of its ``__dict__``; :meth:`changed`
    names one whose state differs now (a mutation a conditional cannot express)."""

    def __init__(self, tx) -> None:
        roots: list = []
        t = tx
        while t is not None:
            _children(t.stack, roots)
            _children(t.symbolic_locals, roots)
            _children(list(t.cells.values()), roots)
            t = t.parent
        _children([v for _, v in tx.output._vars_by_id.values()], roots)
        self.states: dict[int, tuple[VariableTracker, dict]] = {}
        pending = roots
        while pending:
            v = pending.pop()
            if id(v) in self.states:
                continue
            state = {k: _shallow(x) for k, x in vars(v).items()}
            self.states[id(v)] = (v, state)
            for x in vars(v).values():
                _children(x, pending)
        se = tx.output.side_effects
        self.effects = {k: _shallow(x) for k, x in vars(se).items()}
        self.requires_grad_assignments = len(tx.output.requires_grad_assignments)
        self.grad_enabled = torch.is_grad_enabled()

    def changed(self, tx) -> str | None:
        for v, state in self.states.values():
            now = vars(v)
            if now.keys() != state.keys() or not all(
                _same(state[k], _shallow(now[k])) for k in state
            ):
                return f"it changes {type(v).__name__} {v}, which existed before the branch"
        se = vars(tx.output.side_effects)
        if se.keys() != self.effects.keys() or not all(
            _same(self.effects[k], _shallow(se[k])) for k in se
        ):
            return "it has a side effect outside the graph"
        if len(tx.output.requires_grad_assignments) != self.requires_grad_assignments:
            return "it sets tensor.requires_grad"
        if torch.is_grad_enabled() != self.grad_enabled:
            return "it changes grad mode"
        return None


class _RandomOps(TorchDispatchMode):
    """Notes the ATen ops that draw from a random generator while a branch is traced."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
            self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


# --- the translator's state at the jump ------------------------------------------------------
class _FrameState:
    def __init__(self, tx) -> None:
        self.stack = list(tx.stack)
        self.locals = dict(tx.symbolic_locals)
        self.cells = {name: cell.contents for name, cell in tx.cells.items()}
        self.open_withs = list(tx.open_withs)
        self.kw_names = tx.kw_names
        self.lineno = tx.lineno

    def restore(self, tx) -> None:
        tx.stack[:] = self.stack
        tx.symbolic_locals.clear()
        tx.symbolic_locals.update(self.locals)
        for name, contents in self.cells.items():
            tx.cells[name].contents = contents
        tx.open_withs[:] = self.open_withs
        tx.kw_names = self.kw_names
        tx.lineno = self.lineno


def _trace_branch(tx, start: int, join: frozenset[int], snapshot: _Snapshot):
    """Run ``tx`` from instruction ``start`` to the first instruction of ``join`` it
    reaches; returns its state there (``tx.ip`` is that instruction), the new graph nodes,
    and the random ops seen. Raises Unsupported for what a conditional cannot hold."""
    output = tx.output
    known = set(output.graph.nodes)
    anchor = output.graph._root.prev  # the last node before the branch
    versions = {
        n: n.meta["example_value"]._version
        for n in known
        if isinstance(n.meta.get("example_value"), torch.Tensor)
        and not n.meta["example_value"].is_inference()
    }
    random_ops = _RandomOps()
    saved_stop, saved_mode = tx.stop_at, output.branch_dispatch_mode
    tx.ip, tx.stop_at, output.branch_dispatch_mode = start, join, random_ops
    try:
        returned = tx.run()
    finally:
        tx.stop_at, output.branch_dispatch_mode = saved_stop, saved_mode
    if returned is not None or tx.ip not in join:
        _refuse("a branch returns before the two ways meet")
    reason = snapshot.changed(tx)
    if reason is not None:
        _refuse(f"a branch has an effect outside the graph: {reason}")
    for node, version in versions.items():
        if node.meta["example_value"]._version != version:
            _refuse(f"a branch writes in place to {node.name}, computed before the branch")
    # The branch's nodes: those appended after the anchor. Nodes capture inserts among the
    # placeholders (graph inputs, their size() nodes) stay in the outer graph.
    new = []
    node = anchor.next
    while node is not output.graph._root:
        new.append(node)
        node = node.next
    for n in new:
        if n.op == "call_module" and not _is_conditional(output, n):
            _refuse(f"a branch calls the module {n.target} as a graph node")
        if n.op == "call_function" and n.target in _GLOBAL_STATE_TARGETS:
            _refuse("a branch switches grad mode")
        if n.op in ("call_function", "call_method") and n.meta.get("example_value") is None:
            _refuse(f"a branch writes a tensor in place ({n.target})")
        if "autocast" in str(getattr(n.target, "__name__", "")):
            _refuse("a branch enters an autocast region")
    # get_attr nodes of parameters stay outside (operands); those of a nested
    # conditional's subgraphs go with it
    nodes = [n for n in new if n.op != "get_attr" or _is_subgraph_attr(output, n)]
    return _FrameState(tx), nodes, bool(random_ops.seen)


def _is_conditional(output, node: torch.fx.Node) -> bool:
    from .conditional_execution import Conditional

    return isinstance(getattr(output.root, node.target, None), Conditional)


def _is_subgraph_attr(output, node: torch.fx.Node) -> bool:
    return isinstance(getattr(output.root, node.target, None), torch.fx.GraphModule)


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


class _Merge:
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
                _refuse(
                    f"{what} is a {fa.dtype} tensor of shape {tuple(fa.shape)} on one way and a"
                    f" {fb.dtype} tensor of shape {tuple(fb.shape)} on the other"
                )
            ma, mb = _tensor_metadata(self.tx, a), _tensor_metadata(self.tx, b)
            if ma != mb:
                # the compiled graph after the branch assumes one layout, and eager's
                # `requires_grad`, `stride()`, `type()` would depend on tensor data
                _refuse(
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
        _refuse(f"{what} is {a} on one way and {b} on the other")


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


def _resolve(value: Any, outputs: list[TensorVariable], tx=None, pred=None) -> Any:
    if isinstance(value, _CondOutput):
        return outputs[value.index]
    if isinstance(value, _PredBool):
        flag = TensorBoolVariable(_bool_tensor(tx, pred))
        return flag.negated(tx) if value.negated else flag
    if isinstance(value, _BoolOf):
        return TensorBoolVariable(_resolve(value.tensor, outputs, tx, pred))
    if type(value) is TupleVariable:
        items = [_resolve(v, outputs, tx, pred) for v in value.items]
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


def capture_branch(tx, inst: dis.Instruction, pred: TensorVariable, jump_if: bool) -> None:
    """Capture the conditional jump ``inst`` (taken when ``bool(pred) == jump_if``) as a
    ``torch.cond`` node: both ways are traced to where they meet, the translator continues
    from there with the merged state. Raises Unsupported (see the module docstring) with
    the translator's state as it was at the jump when the branch cannot be captured."""
    fake = pred.example
    if fake.numel() != 1:
        unimplemented(gbt.DATA_DEPENDENT, f"truth value of a tensor with {fake.numel()} elements")
    jump = tx.ip - 1
    join = join_point(tx.code, jump)
    if join is None:
        _refuse("the two ways never meet again in the function (one returns or raises)")
    target = tx.offset_to_index[inst.argval]
    true_start, false_start = (target, tx.ip) if jump_if else (tx.ip, target)
    if tx.is_generator:
        _refuse("the branch is in a generator's body")
    before = _FrameState(tx)
    try:
        _capture(tx, pred, join, true_start, false_start, before)
    except Unsupported as e:
        before.restore(tx)
        tx.ip = jump + 1
        msg = str(e.reason)
        if not msg.startswith("data-dependent branch not captured"):
            where = f" (at {e.location})" if e.location is not None else ""
            msg = f"data-dependent branch not captured as a conditional: a branch breaks: {msg}{where}"
        raise Unsupported(msg, gb_type=gbt.DATA_DEPENDENT) from None


def _capture(tx, pred, join, true_start: int, false_start: int, before: _FrameState):
    snapshot = _Snapshot(tx)
    true_state, true_nodes, true_random = _trace_branch(tx, true_start, join, snapshot)
    true_end = tx.ip
    before.restore(tx)
    false_state, false_nodes, false_random = _trace_branch(tx, false_start, join, snapshot)
    false_end = tx.ip  # the same code as from true_end (branch_joins.py)
    merge = _Merge(tx, set(snapshot.states))
    if len(true_state.stack) != len(false_state.stack):
        _refuse("the stack differs where the two ways meet")
    stack = [
        merge.merge(a, b, f"stack slot {i}")
        for i, (a, b) in enumerate(zip(true_state.stack, false_state.stack))
    ]
    live = live_locals(tx.code, tx.instructions[true_end].offset) | live_locals(
        tx.code, tx.instructions[false_end].offset
    )
    locals_: dict[str, Any] = {}
    for name in set(true_state.locals) | set(false_state.locals):
        a, b = true_state.locals.get(name), false_state.locals.get(name)
        if a is b:
            locals_[name] = a
        elif name in live:
            if a is None or b is None:
                _refuse(f"local {name!r} is set on one way only")
            locals_[name] = merge.merge(a, b, f"local {name!r}")
        # a dead local that differs is left unbound
    cells = {}
    for name in true_state.cells:
        cells[name] = merge.merge(
            true_state.cells[name], false_state.cells[name], f"variable {name!r}"
        )
    random = true_random or false_random
    outputs = _emit(tx, pred, merge.pairs, true_nodes, false_nodes, random)
    tx.stack[:] = [_resolve(v, outputs, tx, pred) for v in stack]
    tx.symbolic_locals.clear()
    tx.symbolic_locals.update({k: _resolve(v, outputs, tx, pred) for k, v in locals_.items()})
    for name, value in cells.items():
        tx.cells[name].contents = _resolve(value, outputs, tx, pred)
    tx.ip = true_end


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


def _emit(tx, pred, pairs, true_nodes, false_nodes, random: bool) -> list[TensorVariable]:
    """Cut the branches' nodes out of the graph into two subgraphs and add the conditional
    (a ``torch.cond`` node, or a :class:`~.conditional_execution.Conditional` module call
    where a branch draws random numbers, an operand requires grad or an output is or shares
    memory with a tensor from before the branch) with one ``getitem`` per output pair;
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
    true_gm = _subgraph(output, true_nodes, true_results, operands)
    false_gm = _subgraph(output, false_nodes, false_results, operands)
    if (
        random
        or ambiguous
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
        _refuse(f"torch.cond refuses the branches: {type(e).__name__}: {e}")
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
