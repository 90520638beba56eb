"""Opcode handlers for names: locals (LOAD_FAST and its 3.12/3.13 variants, the 3.13
two-local superinstructions), constants, globals, cells (MAKE_CELL, LOAD_CLOSURE, LOAD_DEREF,
STORE_DEREF) and imports (IMPORT_NAME, IMPORT_FROM).

Key class: :class:`NameInstructions`, a mixin of
:class:`~torch_plugin.capture.symbolic_convert.InstructionTranslatorBase`. Locals live in the
translator's ``symbolic_locals``, cells in ``cells`` (:class:`CellVariable`); a write to a cell
of a closure known at capture is a recorded side effect. Version differences (from
bytecode_compat.py): LOAD_GLOBAL's NULL before (3.11/3.12) or after (3.13) the callable, and
3.13's LOAD_FAST of a cell where earlier versions emit LOAD_CLOSURE.
"""

from __future__ import annotations

import sys

from . import graph_break_types as gbt
from .bytecode_compat import PY312, PY313
from .exc import Unsupported, unimplemented
from .variables.base import NullVariable
from .variables.builder import wrap_constant_or_object
from .variables.functions import CellVariable


class NameInstructions:
    """Name opcodes of the translator. See the module docstring."""

    # --- locals, globals, cells -----------------------------------------------------------
    def LOAD_FAST(self, inst):
        name = inst.argval
        if PY313 and (name in self.code.co_cellvars or name in self.code.co_freevars):
            # 3.13 compiles LOAD_CLOSURE (building a closure) to a LOAD_FAST of the cell;
            # reads of a cell's value are LOAD_DEREF.
            self.push(self.cells.setdefault(name, CellVariable()))
            return
        if name in self.symbolic_locals:
            self.push(self.symbolic_locals[name])
        elif name in self.cells and self.cells[name].contents is not None:
            self.push(self.cells[name].contents)
        else:
            unimplemented(gbt.EXCEPTION, f"local variable {name!r} referenced before assignment")

    LOAD_FAST_CHECK = LOAD_FAST

    def _load_fast_name(self, name: str) -> None:
        self.LOAD_FAST(_NamedArg(name))

    def _store_fast_name(self, name: str) -> None:
        self.STORE_FAST(_NamedArg(name))

    def LOAD_FAST_LOAD_FAST(self, inst):  # 3.13
        self._load_fast_name(inst.argval[0])
        self._load_fast_name(inst.argval[1])

    def STORE_FAST_LOAD_FAST(self, inst):  # 3.13
        self._store_fast_name(inst.argval[0])
        self._load_fast_name(inst.argval[1])

    def STORE_FAST_STORE_FAST(self, inst):  # 3.13: the first name takes the top of the stack
        self._store_fast_name(inst.argval[0])
        self._store_fast_name(inst.argval[1])

    def LOAD_FAST_AND_CLEAR(self, inst):
        value = self.symbolic_locals.pop(inst.argval, None)
        self.push(value if value is not None else NullVariable())

    def STORE_FAST(self, inst):
        value = self.pop()
        if isinstance(value, NullVariable):
            self.symbolic_locals.pop(inst.argval, None)
        else:
            self.symbolic_locals[inst.argval] = value

    def DELETE_FAST(self, inst):
        self.symbolic_locals.pop(inst.argval, None)

    def LOAD_CONST(self, inst):
        self.push(wrap_constant_or_object(inst.argval))

    def RETURN_CONST(self, inst):
        self.push(wrap_constant_or_object(inst.argval))
        self.RETURN_VALUE(inst)

    def LOAD_GLOBAL(self, inst):
        push_null = (inst.arg & 1) if inst.arg is not None else 0
        if push_null and not PY312:
            self.push(NullVariable())
        value = self.load_global_var(inst.argval)
        if push_null and PY312:
            self.push_callable(value)
        else:
            self.push(value)

    def STORE_GLOBAL(self, inst):
        self.output.side_effects.store_global(self.f_globals, inst.argval, self.pop())

    def MAKE_CELL(self, inst):
        name = inst.argval
        cell = self.cells.setdefault(name, CellVariable())
        if name in self.symbolic_locals:
            cell.contents = self.symbolic_locals.pop(name)

    def LOAD_CLOSURE(self, inst):
        name = inst.argval
        self.push(self.cells.setdefault(name, CellVariable()))

    def LOAD_DEREF(self, inst):
        cell = self.cells.get(inst.argval)
        if cell is None or cell.contents is None:
            unimplemented(
                gbt.EXCEPTION, f"free variable {inst.argval!r} referenced before assignment"
            )
        self.push(cell.contents)

    def STORE_DEREF(self, inst):
        name = inst.argval
        cell = self.cells.setdefault(name, CellVariable())
        value = self.pop()
        if cell.source_bound:
            if cell.real_cell is None:
                unimplemented(
                    gbt.SIDE_EFFECT,
                    f"assignment to nonlocal {name!r} of a closure cell not known at capture",
                )
            from .sources import ClosureCellSource

            is_own = self.parent is None and name in self.code.co_freevars
            self.output.side_effects.store_cell(
                cell.real_cell, value, ClosureCellSource(name) if is_own else None
            )
        cell.contents = value

    # --- imports (only of modules already imported: importing has effects) -------------------
    def IMPORT_NAME(self, inst):
        import importlib.util

        fromlist = self.pop().as_python_constant()
        level = self.pop().as_python_constant()
        name = inst.argval
        if level:
            name = importlib.util.resolve_name(
                "." * level + name, self.f_globals.get("__package__")
            )
        module = sys.modules.get(name)
        if module is None:
            unimplemented(gbt.IMPORT, f"import of {name!r}, not imported yet")
        if not fromlist and "." in name:
            module = sys.modules[name.partition(".")[0]]
        self.push(wrap_constant_or_object(module))

    def IMPORT_FROM(self, inst):
        module = self.stack[-1]
        try:
            self.push(self.getattr(module, inst.argval))
        except Unsupported:
            full = f"{module.as_python_constant().__name__}.{inst.argval}"
            if full not in sys.modules:
                raise
            self.push(wrap_constant_or_object(sys.modules[full]))


class _NamedArg:
    """One local of a two-local superinstruction, as the one-local handlers read it."""

    __slots__ = ("argval",)

    def __init__(self, name: str) -> None:
        self.argval = name
