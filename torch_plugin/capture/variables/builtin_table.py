"""C builtins and C methods of builtin types, modelled by their Python-level semantics.

Key names: :data:`TABLE` (a real C callable -> its model), :class:`PureBuiltinVariable` (a
callable of the table), :class:`UnboundMethodVariable` (``set.add``, ``dict.__setitem__``,
``list.append``: a method descriptor or slot wrapper of a builtin type, called with the
object first) and the handlers for the builtins whose argument may run user code
(``sorted``/``min``/``max`` with ``key=``, ``str``/``repr`` of a user object): that code
is inlined, never run for real at capture.

Each model is the C function's documented semantics written over variables (sources: the
"roughly equivalent" Python in the ``functools``/``itertools`` documentation and the
builtins' documentation); an argument combination a model does not cover, or on which the
C function raises, is a graph break (CPython then runs it). A function goes into the table
only if it is pure for the argument types its model accepts.
"""

from __future__ import annotations

import functools
import itertools
import types
import weakref

from .. import graph_break_types as gbt
from ..exc import Unsupported, unimplemented
from . import container_iterators
from .base import CallableVariable, VariableTracker
from .constant import ConstantVariable, is_immutable
from .dicts import ConstDictVariable, dict_key
from .iterators import LazyIteratorVariable, as_iterator
from .lists import ListVariable


def _reduce(tx, args, kwargs):
    """``functools.reduce(function, iterable[, initial])``: left fold; TypeError on an
    empty iterable without ``initial``."""
    if kwargs or not 2 <= len(args) <= 3:
        unimplemented(gbt.EXCEPTION, "functools.reduce with these arguments")
    fn, seq = args[0], args[1]
    it = as_iterator(tx, seq)
    acc = args[2] if len(args) == 3 else it.next_item()
    if acc is None:
        unimplemented(gbt.EXCEPTION, "reduce() of empty iterable with no initial value")
    while (item := it.next_item()) is not None:
        acc = fn.call_function(tx, [acc, item], {})
    return acc


def _fromkeys(tx, args, kwargs):
    """``dict.fromkeys(iterable, value=None)``: every key maps to the same value object."""
    if kwargs or not 1 <= len(args) <= 2:
        unimplemented(gbt.EXCEPTION, "dict.fromkeys with these arguments")
    value = args[1] if len(args) == 2 else ConstantVariable(None)
    items = {dict_key(k): value for k in args[0].unpack_var_sequence(tx)}
    return ConstDictVariable(items, mutable_local=True)


def _chain_from_iterable(tx, args, kwargs):
    """``itertools.chain.from_iterable(iterables)``: lazy over the outer iterable too."""
    if kwargs or len(args) != 1:
        unimplemented(gbt.EXCEPTION, "chain.from_iterable takes one argument")
    outer = as_iterator(tx, args[0])
    state: dict = {"inner": None}

    def produce():
        while True:
            if state["inner"] is None:
                nxt = outer.next_item()
                if nxt is None:
                    return None
                state["inner"] = as_iterator(tx, nxt)
            item = state["inner"].next_item()
            if item is not None:
                return item
            state["inner"] = None

    return LazyIteratorVariable(produce, "chain.from_iterable")


# Classes built by ``collections.namedtuple`` during a capture (:func:`_namedtuple`).
FRAME_CLASSES: weakref.WeakSet = weakref.WeakSet()


def _namedtuple(tx, args, kwargs):
    """``collections.namedtuple(typename, field_names, *, rename=False, defaults=None,
    module=None)`` called in the frame, with constant arguments: the class is built now, by
    ``namedtuple`` itself (``module`` defaulting to the calling function's ``__name__``, as
    namedtuple reads it from its caller's frame), and its instances are modelled as any
    namedtuple's. Eager builds a new class on every call, so the class, and any instance of
    it, may not leave the frame (returned, stored outside it, live at a graph break: a
    graph break, :func:`frame_class_escape`): the capture's one class would stand for a
    new class per call."""
    import collections

    params = [*args, *kwargs.values()]
    if not all(p.is_python_constant() for p in params):
        unimplemented(
            gbt.VALUE_NOT_CONSTANT, "collections.namedtuple() with non-constant arguments"
        )
    a = [p.as_python_constant() for p in args]
    k = {name: v.as_python_constant() for name, v in kwargs.items()}
    if k.get("module") is None:
        k["module"] = tx.f_globals.get("__name__", "__main__")
    try:
        cls = collections.namedtuple(*a, **k)
    except Exception as e:  # noqa: BLE001 - eager raises it: the frame decides
        unimplemented(gbt.EXCEPTION, f"collections.namedtuple(): {type(e).__name__}: {e}")
    FRAME_CLASSES.add(cls)
    from .user_defined import UserDefinedClassVariable

    return UserDefinedClassVariable(cls)


def frame_class_escape(var: VariableTracker) -> str | None:
    """Why ``var`` may not leave the frame when it is a class :func:`_namedtuple` built, or
    an instance of one; else None."""
    cls = getattr(var, "tuple_cls", None)
    if cls is None:
        value = getattr(var, "value", None)
        cls = value if isinstance(value, type) else None
    if cls is not None and cls in FRAME_CLASSES:
        return (
            f"the namedtuple class {cls.__name__} built in the frame (or an instance of it)"
            " would leave the frame (eager builds a new class on every call)"
        )
    return None


TABLE = {
    container_iterators.resume_iterator: container_iterators.model_resume_iterator,
    container_iterators.resume_lazy_iterator: container_iterators.model_resume_lazy_iterator,
    functools.reduce: _reduce,
    dict.fromkeys: _fromkeys,
    itertools.chain.from_iterable: _chain_from_iterable,
    __import__("collections").namedtuple: _namedtuple,
}


def lookup(value):
    """The model of ``value`` (a real callable), or None."""
    try:
        return TABLE.get(value)
    except TypeError:  # unhashable
        return None


def bound_to_builtin_type(value) -> bool:
    """A classmethod of a builtin type (``dict.fromkeys``): a new object on every attribute
    read, so not guarded by identity (the type's own attributes cannot be reassigned)."""
    owner = getattr(value, "__self__", None)
    return isinstance(owner, type) and owner.__module__ in ("builtins", "itertools")


class PureBuiltinVariable(CallableVariable):
    """A C function of :data:`TABLE`, called through its model."""

    def call_function(self, tx, args, kwargs):
        return TABLE[self.fn](tx, list(args), dict(kwargs))

    def __repr__(self) -> str:
        return f"PureBuiltinVariable({getattr(self.fn, '__qualname__', self.fn)})"


# Variable kinds whose ``call_method`` implements a builtin type's own method (no override).
def _modelled_receiver(var: VariableTracker, cls: type, name: str) -> bool:
    from .dicts import ConstDictVariable as Dict
    from .lists import BaseListVariable
    from .sets import SetVariable

    if not isinstance(var, (Dict, BaseListVariable, SetVariable, ConstantVariable)):
        return False
    try:
        actual = var.python_type()
    except Unsupported:
        return False
    # the receiver's class must use this very method (a subclass may override it)
    return issubclass(actual, cls) and getattr(actual, name, None) is getattr(cls, name, None)


class UnboundMethodVariable(VariableTracker):
    """``cls.name`` for a builtin ``cls`` and a method it defines in C (``set.add``,
    ``dict.__setitem__`` also read through a subclass such as ``defaultdict``): a call
    ``cls.name(obj, *args)`` is ``obj.name(*args)`` when ``obj``'s variable models ``cls``'s
    own method; otherwise a graph break."""

    def __init__(self, cls: type, name: str) -> None:
        super().__init__()
        self.cls = cls
        self.name = name

    def as_python_constant(self):
        return getattr(self.cls, self.name)

    def python_type(self) -> type:
        return type(getattr(self.cls, self.name))

    def call_function(self, tx, args, kwargs):
        if not args or not _modelled_receiver(args[0], self.cls, self.name):
            unimplemented(
                gbt.UNSUPPORTED_BUILTIN,
                f"{self.cls.__name__}.{self.name} called on {args[0] if args else 'nothing'}",
            )
        return args[0].call_method(tx, self.name, list(args[1:]), dict(kwargs))

    def __repr__(self) -> str:
        return f"UnboundMethodVariable({self.cls.__name__}.{self.name})"


_METHOD_TYPES = (
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
)


def class_attr(cls: type, name: str) -> VariableTracker | None:
    """``cls.name`` for a builtin type ``cls`` (``dict.fromkeys``, ``set.add``, ``int.__add__``):
    a table entry, an unbound C method, or an immutable class constant; None otherwise."""
    try:
        attr = getattr(cls, name)
    except AttributeError:
        unimplemented(gbt.EXCEPTION, f"type object {cls.__name__!r} has no attribute {name!r}")
    if lookup(attr) is not None:
        return PureBuiltinVariable(attr)
    if isinstance(attr, _METHOD_TYPES):
        owner = getattr(attr, "__objclass__", cls)
        return UnboundMethodVariable(owner, name)
    if is_immutable(attr):
        return ConstantVariable(attr)
    return None


# --- builtins whose arguments may run user code --------------------------------------------


def _no_key(key) -> bool:
    return key is None or (key.is_python_constant() and key.as_python_constant() is None)


def _key_values(tx, items, key, values=None):
    """``key(item)`` for each item, in order (the user's key function inlined), as
    constants of the capture; a graph break for a key that gives a tensor or other value
    whose comparison would read data or run user code. ``values``: the keys already
    computed."""
    if values is not None:
        pass
    elif _no_key(key):
        values = items
    else:
        values = [key.call_function(tx, [item], {}) for item in items]
    out = []
    for v in values:
        if not isinstance(v, ConstantVariable) and not (
            v.is_python_constant() and is_immutable(v.as_python_constant())
        ):
            unimplemented(gbt.DATA_DEPENDENT, f"sorting or comparing {v} (not a constant)")
        out.append(v.as_python_constant())
    return out


def call_sorted(tx, args, kwargs):
    """``sorted(iterable, key=None, reverse=False)``: the key function is inlined for each
    item, then the items are ordered by the constant keys with Python's own stable sort."""
    if len(args) != 1 or not set(kwargs) <= {"key", "reverse"}:
        unimplemented(gbt.EXCEPTION, "sorted() with these arguments")
    items = args[0].unpack_var_sequence(tx)
    keys = _key_values(tx, items, kwargs.get("key"))
    reverse = kwargs.get("reverse", ConstantVariable(False))
    if not reverse.is_python_constant():
        unimplemented(gbt.VALUE_NOT_CONSTANT, "sorted(reverse=...) not known at capture")
    try:
        order = sorted(
            range(len(items)), key=keys.__getitem__, reverse=bool(reverse.as_python_constant())
        )
    except TypeError as e:
        unimplemented(gbt.EXCEPTION, f"sorted(): {e}")
    return ListVariable([items[i] for i in order], mutable_local=True)


def call_minmax(tx, fn, args, kwargs):
    """``min``/``max`` with ``key=`` (inlined per item) and/or ``default=``: the first
    extreme item, as CPython returns it."""
    if not set(kwargs) <= {"key", "default"}:
        unimplemented(gbt.EXCEPTION, f"{fn.__name__}() with these arguments")
    key, values = kwargs.get("key"), None
    if len(args) == 1 and not _no_key(key):
        # CPython pulls one item, calls the key on it, then pulls the next: a key function
        # that changes the iterated container is seen by the iterator (container_iterators)
        it = as_iterator(tx, args[0])
        items, values = [], []
        while (item := it.next_item()) is not None:
            items.append(item)
            values.append(key.call_function(tx, [item], {}))
    elif len(args) == 1:
        items = args[0].unpack_var_sequence(tx)
    elif len(args) > 1 and "default" not in kwargs:
        items = list(args)
    else:
        unimplemented(gbt.EXCEPTION, f"{fn.__name__}() with these arguments")
    if not items:
        if "default" in kwargs:
            return kwargs["default"]
        unimplemented(gbt.EXCEPTION, f"{fn.__name__}() of an empty sequence")
    from .tensor import TensorVariable

    if values is None and not _no_key(key):
        values = [key.call_function(tx, [item], {}) for item in items]
    compared = values if values is not None else items
    if any(isinstance(v, TensorVariable) for v in compared):
        return pick_extreme(tx, fn, items, compared)
    keys = _key_values(tx, items, key, values)
    try:
        best = fn(range(len(items)), key=keys.__getitem__)
    except TypeError as e:
        unimplemented(gbt.EXCEPTION, f"{fn.__name__}(): {e}")
    return items[best]


def pick_extreme(tx, fn, items, values):
    """``min``/``max`` of ``items`` (non-empty) compared by ``values`` when a value is a
    tensor: CPython's loop (:func:`~.polyfills.pick_extreme`) inlined, so each comparison is
    a data-dependent condition of the graph (a conditional where conditionals.py can capture
    it, else a graph break) and the result is the very item eager returns. Values that are
    neither tensors nor constants (a user object whose ``__gt__`` may have effects: CPython
    interleaves its comparisons with the key calls) are a graph break."""
    from .functions import UserFunctionVariable
    from .polyfills import pick_extreme as loop
    from .tensor import TensorVariable

    if not all(isinstance(v, (TensorVariable, ConstantVariable)) for v in values):
        unimplemented(gbt.DATA_DEPENDENT, f"{fn.__name__}() comparing {values}")
    return UserFunctionVariable(loop).call_function(
        tx,
        [
            ConstantVariable(fn is max),
            ListVariable(list(items), mutable_local=True),
            ListVariable(list(values), mutable_local=True),
        ],
        {},
    )


def call_text(tx, fn, obj):
    """``str(obj)`` / ``repr(obj)`` of a user object whose class defines ``__str__`` /
    ``__repr__`` in Python: inlined; it must give a constant string. None: not a user
    object with such a method (the generic path decides)."""
    from .container_ops import _slot, _user_class
    from .functions import UserFunctionVariable

    cls = _user_class(obj)
    if cls is None:
        return None
    method = _slot(cls, "__str__") if fn is str else None
    if method is None:
        method = _slot(cls, "__repr__")
    if method is None:
        return None  # object.__repr__: the real object's (identity-guarded) text
    if method == "C":
        unimplemented(gbt.UNMODELLED_VALUE, f"{fn.__name__}() of a user object (C method)")
    result = UserFunctionVariable(method).call_function(tx, [obj], {})
    if not (isinstance(result, ConstantVariable) and isinstance(result.value, str)):
        unimplemented(gbt.EXCEPTION, f"__{fn.__name__}__ returned a non-string {result}")
    return result


def abs_of(tx, obj):
    """``abs(tensor)`` is ``tensor.abs()`` (``Tensor.__abs__``); a user object's Python
    ``__abs__`` is inlined. None: another value (the generic path decides)."""
    import operator

    from .container_ops import unary
    from .tensor import TensorVariable

    if isinstance(obj, TensorVariable):
        return tx.output.call_function(tx, operator.abs, [obj], {})
    return unary(tx, "abs", obj)


def user_iter(tx, obj: VariableTracker) -> list[VariableTracker]:
    """The items of ``iter(obj)`` for a user object whose class defines ``__iter__`` in
    Python (inlined, then the iterator it returns is consumed); a graph break otherwise."""
    from .container_ops import _slot, _user_class
    from .functions import UserFunctionVariable

    cls = _user_class(obj)
    method = _slot(cls, "__iter__") if cls is not None else None
    if not isinstance(method, types.FunctionType):
        unimplemented(gbt.UNMODELLED_VALUE, f"iteration over {obj}")
    return UserFunctionVariable(method).call_function(tx, [obj], {}).unpack_var_sequence(tx)


# Builtins that consume their first argument as an iterable.
_CONSUMERS = frozenset({sum, min, max, sorted, all, any, frozenset, set, tuple, list})
_DUNDERS_RUN_BY_BUILTINS = (
    "__iter__",
    "__len__",
    "__getitem__",
    "__index__",
    "__int__",
    "__float__",
    "__complex__",
    "__round__",
    "__abs__",
    "__format__",
    "__str__",
    "__repr__",
    "__bytes__",
    "__bool__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__eq__",
    "__ne__",
    "__add__",
    "__radd__",
    "__divmod__",
    "__rdivmod__",
    "__pow__",
    "__rpow__",
    "__hash__",
    "__call__",
)


def user_code_args(tx, fn, args: list) -> list:
    """Arguments for the generic constant path of a builtin (which runs ``fn`` for real on
    the arguments' values): a user object whose class defines one of the methods a builtin
    may call (``__iter__``, ``__lt__``, ``__index__``, ...) in Python would run that code at
    capture time on the object seen then. Iterable arguments of the consuming builtins
    (``sum(obj)``) become their items (``__iter__`` inlined); any other such argument is a
    graph break."""
    from .container_ops import _slot, _user_class

    out = list(args)
    for i, a in enumerate(args):
        cls = _user_class(a)
        if cls is None:
            continue
        if not any(isinstance(_slot(cls, n), types.FunctionType) for n in _DUNDERS_RUN_BY_BUILTINS):
            continue
        if i == 0 and fn in _CONSUMERS and len(args) == 1 or i == 0 and fn is sum:
            out[i] = ListVariable(user_iter(tx, a), mutable_local=True)
            continue
        unimplemented(gbt.UNMODELLED_VALUE, f"{fn.__name__}() of a user object (runs its code)")
    return out


def make_set(tx, cls, args, kwargs):
    """``set(iterable)`` / ``frozenset(iterable)`` (sets.py)."""
    from .sets import SetVariable, key_set

    if kwargs or len(args) > 1:
        unimplemented(gbt.EXCEPTION, f"{cls.__name__}() with these arguments")
    frozen = cls is frozenset
    if not args:
        return SetVariable(frozenset() if frozen else set(), frozen)
    src = args[0]
    from .sets import SetVariable as S

    keys = key_set(tx, src)
    opaque = isinstance(src, S) and src.opaque
    keys = frozenset(keys) if frozen else set(keys)
    result = SetVariable(keys, frozen, opaque or None)
    if frozen and not result.opaque and all(is_immutable(k) for k in keys):
        return ConstantVariable(keys)  # a frozenset of constants is a constant
    return result


__all__ = [
    "TABLE",
    "PureBuiltinVariable",
    "UnboundMethodVariable",
    "abs_of",
    "call_minmax",
    "call_sorted",
    "call_text",
    "class_attr",
    "lookup",
    "make_set",
]
