"""Python's operator protocol on user objects, and the sequence operators the generic
constant path cannot do (``() + (x,)``).

Key functions: :func:`binary_op`, :func:`compare`, :func:`unary` (called first by the
translator's operator handlers; None: not modelled here, the generic handler decides).

A user object's operator is its class's Python method, *inlined* (never run for real at
capture time: ``Vec.__add__`` on the objects seen at capture baked their values into the
graph as constants, silently stale once the object's attributes changed). CPython's order
(``Objects/abstract.c`` ``binary_op1``, ``Objects/object.c`` ``do_richcompare``): the
reflected method of the right operand first when its type is a proper subclass of the left
operand's that overrides it, then the left operand's method, then the right one's;
``NotImplemented`` moves on; ``==``/``!=`` end in identity. An operator slot implemented in
C on a user class (a subclass of ``int`` or ``list``) is left to the generic handler.
Where the other operand is a tensor or a constant of a builtin type, its own method
returns NotImplemented for a plain user object, except in the cases that would call back
into the object (``str % obj``, ``seq * obj`` with ``__index__``, a class with
``__torch_function__``/``__array__``): a graph break.
"""

from __future__ import annotations

import types

from .. import graph_break_types as gbt
from ..exc import unimplemented
from .base import VariableTracker
from .constant import ConstantVariable
from .lists import BaseListVariable, ListVariable, TupleVariable

_BINARY = {
    "+": ("__add__", "__radd__"),
    "-": ("__sub__", "__rsub__"),
    "*": ("__mul__", "__rmul__"),
    "@": ("__matmul__", "__rmatmul__"),
    "/": ("__truediv__", "__rtruediv__"),
    "//": ("__floordiv__", "__rfloordiv__"),
    "%": ("__mod__", "__rmod__"),
    "**": ("__pow__", "__rpow__"),
    "<<": ("__lshift__", "__rlshift__"),
    ">>": ("__rshift__", "__rrshift__"),
    "&": ("__and__", "__rand__"),
    "|": ("__or__", "__ror__"),
    "^": ("__xor__", "__rxor__"),
}
_REFLECTED_COMPARE = {
    "<": ("__lt__", "__gt__"),
    "<=": ("__le__", "__ge__"),
    ">": ("__gt__", "__lt__"),
    ">=": ("__ge__", "__le__"),
    "==": ("__eq__", "__eq__"),
    "!=": ("__ne__", "__ne__"),
}
_UNARY = {"neg": "__neg__", "pos": "__pos__", "invert": "__invert__", "abs": "__abs__"}
# Methods through which a builtin type's operator calls back into a user object.
_CALLBACKS = ("__index__", "__torch_function__", "__array__", "__array_ufunc__")


def _user_class(var: VariableTracker) -> type | None:
    """The class of ``var`` when it is a user object (a real one or one built in the frame)
    whose operators are Python methods to inline; None for any other value."""
    from .new_object import NewObjectVariable
    from .user_defined import UserDefinedObjectVariable

    if isinstance(var, NewObjectVariable):
        return var.cls
    if isinstance(var, UserDefinedObjectVariable):
        cls = type(var.value)
        if cls.__module__ in ("builtins",) or not hasattr(var.value, "__dict__"):
            return None  # C objects (a mappingproxy, a builtin method): the generic path
        return cls
    return None


def _slot(cls: type, name: str):
    """The class's method ``name``: a Python function, None when absent or ``object``'s
    default, or the string "C" for a C implementation (not modelled)."""
    from .user_defined import class_lookup

    attr = class_lookup(cls, name)
    if attr is None or getattr(object, name, None) is attr:
        return None
    if isinstance(attr, types.FunctionType):
        return attr
    return "C"


def _call(tx, fn, self_var, other) -> VariableTracker:
    from .functions import UserFunctionVariable

    return UserFunctionVariable(fn).call_function(tx, [self_var, other], {})


def _not_implemented(v: VariableTracker) -> bool:
    return isinstance(v, ConstantVariable) and v.value is NotImplemented


def _refuse_callbacks(op: str, user_cls: type, other: VariableTracker) -> None:
    from .tensor import TensorVariable

    if any(_slot(user_cls, n) for n in _CALLBACKS) and (
        isinstance(other, TensorVariable) or other.is_python_constant()
    ):
        unimplemented(gbt.UNMODELLED_VALUE, f"operator {op} between {other} and a user object")
    if (
        op.rstrip("=") == "%"
        and isinstance(other, ConstantVariable)
        and isinstance(other.value, (str, bytes))
    ):
        unimplemented(gbt.UNMODELLED_VALUE, "printf-style formatting of a user object")


def _binary_protocol(tx, a, b, name, rname) -> VariableTracker:
    ca, cb = _user_class(a), _user_class(b)
    fa = _slot(ca, name) if ca is not None else None
    fb = _slot(cb, rname) if cb is not None else None
    order = [(fa, a, b), (fb, b, a)]
    if ca is not None and cb is not None and cb is not ca and issubclass(cb, ca) and fb:
        if fb is not (_slot(ca, rname) if ca is not None else None):
            order.reverse()  # a subclass's reflected method first
    if ca is not None and cb is ca:
        order = [(fa, a, b)]  # same type: no reflected call
    for fn, self_var, other in order:
        if fn is None:
            continue
        result = _call(tx, fn, self_var, other)
        if not _not_implemented(result):
            return result
    unimplemented(gbt.EXCEPTION, f"unsupported operand types for {name} (TypeError in eager)")


def binary_op(tx, op: str, a: VariableTracker, b: VariableTracker) -> VariableTracker | None:
    """``a op b`` (``op`` as BINARY_OP spells it, in-place forms end in "=")."""
    ua, ub = _user_class(a), _user_class(b)
    if ua is not None or ub is not None:
        if ua is not None:
            _refuse_callbacks(op, ua, b)
        if ub is not None:
            _refuse_callbacks(op, ub, a)
        base = op.rstrip("=")
        if base not in _BINARY:
            unimplemented(gbt.UNSUPPORTED_BYTECODE, f"operator {op} on a user object")
        name, rname = _BINARY[base]
        slots = [_slot(c, n) for c, n in ((ua, name), (ub, rname), (ua, "__i" + name[2:])) if c]
        if "C" in slots:
            return None  # a C slot (a subclass of a builtin type): the generic handler
        if op.endswith("=") and ua is not None:
            inplace = _slot(ua, "__i" + name[2:])
            if inplace is not None:
                result = _call(tx, inplace, a, b)
                if not _not_implemented(result):
                    return result
        return _binary_protocol(tx, a, b, name, rname)
    return _sequence_op(op, a, b)


def _sequence_op(op: str, a: VariableTracker, b: VariableTracker) -> VariableTracker | None:
    """``+`` between a tuple constant (``()``, LOAD_CONST) and a tuple of variables, and the
    TypeError of ``list + tuple``; None for anything else."""
    if op not in ("+", "+="):
        return None
    seq_a = _as_items(a)
    seq_b = _as_items(b)
    if seq_a is None or seq_b is None:
        return None
    (cls_a, items_a), (cls_b, items_b) = seq_a, seq_b
    if op == "+=" and cls_a is list:
        return None  # list.extend(any iterable): the generic handler
    if cls_a is not cls_b:
        unimplemented(
            gbt.EXCEPTION,
            f'can only concatenate {cls_a.__name__} (not "{cls_b.__name__}") to {cls_a.__name__}',
        )
    if isinstance(a, ConstantVariable) and isinstance(b, ConstantVariable):
        return None
    if cls_a is tuple:
        return TupleVariable(items_a + items_b)
    return None  # lists: the generic handler


def _as_items(var: VariableTracker):
    from .lists import NamedTupleVariable

    if isinstance(var, ConstantVariable) and type(var.value) in (tuple, list):
        return type(var.value), [ConstantVariable(v) for v in var.value]
    if isinstance(var, NamedTupleVariable):
        return tuple, list(var.items)
    if isinstance(var, BaseListVariable) and type(var) in (TupleVariable, ListVariable):
        return var.python_cls, list(var.items)
    return None


def compare(tx, op: str, a: VariableTracker, b: VariableTracker) -> VariableTracker | None:
    """``a op b`` for the rich comparisons when an operand is a user object."""
    ua, ub = _user_class(a), _user_class(b)
    if ua is None and ub is None:
        return None
    name, rname = _REFLECTED_COMPARE[op]
    fa = _slot(ua, name) if ua is not None else None
    fb = _slot(ub, rname) if ub is not None else None
    if "C" in (fa, fb):
        return None  # a C slot (a subclass of a builtin type): the generic handler
    if op == "!=" and fa is None and fb is None:
        # object.__ne__ inverts __eq__ (unless NotImplemented)
        eq = compare(tx, "==", a, b)
        return ConstantVariable(not eq.truthiness(tx))
    order = [(fa, a, b), (fb, b, a)]
    if ua is not None and ub is not None and ub is not ua and issubclass(ub, ua) and fb:
        order.reverse()
    for fn, self_var, other in order:
        if fn is None:
            continue
        result = _call(tx, fn, self_var, other)
        if not _not_implemented(result):
            return result
    if op in ("==", "!="):
        same = tx.is_(a, b)
        return ConstantVariable(same == (op == "=="))
    unimplemented(gbt.EXCEPTION, f"'{op}' not supported between these objects (TypeError)")


def unary(tx, kind: str, v: VariableTracker) -> VariableTracker | None:
    """``-v``, ``+v``, ``~v``, ``abs(v)`` on a user object: its Python method, inlined."""
    cls = _user_class(v)
    if cls is None:
        return None
    fn = _slot(cls, _UNARY[kind])
    if fn is None:
        unimplemented(gbt.EXCEPTION, f"bad operand type for unary {kind} (TypeError in eager)")
    if fn == "C":
        return None
    from .functions import UserFunctionVariable

    return UserFunctionVariable(fn).call_function(tx, [v], {})
