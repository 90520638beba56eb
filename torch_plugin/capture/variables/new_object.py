"""Objects of user classes constructed inside captured code (issue #12).

``DynamicCache(config=self.config)`` (every HF decoder with its default ``use_cache=True``),
``EncoderDecoderCache(...)``, a user's ``Config(...)`` built in ``forward``: constructing
such an object was a graph break. :class:`NewObjectVariable` models the object instead:
construction runs the class's Python ``__init__`` inlined on it, attribute writes change
the variable's own attribute table (nothing outside the frame can see the object yet, so
they are not side effects), attribute reads look in that table and then in the class
(methods, properties and class attributes are resolved as for any user object), and
methods are inlined with it as ``self``. The real object exists only if it escapes: when
the frame returns it (or something holding it), stores it where the caller can see it
(a side effect), or keeps it live across a graph break, it is built after the graph runs
as ``cls.__new__(cls)`` with its final attributes set by ``object.__setattr__``, once per
variable, so every place that holds it holds the same object. An object that does not
escape is never built.

Only classes whose instances this reproduces exactly qualify (:func:`constructible`):
plain Python classes (``type`` or ``abc.ABCMeta`` metaclass) with an instance ``__dict__``,
without a custom ``__new__``, ``__setattr__``, ``__getattribute__``/``__getattr__``,
non-empty ``__slots__`` or ``__del__``, not subclassing a builtin type
(``dict``, ``list``, ...), not ``nn.Module`` (its ``__setattr__`` registers parameters),
and not ``torch.autograd.Function``. Other constructions stay graph breaks.

Key parts: :func:`constructible`, :class:`NewObjectVariable`, :func:`make_object` (the
builder the rebuilt code calls).
"""

from __future__ import annotations

import abc
import collections.abc
import inspect
import types
from typing import Any

import torch

from .. import graph_break_types as gbt
from ..exc import unimplemented
from .base import VariableTracker
from .constant import ConstantVariable


def constructible(cls: type) -> bool:
    """Whether ``cls(...)`` can be modelled by :class:`NewObjectVariable` (module doc)."""
    if not isinstance(cls, type) or type(cls) not in (type, abc.ABCMeta):
        return False
    if issubclass(cls, (torch.nn.Module, torch.autograd.Function, torch.Tensor, BaseException)):
        return False
    if getattr(cls, "__abstractmethods__", None):
        return False  # constructing it raises TypeError in eager
    for klass in cls.__mro__:
        if klass is object:
            continue
        if klass.__module__ == "builtins" or not hasattr(klass, "__dict__"):
            return False  # a builtin base (dict, list, int, ...)
        d = klass.__dict__
        if d.get("__slots__", ()) not in ((), []):  # empty __slots__ (the ABCs') store nothing
            return False
        for name in ("__new__", "__setattr__", "__delattr__", "__getattribute__", "__getattr__",
                     "__del__"):  # fmt: skip
            if name in d:
                return False
    if cls.__dictoffset__ == 0:
        return False  # no instance __dict__ to hold the attributes
    init = inspect.getattr_static(cls, "__init__")
    return init is object.__init__ or isinstance(init, types.FunctionType)


def _is_data_descriptor(static: Any) -> bool:
    """A class attribute that takes over instance reads and writes (a property, a slot)."""
    return static is not None and (isinstance(static, property) or hasattr(type(static), "__set__"))


def make_object(cls: type, names: tuple, values: tuple) -> Any:
    """The real object: ``cls.__new__(cls)`` with ``names`` set to ``values`` (the
    instance ``__dict__`` the capture computed, in its insertion order)."""
    obj = cls.__new__(cls)
    for name, value in zip(names, values):
        object.__setattr__(obj, name, value)
    return obj


class NewObjectVariable(VariableTracker):
    """An object of ``cls`` created by the captured code (see the module doc).

    Attributes:
        cls: its class.
        attrs: its instance ``__dict__`` as variables, in insertion order.
    """

    def __init__(self, cls: type, cls_source=None) -> None:
        super().__init__()
        self.cls = cls
        self.cls_source = cls_source
        from .dicts import KeyEntries

        # a KeyEntries: ``obj.__dict__`` (attribute_rules.NewObjectDictVariable) is this
        # very table, and its iterators count removals
        self.attrs: dict[str, VariableTracker] = KeyEntries()

    @staticmethod
    def create(tx, cls: type, args, kwargs, cls_source=None) -> NewObjectVariable:
        """``cls(*args, **kwargs)``: a new variable with ``__init__`` inlined on it.
        ``cls_source``, where the class was read from, guards class attributes read later."""
        obj = NewObjectVariable(cls, cls_source)
        init = inspect.getattr_static(cls, "__init__")
        if init is object.__init__:
            if args or kwargs:
                unimplemented(gbt.EXCEPTION, f"{cls.__name__}() takes no arguments")
            return obj
        from .functions import UserMethodVariable

        result = UserMethodVariable(init, obj).call_function(tx, list(args), dict(kwargs))
        if not (isinstance(result, ConstantVariable) and result.value is None):
            unimplemented(gbt.EXCEPTION, f"{cls.__name__}.__init__ returned a value")
        return obj

    # --- what the value is --------------------------------------------------------------
    def python_type(self) -> type:
        return self.cls

    def as_python_constant(self):
        unimplemented(
            gbt.UNMODELLED_VALUE,
            f"a {self.cls.__name__} built in the captured code is not a constant",
        )

    def is_python_constant(self) -> bool:
        return False

    def truthiness(self, tx) -> bool:
        for name in ("__bool__", "__len__"):
            method = inspect.getattr_static(self.cls, name, None)
            if method is not None:
                if not isinstance(method, types.FunctionType):
                    unimplemented(
                        gbt.UNMODELLED_VALUE, f"truth value of a {self.cls.__name__} ({name})"
                    )
                result = self.call_method(tx, name, [], {})
                if not isinstance(result, ConstantVariable):
                    unimplemented(
                        gbt.UNMODELLED_VALUE, f"truth value of a {self.cls.__name__} ({name})"
                    )
                return bool(result.value)
        return True

    # --- attributes -----------------------------------------------------------------------
    def has_attr(self, name: str) -> bool:
        return name in self.attrs or hasattr(self.cls, name)

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name == "__dict__":
            from .attribute_rules import NewObjectDictVariable

            return NewObjectDictVariable(self)
        if name == "__class__":
            from .builder import wrap_constant_or_object

            return wrap_constant_or_object(self.cls)
        from .user_defined import class_lookup

        static = class_lookup(self.cls, name)
        if name in self.attrs and not _is_data_descriptor(static):
            return self.attrs[name]
        if static is None:
            unimplemented(gbt.EXCEPTION, f"{self.cls.__name__} object has no attribute {name!r}")
        if not isinstance(
            static, (types.FunctionType, property, staticmethod, classmethod)
        ) and not hasattr(type(static), "__get__"):
            # plain class data (``is_compileable = False``): guarded through the class
            from ..sources import AttrSource
            from .builder import wrap_value

            source = AttrSource(self.cls_source, name) if self.cls_source is not None else None
            return wrap_value(tx, static, source)
        from .nn_module import class_attribute

        return class_attribute(tx, self, static, name)

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        """``obj.name = value``: a plain instance attribute (a property or other data
        descriptor of the class would run code: not modelled)."""
        from .user_defined import class_lookup

        if _is_data_descriptor(class_lookup(self.cls, name)):
            unimplemented(
                gbt.SIDE_EFFECT, f"assignment to descriptor {name!r} of {self.cls.__name__}"
            )
        self.attrs[name] = value

    def delete_attr(self, tx, name: str) -> None:
        if name not in self.attrs:
            unimplemented(
                gbt.EXCEPTION,
                f"deleting {name!r}, not an instance attribute of {self.cls.__name__}",
            )
        del self.attrs[name]

    # --- calls ----------------------------------------------------------------------------
    def call_method(self, tx, name, args, kwargs):
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def call_function(self, tx, args, kwargs):
        call = inspect.getattr_static(self.cls, "__call__", None)
        if not isinstance(call, types.FunctionType):
            unimplemented(gbt.UNMODELLED_VALUE, f"call of a {self.cls.__name__} object")
        from .functions import UserMethodVariable

        return UserMethodVariable(call, self).call_function(tx, args, kwargs)

    def unpack_var_sequence(self, tx):
        it = inspect.getattr_static(self.cls, "__iter__", None)
        if it is collections.abc.Sequence.__iter__:
            # the Sequence mixin's __iter__ indexes until IndexError; by the Sequence
            # contract that is self[0] ... self[len(self) - 1] (exceptions are not modelled)
            n = self.call_method(tx, "__len__", [], {})
            if not isinstance(n, ConstantVariable) or not isinstance(n.value, int):
                unimplemented(
                    gbt.UNMODELLED_VALUE, f"iteration over a {self.cls.__name__} of unknown length"
                )
            return [
                self.call_method(tx, "__getitem__", [ConstantVariable(i)], {})
                for i in range(n.value)
            ]
        if not isinstance(it, types.FunctionType):
            unimplemented(gbt.UNMODELLED_VALUE, f"iteration over a {self.cls.__name__} object")
        iterator = self.call_method(tx, "__iter__", [], {})
        return iterator.unpack_var_sequence(tx)

    def __repr__(self) -> str:
        return f"NewObjectVariable({self.cls.__qualname__})"
