"""Conditionals that run as eager Python ``if``s between compiled pieces of one graph.

``torch.cond`` (conditionals.py) is exact only where its backward may re-run the branch and
where an unused parameter's gradient may be zeros: its backward re-traces the taken branch
(a branch that draws random numbers, dropout in training, would draw them again: other
masks, and the generator advanced where eager's is not), and every operand gets a gradient
(a parameter of the layer LayerDrop skipped ends with ``.grad`` zeros where eager leaves it
None, and AdamW then decays it). So a branch that draws random numbers, or whose operands
require grad while grad mode is on, is recorded as a call of a :class:`Conditional` module:
``outs = conditional(pred, *operands)`` runs ``true_graph`` or ``false_graph`` as eager does
(autograd records only the way taken).

AOTAutograd cannot trace a Python ``if`` on a tensor, so a graph holding conditionals is
compiled by :func:`compile_with_conditionals`: cut (``torch.fx.passes.split_module``) into
pieces before, between and after the conditionals, each piece and each conditional's two
branch graphs compiled by the backend on its own, the conditionals themselves run in
Python. Still one captured graph (one set of guards, no resume function); the backend sees
several. The "eager" backend runs the graph as it is.

Key parts: :class:`Conditional`, :func:`has_conditionals`, :func:`compile_with_conditionals`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from ..contract import stand_ins

__all__ = ["Conditional", "compile_with_conditionals", "has_conditionals"]


class Conditional(torch.nn.Module):
    """``forward(pred, *operands)``: ``true_graph(*operands)`` when ``bool(pred)``, else
    ``false_graph(*operands)`` (a tuple of tensors, the same structure either way).
    ``pred``: a one-element tensor. The branches may be replaced by their compiled forms
    (:func:`compile_with_conditionals`)."""

    def __init__(self, true_graph: torch.fx.GraphModule, false_graph: torch.fx.GraphModule):
        super().__init__()
        self.true_graph = true_graph
        self.false_graph = false_graph
        # what runs each way: the graphs, or their compiled forms
        self.runs: dict[bool, Callable[..., Any]] = {True: true_graph, False: false_graph}

    def forward(self, pred: torch.Tensor, *operands: Any) -> Any:
        return tuple(self.runs[bool(pred)](*operands))


def _conditional_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [
        n
        for n in gm.graph.nodes
        if n.op == "call_module" and isinstance(gm.get_submodule(n.target), Conditional)
    ]


def has_conditionals(gm: torch.fx.GraphModule) -> bool:
    """Whether ``gm`` calls a :class:`Conditional`."""
    return bool(_conditional_nodes(gm))


def _has_operations(gm: torch.fx.GraphModule) -> bool:
    return any(n.op in ("call_function", "call_method", "call_module") for n in gm.graph.nodes)


def _examples(graph: torch.fx.GraphModule) -> list[Any]:
    """Example inputs of a piece: stand-ins for the values capture recorded, sharing memory
    where those did (:func:`torch_plugin.contract.stand_ins`)."""
    return stand_ins(
        [n.meta.get("example_value") for n in graph.graph.nodes if n.op == "placeholder"]
    )


def _compile_branch(compiler, graph: torch.fx.GraphModule) -> Callable[..., Any]:
    if not _has_operations(graph):
        return graph
    return compile_with_conditionals(compiler, graph, _examples(graph))


def _assign(gm: torch.fx.GraphModule) -> dict[torch.fx.Node, int]:
    """Piece index of each node: a conditional is a piece of its own; ``get_attr`` nodes
    are copied into each piece that reads them (a parameter stays a parameter of the piece,
    not a value passed between pieces)."""
    conds = set(_conditional_nodes(gm))
    assignment: dict[torch.fx.Node, int] = {}
    piece = 0
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output", "get_attr"):
            continue
        if node in conds:
            piece += 1
            assignment[node] = piece
            piece += 1
        elif node.op == "call_function" and node.args and node.args[0] in conds:
            assignment[node] = assignment[node.args[0]]  # its getitems: tensors leave it
        else:
            assignment[node] = piece
    for node in list(gm.graph.nodes):
        if node.op != "get_attr":
            continue
        by_piece: dict[int, list[torch.fx.Node]] = {}
        for user in node.users:
            by_piece.setdefault(assignment.get(user, 0), []).append(user)
        for index, (p, users) in enumerate(sorted(by_piece.items())):
            if index == 0:
                assignment[node] = p
                continue
            with gm.graph.inserting_before(min(users, key=_position(gm))):
                copy = gm.graph.get_attr(node.target)
            copy.meta = dict(node.meta)
            for user in users:
                user.replace_input_with(node, copy)
            assignment[copy] = p
        if not by_piece:
            assignment[node] = 0
    return assignment


def _position(gm: torch.fx.GraphModule) -> Callable[[torch.fx.Node], int]:
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    return order.__getitem__


_HIDDEN = "torch_plugin_example_value"


@contextlib.contextmanager
def _example_values_hidden(gm: torch.fx.GraphModule):
    """split_module would pass each size symbol found in an ``example_value`` as an extra
    input (see distributed/ddp.py): hidden while it runs, restored in the pieces."""
    for node in gm.graph.nodes:
        if "example_value" in node.meta:
            node.meta[_HIDDEN] = node.meta.pop("example_value")
    try:
        yield
    finally:
        for module in gm.modules():
            if isinstance(module, torch.fx.GraphModule):
                for node in module.graph.nodes:
                    if _HIDDEN in node.meta:
                        node.meta["example_value"] = node.meta.pop(_HIDDEN)


class _CompiledPiece(torch.nn.Module):
    def __init__(self, compiled: Callable[..., Any]) -> None:
        super().__init__()
        self.compiled = compiled

    def forward(self, *args: Any) -> Any:
        return self.compiled(*args)


def compile_with_conditionals(
    compiler: Callable[..., Any], gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> Callable[..., Any]:
    """Compile ``gm`` with ``compiler``; where it calls :class:`Conditional` modules, as
    pieces cut at them (see the module docstring). Each piece is compiled with example
    inputs made from the values capture recorded (real tensors like them, random contents):
    nothing of the user's graph runs at compile time. Returns ``compiled(*inputs)``."""
    if not has_conditionals(gm):
        return compiler(gm, list(example_inputs))
    from torch.fx.passes.split_module import split_module

    assignment = _assign(gm)
    gm.recompile()
    with _example_values_hidden(gm):
        split = split_module(gm, None, lambda node: assignment[node], keep_original_order=True)
    with _example_values_hidden(split):
        pass  # restores the pieces' example values (split_module copied the hidden key)
    kept = sum(isinstance(m, Conditional) for m in split.modules())
    if kept != len(_conditional_nodes(gm)):
        # a conditional's piece was dropped (no output used): running it is what eager
        # does (its ways may draw random numbers), so the graph runs as it is
        return gm.forward
    # Grad mode at each piece's start (the entry's is guarded: the one in effect now).
    grad = torch.is_grad_enabled()
    for node in list(split.graph.nodes):
        if node.op != "call_module":
            continue
        piece = split.get_submodule(node.target)
        start, grad = grad, _grad_mode_after(piece, grad)
        conds = [m for m in piece.modules() if isinstance(m, Conditional)]
        if conds:
            # runs in Python: its grad-mode switch (split_module's prelude) runs for real
            with torch.set_grad_enabled(grad):
                for cond in conds:
                    cond.runs = {
                        True: _compile_branch(compiler, cond.true_graph),
                        False: _compile_branch(compiler, cond.false_graph),
                    }
            continue
        if not _has_operations(piece):
            continue
        with torch.set_grad_enabled(start):
            compiled = compiler(piece, _examples(piece))
        setattr(split, node.target, _CompiledPiece(compiled))
        if _switches_grad_mode(piece):
            # A compiled piece's grad-mode switches shape its trace but are not run: the
            # mode it leaves is set after it, for the next piece and the conditional.
            with split.graph.inserting_after(node):
                split.graph.call_function(torch._C._set_grad_enabled, (grad,))
    split.recompile()
    return split.forward


def _grad_mode_switches(piece: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [
        n
        for n in piece.graph.nodes
        if n.op == "call_function" and n.target is torch._C._set_grad_enabled
    ]


def _switches_grad_mode(piece: torch.fx.GraphModule) -> bool:
    return bool(_grad_mode_switches(piece))


def _grad_mode_after(piece: torch.fx.GraphModule, grad: bool) -> bool:
    """The grad mode in effect after ``piece`` runs from grad mode ``grad``: its last
    ``torch._C._set_grad_enabled`` (capture records each with a constant; split_module copies
    the one in effect to the start of each later piece)."""
    switches = _grad_mode_switches(piece)
    return bool(switches[-1].args[0]) if switches else grad
