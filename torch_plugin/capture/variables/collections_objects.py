"""``collections`` objects and dict subclasses built in captured code (issue #31).

Key classes: :class:`DequeVariable` (``collections.deque``), :class:`DefaultDictVariable`
(``collections.defaultdict``) and :class:`DictSubclassVariable` (an instance of a user class
deriving from ``dict``). They follow the list and dict variables' scheme:

- built in the frame (``mutable_local``), they are mutated in place during the trace and
  leave no trace unless they escape; an escaping one (returned, stored into a global, an
  attribute or an input container, live at a graph break) is built again after the graph
  with the same type and contents: a deque with its ``maxlen`` (output spec ``"set"`` with
  ``functools.partial(deque, maxlen=m)`` as the maker), a defaultdict with its
  ``default_factory`` (which must then be a real object: a builtin type, a function from a
  global; a lambda made in the frame is a graph break when the dict escapes), a dict subclass
  by calling its class with no argument and ``dict.update``;
- read from a source (an argument, a global), a deque or defaultdict holding any values is
  wrapped with guards on its type, length / keys, ``maxlen`` / ``default_factory``; its
  mutation is recorded as a side effect and replayed on the real object after the graph
  (``clear(); extend(items)`` for a deque, ``clear(); update(items)`` for a defaultdict).

A defaultdict's missing key (``d[k]`` with ``k`` absent) calls the factory, inlined as any
call (a builtin type, a user function or lambda), and stores its result, as
``defaultdict.__missing__`` does. A dict subclass may define Python methods (called inlined,
``self`` the variable), ``__getitem__``/``__setitem__``/``__delitem__``/``__missing__``
(dispatched as CPython's subscript does; ``super().__getitem__`` reaches the dict's own);
a class that overrides ``__init__``, ``__new__``, iteration, length, membership,
comparisons, ``keys``/``update``/``copy``, or has ``__slots__`` stays a graph break (what
the translator does internally with a dict would then differ from eager).
"""

from __future__ import annotations

import collections
import functools
import types
from typing import Any

from .. import graph_break_types as gbt
from ..exc import unimplemented
from .base import VariableTracker, method_getattr
from .constant import ConstantVariable
from .dicts import ConstDictVariable, dict_key, key_var
from .lists import ListIteratorVariable

# --------------------------------------------------------------------------- deque


def _int_arg(var: VariableTracker, what: str) -> int:
    if not var.is_python_constant() or type(var.as_python_constant()) is not int:
        unimplemented(gbt.VALUE_NOT_CONSTANT, f"{what} that is not a constant int")
    return var.as_python_constant()


class DequeVariable(VariableTracker):
    """A ``collections.deque``: ``items`` left to right, ``maxlen`` (None or an int >= 0)."""

    def __init__(
        self,
        items: list[VariableTracker],
        maxlen: int | None = None,
        source=None,
        mutable_local: bool = True,
        real=None,
    ) -> None:
        super().__init__(source)
        self.items = list(items)
        self.maxlen = maxlen
        self.mutable_local = mutable_local and source is None
        self.real = real
        self.state = 0  # bumped by every mutation but d[i] = v, as CPython's deque->state

    def python_type(self) -> type:
        return collections.deque

    def make_iterator(self, tx=None) -> VariableTracker:
        """``iter(d)``: raises (a graph break) once the deque was mutated, as eager does."""
        return _DequeIterator(self)

    def make_reversed(self, tx=None) -> VariableTracker:
        """``reversed(d)``: likewise."""
        return _DequeIterator(self, reverse=True)

    def as_python_constant(self) -> Any:
        return collections.deque([v.as_python_constant() for v in self.items], self.maxlen)

    def truthiness(self, tx) -> bool:
        return bool(self.items)

    def unpack_var_sequence(self, tx):
        return list(self.items)

    def rebuild_call(self):
        """(maker, arguments) that build this deque again (reconstruct.py)."""
        from .lists import TupleVariable

        return functools.partial(collections.deque, maxlen=self.maxlen), [TupleVariable(self.items)]

    def output_spec_maker(self):
        return functools.partial(collections.deque, maxlen=self.maxlen)

    def var_getattr(self, tx, name):
        if name == "maxlen":
            return ConstantVariable(self.maxlen)
        return method_getattr(self, name)

    def _index(self, var: VariableTracker) -> int:
        i = _int_arg(var, "deque index")
        if not -len(self.items) <= i < len(self.items):
            unimplemented(gbt.EXCEPTION, "deque index out of range (IndexError)")
        return i % len(self.items)

    def _mutating(self, tx, name: str) -> None:
        if self.mutable_local:
            return
        if self.real is not None:
            tx.output.side_effects.mutate_container(self.real, self)
            return
        unimplemented(gbt.SIDE_EFFECT, f"deque.{name} on a deque the capture cannot replay")

    def _append(self, v, left: bool) -> None:
        if self.maxlen == 0:
            return
        if left:
            self.items.insert(0, v)
            if self.maxlen is not None and len(self.items) > self.maxlen:
                self.items.pop()
        else:
            self.items.append(v)
            if self.maxlen is not None and len(self.items) > self.maxlen:
                self.items.pop(0)

    def call_method(self, tx, name, args, kwargs):
        from .lists import contains

        if kwargs:
            unimplemented(gbt.EXCEPTION, f"deque.{name}() takes no keyword arguments")
        items = self.items
        none = ConstantVariable(None)
        if name == "__len__" and not args:
            return ConstantVariable(len(items))
        if name == "__contains__" and len(args) == 1:
            return contains(tx, items, args[0])
        if name == "__getitem__" and len(args) == 1:
            return items[self._index(args[0])]
        if name == "__iter__" and not args:
            return self.make_iterator()
        if name in ("copy", "__copy__") and not args:
            return DequeVariable(items, self.maxlen)
        if name not in _DEQUE_MUTATORS:
            return super().call_method(tx, name, args, kwargs)
        self._mutating(tx, name)
        if name != "__setitem__":
            self.state += 1
        if name in ("append", "appendleft") and len(args) == 1:
            self._append(args[0], name == "appendleft")
            return none
        if name in ("extend", "extendleft", "__iadd__") and len(args) == 1:
            for v in args[0].unpack_var_sequence(tx):  # a snapshot: d.extend(d) works
                self._append(v, name == "extendleft")
            return self if name == "__iadd__" else none
        if name in ("pop", "popleft") and not args:
            if not items:
                unimplemented(gbt.EXCEPTION, f"{name} from an empty deque (IndexError)")
            return items.pop() if name == "pop" else items.pop(0)
        if name == "clear" and not args:
            items.clear()
            return none
        if name == "__setitem__" and len(args) == 2:
            items[self._index(args[0])] = args[1]
            return none
        if name == "__delitem__" and len(args) == 1:
            del items[self._index(args[0])]
            return none
        if name == "rotate" and len(args) <= 1:
            n = _int_arg(args[0], "deque.rotate count") if args else 1
            if items:
                n %= len(items)
                items[:] = items[-n:] + items[:-n] if n else items
            return none
        if name == "reverse" and not args:
            items.reverse()
            return none
        unimplemented(gbt.UNMODELLED_VALUE, f"deque.{name} with these arguments")

    def __repr__(self) -> str:
        return f"DequeVariable({len(self.items)} items, maxlen={self.maxlen})"


class _DequeIterator(ListIteratorVariable):
    """An iterator over a deque's items that checks, at each step, that the deque was not
    mutated since (CPython's ``dequeiter_next``: RuntimeError, here a graph break)."""

    def __init__(self, deque_var: DequeVariable, reverse: bool = False) -> None:
        # the live list: d[i] = v is seen, as in eager
        super().__init__(deque_var.items, reverse=reverse)
        self.deque_var = deque_var
        self.state = deque_var.state
        self.given = 0

    def next_item(self):
        # CPython's dequeiter_next checks the state first, even once exhausted
        if self.deque_var.state != self.state:
            unimplemented(gbt.EXCEPTION, "deque mutated during iteration (RuntimeError)")
        item = super().next_item()
        self.given += item is not None
        return item

    def rebuild_call(self):
        if self.deque_var.state != self.state:
            unimplemented(gbt.ESCAPING_VALUE, "a deque iterator whose deque changed, at a break")
        return _deque_iterator_at, [
            self.deque_var,
            ConstantVariable(self.given),
            ConstantVariable(self.reverse),
        ]

    def rebuild_children(self):
        return [self.deque_var]


def _deque_iterator_at(d, given: int, reverse: bool):
    """``iter(d)`` (``reversed(d)``) that has given ``given`` items (reconstruct.py)."""
    it = reversed(d) if reverse else iter(d)
    for _ in range(given):
        next(it)
    return it


_DEQUE_MUTATORS = frozenset(
    {
        "append",
        "appendleft",
        "extend",
        "extendleft",
        "__iadd__",
        "pop",
        "popleft",
        "clear",
        "__setitem__",
        "__delitem__",
        "rotate",
        "reverse",
    }
)


def make_deque(tx, args, kwargs) -> DequeVariable:
    """``deque(iterable=(), maxlen=None)`` built in the frame."""
    names = ("iterable", "maxlen")
    if len(args) > 2 or set(kwargs) - set(names):
        unimplemented(gbt.EXCEPTION, "deque() arguments (TypeError)")
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k in bound:
            unimplemented(gbt.EXCEPTION, f"deque() got multiple values for {k!r}")
        bound[k] = v
    maxlen = None
    if "maxlen" in bound and not (
        bound["maxlen"].is_python_constant() and bound["maxlen"].as_python_constant() is None
    ):
        maxlen = _int_arg(bound["maxlen"], "deque maxlen")
        if maxlen < 0:
            unimplemented(gbt.EXCEPTION, "maxlen must be non-negative (ValueError)")
    out = DequeVariable([], maxlen)
    if "iterable" in bound:
        for v in bound["iterable"].unpack_var_sequence(tx):
            out._append(v, False)
    return out


# --------------------------------------------------------------------------- defaultdict


class DefaultDictVariable(ConstDictVariable):
    """A ``collections.defaultdict``: a dict with constant keys and ``factory`` (a variable
    for ``default_factory``, ConstantVariable(None) for none)."""

    def __init__(self, items, factory: VariableTracker, source=None, mutable_local=False):
        super().__init__(items, source, mutable_local, collections.defaultdict)
        self.factory = factory

    def _real_factory(self):
        factory = self.factory
        try:
            return factory.as_python_constant()
        except Exception:
            unimplemented(
                gbt.ESCAPING_VALUE,
                f"a defaultdict whose default_factory ({factory}) is not a real object escapes",
            )

    def as_python_constant(self) -> Any:
        return collections.defaultdict(
            self.factory.as_python_constant(),
            {k: v.as_python_constant() for k, v in self.items.items()},
        )

    def output_spec_maker(self):
        return functools.partial(collections.defaultdict, self._real_factory())

    def rebuild_call(self):
        from .lists import TupleVariable

        return functools.partial(make_dict, self.output_spec_maker()), [
            TupleVariable([key_var(k) for k in self.items]),
            TupleVariable(list(self.items.values())),
        ]

    def var_getattr(self, tx, name):
        if name == "default_factory":
            return self.factory
        return method_getattr(self, name)

    def call_method(self, tx, name, args, kwargs):
        if name == "__getitem__" and len(args) == 1 and not kwargs:
            key = dict_key(args[0])
            if key not in self.items:
                return self._missing(tx, key)
        if name in ("copy", "__copy__") and not args:
            return DefaultDictVariable(self.items, self.factory, mutable_local=True)
        return super().call_method(tx, name, args, kwargs)

    def _missing(self, tx, key):
        """``defaultdict.__missing__``: KeyError without a factory, else store its result."""
        if self.factory.is_python_constant() and self.factory.as_python_constant() is None:
            unimplemented(gbt.EXCEPTION, f"defaultdict has no key {key!r} (KeyError)")
        value = self.factory.call_function(tx, [], {})
        super().call_method(tx, "__setitem__", [ConstantVariable(key), value], {})
        return value

    def __repr__(self) -> str:
        return f"DefaultDictVariable({list(self.items)}, {self.factory})"


def make_defaultdict(tx, args, kwargs) -> DefaultDictVariable:
    """``defaultdict(default_factory=None, *dict_args, **kwargs)`` built in the frame."""
    from .builtin import BuiltinVariable

    factory = args[0] if args else ConstantVariable(None)
    if factory.is_python_constant() and factory.as_python_constant() is None:
        pass
    elif factory.is_python_constant() and not callable(factory.as_python_constant()):
        unimplemented(gbt.EXCEPTION, "first argument must be callable or None (TypeError)")
    built = BuiltinVariable(dict).call_dict(tx, *args[1:], **kwargs)
    return DefaultDictVariable(built.items, factory, mutable_local=True)


def make_dict(maker, keys, values):
    """Rebuild a dict subclass instance after the graph: ``maker()`` then the items, stored
    with ``dict.__setitem__`` (a subclass's own ``__setitem__`` is not run, as the entries were
    already stored in the trace)."""
    out = maker()
    for k, v in zip(keys, values):
        dict.__setitem__(out, k, v)
    return out


# --------------------------------------------------------------------------- dict subclasses

# names a modelled dict subclass may define besides Python methods and class constants
_HARMLESS = frozenset(
    {
        "__module__",
        "__qualname__",
        "__doc__",
        "__dict__",
        "__weakref__",
        "__annotations__",
        "__firstlineno__",
        "__static_attributes__",
        "__orig_bases__",
        "__parameters__",
    }
)
_OVERRIDABLE = frozenset({"__getitem__", "__setitem__", "__delitem__", "__missing__"})
_REFUSED = frozenset({"keys", "update", "copy", "items", "values", "get", "setdefault", "pop"})


def modelled_dict_subclass(cls: type) -> bool:
    """Whether instances of ``cls`` (a strict subclass of dict, below it only Python classes)
    are modelled by :class:`DictSubclassVariable` (see the module docstring)."""
    if not isinstance(cls, type) or not issubclass(cls, dict) or cls is dict:
        return False
    for klass in cls.__mro__:
        if klass is dict:
            break
        if klass is object or klass.__module__ == "collections" or "__slots__" in vars(klass):
            return False
        for name, attr in vars(klass).items():
            if name in _OVERRIDABLE:
                if not isinstance(attr, types.FunctionType):
                    return False
                continue
            if name in _HARMLESS:
                continue
            if name.startswith("__") and name.endswith("__"):
                return False  # __init__, __iter__, __len__, __eq__, __hash__, ...
            if name in _REFUSED or not isinstance(attr, types.FunctionType):
                return False  # class constants, properties, descriptors: not modelled
    return cls.__mro__[cls.__mro__.index(dict) :] == (dict, object)


class DictSubclassVariable(ConstDictVariable):
    """An instance of a user dict subclass built in the frame (``user_cls``)."""

    def __init__(self, items, cls: type, mutable_local: bool = True) -> None:
        super().__init__(items, None, mutable_local, cls)

    def _user_fn(self, name: str):
        for klass in self.user_cls.__mro__:
            if klass is dict:
                return None
            if name in vars(klass):
                return vars(klass)[name]
        return None

    def var_getattr(self, tx, name):
        from .functions import UserMethodVariable

        attr = self._user_fn(name)
        if isinstance(attr, types.FunctionType):
            return UserMethodVariable(attr, self)
        return method_getattr(self, name)

    def base_method(self, name: str) -> VariableTracker:
        """``super().name`` reaching ``dict``: the dict's own behaviour on this variable."""
        return _BaseDictMethod(self, name)

    def dict_call(self, tx, name, args, kwargs):
        if name == "__getitem__" and len(args) == 1:
            key = dict_key(args[0])
            if key not in self.items:
                missing = self._user_fn("__missing__")
                if isinstance(missing, types.FunctionType):
                    return tx.inline_user_function_obj(missing, [self, args[0]], {})
        if name == "copy" and not args:
            return ConstDictVariable(self.items, mutable_local=True)  # dict.copy: a dict
        return ConstDictVariable.call_method(self, tx, name, args, kwargs)

    def call_method(self, tx, name, args, kwargs):
        fn = self._user_fn(name)
        if isinstance(fn, types.FunctionType):
            return tx.inline_user_function_obj(fn, [self, *args], dict(kwargs))
        return self.dict_call(tx, name, args, kwargs)

    def rebuild_call(self):
        from .lists import TupleVariable

        return functools.partial(make_dict, self.user_cls), [
            TupleVariable([key_var(k) for k in self.items]),
            TupleVariable(list(self.items.values())),
        ]

    def __repr__(self) -> str:
        return f"DictSubclassVariable({self.user_cls.__name__}, {list(self.items)})"


class _BaseDictMethod(VariableTracker):
    def __init__(self, obj: DictSubclassVariable, name: str) -> None:
        super().__init__()
        self.obj = obj
        self.name = name

    def call_function(self, tx, args, kwargs):
        return self.obj.dict_call(tx, self.name, list(args), dict(kwargs))


def make_dict_subclass(tx, cls: type, args, kwargs) -> DictSubclassVariable:
    """``cls(*args, **kwargs)`` for a modelled dict subclass: ``dict(*args, **kwargs)``."""
    from .builtin import BuiltinVariable

    if len(args) > 1:
        unimplemented(gbt.EXCEPTION, "dict expected at most 1 argument (TypeError)")
    built = BuiltinVariable(dict).call_dict(tx, *args, **kwargs)
    return DictSubclassVariable(built.items, cls)


def construct(tx, cls: type, args, kwargs) -> VariableTracker | None:
    """The variable for ``cls(*args, **kwargs)`` when ``cls`` is modelled here, else None."""
    if cls is collections.Counter:
        from .counters import make_counter

        return make_counter(tx, list(args), dict(kwargs))
    if cls is collections.deque:
        return make_deque(tx, list(args), dict(kwargs))
    if cls is collections.defaultdict:
        return make_defaultdict(tx, list(args), dict(kwargs))
    if modelled_dict_subclass(cls):
        return make_dict_subclass(tx, cls, list(args), dict(kwargs))
    return None


# --------------------------------------------------------------------------- operators


def binary_op(tx, op: str, a: VariableTracker, b: VariableTracker) -> VariableTracker | None:
    """``a op b`` where an operand is a deque, a defaultdict or a modelled dict subclass;
    None when neither is (the generic handler decides). ``deque + deque`` is a new deque
    with the left one's maxlen, ``deque += iterable`` extends in place; ``dd | dict`` and
    ``dict | dd`` give a defaultdict with the defaultdict's factory (``defaultdict.__or__``
    / ``__ror__``), a dict subclass's ``|`` a plain dict (``dict.__or__``), ``|=`` updates
    in place. Any other operator on these objects is a graph break."""
    from .counters import _COUNTER_BINARY, CounterVariable

    ours = (DequeVariable, DefaultDictVariable, DictSubclassVariable, CounterVariable)
    if not isinstance(a, ours) and not isinstance(b, ours):
        return None
    if isinstance(a, CounterVariable) and op in _COUNTER_BINARY:
        return a.call_method(tx, _COUNTER_BINARY[op], [b], {})
    if isinstance(a, DequeVariable):
        if op == "+=":
            return a.call_method(tx, "__iadd__", [b], {})
        if op == "+" and isinstance(b, DequeVariable):
            out = DequeVariable(a.items, a.maxlen)
            for v in b.items:
                out._append(v, False)
            return out
    if isinstance(a, ConstDictVariable) and isinstance(b, ConstDictVariable):
        if op == "|=":
            a.call_method(tx, "update", [b], {})
            return a
        if op == "|":
            items = {**a.items, **b.items}
            if isinstance(a, DefaultDictVariable):
                return DefaultDictVariable(items, a.factory, mutable_local=True)
            if type(a) is ConstDictVariable and a.user_cls is not dict:
                return None  # an OrderedDict on the left: as before
            if isinstance(b, DefaultDictVariable) and type(a) is ConstDictVariable:
                # a plain dict on the left: the subclass's __ror__ runs first
                return DefaultDictVariable(items, b.factory, mutable_local=True)
            return ConstDictVariable(items, mutable_local=True)  # dict.__or__
    unimplemented(gbt.UNMODELLED_VALUE, f"operator {op} on {a} and {b}")


# --------------------------------------------------------------------------- inputs


def wrap_input(tx, value: Any, source) -> VariableTracker | None:
    """A deque, defaultdict or Counter read from ``source`` (guarded; mutations replayed),
    else None."""
    from ..sources import AttrSource, ItemSource
    from .builder import wrap_value
    from .constant import is_immutable

    guards = tx.output.guards
    if type(value) is collections.deque:
        guards.len_match(source, value)
        guards.equals_match(AttrSource(source, "maxlen") if source else None, value.maxlen)
        items = [
            wrap_value(tx, v, ItemSource(source, i) if source else None)
            for i, v in enumerate(value)
        ]
        return DequeVariable(items, value.maxlen, source, source is None, real=value)
    if type(value) is collections.Counter and all(is_immutable(k) for k in value):
        from .counters import CounterVariable

        guards.dict_keys_match(source, value)
        items = {
            k: wrap_value(tx, v, ItemSource(source, k) if source else None)
            for k, v in value.items()
        }
        return CounterVariable(items, source is None, source, value if source else None)
    if type(value) is collections.defaultdict and all(is_immutable(k) for k in value):
        guards.dict_keys_match(source, value)
        factory = wrap_value(
            tx, value.default_factory, AttrSource(source, "default_factory") if source else None
        )
        items = {
            k: wrap_value(tx, v, ItemSource(source, k) if source else None)
            for k, v in value.items()
        }
        var = DefaultDictVariable(items, factory, source, source is None)
        if source is not None:
            var.real = value
        return var
    return None
