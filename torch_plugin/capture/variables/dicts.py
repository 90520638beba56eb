"""Dicts of symbolic values with constant keys.

Key class: :class:`ConstDictVariable`. Keys are Python constants (strings, ints, ...);
values are any variables. Dicts created while tracing are local and mutable; dicts from
the frame's inputs are read-only (their keys are guarded).
"""

from __future__ import annotations

import collections
from typing import Any

from .. import graph_break_types as gbt
from ..dynamic_shapes import has_symbolic, specialize_deep
from ..exc import unimplemented
from .base import VariableTracker, method_getattr
from .constant import ConstantVariable
from .lists import TupleVariable


def dict_key(var: VariableTracker):
    """The dict key ``var`` stands for: a constant of the capture, or for a tensor (hashed
    by identity: ``Tensor.__hash__`` is ``id``) an identity key (``sets._IdKey`` of its
    variable: one variable per object in a capture; a tensor whose identity depends on a
    branch on tensor data is a graph break). A symbolic size (``{n: 1}`` with
    ``n = x.shape[0]`` after a dynamic recompile) is not hashable: its concrete value,
    under a guard (the entry is then reused only for that size, as a dict of sizes would
    decide its keys). Raises Unsupported for a key that is not a constant."""
    from .tensor import TensorVariable

    if isinstance(var, TensorVariable):
        from .sets import _IdKey
        from .tensor import refuse_ambiguous_identity

        refuse_ambiguous_identity(var, "a dict key")
        return _IdKey(var, var.node)
    if not var.is_python_constant():
        unimplemented(gbt.VALUE_NOT_CONSTANT, "dict key that is not a constant")
    key = var.as_python_constant()
    if has_symbolic(key):
        key = specialize_deep(key)
    return key


def key_var(key: Any) -> VariableTracker:
    """The variable of dict key ``key`` (:func:`dict_key`'s inverse)."""
    from .sets import _IdKey

    return key.var if isinstance(key, _IdKey) else ConstantVariable(key)


def refuse_identity_keys(entries, what: str) -> None:
    """A graph break when ``entries`` has a key hashed by identity (a tensor): ``what``
    (turning the dict into a real one, rebuilding it after the graph) is not modelled."""
    from .sets import _IdKey

    if any(isinstance(k, _IdKey) for k in entries):
        unimplemented(gbt.UNMODELLED_VALUE, f"{what}: a dict with a tensor key")


class KeyEntries(dict):
    """The entries of a :class:`ConstDictVariable`: a dict that counts key removals.

    An iterator over the dict compares its size and ``removals`` with theirs when it was
    made (``container_iterators.DictIteratorVariable``): a size change raises as in CPython;
    the same size after a removal means the keys changed, and which key CPython yields next
    then depends on its hash table's layout (a graph break). With neither, the keys are the
    ones the iterator started with and only values may have changed (seen live)."""

    __slots__ = ("removals",)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.removals = 0

    def __delitem__(self, key) -> None:
        super().__delitem__(key)
        self.removals += 1

    def pop(self, *args):
        if args and args[0] in self:
            self.removals += 1
        return super().pop(*args)

    def popitem(self):
        item = super().popitem()
        self.removals += 1
        return item

    def clear(self) -> None:
        if self:
            self.removals += 1
        super().clear()


# OrderedDict's own methods (beyond dict's), modelled for a ConstDictVariable whose user_cls
# is OrderedDict
_ORDERED_METHODS = frozenset({"move_to_end", "popitem"})


class ConstDictVariable(VariableTracker):
    """A dict whose keys are constants. ``items`` maps real keys to variables."""

    def var_getattr(self, tx, name):
        return method_getattr(self, name)

    def __init__(
        self,
        items: dict[Any, VariableTracker],
        source=None,
        mutable_local: bool = False,
        user_cls: type = dict,
    ) -> None:
        super().__init__(source)
        self.items = KeyEntries(items)
        self.mutable_local = mutable_local
        self.user_cls = user_cls

    def python_type(self) -> type:
        return self.user_cls

    def as_python_constant(self) -> Any:
        refuse_identity_keys(self.items, "a dict's value")
        return self.user_cls({k: v.as_python_constant() for k, v in self.items.items()})

    def truthiness(self, tx) -> bool:
        return len(self.items) > 0

    def unpack_var_sequence(self, tx):
        return [key_var(k) for k in self.items]

    def make_iterator(self, tx=None) -> VariableTracker:
        """``iter(d)``: CPython's dict iterator over the live dict (container_iterators.py)."""
        from .container_iterators import DictIteratorVariable

        return DictIteratorVariable(self, "keys")

    def getitem(self, key: Any) -> VariableTracker:
        if key not in self.items:
            unimplemented(gbt.EXCEPTION, f"dict has no key {key!r} (KeyError at run time)")
        return self.items[key]

    def call_method(self, tx, name, args, kwargs):
        key_of = dict_key

        if name == "__getitem__" and len(args) == 1:
            return self.getitem(key_of(args[0]))
        if name == "get" and 1 <= len(args) <= 2:
            k = key_of(args[0])
            return self.items.get(k, args[1] if len(args) == 2 else ConstantVariable(None))
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if name == "__iter__" and not args and not kwargs:
            return self.make_iterator(tx)
        if name == "__contains__" and len(args) == 1:
            return ConstantVariable(key_of(args[0]) in self.items)
        if name == "keys":
            return DictViewVariable(self, "keys")
        if name == "values":
            return DictViewVariable(self, "values")
        if name == "items":
            return DictViewVariable(self, "items")
        if name == "copy":
            return ConstDictVariable(self.items, mutable_local=True, user_cls=self.user_cls)
        ordered = self.user_cls is collections.OrderedDict and name in _ORDERED_METHODS
        if not self.mutable_local and getattr(self, "real", None) is not None:
            if ordered or name in (
                "__setitem__",
                "__delitem__",
                "pop",
                "setdefault",
                "update",
                "clear",
            ):
                tx.output.side_effects.mutate_container(self.real, self)
        elif not self.mutable_local:
            unimplemented(
                gbt.SIDE_EFFECT,
                f"dict.{name} on a dict from the frame's inputs (mutation is a side effect)",
            )
        if name == "__setitem__" and len(args) == 2:
            self.items[key_of(args[0])] = args[1]
            return ConstantVariable(None)
        if name == "__delitem__" and len(args) == 1:
            self.items.pop(key_of(args[0]))
            return ConstantVariable(None)
        if name == "pop" and 1 <= len(args) <= 2:
            k = key_of(args[0])
            if k in self.items:
                return self.items.pop(k)
            if len(args) == 2:
                return args[1]
            unimplemented(gbt.EXCEPTION, f"dict.pop of missing key {k!r}")
        if name == "setdefault" and 1 <= len(args) <= 2:
            k = key_of(args[0])
            if k not in self.items:
                self.items[k] = args[1] if len(args) == 2 else ConstantVariable(None)
            return self.items[k]
        if name == "update":
            for a in args:
                if isinstance(a, ConstDictVariable):
                    self.items.update(a.items)
                else:
                    # one pair at a time, as CPython's dict_merge_from_seq2: an iterator over
                    # this dict sees each insertion (and raises, container_iterators.py)
                    from .iterators import as_iterator

                    it = as_iterator(tx, a)
                    while (pair := it.next_item()) is not None:
                        k, v = pair.unpack_var_sequence(tx)
                        self.items[key_of(k)] = v
            for k, v in kwargs.items():
                self.items[k] = v
            return ConstantVariable(None)
        if name == "clear":
            self.items.clear()
            return ConstantVariable(None)
        if ordered:
            return self._ordered_call(tx, name, args, kwargs)
        return super().call_method(tx, name, args, kwargs)

    def _ordered_call(self, tx, name, args, kwargs):
        """``OrderedDict.move_to_end(key, last=True)`` / ``popitem(last=True)``. Both count
        as a removal for iterators (CPython's OrderedDict iterator raises on any change; the
        modelled one breaks the graph at its next step, so Python raises)."""
        params = list(args) + [kwargs[k] for k in ("last",) if k in kwargs]
        if set(kwargs) - {"last"} or not all(p.is_python_constant() for p in params):
            unimplemented(gbt.VALUE_NOT_CONSTANT, f"OrderedDict.{name} with these arguments")
        values = [p.as_python_constant() for p in params]
        entries = self.items
        if name == "move_to_end" and 1 <= len(values) <= 2:
            key = dict_key(args[0])
            if key not in entries:
                unimplemented(gbt.EXCEPTION, f"OrderedDict.move_to_end of missing key {key!r}")
            last = bool(values[1]) if len(values) == 2 else True
            order = [k for k in entries if k != key]
            order = [*order, key] if last else [key, *order]
            moved = {k: entries[k] for k in order}
            removals = entries.removals + 1
            dict.clear(entries)
            dict.update(entries, moved)
            entries.removals = removals
            return ConstantVariable(None)
        if name == "popitem" and len(values) <= 1:
            if not entries:
                unimplemented(gbt.EXCEPTION, "popitem(): dictionary is empty (KeyError)")
            last = bool(values[0]) if values else True
            key = next(reversed(entries)) if last else next(iter(entries))
            return TupleVariable([key_var(key), entries.pop(key)])
        unimplemented(gbt.UNMODELLED_VALUE, f"OrderedDict.{name} with these arguments")

    def __repr__(self) -> str:
        return f"ConstDictVariable({list(self.items)})"


class DictViewVariable(VariableTracker):
    """``d.keys()`` / ``d.values()`` / ``d.items()``: a live view of ``dict_var`` (its length,
    membership and iteration read the dict as it is when asked)."""

    def var_getattr(self, tx, name):
        return method_getattr(self, name)

    def __init__(self, dict_var: ConstDictVariable, kind: str) -> None:
        super().__init__()
        self.dict_var = dict_var
        self.kind = kind

    def unpack_var_sequence(self, tx):
        d = self.dict_var.items
        if self.kind == "keys":
            return [key_var(k) for k in d]
        if self.kind == "values":
            return list(d.values())
        return [TupleVariable([key_var(k), v]) for k, v in d.items()]

    def truthiness(self, tx) -> bool:
        return len(self.dict_var.items) > 0

    def make_iterator(self, tx=None) -> VariableTracker:
        """``iter(view)``: CPython's dict iterator over the live dict (container_iterators.py)."""
        from .container_iterators import DictIteratorVariable

        return DictIteratorVariable(self.dict_var, self.kind)

    def call_method(self, tx, name, args, kwargs):
        if name == "__len__":
            return ConstantVariable(len(self.dict_var.items))
        if name == "__iter__" and not args and not kwargs:
            return self.make_iterator(tx)
        if name == "__contains__" and self.kind == "keys" and args[0].is_python_constant():
            return ConstantVariable(args[0].as_python_constant() in self.dict_var.items)
        return super().call_method(tx, name, args, kwargs)

    def python_type(self) -> type:
        return type(getattr({}, self.kind)())

    def as_python_constant(self):
        # a real view (of a copy): set operators (keys() | keys()), == (keys() == {"a"} is
        # True, keys() == ["a"] False, values() == values() False) and type are a view's
        d = self.dict_var.items
        refuse_identity_keys(d, "a dict view's value")
        if self.kind == "keys":
            return dict.fromkeys(d).keys()
        values = {k: v.as_python_constant() for k, v in d.items()}
        return getattr(values, self.kind)()
