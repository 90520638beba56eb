"""``collections.Counter`` built in captured code or received (issue #31).

Key class: :class:`CounterVariable`, a dict variable of constant keys whose missing keys
read 0; :func:`make_counter` builds one for ``Counter(...)`` in the frame (called by
collections_objects.construct). A Counter read from a source (collections_objects.wrap_input)
is guarded on its keys, its values read through item sources, and its mutations replayed on
it after the graph (``clear(); update(entries)``: Counter.update of a mapping into an empty
Counter is dict.update).
"""

from __future__ import annotations

import collections
import functools
from typing import Any

from .. import graph_break_types as gbt
from ..exc import unimplemented
from .constant import ConstantVariable
from .dicts import ConstDictVariable, dict_key, key_var


def make_dict(maker, keys, values):
    from .collections_objects import make_dict as build

    return build(maker, keys, values)


def _counts(var: ConstDictVariable) -> dict:
    """The Counter's entries as constants (its counts must be known at capture time for
    an operation that orders or combines them)."""
    out = {}
    for k, v in var.items.items():
        if not v.is_python_constant():
            unimplemented(gbt.VALUE_NOT_CONSTANT, f"a Counter's count {v} is not a constant")
        out[k] = v.as_python_constant()
    return out


class CounterVariable(ConstDictVariable):
    """A ``collections.Counter`` built in the frame: a dict of constant keys whose missing
    keys read 0 (``Counter.__missing__``, nothing stored). ``update``/``subtract`` count
    as Counter's Python code does (an iterable: each element's count plus one, in order; a
    mapping: its counts added); ``most_common``, ``total``, ``elements`` and the operators
    ``+ - | &`` (and their in-place forms) run Counter's own code on the constant counts
    (counts that are not constants there: a graph break). Escaping, it is rebuilt as a
    Counter with the same entries in the same order (``dict.__setitem__``, no counting)."""

    def __init__(self, items, mutable_local: bool = True, source=None, real=None) -> None:
        super().__init__(items, source, mutable_local, collections.Counter)
        if real is not None:
            self.real = real  # a Counter from the inputs: mutations replayed on it

    def _mutating(self, tx, name: str) -> None:
        if self.mutable_local:
            return
        if getattr(self, "real", None) is None:
            unimplemented(gbt.SIDE_EFFECT, f"Counter.{name} on a Counter from the inputs")
        # replayed as clear(); update(entries): Counter.update of a mapping into an empty
        # Counter is dict.update, so the entries and their order are kept
        tx.output.side_effects.mutate_container(self.real, self)

    def as_python_constant(self) -> Any:
        return make_dict(collections.Counter, list(self.items), list(_counts(self).values()))

    def rebuild_call(self):
        from .lists import TupleVariable

        return functools.partial(make_dict, collections.Counter), [
            TupleVariable([key_var(k) for k in self.items]),
            TupleVariable(list(self.items.values())),
        ]

    def _count(self, tx, source, sign: int) -> None:
        """Counter.update (``sign`` 1) / subtract (-1) with one positional argument."""
        from .builder import wrap_constant_or_object
        from .iterators import as_iterator

        if isinstance(source, ConstDictVariable):  # a mapping: its counts
            pairs = list(source.items.items())
        else:  # an iterable: each element once, in order
            it = as_iterator(tx, source)
            pairs = []
            while (item := it.next_item()) is not None:
                pairs.append((dict_key(item), ConstantVariable(1)))
        for key, count in pairs:
            if key in self.items:
                new = tx.binary_op("+" if sign > 0 else "-", self.items[key], count)
            elif sign > 0 and isinstance(source, ConstDictVariable) and not self.items:
                new = count  # Counter.update on an empty Counter: dict.update
            else:
                new = tx.binary_op("+" if sign > 0 else "-", ConstantVariable(0), count)
            self.items[key] = (
                new
                if not new.is_python_constant()
                else wrap_constant_or_object(new.as_python_constant())
            )

    def _counting(self, tx, name, args, kwargs) -> None:
        if len(args) > 1:
            unimplemented(gbt.EXCEPTION, f"Counter.{name} expected at most 1 argument")
        sign = 1 if name == "update" else -1
        if args and not (args[0].is_python_constant() and args[0].as_python_constant() is None):
            self._count(tx, args[0], sign)
        if kwargs:
            self._count(tx, ConstDictVariable(dict(kwargs)), sign)

    def _result(self, value):
        """A Counter computed by Counter's own code on the constant counts, as a variable."""
        return CounterVariable({k: ConstantVariable(v) for k, v in value.items()})

    def call_method(self, tx, name, args, kwargs):
        from .builder import wrap_constant_or_object

        if name == "__getitem__" and len(args) == 1 and not kwargs:
            key = dict_key(args[0])
            if key not in self.items:
                return ConstantVariable(0)
        if name in ("update", "subtract"):
            self._mutating(tx, name)
            self._counting(tx, name, args, kwargs)
            return ConstantVariable(None)
        if name in ("copy", "__copy__") and not args and not kwargs:
            return CounterVariable(dict(self.items))
        if name in ("most_common", "total", "elements") or name in _COUNTER_OPERATORS:
            if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
                unimplemented(gbt.VALUE_NOT_CONSTANT, f"Counter.{name} with these arguments")
            real = self.as_python_constant()
            values = [a.as_python_constant() for a in args]
            if name in _COUNTER_OPERATORS and not (args and isinstance(args[0], CounterVariable)):
                unimplemented(gbt.UNMODELLED_VALUE, f"Counter.{name} with {args}")
            if name in _COUNTER_OPERATORS:
                values = [args[0].as_python_constant()]
            try:
                out = getattr(real, name)(
                    *values, **{k: v.as_python_constant() for k, v in kwargs.items()}
                )
            except Exception as e:  # noqa: BLE001 - eager raises it: the graph breaks
                unimplemented(gbt.EXCEPTION, f"Counter.{name}: {type(e).__name__}: {e}")
            if isinstance(out, collections.Counter):
                if name.startswith("__i"):  # in place: this Counter, its entries replaced
                    self._mutating(tx, name)
                    self.items.clear()
                    self.items.update({k: ConstantVariable(v) for k, v in out.items()})
                    return self
                return self._result(out)
            if name == "elements":
                from .lists import ListVariable

                return ListVariable(
                    [ConstantVariable(k) for k in out], mutable_local=True
                ).make_iterator(tx)
            return wrap_constant_or_object(out)
        return super().call_method(tx, name, args, kwargs)

    def __repr__(self) -> str:
        return f"CounterVariable({list(self.items)})"


_COUNTER_OPERATORS = frozenset(
    {"__add__", "__sub__", "__or__", "__and__", "__iadd__", "__isub__", "__ior__", "__iand__"}
)
_COUNTER_BINARY = {
    "+": "__add__",
    "-": "__sub__",
    "|": "__or__",
    "&": "__and__",
    "+=": "__iadd__",
    "-=": "__isub__",
    "|=": "__ior__",
    "&=": "__iand__",
}


def make_counter(tx, args, kwargs) -> CounterVariable:
    """``Counter(iterable_or_mapping=None, /, **kwds)`` built in the frame."""
    counter = CounterVariable({})
    counter._counting(tx, "update", list(args), dict(kwargs))
    return counter
