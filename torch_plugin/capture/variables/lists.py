"""Sequences: tuples, lists, named tuples and list iterators of symbolic values.

Key classes: :class:`TupleVariable`, :class:`ListVariable`, :class:`NamedTupleVariable`,
:class:`ListIteratorVariable`. A list created while tracing is *local* and may be mutated
freely (the mutation is part of the trace); a list that came from the frame's inputs
(``source`` set) is read-only here, since mutating it would be a side effect that the
transformed code does not replay yet.
"""

from __future__ import annotations

from typing import Any

from .. import graph_break_types as gbt
from ..exc import unimplemented
from .base import VariableTracker, method_getattr
from .constant import ConstantVariable
from .iterators import IteratorVariable


def _const(v: VariableTracker):
    return v.as_python_constant()


class BaseListVariable(VariableTracker):
    """Common behaviour of tuples and lists. ``items`` holds the element variables."""

    python_cls: type = list

    def var_getattr(self, tx, name):
        return method_getattr(self, name)

    def __init__(
        self, items: list[VariableTracker], source=None, mutable_local: bool = False
    ) -> None:
        super().__init__(source)
        self.items = list(items)
        self.mutable_local = mutable_local

    def python_type(self) -> type:
        return self.python_cls

    def as_python_constant(self) -> Any:
        return self.python_cls([_const(v) for v in self.items])

    def truthiness(self, tx) -> bool:
        return len(self.items) > 0

    def unpack_var_sequence(self, tx):
        return list(self.items)

    def _new(self, items):
        return type(self)(items, mutable_local=True)

    def make_iterator(self, tx=None) -> VariableTracker:
        """``iter(seq)``: live over a list (mutations in the loop are seen, as in CPython),
        a snapshot of a tuple's items."""
        if type(self) is ListVariable:
            return ListIteratorVariable(self.items, seq=self)
        return ListIteratorVariable(list(self.items))

    def getitem(self, tx, index: VariableTracker) -> VariableTracker:
        from .tensor import TensorVariable

        if isinstance(index, TensorVariable):
            # list/tuple subscript calls index.__index__(): the tensor's value (an integer
            # one-element tensor; TypeError otherwise), only known when the graph runs.
            # A graph break at this subscript; the code after it is captured again.
            unimplemented(
                gbt.DATA_DEPENDENT,
                f"{self.python_cls.__name__} indexed by a tensor (Tensor.__index__ reads its"
                " value: data-dependent)",
            )
        key = index.as_python_constant()
        if isinstance(key, slice):
            return self._new(self.items[key])
        if isinstance(key, int):
            try:
                return self.items[key]
            except IndexError:
                unimplemented(gbt.EXCEPTION, f"{self.python_cls.__name__} index {key} out of range")
        unimplemented(
            gbt.VALUE_NOT_CONSTANT, f"{self.python_cls.__name__} index of type {type(key).__name__}"
        )

    def call_method(self, tx, name, args, kwargs):
        if name == "__getitem__" and len(args) == 1:
            return self.getitem(tx, args[0])
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if name == "__iter__" and not args and not kwargs:
            return self.make_iterator(tx)
        if name == "__contains__" and len(args) == 1:
            return contains(tx, self.items, args[0])
        if name in ("index", "count") and all(a.is_python_constant() for a in args):
            return ConstantVariable(
                getattr(self.as_python_constant(), name)(*[_const(a) for a in args])
            )
        if name == "copy" and not args:
            return ListVariable(list(self.items), mutable_local=True)
        if self.mutable_local and self.python_cls is list:
            return self._mutate(tx, name, args, kwargs)
        if getattr(self, "real", None) is not None and name in _MUTATORS:
            tx.output.side_effects.mutate_container(self.real, self)
            return self._mutate(tx, name, args, kwargs)
        return super().call_method(tx, name, args, kwargs)

    def _mutate(self, tx, name, args, kwargs):
        items = self.items
        if name == "append" and len(args) == 1:
            items.append(args[0])
        elif name == "extend" and len(args) == 1:
            items.extend(args[0].unpack_var_sequence(tx))
        elif name == "insert" and len(args) == 2:
            items.insert(_const(args[0]), args[1])
        elif name == "pop":
            idx = _const(args[0]) if args else -1
            return items.pop(idx)
        elif name == "clear":
            items.clear()
        elif name == "reverse" and not args and not kwargs:
            items.reverse()
        elif name == "sort" and not args and set(kwargs) <= {"key", "reverse"}:
            # constants only, no key function: the order is known at capture time
            key = kwargs.get("key")
            reverse = kwargs.get("reverse", ConstantVariable(False))
            if (
                (key is not None and not (key.is_python_constant() and _const(key) is None))
                or not reverse.is_python_constant()
                or not all(isinstance(v, ConstantVariable) for v in items)
            ):
                unimplemented(
                    gbt.VALUE_NOT_CONSTANT,
                    "list.sort of values not known at capture, or with a key function",
                )
            try:
                items.sort(key=lambda v: v.value, reverse=bool(_const(reverse)))
            except TypeError as e:
                unimplemented(gbt.EXCEPTION, f"list.sort raised TypeError: {e}")
        elif name == "__setitem__" and len(args) == 2:
            key = _const(args[0])
            if isinstance(key, slice):
                items[key] = args[1].unpack_var_sequence(tx)
            else:
                items[key] = args[1]
        elif name == "__delitem__" and len(args) == 1:
            del items[_const(args[0])]
        elif name == "remove" and len(args) == 1:
            target = _const(args[0])
            for i, v in enumerate(items):
                if v.is_python_constant() and _const(v) == target:
                    del items[i]
                    break
            else:
                unimplemented(gbt.EXCEPTION, "list.remove of a value not found")
        else:
            return super().call_method(tx, name, args, kwargs)
        return ConstantVariable(None)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.items!r})"


_MUTATORS = (
    "sort",
    "append",
    "extend",
    "insert",
    "pop",
    "clear",
    "reverse",
    "__setitem__",
    "__delitem__",
    "remove",
)


def contains(tx, items: list[VariableTracker], needle: VariableTracker) -> ConstantVariable:
    """``needle in items`` when it can be decided at capture time."""
    from .tensor import TensorVariable

    if needle.is_python_constant():
        value = needle.as_python_constant()
        for item in items:
            if item.is_python_constant():
                if item.as_python_constant() == value:
                    return ConstantVariable(True)
            elif isinstance(item, TensorVariable):
                unimplemented(gbt.DATA_DEPENDENT, "`in` test comparing a constant with a tensor")
        return ConstantVariable(False)
    for item in items:
        if item is needle:
            return ConstantVariable(True)
    if isinstance(needle, TensorVariable):
        unimplemented(gbt.DATA_DEPENDENT, "`in` test on a tensor (compares tensor data)")
    unimplemented(gbt.UNMODELLED_VALUE, f"`in` test for {needle}")


class TupleVariable(BaseListVariable):
    python_cls = tuple

    def _new(self, items):
        return TupleVariable(items)


class ListVariable(BaseListVariable):
    python_cls = list


class NamedTupleVariable(TupleVariable):
    """A named tuple (``torch.return_types.max``, user namedtuples) of symbolic values."""

    def __init__(self, items, tuple_cls: type, source=None) -> None:
        super().__init__(items, source)
        self.tuple_cls = tuple_cls

    def python_type(self) -> type:
        return self.tuple_cls

    def as_python_constant(self):
        return self.tuple_cls(*[_const(v) for v in self.items])

    def var_getattr(self, tx, name: str):
        # namedtuple classes have _fields; structseq types (torch.return_types.*) __match_args__.
        fields = getattr(self.tuple_cls, "_fields", None) or getattr(
            self.tuple_cls, "__match_args__", ()
        )
        if name in fields:
            return self.items[list(fields).index(name)]
        if name in ("_fields", "_field_defaults") and hasattr(self.tuple_cls, name):
            from .builder import wrap_constant_or_object

            return wrap_constant_or_object(getattr(self.tuple_cls, name))
        return method_getattr(self, name)

    def call_method(self, tx, name, args, kwargs):
        fields = list(getattr(self.tuple_cls, "_fields", ()))
        method = getattr(self.tuple_cls, name, None)
        if getattr(getattr(method, "__code__", None), "co_filename", None) != _COLLECTIONS_FILE:
            fields = []  # overridden by the class: inlined as any method (not here)
        if name == "_replace" and fields and not args:
            # namedtuple._replace: a new instance with the named fields replaced
            if any(k not in fields for k in kwargs):
                unimplemented(gbt.EXCEPTION, f"_replace() got unexpected field names {kwargs}")
            items = [kwargs.get(f, v) for f, v in zip(fields, self.items)]
            return NamedTupleVariable(items, self.tuple_cls)
        if name == "_asdict" and fields and not args and not kwargs:
            from .dicts import ConstDictVariable

            return ConstDictVariable(dict(zip(fields, self.items)), mutable_local=True)
        return super().call_method(tx, name, args, kwargs)


_COLLECTIONS_FILE = __import__("collections").__file__


class ListIteratorVariable(IteratorVariable):
    """``iter(seq)``, advanced by FOR_ITER / ``next()``.

    Over a snapshot (``items``: a tuple's items, results known at capture time), or, with
    ``seq`` set, over a live list: ``items`` is then the list variable's own item list and
    each step reads it as CPython's ``listiterator`` does (``seq[index]`` while ``index <
    len(seq)``), so items appended in the loop are seen and the loop stops at the list's
    length at that moment; once exhausted it stays exhausted. ``reverse``: CPython's
    ``listreverseiterator`` (``reversed(lst)``: from ``index`` down while ``index <
    len(seq)``)."""

    def __init__(
        self,
        items: list[VariableTracker],
        index: int | None = None,
        seq: VariableTracker | None = None,
        reverse: bool = False,
    ) -> None:
        super().__init__()
        self.items = items
        self.seq = seq
        self.reverse = reverse
        if index is None:
            index = len(items) - 1 if reverse else 0
        self.index = index
        self.exhausted = False

    def next_item(self) -> VariableTracker | None:
        if self.exhausted:
            return None
        if self.reverse:
            if 0 <= self.index < len(self.items):
                self.index -= 1
                return self.items[self.index + 1]
        elif self.index < len(self.items):
            self.index += 1
            return self.items[self.index - 1]
        self.exhausted = True
        return None

    def var_getattr(self, tx, name):
        if name == "__setstate__":
            return method_getattr(self, name)
        return super().var_getattr(tx, name)

    def call_method(self, tx, name, args, kwargs):
        if (
            name == "__setstate__"
            and type(self) is ListIteratorVariable
            and len(args) == 1
            and not kwargs
            and not self.exhausted
        ):
            # a resume function positions a loop's list iterator (resume_execution.py)
            from ..dynamic_shapes import specialize_deep

            index = specialize_deep(args[0].as_python_constant())
            bound = len(self.items) - (1 if self.reverse else 0)
            self.index = max(-1 if self.reverse else 0, min(int(index), bound))
            return ConstantVariable(None)
        return super().call_method(tx, name, args, kwargs)

    def remaining(self) -> list[VariableTracker]:
        """The items a full iteration would still give now (without advancing)."""
        if self.exhausted:
            return []
        if self.reverse:
            return list(reversed(self.items[: self.index + 1]))
        return self.items[self.index :]

    def unpack_var_sequence(self, tx):
        rest = self.remaining()
        self.exhausted = True
        return rest

    def rebuild_call(self):
        """(helper, arguments) that build the real iterator at a graph break (reconstruct.py):
        over the rebuilt list itself when live (later mutations are seen), at this index."""
        from .container_iterators import exhausted_iterator, list_iterator_at

        if self.exhausted:
            return exhausted_iterator, []
        if self.seq is None:
            return list_iterator_at, [
                ListVariable(self.remaining(), mutable_local=True),
                ConstantVariable(0),
                ConstantVariable(False),
            ]
        return list_iterator_at, [
            self.seq,
            ConstantVariable(self.index),
            ConstantVariable(self.reverse),
        ]

    def rebuild_children(self) -> list[VariableTracker]:
        return [self.seq] if self.seq is not None else self.remaining()

    def python_type(self) -> type:
        return type(reversed([])) if self.reverse else type(iter([]))

    def __repr__(self) -> str:
        return f"ListIteratorVariable({self.index}/{len(self.items)})"
