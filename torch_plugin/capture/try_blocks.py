"""Graph breaks inside ``try`` / ``except`` / ``finally`` (and ``with``) blocks.

CPython 3.11+ keeps a frame's handlers in its *exception table*: ranges of instructions, each
with a handler offset, the stack depth the handler unwinds to and whether it gets the raising
instruction's offset (``lasti``). An instruction is covered by at most one range (nesting is
expressed by the handler's own code being covered by the outer range).

A graph break at instruction *i* covered by a range would run *i* (and the compiled graph of
what came before it) in the transformed code, outside the handler. The break code
(graph_break.py) keeps the handler in force in two ways:

- **the native instruction** runs inside a range of the transformed code. If it raises, that
  range's handler calls a *handler resume function* (``ResumeSpec.raise_into``): the original
  code whose prologue pushes the stack the handler unwinds to and re-raises the same exception
  object inside a range that points at the original handler. ``except``/``finally``/``with``
  cleanup code then runs exactly as in eager, with the locals as they were before *i*.
- **the compiled graph** (the part of the frame before *i*, which may be inside the ``try``)
  runs inside another range. If the graph raises, nothing observable has happened yet (the
  side-effect replay runs after the graph), so the handler runs the whole frame again, in
  plain Python, with its original arguments (:func:`rerun_code`: a copy of the frame's code
  the hook never captures): the exception is raised again where eager raises it and reaches
  the ``except`` clause with eager's locals. This needs a graph whose partial run leaves no
  trace (:func:`rerun_blocker`: no in-place write, no random draw, no global-state change);
  otherwise the break moves to the start of the range (``retry_index``), as a break inside
  a ``with`` block moves to its ``with`` statement, and the ``try`` runs in the resume
  function.

Dynamo instead simulates the exception table in its translator and keeps try blocks in one
graph when nothing raises at trace time; a break inside one there is refused per block kind.
"""

from __future__ import annotations

import dis
import inspect
import operator
import types

import torch.fx

from . import graph_break_types as gbt
from .exc import Unsupported
from .pure_calls import _INPLACE_OPERATORS as INPLACE_OPERATORS

_Entry = dis._ExceptionTableEntry  # the documented table, parsed


def covering_entry(code: types.CodeType, offset: int) -> _Entry | None:
    """The exception-table range covering instruction ``offset`` (None: no handler)."""
    for e in dis._parse_exception_table(code):
        if e.start <= offset < e.end:
            return e
    return None


def entry_at_break(tx, inst_index: int, resume_only: bool) -> _Entry | None:
    """The range in force where the break's code runs: at instruction ``inst_index``, or for
    a break that resumes *at* ``inst_index`` (``resume_only``) just before it."""
    if resume_only:
        if inst_index == 0:
            return None
        return covering_entry(tx.code, tx.instructions[inst_index - 1].offset)
    return covering_entry(tx.code, tx.instructions[inst_index].offset)


def retry_before(tx, entry: _Entry, reason: str) -> Unsupported:
    """The error that moves the break to the start of ``entry``'s range: the graph before it
    is compiled there and the range runs in the resume function."""
    err = Unsupported(reason, gb_type=gbt.NO_BREAK_HERE)
    err.retry_index = tx.offset_to_index[entry.start]
    return err


# Words in an operation's name that mark a random draw or a change of global state: a graph
# stopped half-way by an exception would have consumed random numbers or left the state
# changed, so running the frame again would not reproduce eager.
_UNREPEATABLE_WORDS = (
    "rand",
    "dropout",
    "bernoulli",
    "multinomial",
    "uniform",
    "exponential",
    "poisson",
    "cauchy",
    "geometric",
    "gumbel",
    "rrelu",
    "seed",
    "_set_",
    "enter",
    "exit",
    "requires_grad",
    "apply",
)
# The in-place operator calls pure_calls knows, and setitem.
_INPLACE_OPERATORS = INPLACE_OPERATORS | {operator.setitem}


def _target_name(node: torch.fx.Node) -> str:
    t = node.target
    if isinstance(t, str):
        return t
    return getattr(t, "__name__", "") or repr(t)


def rerun_blocker(graph: torch.fx.Graph) -> str | None:
    """Why running the frame again after ``graph`` raised half-way could differ from eager
    (an in-place write, a random draw, a global-state change), or None when it cannot."""
    for node in graph.nodes:
        if node.op not in ("call_function", "call_method", "call_module"):
            continue
        name = _target_name(node)
        low = name.lower()
        if node.op == "call_module":
            continue  # only pure modules become call_module nodes (nn_module.py)
        if "out" in node.kwargs:
            return f"{name}(out=...) writes a tensor"
        if name == "__setitem__" or (name.endswith("_") and not name.startswith("_")):
            return f"{name} writes a tensor in place"
        try:
            if node.target in _INPLACE_OPERATORS:
                return f"{name} writes a tensor in place"
        except TypeError:
            pass
        if name == "normal":
            return "normal draws random numbers"
        for word in _UNREPEATABLE_WORDS:
            if word in low:
                return f"{name} draws random numbers or changes global state"
    return None


_rerun_cache: dict[types.CodeType, types.CodeType] = {}


def rerun_code(code: types.CodeType) -> types.CodeType:
    """A copy of ``code`` taking its argument slots as plain positional parameters (as the
    transformed code does), marked so the hook always runs it unmodified."""
    cached = _rerun_cache.get(code)
    if cached is not None:
        return cached
    from torch_plugin import _C

    from .bytecode_emission import nargs_of
    from .code_marks import seen_code_objects

    flags = code.co_flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    copy = code.replace(
        co_argcount=nargs_of(code),
        co_posonlyargcount=0,
        co_kwonlyargcount=0,
        co_flags=flags,
        co_name=code.co_name,
    )
    if copy is code:  # pragma: no cover - replace() always builds a new object
        raise Unsupported("cannot copy the frame's code", gb_type=gbt.INTERNAL_ERROR)
    _C.skip_code(copy)
    seen_code_objects.add(copy)
    _rerun_cache[code] = copy
    return copy


def emit_rerun(gen, code: types.CodeType) -> None:
    """Emit ``return rerun(*argument slots)`` (the exception on the stack dropped first)."""
    from .bytecode_emission import nargs_of
    from .resume_execution import push_function

    gen._emit("POP_TOP")
    push_function(gen, rerun_code(code))
    n = nargs_of(code)
    for name in code.co_varnames[:n]:
        gen.load_fast(name)
    gen.call(n)
    gen._emit("RETURN_VALUE")
