"""Python constants: values known exactly at capture time whose operations can run for real.

Key class: :class:`ConstantVariable`. It holds immutable values (None, bool, int, float,
complex, str, bytes, Ellipsis, slices, tuples of constants, torch.dtype/device/Size/layout/
memory_format, enum members, types) plus :class:`ObjectVariable`-like real values that are
safe to operate on because they cannot change (see ``is_immutable``).
"""

from __future__ import annotations

import enum
import operator
import types
from typing import Any

import torch

from .. import graph_break_types as gbt
from ..exc import unimplemented
from .base import VariableTracker
from .numpy_calls import immutable_numpy_types, is_numpy_value, refuse_effectful_method
from .numpy_calls import run as numpy_run

_IMMUTABLE_TYPES = (
    type(None),
    bool,
    int,
    float,
    complex,
    str,
    bytes,
    type(Ellipsis),
    type(NotImplemented),
    slice,
    range,
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
    torch.Size,
    enum.Enum,
    frozenset,
    types.CodeType,
    # Symbolic sizes (dynamic shapes): immutable; a Python use that needs the concrete
    # value (bool(), int(), range()) adds a ShapeEnv guard.
    torch.SymInt,
    torch.SymFloat,
    torch.SymBool,
    # NumPy scalars, dtypes, finfo/iinfo (numpy_calls.py)
    *immutable_numpy_types(),
)


def is_immutable(value: Any) -> bool:
    """True for values that no operation can mutate (containers checked recursively)."""
    if isinstance(value, tuple):
        return all(is_immutable(v) for v in value)
    if isinstance(value, frozenset):
        return all(is_immutable(v) for v in value)
    return isinstance(value, _IMMUTABLE_TYPES)


class ConstantVariable(VariableTracker):
    """An immutable value known at capture time."""

    def __init__(self, value: Any, source=None) -> None:
        super().__init__(source)
        self.value = value

    @staticmethod
    def create(value: Any) -> ConstantVariable:
        return ConstantVariable(value)

    def python_type(self) -> type:
        return type(self.value)

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self) -> Any:
        return self.value

    def truthiness(self, tx) -> bool:
        return bool(self.value)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        try:
            attr = getattr(self.value, name)
        except AttributeError:
            unimplemented(gbt.EXCEPTION, f"{type(self.value).__name__} has no attribute {name!r}")
        if callable(attr) and not isinstance(attr, type):
            return ConstantMethodVariable(self, name)
        from .builder import wrap_constant_or_object

        return wrap_constant_or_object(attr)

    def call_method(self, tx, name, args, kwargs):
        if not all(a.is_python_constant() for a in args) or not all(
            v.is_python_constant() for v in kwargs.values()
        ):
            if isinstance(self.value, str) and name == "format":
                unimplemented(gbt.VALUE_NOT_CONSTANT, "str.format with non-constant arguments")
            unimplemented(
                gbt.VALUE_NOT_CONSTANT,
                f"method {name!r} of constant {self.value!r} with non-constant arguments",
            )
        refuse_effectful_method(self.value, name)
        fn = getattr(self.value, name)
        a = [a.as_python_constant() for a in args]
        k = {k: v.as_python_constant() for k, v in kwargs.items()}
        if isinstance(self.value, (str, bytes)):
            # str.format/join/...: the text of a symbolic size is its symbol's name (s0)
            from ..dynamic_shapes import specialize_deep

            a, k = specialize_deep(a), specialize_deep(k)
        result = numpy_run(fn, *a, **k) if is_numpy_value(self.value) else fn(*a, **k)
        from .builder import wrap_constant_or_object

        return wrap_constant_or_object(result)

    def unpack_var_sequence(self, tx):
        if isinstance(self.value, (tuple, str, range, torch.Size, bytes, frozenset)):
            return [ConstantVariable(v) for v in self.value]
        unimplemented(gbt.UNMODELLED_VALUE, f"iteration over {type(self.value).__name__}")

    def __repr__(self) -> str:
        return f"ConstantVariable({self.value!r})"


class ConstantMethodVariable(VariableTracker):
    """A bound method of a constant, e.g. ``"a_b".split``."""

    def __init__(self, obj: ConstantVariable, name: str) -> None:
        super().__init__()
        self.obj = obj
        self.name = name

    def call_function(self, tx, args, kwargs):
        return self.obj.call_method(tx, self.name, args, kwargs)


def constant_binary_op(op, a: Any, b: Any) -> Any:
    """Apply ``op`` to two constants (used by the translator's operator handlers)."""
    return op(a, b)


BINARY_OPS = {
    "+": operator.add,
    "&": operator.and_,
    "//": operator.floordiv,
    "<<": operator.lshift,
    "@": operator.matmul,
    "*": operator.mul,
    "%": operator.mod,
    "|": operator.or_,
    "**": operator.pow,
    ">>": operator.rshift,
    "-": operator.sub,
    "/": operator.truediv,
    "^": operator.xor,
}
INPLACE_OPS = {
    "+=": operator.iadd,
    "&=": operator.iand,
    "//=": operator.ifloordiv,
    "<<=": operator.ilshift,
    "@=": operator.imatmul,
    "*=": operator.imul,
    "%=": operator.imod,
    "|=": operator.ior,
    "**=": operator.ipow,
    ">>=": operator.irshift,
    "-=": operator.isub,
    "/=": operator.itruediv,
    "^=": operator.ixor,
}
COMPARE_OPS = {
    "<": operator.lt,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
    ">": operator.gt,
    ">=": operator.ge,
}
