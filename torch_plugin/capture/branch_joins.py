"""Where the two ways of a conditional jump meet again, for capturing it as a conditional.

The join of a jump is its immediate post-dominator in the code object's control-flow graph:
the first place every path from it reaches. CPython 3.12 and later copy small exit blocks
into each block that jumps to them (``if c: y = f(x)`` / ``else: y = g(x)`` / ``return y + 1``
compiles the ``return y + 1`` once at the end of each way), so the two ways of such a branch
only meet at the function's exit in the graph of instructions. Copies behave alike, though:
two instructions whose straight-line run to a ``return`` or ``raise`` is the same sequence
of operations, under the same exception handlers, do the same thing from there on. The
post-dominators are therefore computed on the graph where such copies are one node (the
quotient of the instruction graph by that equivalence), and a join is a *set* of
instructions: each way is traced until it reaches one of them, and the capture continues
from where the true way stopped (the other way's stopping point does the same).

Key function: :func:`join_point`.
"""

from __future__ import annotations

import dis
import functools
import types

from .resume_execution import _successors

__all__ = ["join_point"]

_TERMINAL = {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"}
_UNCONDITIONAL = {
    "JUMP_FORWARD",
    "JUMP_BACKWARD",
    "JUMP_BACKWARD_NO_INTERRUPT",
    "JUMP",
    "JUMP_ABSOLUTE",
}
# the same operation under another name (the copy of a block may differ only in these)
_SAME_AS = {"LOAD_FAST_CHECK": "LOAD_FAST"}
_MAX_TAIL = 64  # longer straight-line runs are not compared (each instruction its own node)


def _is_jump(inst: dis.Instruction) -> bool:
    return inst.opcode in dis.hasjrel or inst.opcode in dis.hasjabs


def _handlers(code: types.CodeType, instructions: list[dis.Instruction]) -> list[tuple | None]:
    """For each instruction, the exception-table entry covering it (handler target, stack
    depth, lasti), or None."""
    out: list[tuple | None] = [None] * len(instructions)
    try:
        table = dis._parse_exception_table(code)
    except AttributeError:  # pragma: no cover - every supported version has it
        return out
    for i, inst in enumerate(instructions):
        for entry in table:
            if entry.start <= inst.offset < entry.end:
                out[i] = (entry.target, entry.depth, entry.lasti)
                break
    return out


def _tail_key(
    instructions: list[dis.Instruction],
    index: dict[int, int],
    handlers: list[tuple | None],
    i: int,
) -> tuple | None:
    """The operations from instruction ``i`` to the ``return`` or ``raise`` it runs into
    without a conditional jump (unconditional jumps followed), with their exception
    handlers; None when it meets a conditional jump, a loop or more than _MAX_TAIL
    instructions first."""
    key: list = []
    if instructions[i].opname in _UNCONDITIONAL:
        key.append(("JUMP", None, handlers[i]))  # a node of its own before its target's
        i = index.get(instructions[i].argval)
    seen: set[int] = set()
    while i is not None and i not in seen and len(key) < _MAX_TAIL:
        seen.add(i)
        inst = instructions[i]
        if inst.opname in _UNCONDITIONAL:
            i = index.get(inst.argval)
            continue
        if _is_jump(inst):
            return None
        key.append((_SAME_AS.get(inst.opname, inst.opname), inst.arg, handlers[i]))
        if inst.opname in _TERMINAL:
            return tuple(key)
        i = i + 1 if i + 1 < len(instructions) else None
    return None


@functools.lru_cache(maxsize=256)
def _post_dominators(code: types.CodeType) -> tuple[list[int], list[int], list[list[int]]]:
    """(class of each instruction, post-dominator bitset of each class, members of each
    class) of ``code``'s instruction graph with copied exit blocks merged (module
    docstring). Bit ``len(classes)`` stands for the function's exit."""
    instructions = list(dis.get_instructions(code))
    n = len(instructions)
    index = {inst.offset: i for i, inst in enumerate(instructions)}
    handlers = _handlers(code, instructions)
    classes: list[int] = []
    by_tail: dict[tuple, int] = {}
    members: list[list[int]] = []
    for i in range(n):
        tail = _tail_key(instructions, index, handlers, i)
        c = by_tail.get(tail) if tail is not None else None
        if c is None:
            c = len(members)
            members.append([])
            if tail is not None:
                by_tail[tail] = c
        classes.append(c)
        members[c].append(i)
    m = len(members)
    exit_bit = 1 << m
    full = (1 << (m + 1)) - 1
    succ: list[set[int]] = []
    for c in range(m):
        i = members[c][0]
        inst = instructions[i]
        s = [] if inst.opname in _TERMINAL else _successors(instructions, index, i)
        succ.append({classes[j] for j in s} or {m})
    pdom = [full] * m + [exit_bit]
    changed = True
    while changed:
        changed = False
        for c in range(m - 1, -1, -1):
            new = full
            for s in succ[c]:
                new &= pdom[s]
            new |= 1 << c
            if new != pdom[c]:
                pdom[c] = new
                changed = True
    return classes, pdom, members


def join_point(code: types.CodeType, jump: int) -> frozenset[int] | None:
    """Indices of the instructions where the two ways from instruction ``jump`` of
    ``code`` (in ``dis.get_instructions`` order) meet again: each way, traced from the jump,
    reaches one of them first, and the code from any of them does the same (copies of one
    exit block, see the module docstring). None when the ways only meet at the function's
    exit (they return or raise differently). Exception edges are not followed: an exception
    while tracing a branch stops the capture of the conditional anyway."""
    classes, pdom, members = _post_dominators(code)
    m = len(members)
    own = classes[jump]
    strict = pdom[own] & ~(1 << own)
    best, best_count = None, -1
    for d in range(m + 1):
        if strict >> d & 1:
            count = pdom[d].bit_count()
            if count > best_count:
                best, best_count = d, count
    if best is None or best == m:
        return None
    return frozenset(members[best])
