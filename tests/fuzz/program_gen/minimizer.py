"""Shrinking a failing program: drop statements, unwrap blocks and drop returned values
while a predicate (it still fails the same way) holds."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from .program import Block, Program


def _paths(nodes, prefix=()):
    """Every removable node, as an index path (deepest last so blocks go after children)."""
    for i, node in enumerate(nodes):
        yield prefix + (("body", i),)
        if isinstance(node, Block):
            yield from _paths(node.body, prefix + (("body", i), ("in", "body")))
            if node.orelse is not None:
                yield from _paths(node.orelse, prefix + (("body", i), ("in", "orelse")))


def _remove(nodes, path):
    nodes = list(nodes)
    (_, i), rest = path[0], path[1:]
    if not rest:
        del nodes[i]
        return nodes
    node = nodes[i]
    field = rest[0][1]
    new = dataclasses.replace(node)
    setattr(new, field, _remove(getattr(node, field), rest[1:]))
    nodes[i] = new
    return nodes


def _unwrap(nodes, path):
    """Replace the block at path by its body (drop the condition/loop/with)."""
    nodes = list(nodes)
    (_, i), rest = path[0], path[1:]
    if not rest:
        node = nodes[i]
        if isinstance(node, Block):
            nodes[i : i + 1] = list(node.body)
        return nodes
    node = nodes[i]
    field = rest[0][1]
    new = dataclasses.replace(node)
    setattr(new, field, _unwrap(getattr(node, field), rest[1:]))
    nodes[i] = new
    return nodes


def minimize(prog: Program, still_fails: Callable[[Program], bool], budget: int = 200) -> Program:
    """Greedy: drop statements, unwrap blocks and drop returned values while ``still_fails``
    holds (at most ``budget`` tries)."""
    tries = 0
    changed = True
    while changed and tries < budget:
        changed = False
        # statements, last first (later ones depend on earlier ones)
        for path in reversed(list(_paths(prog.body))):
            if tries >= budget:
                break
            for op in (_remove, _unwrap):
                try:
                    body = op(prog.body, path)
                except (IndexError, AttributeError):
                    continue
                if body == prog.body:
                    continue
                cand = dataclasses.replace(prog, body=body)
                tries += 1
                if still_fails(cand):
                    prog = cand
                    changed = True
                    break
        for k in range(len(prog.ret) - 1, -1, -1):
            if len(prog.ret) <= 1 or tries >= budget:
                break
            cand = dataclasses.replace(prog, ret=prog.ret[:k] + prog.ret[k + 1 :])
            tries += 1
            if still_fails(cand):
                prog = cand
                changed = True
    return prog
