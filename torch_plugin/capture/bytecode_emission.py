"""Emit the transformed code object for a captured frame.

The transformed code takes the frame's argument slots as plain positional parameters (the
C++ hook passes ``localsplus[0:nargs]``), loads each graph input from its source, calls the
compiled graph (installed as a global of the frame's module), and returns its result. Code
objects are assembled with the ``bytecode`` package, which handles line tables, exception
tables, stack depth and inline caches on each supported Python version.

Installed globals live as long as the transformed code that loads them: a conversion runs
inside :func:`collect_installed_globals`, and :func:`release_with` removes its names from
the module's globals when that code object dies (its cache entry was dropped, e.g. because
a module it is specialized to was deleted). The compiled graph then no longer keeps the
model's weights alive. PyTorch does the same (torch/_dynamo/output_graph.py, cleanup hooks
of ``install_global``).

Key class: :class:`CodeGen`; entry point :func:`make_transformed_code`.
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import types
import weakref
from typing import Any

import bytecode as bc

from .bytecode_compat import PY312, PY313

_counter = itertools.count()
# One list per conversion in progress (innermost last) of the (globals dict, name) pairs
# it installed; conversions are serialized by the hook's compile lock.
_collectors: list[list[tuple[dict, str]]] = []


@contextlib.contextmanager
def collect_installed_globals():
    """Records the globals installed while the block runs; yields the list of
    ``(globals dict, name)`` pairs."""
    installed: list[tuple[dict, str]] = []
    _collectors.append(installed)
    try:
        yield installed
    finally:
        _collectors.pop()


def uninstall_globals(installed: list[tuple[dict, str]]) -> None:
    """Removes installed names from their globals dicts (names already gone are
    skipped)."""
    for f_globals, name in installed:
        f_globals.pop(name, None)


def release_with(code: types.CodeType, installed: list[tuple[dict, str]]) -> None:
    """Removes ``installed`` when ``code`` (the transformed code that loads them) dies."""
    if installed:
        weakref.finalize(code, uninstall_globals, list(installed))


class CodeGen:
    """Builds an instruction list; sources call back into it (``Source.reconstruct``)."""

    def __init__(self, code: types.CodeType, f_globals: dict, lineno: int) -> None:
        self.code = code
        self.f_globals = f_globals
        self.lineno = lineno
        self.instrs: list[bc.Instr] = []

    def _emit(self, name: str, arg: Any = bc.UNSET) -> None:
        self.instrs.append(bc.Instr(name, arg, lineno=self.lineno))

    def load_fast(self, name: str) -> None:
        self._emit("LOAD_FAST", name)

    def load_free(self, name: str) -> None:
        self._emit("LOAD_DEREF", bc.FreeVar(name))

    def load_closure(self, name: str) -> None:
        """Push the cell of free variable ``name`` (3.13: LOAD_CLOSURE is a pseudo-instruction
        the compiler turns into LOAD_FAST, which reads cells there)."""
        self._emit("LOAD_FAST" if PY313 else "LOAD_CLOSURE", bc.FreeVar(name))

    def load_global(self, name: str, push_null: bool) -> None:
        self._emit("LOAD_GLOBAL", (push_null, name))

    def load_attr(self, name: str) -> None:
        self._emit("LOAD_ATTR", (False, name) if PY312 else name)

    def load_const(self, value: Any) -> None:
        self._emit("LOAD_CONST", value)

    def binary_subscr(self) -> None:
        self._emit("BINARY_SUBSCR")

    def install_global(self, value: Any, hint: str) -> str:
        """Store ``value`` in the frame's module globals under a fresh name."""
        name = f"__torch_plugin_{hint}_{next(_counter)}"
        self.f_globals[name] = value
        if _collectors:
            _collectors[-1].append((self.f_globals, name))
        return name

    def load_object(self, obj: Any, hint: str) -> None:
        self.load_global(self.install_global(obj, "obj"), push_null=False)

    def call(self, nargs: int) -> None:
        if not PY312:
            self._emit("PRECALL", nargs)
        self._emit("CALL", nargs)

    def store_fast(self, name: str) -> None:
        self._emit("STORE_FAST", name)

    def push_null(self) -> None:
        self._emit("PUSH_NULL")


def nargs_of(code: types.CodeType) -> int:
    """Number of argument slots: positional, keyword-only, *args and **kwargs."""
    flags = code.co_flags
    return (
        code.co_argcount
        + code.co_kwonlyargcount
        + bool(flags & inspect.CO_VARARGS)
        + bool(flags & inspect.CO_VARKEYWORDS)
    )


def make_transformed_code(
    code: types.CodeType, f_globals: dict, compiled_fn: Any, input_sources: list
) -> types.CodeType:
    """Code with ``code``'s argument layout that returns ``compiled_fn(*inputs)``, where
    ``inputs`` are loaded from ``input_sources`` (graph inputs, then runtime arguments)."""
    gen = CodeGen(code, f_globals, code.co_firstlineno)
    fn_name = gen.install_global(compiled_fn, "compiled_fn")
    gen.load_global(fn_name, push_null=True)
    for source in input_sources:
        source.reconstruct(gen)
    gen.call(len(input_sources))
    gen._emit("RETURN_VALUE")
    return assemble(code, gen)


def assemble(code: types.CodeType, gen: CodeGen) -> types.CodeType:
    """A code object with ``code``'s argument slots as plain positional parameters, its free
    variables (copied in by COPY_FREE_VARS), name, file and first line, and ``gen``'s body."""
    nargs = nargs_of(code)
    prologue = []
    if code.co_freevars:
        prologue.append(
            bc.Instr("COPY_FREE_VARS", len(code.co_freevars), lineno=code.co_firstlineno)
        )
    prologue.append(bc.Instr("RESUME", 0, lineno=code.co_firstlineno))
    out = bc.Bytecode(prologue + gen.instrs)
    out.argcount = nargs
    out.posonlyargcount = 0
    out.kwonlyargcount = 0
    out.argnames = list(code.co_varnames[:nargs])
    out.name = code.co_name
    out.qualname = code.co_qualname
    out.filename = code.co_filename
    out.first_lineno = code.co_firstlineno
    out.freevars = list(code.co_freevars)
    out.cellvars = []
    flags = code.co_flags & ~(inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
    out.flags = flags | inspect.CO_OPTIMIZED | inspect.CO_NEWLOCALS
    if code.co_freevars:
        out.flags |= inspect.CO_NESTED
    return out.to_code()
