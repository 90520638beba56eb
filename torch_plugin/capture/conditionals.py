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
from typing import Any

import torch
import torch.fx
from torch.utils._python_dispatch import TorchDispatchMode

from . import graph_break_types as gbt
from .branch_joins import join_point
from .conditional_outputs import Merge, TensorBoolVariable, emit, refuse, resolve
from .exc import Unsupported, unimplemented
from .resume_execution import live_locals
from .variables.base import VariableTracker
from .variables.tensor import TensorVariable

__all__ = ["TensorBoolVariable", "capture_branch", "join_point"]

_GLOBAL_STATE_TARGETS = {torch._C._set_grad_enabled}


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
        refuse("a branch returns before the two ways meet")
    reason = snapshot.changed(tx)
    if reason is not None:
        refuse(f"a branch has an effect outside the graph: {reason}")
    for node, version in versions.items():
        if node.meta["example_value"]._version != version:
            refuse(f"a branch writes in place to {node.name}, computed before the branch")
    for node in output.graph.nodes:
        # a graph input or attribute (a global tensor) first read inside the way: its
        # FakeTensor was made there, with version 0 (``FakeTensorMode.from_tensor``)
        example = node.meta.get("example_value")
        if (
            node not in known
            and node.op in ("placeholder", "get_attr")
            and isinstance(example, torch.Tensor)
            and not example.is_inference()
            and example._version != 0
        ):
            refuse(f"a branch writes in place to {node.name}, a tensor from before the branch")
    # The branch's nodes: those appended after the anchor. Nodes capture inserts among the
    # placeholders (graph inputs, their size() nodes) stay in the outer graph.
    new = []
    node = anchor.next
    while node is not output.graph._root:
        new.append(node)
        node = node.next
    for n in new:
        if n.op == "call_module" and not _is_conditional(output, n):
            refuse(f"a branch calls the module {n.target} as a graph node")
        if n.op == "call_function" and n.target in _GLOBAL_STATE_TARGETS:
            refuse("a branch switches grad mode")
        if n.op in ("call_function", "call_method") and n.meta.get("example_value") is None:
            refuse(f"a branch writes a tensor in place ({n.target})")
        if "autocast" in str(getattr(n.target, "__name__", "")):
            refuse("a branch enters an autocast region")
    # get_attr nodes of parameters stay outside (operands); those of a nested
    # conditional's subgraphs go with it
    nodes = [n for n in new if n.op != "get_attr" or _is_subgraph_attr(output, n)]
    return _FrameState(tx), nodes, bool(random_ops.seen)


def _is_conditional(output, node: torch.fx.Node) -> bool:
    from .conditional_execution import Conditional

    return isinstance(getattr(output.root, node.target, None), Conditional)


def _is_subgraph_attr(output, node: torch.fx.Node) -> bool:
    return isinstance(getattr(output.root, node.target, None), torch.fx.GraphModule)


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
        refuse("the two ways never meet again in the function (one returns or raises)")
    target = tx.offset_to_index[inst.argval]
    true_start, false_start = (target, tx.ip) if jump_if else (tx.ip, target)
    if tx.is_generator:
        refuse("the branch is in a generator's body")
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
    merge = Merge(tx, set(snapshot.states))
    if len(true_state.stack) != len(false_state.stack):
        refuse("the stack differs where the two ways meet")
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
                refuse(f"local {name!r} is set on one way only")
            locals_[name] = merge.merge(a, b, f"local {name!r}")
        # a dead local that differs is left unbound
    cells = {}
    for name in true_state.cells:
        cells[name] = merge.merge(
            true_state.cells[name], false_state.cells[name], f"variable {name!r}"
        )
    random = true_random or false_random
    outputs = emit(tx, pred, merge.pairs, true_nodes, false_nodes, random)
    tx.stack[:] = [resolve(v, outputs, tx, pred) for v in stack]
    tx.symbolic_locals.clear()
    tx.symbolic_locals.update({k: resolve(v, outputs, tx, pred) for k, v in locals_.items()})
    for name, value in cells.items():
        tx.cells[name].contents = resolve(value, outputs, tx, pred)
    tx.ip = true_end
