"""The symbolic bytecode interpreter.

Key classes:
- :class:`InstructionTranslatorBase`: runs a code object's instructions (from ``dis``,
  CPython 3.11 and 3.12) on :class:`~torch_plugin.capture.variables.base.VariableTracker`
  values. One handler method per opcode, named after it.
- :class:`InstructionTranslator`: the captured frame itself; its inputs are the frame's
  arguments, globals and closure, wrapped with sources (and so guarded).
- :class:`InliningInstructionTranslator`: a called user function, interpreted in place so its
  operations join the same graph.

Python-version differences handled here: LOAD_GLOBAL/LOAD_ATTR's NULL/method bit, PRECALL
(3.11), POP_JUMP_FORWARD/BACKWARD_* (3.11) vs POP_JUMP_IF_* (3.12), RETURN_CONST,
BINARY_SLICE/STORE_SLICE, LOAD_FAST_CHECK/LOAD_FAST_AND_CLEAR, END_FOR, LOAD_SUPER_ATTR and
CALL_INTRINSIC_1 (3.12), and FOR_ITER's exhaustion jump (3.12 skips END_FOR).
"""

from __future__ import annotations

import copy
import dataclasses
import dis
import inspect
import operator
import os
import sys
import types
from typing import Any

import torch

from . import torch_compile_interop
from .container_instructions import ContainerInstructions
from .dynamic_shapes import has_symbolic, specialize_deep
from .exc import Unsupported, UserSourceLocation, unimplemented
from .output_graph import OutputGraph
from .sources import ClosureSource, GlobalSource, ItemSource, LocalSource, ObjectSource
from .variables.autograd_function import FunctionCtxVariable
from .variables.base import VariableTracker
from .variables.builder import wrap_constant_or_object, wrap_value
from .variables.constant import BINARY_OPS, COMPARE_OPS, INPLACE_OPS, ConstantVariable
from .variables.dicts import ConstDictVariable
from .variables.functions import (
    BaseUserFunctionVariable,
    CellVariable,
    NestedUserFunctionVariable,
    UserFunctionVariable,
    UserMethodVariable,
)
from .variables.iterators import GeneratorVariable, IteratorVariable
from .variables.lists import (
    BaseListVariable,
    ListIteratorVariable,
    ListVariable,
    TupleVariable,
    contains,
)
from .variables.new_object import NewObjectVariable
from .variables.nn_module import NNModuleVariable
from .variables.tensor import TensorVariable
from .variables.torch import AutocastVariable, GradModeVariable
from .variables.user_defined import SuperVariable, UserDefinedObjectVariable

PY312 = sys.version_info >= (3, 12)
MAX_INSTRUCTIONS = 2_000_000
MAX_INLINE_DEPTH = 64
_GENERATOR_FLAGS = inspect.CO_GENERATOR
_UNSUPPORTED_CODE_FLAGS = (
    inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
)


class NullVariable(VariableTracker):
    """The NULL that CALL's stack layout expects below a callable (PUSH_NULL)."""

    def __repr__(self) -> str:
        return "NULL"


class WithExitVariable(VariableTracker):
    """The ``__exit__`` that BEFORE_WITH leaves on the stack."""

    def __init__(self, ctx: VariableTracker) -> None:
        super().__init__()
        self.ctx = ctx

    def call_function(self, tx, args, kwargs):
        return self.ctx.exit(tx)


def _closes_with_block(tx, fn: VariableTracker) -> None:
    """Calling ``fn`` (an ``__exit__`` BEFORE_WITH pushed) ends the innermost open ``with``
    block of the captured frame."""
    from .variables.context_managers import GeneratorExitVariable, InlinedExitVariable

    if (
        tx.parent is None
        and tx.open_withs
        and isinstance(fn, (WithExitVariable, InlinedExitVariable, GeneratorExitVariable))
    ):
        tx.open_withs.pop()


class _Return(Exception):
    def __init__(self, value: VariableTracker) -> None:
        self.value = value


class GeneratorYield(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised by YIELD_VALUE in an inlined generator's body: ``run()`` stops there with its
    state kept, and :class:`~.variables.iterators.GeneratorVariable` returns ``value``."""

    def __init__(self, value: VariableTracker) -> None:
        self.value = value


def _holds_object_state(v: VariableTracker) -> bool:
    """Whether ``v.as_python_constant()`` would stand for an object whose attributes no guard
    covers (a user object read from a source, or an nn.Module: guarded on identity only), also
    inside a container or a partial. An object without a source was made during this capture
    by a fold on such constants (``inspect.signature(fn)``): nothing outside can change it."""
    from .variables.functions import PartialVariable
    from .variables.nn_module import ModuleSliceVariable
    from .variables.user_defined import _PLAIN_ATTRIBUTE_TYPES

    if isinstance(v, UserDefinedObjectVariable):
        return v.source is not None and not isinstance(v.value, _PLAIN_ATTRIBUTE_TYPES)
    if isinstance(v, (NNModuleVariable, ModuleSliceVariable)):
        return True
    if isinstance(v, BaseListVariable):
        return any(_holds_object_state(i) for i in v.items)
    if isinstance(v, ConstDictVariable):
        return any(_holds_object_state(i) for i in v.items.values())
    if isinstance(v, PartialVariable):
        return any(_holds_object_state(i) for i in [*v.args, *v.keywords.values()])
    return False


# Standard-library functions whose result depends only on their argument's type (and the
# class's definition), not on an object's attributes: they fold on user objects too.
# Pure helpers whose answer for a bound method depends on its function only (the function is
# guarded where the method was looked up), not on the instance it is bound to.
_SIGNATURE_ONLY_STDLIB = frozenset({inspect.signature, inspect.getfullargspec})

_TYPE_ONLY_STDLIB = frozenset(
    {
        dataclasses.fields,
        dataclasses.is_dataclass,
        inspect.isclass,
        inspect.isfunction,
        inspect.ismethod,
        inspect.isroutine,
        inspect.ismodule,
        inspect.isbuiltin,
        inspect.isgeneratorfunction,
        inspect.iscoroutinefunction,
    }
)


# Standard-library functions that build fresh values from everything an object holds (no
# part of the result is shared with the argument): they fold on a user object whose whole
# state is guarded. copy.copy and dataclasses.replace share the attribute values (a later
# mutation through the copy must reach the original), so they never fold on one.
_DEEP_COPY_STDLIB = frozenset({copy.deepcopy, dataclasses.asdict, dataclasses.astuple})


class InstructionTranslatorBase(ContainerInstructions):
    """Interprets one code object. See the module docstring."""

    def __init__(
        self,
        code: types.CodeType,
        f_globals: dict,
        f_builtins: dict,
        symbolic_locals: dict[str, VariableTracker],
        cells: dict[str, CellVariable],
        output: OutputGraph,
        depth: int = 0,
    ) -> None:
        self.code = code
        self.f_globals = f_globals
        self.f_builtins = f_builtins
        self.symbolic_locals = symbolic_locals
        self.cells = cells
        self.output = output
        self.depth = depth
        self.instructions = list(dis.get_instructions(code))
        self.offset_to_index = {inst.offset: i for i, inst in enumerate(self.instructions)}
        self.stack: list[VariableTracker] = []
        self.ip = 0
        self.kw_names: tuple | None = None
        self.current_inst: dis.Instruction | None = None
        self.lineno = code.co_firstlineno
        self.is_generator = False  # an inlined generator function's body (YIELD_VALUE)
        self.globals_source = None
        self.parent: InstructionTranslatorBase | None = None
        self.stop_at: int | None = None
        # Indices of the BEFORE_WITH instructions of this frame's open ``with`` blocks
        # (captured frame only): a graph break inside one moves to its ``with`` statement.
        self.open_withs: list[int] = []

    # --- locations ------------------------------------------------------------------------
    def location(self) -> UserSourceLocation:
        name = self.code.co_name.removeprefix("torch_plugin_resume_in_")
        return UserSourceLocation(self.code.co_filename, self.lineno, name)

    def current_location_text(self) -> str:
        return str(self.location())

    # --- the loop -------------------------------------------------------------------------
    def run(self) -> VariableTracker | None:
        """Interpret until RETURN_VALUE (its value is returned) or, for the captured frame,
        until instruction ``stop_at`` is reached (None is returned; the state is kept)."""
        count = 0
        try:
            while True:
                if self.ip == self.stop_at:
                    return None
                inst = self.instructions[self.ip]
                self.ip += 1
                self.current_inst = inst
                if inst.positions is not None and inst.positions.lineno is not None:
                    self.lineno = inst.positions.lineno
                elif inst.starts_line:
                    self.lineno = inst.starts_line
                count += 1
                if count > MAX_INSTRUCTIONS:
                    unimplemented("too many instructions interpreted (unbounded loop?)")
                handler = getattr(self, inst.opname, None)
                try:
                    if handler is None:
                        unimplemented(f"bytecode {inst.opname} is not supported yet")
                    handler(inst)
                except Unsupported as e:
                    if e.location is None:
                        e.location = self.location()
                    if self.parent is None and e.root_index is None:
                        e.root_index = self.ip - 1
                        e.with_index = self.open_withs[0] if self.open_withs else None
                    raise
                except (_Return, GeneratorYield):
                    raise
                except RecursionError:
                    raise Unsupported(
                        "recursion too deep while capturing", self.location()
                    ) from None
                except (TypeError, ValueError, AttributeError, KeyError, IndexError) as e:
                    err = Unsupported(
                        f"{type(e).__name__} while capturing {inst.opname}: {e}", self.location()
                    )
                    if self.parent is None:
                        err.root_index = self.ip - 1
                        err.with_index = self.open_withs[0] if self.open_withs else None
                    raise err from e
        except _Return as r:
            return r.value

    def push(self, v: VariableTracker) -> None:
        assert isinstance(v, VariableTracker), v
        self.stack.append(v)

    def pop(self) -> VariableTracker:
        return self.stack.pop()

    def popn(self, n: int) -> list[VariableTracker]:
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    def jump(self, inst: dis.Instruction) -> None:
        self.ip = self.offset_to_index[inst.argval]

    # --- helpers --------------------------------------------------------------------------
    def binary_op(self, op: str, a: VariableTracker, b: VariableTracker) -> VariableTracker:
        fn = BINARY_OPS.get(op) or INPLACE_OPS.get(op)
        if fn is None:
            unimplemented(f"binary operator {op}")
        if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
            if op.endswith("=") and isinstance(a, TensorVariable):
                return self.output.call_function(self, fn, [a, b], {})
            return self.output.call_function(self, BINARY_OPS[op.rstrip("=")], [a, b], {})
        # In-place operators on a list or dict mutate the object (every alias sees it):
        # list += any iterable is list.extend, list *= n repeats in place, dict |= is update
        if op == "+=" and type(a) is ListVariable and a.python_cls is list:
            a.call_method(self, "extend", [b], {})
            return a
        if op == "*=" and type(a) is ListVariable and a.python_cls is list:
            if not b.is_python_constant() or not isinstance(b.as_python_constant(), int):
                unimplemented(f"list *= {b}")
            if not a.mutable_local:
                unimplemented("in-place *= on a list from the frame's inputs")
            a.items[:] = a.items * b.as_python_constant()
            return a
        if op == "|=" and isinstance(a, ConstDictVariable) and isinstance(b, ConstDictVariable):
            a.call_method(self, "update", [b], {})
            return a
        if (
            op == "*"
            and isinstance(b, BaseListVariable)
            and a.is_python_constant()
            and isinstance(a.as_python_constant(), int)
        ):
            a, b = b, a  # n * sequence is sequence * n
        if (
            isinstance(a, BaseListVariable)
            and op in ("+", "+=")
            and isinstance(b, BaseListVariable)
        ):
            if op == "+=" and isinstance(a, ListVariable):
                if not a.mutable_local:
                    unimplemented("in-place += on a list from the frame's inputs")
                a.items.extend(b.items)
                return a
            return (
                type(a)(a.items + b.items, mutable_local=True)
                if isinstance(a, ListVariable)
                else TupleVariable(a.items + b.items)
            )
        if isinstance(a, BaseListVariable) and op in ("*", "*=") and b.is_python_constant():
            items = a.items * b.as_python_constant()
            return (
                ListVariable(items, mutable_local=True)
                if isinstance(a, ListVariable)
                else TupleVariable(items)
            )
        if (
            isinstance(a, ConstDictVariable)
            and isinstance(b, ConstDictVariable)
            and op in ("|", "|=")
        ):
            return ConstDictVariable({**a.items, **b.items}, mutable_local=True)
        if a.is_python_constant() and b.is_python_constant():
            av, bv = a.as_python_constant(), b.as_python_constant()
            if op.endswith("=") and isinstance(av, (list, dict, set, bytearray)):
                # an in-place operator mutates the object: computing a new one (as the
                # operator without "=") would leave every alias (a caller's set) unchanged
                unimplemented(f"in-place {op} on a {type(av).__name__} (mutation not modelled)")
            if isinstance(bv, (list, dict, set)):
                fn = BINARY_OPS[op.rstrip("=")]
            if _is_numpy_value(av) or _is_numpy_value(bv):
                # NumPy cannot compute on a symbolic int (np.int64(2) * s0 would become an
                # int where eager gives np.int64): its concrete value, under a guard
                from .dynamic_shapes import specialize

                av, bv = specialize(av), specialize(bv)
            if isinstance(av, (str, bytes)) and op.rstrip("=") == "%":
                # printf-style formatting: a symbolic size formats as its symbol's name
                av, bv = specialize_deep(av), specialize_deep(bv)
            av, bv = _bool_as_int(av, bv), _bool_as_int(bv, av)
            try:
                return wrap_constant_or_object(fn(av, bv))
            except TypeError:
                if not (has_symbolic(av) or has_symbolic(bv)):
                    raise
            # SymInt/SymBool lack some operators ((s0 > 3) ^ True): the concrete values,
            # under a guard
            return wrap_constant_or_object(fn(specialize_deep(av), specialize_deep(bv)))
        unimplemented(f"operator {op} on {a} and {b}")

    def compare(self, op: str, a: VariableTracker, b: VariableTracker) -> VariableTracker:
        if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
            return self.output.call_function(self, COMPARE_OPS[op], [a, b], {})
        if a.is_python_constant() and b.is_python_constant():
            return ConstantVariable(COMPARE_OPS[op](a.as_python_constant(), b.as_python_constant()))
        if op in ("==", "!=") and a is b:
            return ConstantVariable(op == "==")
        unimplemented(f"comparison {op} between {a} and {b}")

    def is_(self, a: VariableTracker, b: VariableTracker) -> bool:
        if a is b:
            return True
        if isinstance(a, NewObjectVariable) or isinstance(b, NewObjectVariable):
            return False  # an object built in the frame is no other object
        tensor_a, tensor_b = isinstance(a, TensorVariable), isinstance(b, TensorVariable)
        if tensor_a and tensor_b:
            return a.node is b.node
        if tensor_a or tensor_b:
            return False
        if isinstance(a, (NullVariable,)) or isinstance(b, NullVariable):
            return False
        for x, y in ((a, b), (b, a)):
            if (
                isinstance(y, ConstantVariable)
                and y.value is None
                and not isinstance(x, ConstantVariable)
            ):
                if isinstance(x, UserDefinedObjectVariable):
                    return False  # its type is guarded; its identity does not matter here
                try:
                    x.as_python_constant()
                except Unsupported:
                    return False
        try:
            return a.as_python_constant() is b.as_python_constant()
        except Unsupported:
            pass
        if type(a) is not type(b) and not (
            isinstance(a, ConstantVariable) or isinstance(b, ConstantVariable)
        ):
            return False
        unimplemented(f"`is` between {a} and {b}")

    def getattr(self, obj: VariableTracker, name: str) -> VariableTracker:
        """``getattr(obj, name)``; ``__class__`` is answered from the variable's type."""
        if name == "__class__" and not isinstance(obj, TensorVariable):
            return wrap_constant_or_object(obj.python_type())
        if (
            isinstance(obj, (UserDefinedObjectVariable, NNModuleVariable))
            and self.output.side_effects
        ):
            pending = self.output.side_effects.pending_attr(_object_seen(obj), name)
            if pending is not None:
                return pending
        return obj.var_getattr(self, name)

    def call(self, fn: VariableTracker, args: list, kwargs: dict) -> VariableTracker:
        result = fn.call_function(self, args, kwargs)
        _closes_with_block(self, fn)
        return result

    def load_global_var(self, name: str) -> VariableTracker:
        if self.output.side_effects:
            pending = self.output.side_effects.pending_global(self.f_globals, name)
            if pending is not None:
                return pending
        if name in self.f_globals:
            if self.globals_source is None:
                source = GlobalSource(name)
            else:
                source = ItemSource(self.globals_source, name)
            return wrap_value(self, self.f_globals[name], source)
        if name in self.f_builtins:
            return wrap_value(self, self.f_builtins[name], None)
        unimplemented(f"name {name!r} is not defined")

    def inline_user_function_obj(self, fn, args, kwargs) -> VariableTracker:
        """Inline a real function object found by attribute lookup (no source)."""
        var = (
            wrap_value(self, fn, None)
            if not isinstance(fn, types.FunctionType)
            else UserFunctionVariable(fn)
        )
        return var.call_function(self, list(args), dict(kwargs))

    def inline_user_function(
        self, fn_var: BaseUserFunctionVariable, args, kwargs
    ) -> VariableTracker:
        code = fn_var.get_code()
        if code.co_flags & _UNSUPPORTED_CODE_FLAGS:
            unimplemented(f"call to coroutine/async function {code.co_name}")
        if self.depth >= MAX_INLINE_DEPTH:
            unimplemented("inlining too deep (recursion?)")
        if isinstance(fn_var, UserFunctionVariable):  # e.g. a disabled method: obj.method
            reason = torch_compile_interop.call_reason(fn_var.fn)
            if reason is not None:
                unimplemented(reason)
        from .skipfiles import check_inline, is_pure_stdlib

        if isinstance(fn_var, UserFunctionVariable) and fn_var.fn is os.getenv:
            from .variables.environ import call_getenv

            return call_getenv(self, args, kwargs)
        if (
            isinstance(fn_var, UserFunctionVariable)
            and torch_compile_interop.assumes_constant_result(fn_var.fn)
            and all(a.is_python_constant() for a in [*args, *kwargs.values()])
        ):
            value = fn_var.fn(
                *[a.as_python_constant() for a in args],
                **{k: v.as_python_constant() for k, v in kwargs.items()},
            )
            return wrap_constant_or_object(value)
        from .variables.logging_calls import call_logger, is_logger_call

        if is_logger_call(fn_var):
            return call_logger(self, fn_var, args[1:], kwargs)  # args[0] is the logger
        if isinstance(fn_var, UserFunctionVariable):
            from .variables.import_probe import call_import_probe, is_import_probe

            if is_import_probe(fn_var.fn):
                return call_import_probe(self, fn_var.fn, args, kwargs)

        if (
            isinstance(fn_var, UserFunctionVariable)
            and is_pure_stdlib(code)
            and self._may_fold_stdlib(fn_var.fn, [*args, *kwargs.values()])
        ):
            # Pure standard-library helpers (inspect, dataclasses, ...) on values known at
            # capture time run for real; their result is a constant of this capture.
            # A type-only helper (dataclasses.fields) depends on the argument's type, which
            # its variable already guards: no identity guard on an object built per call.
            type_only = fn_var.fn in _TYPE_ONLY_STDLIB

            signature_only = fn_var.fn in _SIGNATURE_ONLY_STDLIB

            def real(a: VariableTracker) -> Any:
                if type_only and isinstance(a, UserDefinedObjectVariable):
                    return a.value
                if (
                    signature_only
                    and type(a) is UserMethodVariable
                    and isinstance(a.obj, (UserDefinedObjectVariable, NNModuleVariable))
                ):
                    # a bound method's signature is its function's, whatever the instance
                    # (HF's apply_chunking_to_forward reads inspect.signature(self.ff_chunk))
                    return types.MethodType(a.fn, _object_seen(a.obj))
                return a.as_python_constant()

            try:
                real_args = [real(a) for a in args]
                real_kwargs = {k: real(v) for k, v in kwargs.items()}
            except Unsupported:
                pass
            else:
                fn = fn_var.as_python_constant()
                result = wrap_constant_or_object(fn(*real_args, **real_kwargs))
                if fn is copy.deepcopy and isinstance(result, UserDefinedObjectVariable):
                    result.private = True  # a new object nothing outside the capture holds
                return result
        check_inline(code)
        bound = fn_var.bind(args, kwargs)
        cells = fn_var.closure_cells(self)
        for name in code.co_cellvars:
            cells[name] = CellVariable(bound.get(name))
        fn_globals = fn_var.get_globals()
        sub = InliningInstructionTranslator(
            code, fn_globals, _builtins_of(fn_globals), bound, cells, self.output, self.depth + 1
        )
        if fn_globals is not self.root_globals():
            sub.globals_source = ObjectSource(fn_globals, str(fn_globals.get("__name__", "?")))
        sub.parent = self
        if code.co_flags & _GENERATOR_FLAGS:
            # A generator object: its body runs lazily, one `yield` per next() (iterators.py).
            sub.is_generator = True
            return GeneratorVariable(sub)
        return sub.run()

    def _may_fold_stdlib(self, fn, args: list[VariableTracker]) -> bool:
        """Whether a pure standard-library call may run now on ``args``' constants. A user
        object's or module's constant is its identity (ID_MATCH) while copy.deepcopy(config)
        or dataclasses.asdict(config) read its attributes, which later calls may change: such
        a call folds when only the argument's type matters, or, for the deep copies, when all
        of the object's state is guarded (:func:`~.variables.user_defined.guard_state`)."""
        stateful = [a for a in args if _holds_object_state(a)]
        if not stateful or fn in _TYPE_ONLY_STDLIB:
            return True
        if fn not in _DEEP_COPY_STDLIB:
            return False
        from .variables.user_defined import guard_state

        return all(
            isinstance(a, UserDefinedObjectVariable) and guard_state(self, a.value, a.source)
            for a in stateful
        )

    def root_tx(self) -> InstructionTranslatorBase:
        tx = self
        while getattr(tx, "parent", None) is not None:
            tx = tx.parent
        return tx

    def root_globals(self) -> dict:
        return self.root_tx().f_globals

    def zero_arg_super(self) -> VariableTracker:
        cell = self.cells.get("__class__")
        if cell is None or cell.contents is None or self.code.co_argcount == 0:
            unimplemented("super() without __class__ cell")
        first = self.code.co_varnames[0]
        obj = self.symbolic_locals.get(first)
        if obj is None and first in self.cells:
            obj = self.cells[first].contents
        if obj is None:
            unimplemented("super() without a first argument")
        return SuperVariable(cell.contents.as_python_constant(), obj)

    # --- opcodes: no-ops ------------------------------------------------------------------
    def NOP(self, inst):
        pass

    RESUME = NOP
    PRECALL = NOP
    EXTENDED_ARG = NOP
    CACHE = NOP
    COPY_FREE_VARS = NOP

    # --- stack ----------------------------------------------------------------------------
    def POP_TOP(self, inst):
        self.pop()

    def PUSH_NULL(self, inst):
        self.push(NullVariable())

    def SWAP(self, inst):
        i = inst.arg
        self.stack[-1], self.stack[-i] = self.stack[-i], self.stack[-1]

    def COPY(self, inst):
        self.push(self.stack[-inst.arg])

    def END_FOR(self, inst):
        self.popn(2)

    # --- locals, globals, cells -----------------------------------------------------------
    def LOAD_FAST(self, inst):
        name = inst.argval
        if name in self.symbolic_locals:
            self.push(self.symbolic_locals[name])
        elif name in self.cells and self.cells[name].contents is not None:
            self.push(self.cells[name].contents)
        else:
            unimplemented(f"local variable {name!r} referenced before assignment")

    LOAD_FAST_CHECK = LOAD_FAST

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
            self.push(NullVariable())
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
            unimplemented(f"free variable {inst.argval!r} referenced before assignment")
        self.push(cell.contents)

    def STORE_DEREF(self, inst):
        name = inst.argval
        cell = self.cells.setdefault(name, CellVariable())
        value = self.pop()
        if cell.source_bound:
            if cell.real_cell is None:
                unimplemented(
                    f"assignment to nonlocal {name!r} of a closure cell not known at capture"
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
            unimplemented(f"import of {name!r}, not imported yet")
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

    # --- attributes -------------------------------------------------------------------------
    def LOAD_ATTR(self, inst):
        obj = self.pop()
        method = PY312 and (inst.arg & 1)
        value = self.getattr(obj, inst.argval)
        if method:
            self.push(NullVariable())
        self.push(value)

    def LOAD_METHOD(self, inst):  # 3.11
        obj = self.pop()
        self.push(NullVariable())
        self.push(self.getattr(obj, inst.argval))

    def LOAD_SUPER_ATTR(self, inst):  # 3.12
        self_var = self.pop()
        cls = self.pop()
        self.pop()  # the global super
        value = SuperVariable(cls.as_python_constant(), self_var).var_getattr(self, inst.argval)
        if inst.arg & 1:
            self.push(NullVariable())
        self.push(value)

    def STORE_ATTR(self, inst):
        obj = self.pop()
        value = self.pop()
        self.store_attr(obj, inst.argval, value)

    def store_attr(self, obj: VariableTracker, name: str, value: VariableTracker) -> None:
        """``obj.name = value`` (the STORE_ATTR opcode and ``setattr``)."""
        from .variables.model_output import ModelOutputVariable
        from .variables.user_defined import (
            is_private,
            private_setattr,
            refuse_code_running_write,
            refuse_mutated_private,
        )

        if isinstance(obj, (NewObjectVariable, FunctionCtxVariable, ModelOutputVariable)):
            obj.store_attr(self, name, value)  # not visible outside the frame yet
            return
        if isinstance(obj, TensorVariable) and name == "requires_grad":
            from .variables.tensor import set_requires_grad

            set_requires_grad(self, obj, value)
            return
        if is_private(obj):
            private_setattr(self, obj, name, value)
            return
        if isinstance(obj, (UserDefinedObjectVariable, NNModuleVariable)):
            real = _object_seen(obj)
            refuse_code_running_write(real, name)
            if isinstance(real, torch.nn.Module) and isinstance(value, TensorVariable):
                if name in real._parameters or name in real._buffers:
                    unimplemented(
                        f"assignment to parameter/buffer {name!r} of {type(real).__name__}"
                    )
            # A user object is guarded on its type only: the write is replayed on the object
            # found at its source on each call, not on the one seen at capture.
            # A shared module (capture/shared_modules.py) likewise.
            target = (
                obj.source
                if isinstance(obj, UserDefinedObjectVariable)
                or (isinstance(obj, NNModuleVariable) and obj.shared)
                else None
            )
            refuse_mutated_private(value)
            self.output.side_effects.store_attr(real, name, value, target)
            return
        unimplemented(f"assignment to attribute {name!r} of {obj}")

    def DELETE_ATTR(self, inst):
        self.delete_attr(self.pop(), inst.argval)

    def delete_attr(self, obj: VariableTracker, name: str) -> None:
        """``del obj.name`` (the DELETE_ATTR opcode and ``delattr``)."""
        from .variables.user_defined import is_private, private_setattr

        if isinstance(obj, NewObjectVariable):
            obj.delete_attr(self, name)
            return
        if is_private(obj):
            private_setattr(self, obj, name, None)
            return
        unimplemented(f"deletion of attribute {name!r} (side effect)")

    # --- operators ------------------------------------------------------------------------
    def BINARY_OP(self, inst):
        b = self.pop()
        a = self.pop()
        self.push(self.binary_op(inst.argrepr, a, b))

    def COMPARE_OP(self, inst):
        b = self.pop()
        a = self.pop()
        op = inst.argval
        if isinstance(op, str) and op.startswith("bool("):
            op = op[5:-1]
        self.push(self.compare(op, a, b))

    def IS_OP(self, inst):
        b = self.pop()
        a = self.pop()
        result = self.is_(a, b)
        self.push(ConstantVariable(result != bool(inst.arg)))

    def CONTAINS_OP(self, inst):
        container = self.pop()
        item = self.pop()
        if isinstance(container, (BaseListVariable,)):
            result = contains(self, container.items, item).value
        elif (
            isinstance(container, (ConstDictVariable, NNModuleVariable))
            or not container.is_python_constant()
        ):
            result = container.call_method(self, "__contains__", [item], {}).as_python_constant()
        else:
            if isinstance(item, TensorVariable):
                unimplemented("`in` test on a tensor")
            result = item.as_python_constant() in container.as_python_constant()
        self.push(ConstantVariable(result != bool(inst.arg)))

    def _unary(self, fn):
        v = self.pop()
        if isinstance(v, TensorVariable):
            self.push(self.output.call_function(self, fn, [v], {}))
        elif v.is_python_constant():
            value = v.as_python_constant()
            try:
                result = fn(value)
            except TypeError:
                if not has_symbolic(value):
                    raise
                # SymInt has no ~, SymBool no unary -: the concrete value, under a guard
                result = fn(specialize_deep(value))
            self.push(wrap_constant_or_object(result))
        else:
            unimplemented(f"unary {fn.__name__} on {v}")

    def UNARY_NEGATIVE(self, inst):
        self._unary(operator.neg)

    def UNARY_POSITIVE(self, inst):
        self._unary(operator.pos)

    def UNARY_INVERT(self, inst):
        self._unary(operator.invert)

    def UNARY_NOT(self, inst):
        self.push(ConstantVariable(not self.pop().truthiness(self)))

    def CALL_INTRINSIC_1(self, inst):  # 3.12
        if inst.argrepr == "INTRINSIC_UNARY_POSITIVE":
            self._unary(operator.pos)
        elif inst.argrepr == "INTRINSIC_LIST_TO_TUPLE":
            self.push(TupleVariable(self.pop().unpack_var_sequence(self)))
        else:
            unimplemented(f"CALL_INTRINSIC_1 {inst.argrepr}")

    # --- calls ----------------------------------------------------------------------------
    def KW_NAMES(self, inst):
        self.kw_names = self.code.co_consts[inst.arg]

    def CALL(self, inst):
        n = inst.arg
        args = self.popn(n)
        a, b = self.popn(2)
        if isinstance(a, NullVariable):
            fn = b
        else:
            fn = a
            args = [b, *args]
        kwargs = {}
        if self.kw_names:
            names = self.kw_names
            kw_values = args[len(args) - len(names) :]
            args = args[: len(args) - len(names)]
            kwargs = dict(zip(names, kw_values))
            self.kw_names = None
        self.push(self.call(fn, args, kwargs))

    def CALL_FUNCTION_EX(self, inst):
        kwargs_var = self.pop() if inst.arg & 1 else None
        args_var = self.pop()
        fn = self.pop()
        if self.stack and isinstance(self.stack[-1], NullVariable):
            self.pop()
        args = args_var.unpack_var_sequence(self)
        kwargs = {}
        if kwargs_var is not None:
            if not isinstance(kwargs_var, ConstDictVariable):
                unimplemented(f"**kwargs from {kwargs_var}")
            kwargs = dict(kwargs_var.items)
        self.push(self.call(fn, list(args), kwargs))

    def MAKE_FUNCTION(self, inst):
        flags = inst.arg
        code = self.pop().as_python_constant()
        closure = self.pop().items if flags & 0x08 else ()
        if flags & 0x04:
            self.pop()  # annotations
        kwdefaults = self._function_kwdefaults(self.pop()) if flags & 0x02 else {}
        # A default tuple of constants is one LOAD_CONST (a ConstantVariable of a tuple).
        defaults = self.pop().unpack_var_sequence(self) if flags & 0x01 else ()
        fn = NestedUserFunctionVariable(
            code,
            self.f_globals,
            code.co_name,
            code.co_qualname,
            tuple(defaults),
            dict(kwdefaults),
            tuple(closure),
        )
        fn.globals_source = self.globals_source
        self.push(fn)

    @staticmethod
    def _function_kwdefaults(value: VariableTracker) -> dict[str, VariableTracker]:
        """MAKE_FUNCTION's keyword-only defaults: a dict built by BUILD_MAP or
        BUILD_CONST_KEY_MAP, or one constant dict."""
        if isinstance(value, ConstDictVariable):
            return dict(value.items)
        if value.is_python_constant() and isinstance(value.as_python_constant(), dict):
            return {k: wrap_constant_or_object(v) for k, v in value.as_python_constant().items()}
        unimplemented(f"keyword-only defaults {value} of a function made in the captured code")

    # --- control flow ---------------------------------------------------------------------
    def _jump_if(self, inst, want: bool, pop: bool = True):
        value = self.pop() if pop else self.stack[-1]
        if value.truthiness(self) == want:
            if not pop:
                pass
            self.jump(inst)
        elif not pop:
            self.pop()

    def POP_JUMP_IF_TRUE(self, inst):
        self._jump_if(inst, True)

    def POP_JUMP_IF_FALSE(self, inst):
        self._jump_if(inst, False)

    POP_JUMP_FORWARD_IF_TRUE = POP_JUMP_BACKWARD_IF_TRUE = POP_JUMP_IF_TRUE
    POP_JUMP_FORWARD_IF_FALSE = POP_JUMP_BACKWARD_IF_FALSE = POP_JUMP_IF_FALSE

    def _is_none(self, value) -> bool:
        if isinstance(value, ConstantVariable):
            return value.value is None
        if isinstance(value, (TensorVariable, NullVariable)):
            return False
        return self.is_(value, ConstantVariable(None))

    def POP_JUMP_IF_NONE(self, inst):
        if self._is_none(self.pop()):
            self.jump(inst)

    def POP_JUMP_IF_NOT_NONE(self, inst):
        if not self._is_none(self.pop()):
            self.jump(inst)

    POP_JUMP_FORWARD_IF_NONE = POP_JUMP_BACKWARD_IF_NONE = POP_JUMP_IF_NONE
    POP_JUMP_FORWARD_IF_NOT_NONE = POP_JUMP_BACKWARD_IF_NOT_NONE = POP_JUMP_IF_NOT_NONE

    def JUMP_IF_TRUE_OR_POP(self, inst):  # 3.11
        if self.stack[-1].truthiness(self):
            self.jump(inst)
        else:
            self.pop()

    def JUMP_IF_FALSE_OR_POP(self, inst):  # 3.11
        if not self.stack[-1].truthiness(self):
            self.jump(inst)
        else:
            self.pop()

    def JUMP_FORWARD(self, inst):
        self.jump(inst)

    JUMP_BACKWARD = JUMP_BACKWARD_NO_INTERRUPT = JUMP_ABSOLUTE = JUMP = JUMP_FORWARD

    def GET_ITER(self, inst):
        obj = self.pop()
        if isinstance(obj, IteratorVariable):
            self.push(obj)
        else:
            self.push(ListIteratorVariable(obj.unpack_var_sequence(self)))

    def FOR_ITER(self, inst):
        it = self.stack[-1]
        if not isinstance(it, IteratorVariable):
            unimplemented(f"for loop over {it}")
        item = it.next_item()
        if item is not None:
            self.push(item)
            return
        self.pop()
        self.jump(inst)
        if self.instructions[self.ip].opname == "END_FOR":
            self.ip += 1

    # --- with blocks ----------------------------------------------------------------------
    def BEFORE_WITH(self, inst):
        from .variables import context_managers

        ctx = self.pop()
        if isinstance(ctx, (GradModeVariable, AutocastVariable)):
            exit_var, entered = WithExitVariable(ctx), ctx.enter(self)
        else:
            exit_var, entered = context_managers.enter(self, ctx)
        if self.parent is None:
            self.open_withs.append(self.ip - 1)
        self.push(exit_var)
        self.push(entered)

    # --- generators (an inlined generator's body runs up to each yield) --------------------
    def RETURN_GENERATOR(self, inst):
        self.push(ConstantVariable(None))

    def YIELD_VALUE(self, inst):
        if not self.is_generator:
            unimplemented("yield in the captured frame")
        value = self.pop()
        self.push(ConstantVariable(None))  # what `yield` evaluates to on resume (no send())
        raise GeneratorYield(value)

    # --- exits ----------------------------------------------------------------------------
    def RETURN_VALUE(self, inst):
        raise _Return(self.pop())

    def RAISE_VARARGS(self, inst):
        unimplemented("raise statement reached while capturing")

    def LOAD_ASSERTION_ERROR(self, inst):
        unimplemented("assertion failed while capturing")


def _builtins_of(f_globals: dict) -> dict:
    b = f_globals.get("__builtins__", __builtins__)
    return b if isinstance(b, dict) else b.__dict__


class InliningInstructionTranslator(InstructionTranslatorBase):
    """A user function called from traced code, interpreted into the same graph."""

    parent: InstructionTranslatorBase | None = None


class InstructionTranslator(InstructionTranslatorBase):
    """The captured frame. Its arguments, globals and closure are the graph's inputs."""

    def __init__(self, frame, output: OutputGraph, stop_at: int | None = None) -> None:
        code = frame.f_code
        super().__init__(code, frame.f_globals, frame.f_builtins, {}, {}, output)
        self.stop_at = stop_at
        nargs = code.co_argcount + code.co_kwonlyargcount
        nargs += bool(code.co_flags & inspect.CO_VARARGS) + bool(
            code.co_flags & inspect.CO_VARKEYWORDS
        )
        self.nargs = nargs
        for slot, name in enumerate(code.co_varnames[:nargs]):
            value = frame.arg_values[slot]
            var = wrap_value(self, value, LocalSource(name, slot))
            if slot >= code.co_argcount + code.co_kwonlyargcount and hasattr(var, "mutable_local"):
                # *args / **kwargs are fresh containers made for this call: local to the frame
                var.mutable_local = True
                var.source = None
                var.__dict__.pop("real", None)
            self.symbolic_locals[name] = var
        closure = frame.closure or ()
        for index, name in enumerate(code.co_freevars):
            try:
                contents = closure[index].cell_contents
            except ValueError:
                self.cells[name] = CellVariable(None, source_bound=True)
                continue
            cell = CellVariable(
                wrap_value(self, contents, ClosureSource(name, index)), source_bound=True
            )
            cell.real_cell = closure[index]
            self.cells[name] = cell
        for name in code.co_cellvars:
            if name not in self.cells:
                self.cells[name] = CellVariable(None)


def _bool_as_int(value, other):
    """``value`` as an int when it is a bool and ``other`` a symbolic int or float: Python
    computes ``True + n`` as ``1 + n``, but a SymInt's arithmetic takes no bool (sympy
    raises "BooleanAtom not allowed in this context")."""
    if isinstance(value, bool) and isinstance(other, (torch.SymInt, torch.SymFloat)):
        return int(value)
    return value


def _is_numpy_value(value: Any) -> bool:
    """A NumPy scalar or array (its arithmetic result types are NumPy's)."""
    return (type(value).__module__ or "").split(".")[0] == "numpy"


def _object_seen(obj: VariableTracker):
    """The real object behind a user-object or nn.Module variable, without guarding its
    identity (side effects are keyed by it while tracing)."""
    if isinstance(obj, UserDefinedObjectVariable):
        return obj.value
    if isinstance(obj, NNModuleVariable):
        return obj.module
    return obj.as_python_constant()
