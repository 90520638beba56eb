"""Opcode handlers for calls, and the inlining of user functions.

Key class: :class:`CallInstructions`, a mixin of
:class:`~torch_plugin.capture.symbolic_convert.InstructionTranslatorBase`: KW_NAMES, CALL,
CALL_FUNCTION_EX and MAKE_FUNCTION, and :meth:`CallInstructions.inline_user_function`, which
runs a called Python function in a new inlining translator (its operations join the same
graph) unless the call is one the capture models otherwise: ``os.getenv``, a logger call, an
import probe, a function marked by torch.compile, or a pure standard-library helper folded at
capture time on constants (``inspect.signature``, ``dataclasses.fields``, ``copy.deepcopy``
of an object whose whole state is guarded).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import os
import types
from typing import Any

from . import graph_break_types as gbt
from . import torch_compile_interop
from .attribute_instructions import _object_seen
from .bytecode_compat import callable_and_self
from .exc import Unsupported, unimplemented
from .sources import ObjectSource
from .variables.base import NullVariable, VariableTracker
from .variables.builder import wrap_constant_or_object, wrap_value
from .variables.dicts import ConstDictVariable
from .variables.functions import (
    BaseUserFunctionVariable,
    CellVariable,
    NestedUserFunctionVariable,
    UserFunctionVariable,
    UserMethodVariable,
)
from .variables.iterators import GeneratorVariable
from .variables.lists import BaseListVariable
from .variables.nn_module import NNModuleVariable
from .variables.user_defined import UserDefinedObjectVariable

MAX_INLINE_DEPTH = 64
_GENERATOR_FLAGS = inspect.CO_GENERATOR
_UNSUPPORTED_CODE_FLAGS = (
    inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR | inspect.CO_ITERABLE_COROUTINE
)


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


class CallInstructions:
    """Call opcodes of the translator and user-function inlining. See the module docstring."""

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
        from .optimizer_steps import is_optimizer_step

        if is_optimizer_step(fn_var):
            # Never inlined: the step runs after the graph, as the backend runs steps
            # (optimizer_steps.py).
            unimplemented(gbt.OPTIMIZER_STEP, "call to optimizer.step()")
        code = fn_var.get_code()
        if code.co_flags & _UNSUPPORTED_CODE_FLAGS:
            unimplemented(gbt.GENERATOR, f"call to coroutine/async function {code.co_name}")
        if self.depth >= MAX_INLINE_DEPTH:
            unimplemented(gbt.CAPTURE_LIMIT, "inlining too deep (recursion?)")
        if isinstance(fn_var, UserFunctionVariable):  # e.g. a disabled method: obj.method
            reason = torch_compile_interop.call_reason(fn_var.fn)
            if reason is not None:
                unimplemented(gbt.RUNS_OUTSIDE_CAPTURE, reason)
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
        sub = self.inlining_translator(code, fn_globals, bound, cells)
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
        of the object's state is guarded (:func:`~.variables.object_copies.guard_state`)."""
        stateful = [a for a in args if _holds_object_state(a)]
        if not stateful or fn in _TYPE_ONLY_STDLIB:
            return True
        if fn not in _DEEP_COPY_STDLIB:
            return False
        from .variables.object_copies import guard_state

        return all(
            isinstance(a, UserDefinedObjectVariable) and guard_state(self, a.value, a.source)
            for a in stateful
        )

    def KW_NAMES(self, inst):
        self.kw_names = self.code.co_consts[inst.arg]

    def CALL(self, inst):
        n = inst.arg
        args = self.popn(n)
        a, b = self.popn(2)
        fn, self_arg = callable_and_self(a, b, lambda v: isinstance(v, NullVariable))
        if self_arg is not None:
            args = [self_arg, *args]
        kwargs = {}
        if self.kw_names:
            names = self.kw_names
            kw_values = args[len(args) - len(names) :]
            args = args[: len(args) - len(names)]
            kwargs = dict(zip(names, kw_values))
            self.kw_names = None
        self.push(self.call(fn, args, kwargs))

    def CALL_KW(self, inst):  # 3.13: the keyword names are a tuple on the stack
        self.kw_names = self.pop().as_python_constant()
        self.CALL(inst)

    def CALL_FUNCTION_EX(self, inst):
        kwargs_var = self.pop() if inst.arg & 1 else None
        args_var = self.pop()
        fn = self.pop()
        if isinstance(fn, NullVariable):  # 3.13: callable, NULL, args
            fn = self.pop()
        elif self.stack and isinstance(self.stack[-1], NullVariable):
            self.pop()
        args = args_var.unpack_var_sequence(self)
        kwargs = {}
        if kwargs_var is not None:
            if not isinstance(kwargs_var, ConstDictVariable):
                unimplemented(gbt.VALUE_NOT_CONSTANT, f"**kwargs from {kwargs_var}")
            kwargs = dict(kwargs_var.items)
        self.push(self.call(fn, list(args), kwargs))

    def MAKE_FUNCTION(self, inst):
        flags = inst.arg or 0  # 3.13: no argument; SET_FUNCTION_ATTRIBUTE follows
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

    def SET_FUNCTION_ATTRIBUTE(self, inst):  # 3.13
        fn = self.pop()
        value = self.pop()
        if not isinstance(fn, NestedUserFunctionVariable):
            unimplemented(gbt.UNSUPPORTED_BYTECODE, f"SET_FUNCTION_ATTRIBUTE on {fn}")
        flag = inst.arg
        if flag == 0x08:
            fn.closure = tuple(value.items)
        elif flag == 0x02:
            fn.kwdefaults = dict(self._function_kwdefaults(value))
        elif flag == 0x01:
            fn.defaults = tuple(value.unpack_var_sequence(self))
        elif flag != 0x04:  # 0x04: annotations, unused
            unimplemented(gbt.UNSUPPORTED_BYTECODE, f"SET_FUNCTION_ATTRIBUTE {flag}")
        self.push(fn)

    @staticmethod
    def _function_kwdefaults(value: VariableTracker) -> dict[str, VariableTracker]:
        """MAKE_FUNCTION's keyword-only defaults: a dict built by BUILD_MAP or
        BUILD_CONST_KEY_MAP, or one constant dict."""
        if isinstance(value, ConstDictVariable):
            return dict(value.items)
        if value.is_python_constant() and isinstance(value.as_python_constant(), dict):
            return {k: wrap_constant_or_object(v) for k, v in value.as_python_constant().items()}
        unimplemented(
            gbt.VALUE_NOT_CONSTANT,
            f"keyword-only defaults {value} of a function made in the captured code",
        )
