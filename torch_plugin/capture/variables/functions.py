"""Python functions and methods, called by inlining their bytecode.

Key classes: :class:`UserFunctionVariable` (a real function object),
:class:`UserMethodVariable` (a function bound to a symbolic ``self``),
:class:`NestedUserFunctionVariable` (a function created by MAKE_FUNCTION while tracing,
whose defaults and closure cells are symbolic), :class:`CellVariable` (a closure cell
created while tracing) and :func:`bind_args` (CPython's argument binding, applied to
symbolic values).
"""

from __future__ import annotations

import inspect
import types
from typing import Any

from .. import graph_break_types as gbt
from ..exc import unimplemented
from .base import CallableVariable, VariableTracker
from .constant import ConstantVariable
from .dicts import ConstDictVariable
from .lists import TupleVariable


class CellVariable(VariableTracker):
    """A closure cell; ``contents`` is None while the cell is empty."""

    def __init__(self, contents: VariableTracker | None = None, source_bound: bool = False) -> None:
        super().__init__()
        self.contents = contents
        # True for cells of real function objects: writing them is a side effect.
        self.source_bound = source_bound
        self.real_cell = None  # the real cell object, when source_bound


def bind_args(
    code: types.CodeType,
    defaults: tuple,
    kwdefaults: dict,
    args: list[VariableTracker],
    kwargs: dict[str, VariableTracker],
) -> dict[str, VariableTracker]:
    """Bind call arguments to ``code``'s parameters as CPython does (defaults are variables).

    Raises Unsupported for calls CPython would reject with TypeError, so the frame runs
    unmodified and the user sees Python's own error.
    """
    nargs = code.co_argcount
    nposonly = code.co_posonlyargcount
    nkwonly = code.co_kwonlyargcount
    names = code.co_varnames
    pos_names = names[:nargs]
    kwonly_names = names[nargs : nargs + nkwonly]
    has_varargs = bool(code.co_flags & inspect.CO_VARARGS)
    has_varkw = bool(code.co_flags & inspect.CO_VARKEYWORDS)
    bound: dict[str, VariableTracker] = {}
    for name, value in zip(pos_names, args):
        bound[name] = value
    extra = list(args[nargs:])
    if extra and not has_varargs:
        unimplemented(gbt.EXCEPTION, f"{code.co_name}() got too many positional arguments")
    extra_kwargs: dict[str, VariableTracker] = {}
    for key, value in kwargs.items():
        if key in pos_names[nposonly:] or key in kwonly_names:
            if key in bound:
                unimplemented(
                    gbt.EXCEPTION, f"{code.co_name}() got multiple values for argument {key!r}"
                )
            bound[key] = value
        elif has_varkw:
            extra_kwargs[key] = value
        else:
            unimplemented(
                gbt.EXCEPTION, f"{code.co_name}() got an unexpected keyword argument {key!r}"
            )
    ndefaults = len(defaults)
    for i, name in enumerate(pos_names):
        if name not in bound:
            j = i - (nargs - ndefaults)
            if j < 0:
                unimplemented(gbt.EXCEPTION, f"{code.co_name}() missing required argument {name!r}")
            bound[name] = defaults[j]
    for name in kwonly_names:
        if name not in bound:
            if name not in kwdefaults:
                unimplemented(
                    gbt.EXCEPTION, f"{code.co_name}() missing keyword-only argument {name!r}"
                )
            bound[name] = kwdefaults[name]
    idx = nargs + nkwonly
    if has_varargs:
        bound[names[idx]] = TupleVariable(extra)
        idx += 1
    if has_varkw:
        bound[names[idx]] = ConstDictVariable(extra_kwargs, mutable_local=True)
    return bound


def _wrap_defaults(fn: types.FunctionType) -> tuple[tuple, dict]:
    from .builder import wrap_constant_or_object

    defaults = tuple(wrap_constant_or_object(v) for v in (fn.__defaults__ or ()))
    kwdefaults = {k: wrap_constant_or_object(v) for k, v in (fn.__kwdefaults__ or {}).items()}
    return defaults, kwdefaults


class BaseUserFunctionVariable(VariableTracker):
    def get_code(self) -> types.CodeType:
        raise NotImplementedError

    def get_globals(self) -> dict:
        raise NotImplementedError

    def bind(self, args, kwargs) -> dict[str, VariableTracker]:
        raise NotImplementedError

    def closure_cells(self, tx) -> dict[str, VariableTracker]:
        """Free variable name -> CellVariable for the inlined frame."""
        raise NotImplementedError

    def call_function(self, tx, args, kwargs):
        return tx.inline_user_function(self, list(args), dict(kwargs))


class UserFunctionVariable(BaseUserFunctionVariable):
    """A real Python function; calls are inlined into the current graph."""

    def __init__(self, fn: types.FunctionType, source=None) -> None:
        super().__init__(source)
        self.fn = fn

    def python_type(self) -> type:
        return types.FunctionType

    def as_python_constant(self) -> Any:
        return self.fn

    def get_code(self):
        return self.fn.__code__

    def get_globals(self):
        return self.fn.__globals__

    def bind(self, args, kwargs):
        defaults, kwdefaults = _wrap_defaults(self.fn)
        return bind_args(self.fn.__code__, defaults, kwdefaults, args, kwargs)

    def closure_cells(self, tx):
        from ..sources import AttrSource, ItemSource
        from .builder import wrap_value

        cells = {}
        code = self.fn.__code__
        for i, name in enumerate(code.co_freevars):
            cell = self.fn.__closure__[i]
            try:
                value = cell.cell_contents
            except ValueError:
                cells[name] = CellVariable(None, source_bound=True)
                cells[name].real_cell = cell
                continue
            source = None
            if self.source is not None:
                source = AttrSource(
                    ItemSource(AttrSource(self.source, "__closure__"), i), "cell_contents"
                )
            cells[name] = CellVariable(wrap_value(tx, value, source), source_bound=True)
            cells[name].real_cell = cell
        return cells

    def var_getattr(self, tx, name):
        if name in ("__name__", "__qualname__", "__module__", "__doc__"):
            return ConstantVariable(getattr(self.fn, name))
        if name == "__code__":
            return ConstantVariable(self.fn.__code__)
        from .attribute_rules import function_attribute

        value = function_attribute(tx, self, name)
        if value is not None:
            return value
        unimplemented(
            gbt.UNMODELLED_VALUE, f"attribute {name!r} of function {self.fn.__qualname__}"
        )

    def __repr__(self) -> str:
        return f"UserFunctionVariable({self.fn.__qualname__})"


class UserMethodVariable(UserFunctionVariable):
    """A Python function bound to a symbolic ``self`` (``obj.method``)."""

    def __init__(self, fn: types.FunctionType, obj: VariableTracker, source=None) -> None:
        super().__init__(fn, source)
        self.obj = obj

    def python_type(self) -> type:
        return types.MethodType

    def as_python_constant(self) -> Any:
        return types.MethodType(self.fn, self.obj.as_python_constant())

    def call_function(self, tx, args, kwargs):
        return tx.inline_user_function(self, [self.obj, *args], dict(kwargs))

    def var_getattr(self, tx, name):
        if name == "__self__":
            return self.obj
        if name == "__func__":
            return UserFunctionVariable(self.fn)
        return super().var_getattr(tx, name)

    def __repr__(self) -> str:
        return f"UserMethodVariable({self.fn.__qualname__})"


class NestedUserFunctionVariable(BaseUserFunctionVariable):
    """A function made by MAKE_FUNCTION during tracing (lambdas, comprehensions, closures)."""

    def __init__(self, code, fn_globals, name, qualname, defaults, kwdefaults, closure) -> None:
        super().__init__()
        self.code = code
        self.fn_globals = fn_globals
        self.name = name
        self.qualname = qualname
        self.defaults = defaults or ()
        self.kwdefaults = kwdefaults or {}
        self.closure = closure or ()

    def python_type(self) -> type:
        return types.FunctionType

    def get_code(self):
        return self.code

    def get_globals(self):
        return self.fn_globals

    def bind(self, args, kwargs):
        return bind_args(self.code, tuple(self.defaults), dict(self.kwdefaults), args, kwargs)

    def closure_cells(self, tx):
        return dict(zip(self.code.co_freevars, self.closure))

    def __repr__(self) -> str:
        return f"NestedUserFunctionVariable({self.qualname})"


class DisabledFunctionVariable(CallableVariable):
    """A function wrapped by ``torch_plugin.disable``, marked by ``torch.compiler.disable``, or
    compiled by ``torch.compile``: calling it is a graph break (it runs in CPython, outside
    capture; see torch_compile_interop)."""

    def __init__(self, fn, source=None, reason: str | None = None) -> None:
        super().__init__(fn, source)
        self.reason = reason

    def call_function(self, tx, args, kwargs):
        unimplemented(
            gbt.RUNS_OUTSIDE_CAPTURE,
            self.reason
            or f"call to {getattr(self.fn, '__qualname__', self.fn)}, run with capture off"
            " (torch_plugin.disable, torch.utils.checkpoint)",
        )


from .partials import PartialVariable  # noqa: F401 - re-exported
