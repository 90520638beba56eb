"""Resume functions: code objects that continue a frame after a graph break.

When capture stops at instruction *i* of a frame, the transformed code runs the graph built so
far, lets CPython run instruction *i* itself, and then calls a *resume function*: a new code
object made from the original one whose prologue puts the live stack values back on the stack
(NULLs and iterators included) and jumps to the instruction after *i* (or to a jump's target).
It is an ordinary function, so the eval-frame hook captures it in turn.

Key parts: :func:`live_locals` (which locals are read after an offset), :class:`ResumeSpec`
(the stack layout a resume function expects) and :func:`resume_code` (builds, and caches per
(code, target, layout), the resume function's code object).
"""

from __future__ import annotations

import dataclasses
import dis
import inspect
import types

import bytecode as bc

from . import graph_break_types as gbt
from .bytecode_compat import PY312, PY313, local_accesses
from .exc import unimplemented
from .variables.container_iterators import resume_iterator, resume_lazy_iterator

_UNCONDITIONAL = {
    "JUMP_FORWARD",
    "JUMP_BACKWARD",
    "JUMP_BACKWARD_NO_INTERRUPT",
    "JUMP",
    "JUMP_ABSOLUTE",
}
_TERMINAL = {"RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE"}


def _successors(instructions: list[dis.Instruction], index: dict[int, int], i: int) -> list[int]:
    inst = instructions[i]
    out = []
    if (
        inst.opname not in _UNCONDITIONAL
        and inst.opname not in _TERMINAL
        and i + 1 < len(instructions)
    ):
        out.append(i + 1)
    if inst.opcode in dis.hasjrel or inst.opcode in dis.hasjabs:
        target = index.get(inst.argval)
        if target is not None:
            out.append(target)
    return out


def live_locals(code: types.CodeType, offset: int) -> set[str]:
    """Names of locals and cell variables that may be read, before being written, on some
    path that starts at instruction ``offset`` (exception handlers included)."""
    instructions = list(dis.get_instructions(code))
    index = {inst.offset: i for i, inst in enumerate(instructions)}
    handlers: list[int] = []
    try:
        table = dis._parse_exception_table(code)
        handlers = [index[e.target] for e in table if e.target in index]
    except AttributeError:  # pragma: no cover - every supported version has it
        pass
    live_in: list[set[str]] = [set() for _ in instructions]
    changed = True
    while changed:
        changed = False
        for i in range(len(instructions) - 1, -1, -1):
            inst = instructions[i]
            out: set[str] = set()
            for s in _successors(instructions, index, i):
                out |= live_in[s]
            for h in handlers:  # conservative: any instruction may raise into any handler
                out |= live_in[h]
            new = set(out)
            for kind, name in reversed(local_accesses(inst)):
                if kind == "read":
                    new.add(name)
                else:
                    new.discard(name)
            if new != live_in[i]:
                live_in[i] = new
                changed = True
    start = index.get(offset)
    if start is None:
        unimplemented(gbt.NO_BREAK_HERE, f"no instruction at offset {offset}")
    return live_in[start]


@dataclasses.dataclass(frozen=True)
class ResumeSpec:
    """How a resume function's prologue rebuilds the stack.

    ``stack`` has one entry per stack slot, bottom first: ``"null"`` (push NULL), ``"value"``
    (the next ``__stack`` argument), ``"iter"`` (``iter()`` of the next argument, a list) or
    ``"list_iter"`` (the next argument is ``(lst, index)``: ``iter(lst)`` positioned at
    ``index`` by its ``__setstate__``, a loop's live iterator over a list) or
    ``"enum_list_iter"`` (``(lst, index, count)``: ``enumerate`` of that, from ``count``)
    or ``"live_iter"`` (``container_iterators.resume_iterator`` of the next argument: a dict's
    or set's iterator made again at its position, or the real one) or ``"lazy_iter"``
    (``resume_lazy_iterator``: ``zip``/``map``/``filter``/``enumerate`` over list iterators).
    :meth:`argnames` are the parameters: the stack values, then the live locals.
    """

    target_offset: int
    stack: tuple[str, ...]
    locals: tuple[str, ...]
    # True when locals[0] is the original first argument: it then comes first, because
    # zero-argument super() reads the frame's first local.
    lead: bool = False
    # A handler resume function (try_blocks.py): (handler offset, lasti). The last ``stack``
    # entry is then an exception, raised again inside a range pointing at that handler
    # instead of being pushed.
    raise_into: tuple[int, bool] | None = None

    def stack_argnames(self, taken: frozenset[str] = frozenset()) -> tuple[str, ...]:
        """The parameters holding the stack values: ``__stack<k>``, skipping every name in
        ``locals`` and in ``taken`` (the code's cell and free variables). The code being
        resumed may itself be a resume function, whose own ``__stack<k>`` parameters are its
        locals; a stack parameter sharing a live local's name made two parameters of one
        name (CPython: "co_varnames is too small")."""
        taken = taken | frozenset(self.locals)
        n = sum(1 for s in self.stack if s != "null")
        out: list[str] = []
        k = 0
        while len(out) < n:
            name = f"__stack{k}"
            if name not in taken:
                out.append(name)
            k += 1
        return tuple(out)

    def argnames(self, taken: frozenset[str] = frozenset()) -> tuple[str, ...]:
        """All parameters, in call order (``taken``: as for :meth:`stack_argnames`)."""
        stack = self.stack_argnames(taken)
        if self.lead:
            return self.locals[:1] + stack + self.locals[1:]
        return stack + self.locals


def _list_iter_at(instr, arg: str) -> list:
    """After ``LOAD_FAST arg`` (a tuple ``(lst, index)``): leave ``iter(lst)`` positioned at
    ``index`` on the stack (``it.__setstate__(index)``; the translator models both)."""
    out = [
        instr("LOAD_CONST", 0),
        instr("BINARY_SUBSCR"),
        instr("GET_ITER"),
        instr("COPY", 1),
        instr("LOAD_ATTR", (False, "__setstate__") if PY312 else "__setstate__"),
    ]
    if PY313:
        out.append(instr("PUSH_NULL"))  # the NULL goes above the callable
    else:
        out += [instr("PUSH_NULL"), instr("SWAP", 2)]
    out += [instr("LOAD_FAST", arg), instr("LOAD_CONST", 1), instr("BINARY_SUBSCR")]
    if not PY312:
        out.append(instr("PRECALL", 1))
    out += [instr("CALL", 1), instr("POP_TOP")]
    return out


def _call_const(instr, fn, arg: str) -> list:
    """``fn(arg)`` with ``fn`` a constant of the code, left on the stack."""
    if PY313:
        out = [instr("LOAD_CONST", fn), instr("PUSH_NULL")]
    else:
        out = [instr("PUSH_NULL"), instr("LOAD_CONST", fn)]
    out.append(instr("LOAD_FAST", arg))
    if not PY312:
        out.append(instr("PRECALL", 1))
    out.append(instr("CALL", 1))
    return out


# A resume function's co_name: this prefix and the frame's name (decompiler.RESUME_PREFIX).
RESUME_PREFIX = "torch_plugin_resume_in_"
_cache: dict[tuple, types.CodeType] = {}
# resume code -> the parameter holding the user function's first argument (None: none does)
_first_argument: dict[types.CodeType, str | None] = {}


def user_first_argument(code: types.CodeType) -> str | None:
    """The parameter of ``code`` that holds the first argument of the user's function (the
    local zero-argument ``super()`` reads), or None.

    For the user's own code, its first parameter (None without parameters). For a resume
    function made by :func:`resume_code`, the original first argument when it was passed in
    front (``ResumeSpec.lead``), else None: its first parameter is then a stack value
    (``__stack0``) or another live local, nothing of the user's function's arguments. A
    graph break in a resume function of a zero-argument function took ``__stack0`` for
    the first argument, kept it alive and named a new stack parameter ``__stack0`` too.
    """
    if code in _first_argument:
        return _first_argument[code]
    if not code.co_argcount:
        return None
    first = code.co_varnames[0]
    if code.co_name.startswith(RESUME_PREFIX) and first.startswith("__stack"):
        return None  # a copy of a resume function (code.replace): its first stack value
    return first


def resume_code(code: types.CodeType, spec: ResumeSpec) -> types.CodeType:
    """The resume function for ``code`` continuing at ``spec.target_offset`` (cached)."""
    key = (code, spec)
    cached = _cache.get(key)
    if cached is not None:
        return cached
    instructions = [
        i for i in dis.get_instructions(code) if i.opname not in ("EXTENDED_ARG", "CACHE")
    ]
    abstract = bc.Bytecode.from_code(code)
    real = [(pos, ins) for pos, ins in enumerate(abstract) if isinstance(ins, bc.Instr)]
    if len(real) != len(instructions):
        unimplemented(gbt.NO_BREAK_HERE, "cannot map instructions for a resume function")
    target_pos = None
    for (pos, ins), dis_ins in zip(real, instructions):
        if ins.name != dis_ins.opname:
            unimplemented(
                gbt.NO_BREAK_HERE, f"cannot map instruction {dis_ins.opname} for a resume function"
            )
        if dis_ins.offset == spec.target_offset:
            target_pos = pos
    if target_pos is None:
        unimplemented(
            gbt.NO_BREAK_HERE,
            f"no instruction at offset {spec.target_offset} for a resume function",
        )
    # A target that opens an exception-table region (the POP_TOP after BEFORE_WITH: a graph
    # break at `with ctx:` resumes inside the block) has a TryBegin just before it. The jump
    # must pass through it: `bytecode` computes a region's stack depth from the flow that
    # enters its TryBegin, and one reached only through the unreachable original code got
    # no depth (32768 in the table: CPython crashed unwinding to it, fuzz seed 230).
    while target_pos > 0 and isinstance(abstract[target_pos - 1], (bc.TryBegin, bc.SetLineno)):
        target_pos -= 1
    lineno = code.co_firstlineno
    target_label = bc.Label()

    def instr(name, arg=bc.UNSET):
        return bc.Instr(name, arg, lineno=lineno)

    prologue = []
    if code.co_freevars:
        prologue.append(instr("COPY_FREE_VARS", len(code.co_freevars)))
    for name in code.co_cellvars:
        prologue.append(instr("MAKE_CELL", bc.CellVar(name)))
    prologue.append(instr("RESUME", 0))
    taken = frozenset(code.co_cellvars) | frozenset(code.co_freevars)
    stack_args = iter(spec.stack_argnames(taken))
    kinds = spec.stack[:-1] if spec.raise_into is not None else spec.stack
    for kind in kinds:
        if kind == "null":
            prologue.append(instr("PUSH_NULL"))
        else:
            arg = next(stack_args)
            prologue.append(instr("LOAD_FAST", arg))
            if kind == "iter":
                prologue.append(instr("GET_ITER"))
            elif kind == "list_iter":
                prologue += _list_iter_at(instr, arg)
            elif kind == "live_iter":  # resume_iterator(arg): a dict's or set's iterator
                prologue[-1:] = _call_const(instr, resume_iterator, arg)
            elif kind == "lazy_iter":  # zip/map/filter/enumerate over list iterators
                prologue[-1:] = _call_const(instr, resume_lazy_iterator, arg)
            elif kind == "enum_list_iter":  # enumerate(<list_iter>, arg[2])
                prologue[-1:] = [instr("LOAD_GLOBAL", (True, "enumerate")), prologue[-1]]
                prologue += _list_iter_at(instr, arg)
                prologue += [instr("LOAD_FAST", arg), instr("LOAD_CONST", 2)]
                prologue += [instr("BINARY_SUBSCR")]
                if not PY312:
                    prologue.append(instr("PRECALL", 2))
                prologue.append(instr("CALL", 2))
    if spec.raise_into is not None:
        # `raise exc` inside a range whose handler is the original one: the handler sees
        # the stack it unwinds to and the exception, as when the instruction raised there.
        handler, lasti = spec.raise_into
        handler_label = _label_at(abstract, real, instructions, handler)
        begin = bc.TryBegin(handler_label, push_lasti=lasti)
        prologue += [
            begin,
            instr("LOAD_FAST", next(stack_args)),
            instr("RAISE_VARARGS", 1),
            bc.TryEnd(begin),
        ]
    else:
        prologue.append(instr("JUMP_FORWARD", target_label))
    body = _enter_region_at(list(abstract), target_pos, target_label)
    # The original prologue (MAKE_CELL/COPY_FREE_VARS/RESUME) stays in the body, unreachable.
    out = bc.Bytecode(prologue + body)
    out.argcount = len(spec.argnames(taken))
    out.posonlyargcount = 0
    out.kwonlyargcount = 0
    cellvars = [n for n in code.co_cellvars]
    argnames = list(spec.argnames(taken))
    if len(set(argnames)) != len(argnames):  # one slot for two values: never build it
        unimplemented(
            gbt.NO_BREAK_HERE,
            f"the resume function at offset {spec.target_offset} would have two "
            f"parameters of one name ({argnames})",
        )
    out.argnames = argnames
    base = code.co_name.removeprefix(RESUME_PREFIX)
    out.name = f"{RESUME_PREFIX}{base}"
    out.qualname = f"{code.co_qualname}.<resume at line {_line_of(code, spec.target_offset)}>"
    out.filename = code.co_filename
    out.first_lineno = code.co_firstlineno
    out.freevars = list(code.co_freevars)
    out.cellvars = cellvars
    flags = code.co_flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    out.flags = flags
    result = out.to_code()
    # `bytecode` leaves a range's depth unset (32768) when no flow it can follow enters the
    # range's TryBegin; CPython then unwinds an exception there into garbage (fuzz seed 230
    # crashed). Seen again for a resume function inside a resume function that starts in a
    # `with` block: such a resume point is refused (the frame part runs uncaptured).
    for entry in live_exception_entries(result):
        if entry.depth > result.co_stacksize:
            unimplemented(
                gbt.NO_BREAK_HERE,
                f"the resume function at offset {spec.target_offset} would have an "
                f"exception-table entry without a stack depth ({entry.depth})",
            )
    _cache[key] = result
    _first_argument[result] = spec.locals[0] if spec.lead else None
    return result


_NO_FALLTHROUGH = frozenset({
    "RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE", "JUMP_FORWARD",
    "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT", "JUMP", "JUMP_NO_INTERRUPT",
})  # fmt: skip


def live_exception_entries(code: types.CodeType) -> list:
    """The exception-table entries of ``code`` whose range holds an instruction that can run:
    reachable from the first instruction through fall-through, jumps and the handlers of
    live entries. A resume function keeps the original code after its prologue, unreachable,
    and ``bytecode`` gives the ranges there no depth (32768); only a live range with no
    depth can unwind into garbage."""
    instructions = list(dis.get_instructions(code))
    by_offset = {ins.offset: i for i, ins in enumerate(instructions)}
    table = dis._parse_exception_table(code)
    reached: set[int] = set()
    todo = [0]
    live: list = []
    while todo:
        while todo:
            i = todo.pop()
            while i is not None and i < len(instructions) and i not in reached:
                reached.add(i)
                ins = instructions[i]
                if ins.opcode in dis.hasjrel or ins.opcode in dis.hasjabs:
                    target = by_offset.get(ins.argval)
                    if target is not None:
                        todo.append(target)
                i = None if ins.opname in _NO_FALLTHROUGH else i + 1
        grown = False
        for entry in table:
            if entry in live:
                continue
            if any(entry.start <= instructions[i].offset < entry.end for i in reached):
                live.append(entry)
                target = by_offset.get(entry.target)
                if target is not None and target not in reached:
                    todo.append(target)
                grown = True
        if not grown:
            break
    return live


def _enter_region_at(body: list, target_pos: int, target_label: bc.Label) -> list:
    """``body`` with ``target_label`` inserted at ``target_pos``. A target in the middle of
    an exception-table range (a break inside a ``try`` block) splits the range there, so the
    jump enters a range through its TryBegin: ``bytecode`` computes a range's stack depth
    from the flow entering its TryBegin (a range entered in the middle got a negative one)."""
    open_begin = None
    for item in body[:target_pos]:
        if isinstance(item, bc.TryBegin):
            open_begin = item
        elif isinstance(item, bc.TryEnd) and item.entry is open_begin:
            open_begin = None
    if open_begin is None:
        return body[:target_pos] + [target_label] + body[target_pos:]
    begin = bc.TryBegin(open_begin.target, open_begin.push_lasti)
    rest = [
        bc.TryEnd(begin) if isinstance(x, bc.TryEnd) and x.entry is open_begin else x
        for x in body[target_pos:]
    ]
    return body[:target_pos] + [bc.TryEnd(open_begin), target_label, begin] + rest


def _label_at(abstract, real, instructions, offset: int) -> bc.Label:
    """The label of the instruction at ``offset`` in ``abstract`` (a handler: always
    labelled, since a TryBegin targets it)."""
    for (pos, _), dis_ins in zip(real, instructions):
        if dis_ins.offset == offset:
            k = pos - 1
            while k >= 0 and not isinstance(abstract[k], bc.Instr):
                if isinstance(abstract[k], bc.Label):
                    return abstract[k]
                k -= 1
    unimplemented(gbt.NO_BREAK_HERE, f"no handler label at offset {offset}")


def _line_of(code: types.CodeType, offset: int) -> int:
    line = code.co_firstlineno
    for start, _, lineno in code.co_lines():
        if start > offset:
            break
        if lineno is not None:
            line = lineno
    return line


def push_function(gen, rcode: types.CodeType) -> None:
    """Push a function of ``rcode`` (a code object with the frame's free variables) with
    the NULL a CALL expects, its closure the transformed frame's cells."""
    code = gen.code
    if code.co_freevars:
        if not PY313:
            gen.push_null()
        for name in code.co_freevars:
            gen.load_closure(name)
        gen._emit("BUILD_TUPLE", len(code.co_freevars))
        gen.load_const(rcode)
        if PY313:  # callable, NULL: bytecode_compat.NULL_AFTER_CALLABLE
            gen._emit("MAKE_FUNCTION")
            gen._emit("SET_FUNCTION_ATTRIBUTE", 0x08)
            gen.push_null()
        else:
            gen._emit("MAKE_FUNCTION", 0x08)
    else:
        fn = types.FunctionType(rcode, gen.f_globals, rcode.co_name)
        gen.load_global(gen.install_global(fn, "resume"), push_null=True)
