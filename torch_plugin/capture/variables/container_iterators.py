"""Iterators over live containers, and the lazy builtins over iterators (issue #31).

CPython's container iterators read the container as it is at each step, and check it:

- a list iterator reads ``lst[i]`` while ``i < len(lst)``: items appended in the loop are
  seen, the loop stops at the list's length at that step (``lists.ListIteratorVariable``
  with ``seq``; ``reversed(lst)`` reads down from the end while the index is in range);
- a dict iterator (``iter(d)``, ``d.keys()/values()/items()``, ``reversed(d)``) remembers
  the dict's size: a size change raises ``RuntimeError: dictionary changed size during
  iteration`` at the next step (:class:`DictIteratorVariable`);
- a set iterator likewise raises ``RuntimeError: Set changed size during iteration``
  (:class:`SetIteratorVariable`); a deque's raises on any mutation
  (``collections_objects._DequeIterator``).

Before, capture iterated a snapshot taken at ``iter()``: a loop that added a key ran to the
end instead of raising, a loop that appended to a list did not see the new items (a silent
wrong result). Now each step checks as CPython does. A step that would raise stops capture
there (``GB009``, the code raises: the frame runs as Python and raises as usual). A step
after a same-size change of a dict's or set's keys (a removal, then an insertion) is a
graph break too: which key CPython yields next then depends on its hash table's layout.

``enumerate``, ``zip``, ``map`` and ``filter`` pull from their arguments' iterators one item
at a time, when the loop asks (``map``'s function runs per item, as in CPython, so a loop
that stops early runs it no further). Every iterator here can be rebuilt at a graph break
as a real iterator of the same kind at the same position (``rebuild_call``), over the real
container (rebuilt once, so a later mutation is seen by both); an iterator whose container
changed in a way that would raise, or over a generator, cannot, and the frame then runs
unmodified.
"""

from __future__ import annotations

from .. import graph_break_types as gbt
from ..exc import unimplemented
from .base import VariableTracker
from .constant import ConstantVariable
from .iterators import IteratorVariable

# --------------------------------------------------------------------------- dicts and sets


class DictIteratorVariable(IteratorVariable):
    """CPython's dict iterator over ``dict_var`` (``kind``: ``"keys"``, ``"values"`` or
    ``"items"``; ``reverse``: ``reversed(d)``). It remembers the dict's size and removal
    count (``dicts.KeyEntries``) and the keys in order when made; each step checks them."""

    def __init__(self, dict_var, kind: str, reverse: bool = False) -> None:
        super().__init__()
        entries = dict_var.items
        self.dict_var = dict_var
        self.kind = kind
        self.reverse = reverse
        self.used = len(entries)
        self.removals = entries.removals
        self.keys = list(reversed(entries)) if reverse else list(entries)
        self.pos = 0
        self.exhausted = False

    def _unchanged(self) -> bool:
        entries = self.dict_var.items
        return len(entries) == self.used and entries.removals == self.removals

    def next_item(self) -> VariableTracker | None:
        if self.exhausted:
            return None
        entries = self.dict_var.items
        if len(entries) != self.used:
            unimplemented(
                gbt.EXCEPTION, "dictionary changed size during iteration (RuntimeError in eager)"
            )
        if entries.removals != self.removals:
            unimplemented(
                gbt.UNMODELLED_VALUE,
                "a dict's keys changed during iteration (a key removed and another added): "
                "the next key depends on CPython's hash table layout",
            )
        if self.pos >= len(self.keys):
            self.exhausted = True
            return None
        key = self.keys[self.pos]
        self.pos += 1
        from .dicts import key_var

        if self.kind == "keys":
            return key_var(key)
        if self.kind == "values":
            return entries[key]
        from .lists import TupleVariable

        return TupleVariable([key_var(key), entries[key]])

    def rebuild_call(self):
        if self.exhausted:
            return exhausted_iterator, []
        if not self._unchanged():
            unimplemented(
                gbt.ESCAPING_VALUE, "a dict iterator whose dict changed, live at a graph break"
            )
        return dict_iterator_at, [
            self.dict_var,
            ConstantVariable(self.kind),
            ConstantVariable(self.reverse),
            ConstantVariable(self.pos),
        ]

    def rebuild_children(self) -> list[VariableTracker]:
        return [self.dict_var]

    def python_type(self) -> type:
        view = getattr({}, self.kind)()
        return type(reversed(view) if self.reverse else iter(view))

    def __repr__(self) -> str:
        return f"DictIteratorVariable({self.kind}, {self.pos}/{len(self.keys)})"


class SetIteratorVariable(IteratorVariable):
    """CPython's set iterator over ``set_var``: the elements in the set's order when made;
    each step checks the set's size (RuntimeError) and removal count (a graph break)."""

    def __init__(self, set_var) -> None:
        super().__init__()
        set_var._check_order("iterating")
        self.set_var = set_var
        self.used = len(set_var.keys)
        self.removals = set_var.removals
        self.order = list(set_var.keys)
        self.pos = 0
        self.exhausted = False

    def _unchanged(self) -> bool:
        s = self.set_var
        return len(s.keys) == self.used and s.removals == self.removals

    def next_item(self) -> VariableTracker | None:
        from .sets import _element

        if self.exhausted:
            return None
        if len(self.set_var.keys) != self.used:
            unimplemented(
                gbt.EXCEPTION, "Set changed size during iteration (RuntimeError in eager)"
            )
        if self.set_var.removals != self.removals:
            unimplemented(
                gbt.UNMODELLED_VALUE,
                "a set's elements changed during iteration (one removed and another added): "
                "the next element depends on CPython's hash table layout",
            )
        if self.pos >= len(self.order):
            self.exhausted = True
            return None
        self.pos += 1
        return _element(self.order[self.pos - 1])

    def rebuild_call(self):
        if self.exhausted:
            return exhausted_iterator, []
        # the real set (rebuilt from its elements, or the input set after the replay) must
        # iterate in the captured order for the rebuilt iterator to continue where this one is
        if not self._unchanged() or list(set(self.order)) != self.order:
            unimplemented(
                gbt.ESCAPING_VALUE, "a set iterator whose order cannot be rebuilt, at a break"
            )
        return set_iterator_at, [self.set_var, ConstantVariable(self.pos)]

    def rebuild_children(self) -> list[VariableTracker]:
        return [self.set_var]

    def python_type(self) -> type:
        return type(iter(set()))

    def __repr__(self) -> str:
        return f"SetIteratorVariable({self.pos}/{len(self.order)})"


# --------------------------------------------------------------------------- lazy builtins


class EnumerateVariable(IteratorVariable):
    """``enumerate(it, start)``: pulls one item of ``inner`` per step."""

    def __init__(self, inner: IteratorVariable, start) -> None:
        super().__init__()
        self.inner = inner
        self.count = start

    def next_item(self):
        from .lists import TupleVariable

        item = self.inner.next_item()
        if item is None:
            return None
        self.count += 1
        return TupleVariable([ConstantVariable(self.count - 1), item])

    def rebuild_call(self):
        return enumerate, [self.inner, ConstantVariable(self.count)]

    def rebuild_children(self):
        return [self.inner]

    def python_type(self) -> type:
        return enumerate


class ZipVariable(IteratorVariable):
    """``zip(*its, strict=...)``: pulls from its iterators left to right and stops at the
    first exhausted one (the ones before it have given one item more, as in CPython);
    ``strict``: ValueError unless all end together (a graph break: the code raises)."""

    def __init__(self, inners: list, strict: bool = False) -> None:
        super().__init__()
        self.inners = inners
        self.strict = strict

    def next_item(self):
        from .lists import TupleVariable

        if not self.inners:
            return None
        items = []
        for i, it in enumerate(self.inners):
            item = it.next_item()
            if item is None:
                if self.strict and (
                    i > 0 or any(o.next_item() is not None for o in self.inners[1:])
                ):
                    unimplemented(gbt.EXCEPTION, "zip(strict=True) with unequal lengths")
                return None
            items.append(item)
        return TupleVariable(items)

    def rebuild_call(self):
        from .lists import TupleVariable

        return zip_of, [TupleVariable(list(self.inners)), ConstantVariable(self.strict)]

    def rebuild_children(self):
        return list(self.inners)

    def python_type(self) -> type:
        return zip


class MapVariable(IteratorVariable):
    """``map(fn, *its)``: calls ``fn`` (inlined) on one item of each iterator per step."""

    def __init__(self, tx, fn: VariableTracker, inners: list) -> None:
        super().__init__()
        self.tx = tx
        self.fn = fn
        self.inners = inners

    def next_item(self):
        args = []
        for it in self.inners:
            item = it.next_item()
            if item is None:
                return None
            args.append(item)
        return self.fn.call_function(self.tx, args, {})

    def rebuild_call(self):
        return map, [self.fn, *self.inners]

    def rebuild_children(self):
        return [self.fn, *self.inners]

    def python_type(self) -> type:
        return map


class FilterVariable(IteratorVariable):
    """``filter(fn, it)``: the next item of ``it`` for which ``fn(item)`` (or the item itself,
    for ``fn`` None) is true."""

    def __init__(self, tx, fn: VariableTracker, inner: IteratorVariable) -> None:
        super().__init__()
        self.tx = tx
        self.fn = fn
        self.inner = inner

    def next_item(self):
        fn = self.fn
        while (item := self.inner.next_item()) is not None:
            if fn.is_python_constant() and fn.as_python_constant() is None:
                keep = item
            else:
                keep = fn.call_function(self.tx, [item], {})
            if keep.truthiness(self.tx):
                return item
        return None

    def rebuild_call(self):
        return filter, [self.fn, self.inner]

    def rebuild_children(self):
        return [self.fn, self.inner]

    def python_type(self) -> type:
        return filter


# --------------------------------------------------------------------------- iter / reversed


def make_iterator(tx, obj: VariableTracker) -> IteratorVariable:
    """``iter(obj)`` as CPython builds it: the iterator itself, a live iterator over a list,
    dict, dict view, set or deque, or a snapshot of a sequence's items (a tuple, a string, a
    range, a module list: values that do not change while iterated here)."""
    if isinstance(obj, IteratorVariable):
        return obj
    make = getattr(obj, "make_iterator", None)
    if make is not None:
        return make(tx)
    from .lists import ListIteratorVariable

    return ListIteratorVariable(obj.unpack_var_sequence(tx))


def make_reversed(tx, obj: VariableTracker) -> IteratorVariable:
    """``reversed(obj)``: a list's and a dict's (or dict view's) own reverse iterators
    (live, as above); TypeError (a graph break) for a set or an iterator, which are not
    reversible; a snapshot for immutable sequences."""
    from .dicts import ConstDictVariable, DictViewVariable
    from .lists import ListIteratorVariable, ListVariable
    from .sets import SetVariable

    if type(obj) is ListVariable:
        return ListIteratorVariable(obj.items, seq=obj, reverse=True)
    if isinstance(obj, ConstDictVariable):  # a modelled subclass keeps dict's __reversed__
        return DictIteratorVariable(obj, "keys", reverse=True)
    if isinstance(obj, DictViewVariable):
        return DictIteratorVariable(obj.dict_var, obj.kind, reverse=True)
    if isinstance(obj, (SetVariable, IteratorVariable)):
        unimplemented(gbt.EXCEPTION, f"reversed() of {obj}: not reversible (TypeError)")
    if hasattr(obj, "make_reversed"):
        return obj.make_reversed(tx)
    return ListIteratorVariable(list(reversed(obj.unpack_var_sequence(tx))))


# --------------------------------------------------------------------------- rebuild helpers
# Called by the graph-break bytecode (reconstruct.py) with the rebuilt container.


def exhausted_iterator():
    """An exhausted iterator (it stays exhausted, as every CPython iterator does)."""
    return iter(())


def list_iterator_at(lst: list, index: int, reverse: bool):
    """``iter(lst)`` (``reversed(lst)``) positioned at ``index`` (its ``__setstate__``)."""
    it = reversed(lst) if reverse else iter(lst)
    it.__setstate__(index)
    return it


def dict_iterator_at(d: dict, kind: str, reverse: bool, pos: int):
    """A dict iterator over ``d``'s ``kind`` view that has given ``pos`` items."""
    view = getattr(d, kind)()
    it = reversed(view) if reverse else iter(view)
    for _ in range(pos):
        next(it)
    return it


def _iterator_at(container, kind: str, reverse: bool, pos: int):
    if kind == "set":
        return set_iterator_at(container, pos)
    return dict_iterator_at(container, kind, reverse, pos)


def _same_item(a, b) -> bool:
    if type(a) is tuple and type(b) is tuple:  # an items() pair: a new tuple each time
        return len(a) == len(b) and all(x is y for x, y in zip(a, b))
    return a is b


def hand_iterator(handed: tuple):
    """Graph-break bytecode, after the breaking instruction: ``handed`` is ``(it, container,
    kind, reverse, pos)`` for a loop's live dict or set iterator ``it`` (made at the break as
    ``_iterator_at(container, kind, reverse, pos)``). Returns ``(container, kind, reverse,
    pos)`` when a fresh iterator there gives exactly what ``it`` would still give (the
    resume function then makes, and capture models, that iterator), else ``it`` itself (the
    instruction changed the container: the resume function runs with the real iterator, so
    it raises or continues as CPython's does)."""
    it, container, kind, reverse, pos = handed
    try:
        remaining = it.__reduce__()[1][0]  # a copy of the iterator's state, listed
    except RuntimeError:  # changed size: the next step raises
        return it
    fresh = list(_iterator_at(container, kind, reverse, pos))
    if len(fresh) != len(remaining) or not all(map(_same_item, fresh, remaining)):
        return it
    return (container, kind, reverse, pos)


def resume_iterator(handed):
    """A resume function's prologue: the loop iterator from :func:`hand_iterator`'s result."""
    if type(handed) is tuple:
        return _iterator_at(*handed)
    return handed


def model_resume_iterator(tx, args, kwargs) -> IteratorVariable:
    """:func:`resume_iterator` while capturing a resume function: a dict or set iterator
    over the input container, advanced to its position (``pos`` is guarded, as a list
    iterator's index is)."""
    from ..dynamic_shapes import specialize_deep
    from .dicts import ConstDictVariable
    from .lists import TupleVariable
    from .sets import SetVariable

    handed = args[0] if len(args) == 1 and not kwargs else None
    if not isinstance(handed, TupleVariable) or len(handed.items) != 4:
        unimplemented(gbt.UNMODELLED_VALUE, "a loop's real iterator handed to a resume function")
    container, kind, reverse, pos = handed.items
    kind, reverse = kind.as_python_constant(), reverse.as_python_constant()
    pos = int(specialize_deep(pos.as_python_constant()))
    if kind == "set" and isinstance(container, SetVariable):
        it = SetIteratorVariable(container)
    elif kind != "set" and isinstance(container, ConstDictVariable):
        it = DictIteratorVariable(container, kind, reverse)
    else:
        unimplemented(gbt.UNMODELLED_VALUE, f"a resumed loop over {container}")
    for _ in range(pos):
        if it.next_item() is None:
            unimplemented(gbt.UNMODELLED_VALUE, "a resumed loop past its container's end")
    return it


def resume_lazy_iterator(spec: tuple):
    """A resume function's prologue: the loop iterator described by ``spec`` (made by
    ``graph_break._lazy_spec``): ``("list", lst, index, reverse)`` a list iterator at
    ``index``; ``("enumerate", inner, count)``, ``("zip", inners, strict)``, ``("map", fn,
    inners)``, ``("filter", fn, inner)`` the lazy builtins over such iterators, each in the
    state the captured loop left it (CPython's list iterators keep only their index)."""
    kind = spec[0]
    if kind == "list":
        return list_iterator_at(spec[1], spec[2], spec[3])
    if kind == "enumerate":
        return enumerate(resume_lazy_iterator(spec[1]), spec[2])
    if kind == "zip":
        return zip(*[resume_lazy_iterator(s) for s in spec[1]], strict=spec[2])
    if kind == "map":
        return map(spec[1], *[resume_lazy_iterator(s) for s in spec[2]])
    return filter(spec[1], resume_lazy_iterator(spec[2]))


def model_resume_lazy_iterator(tx, args, kwargs) -> IteratorVariable:
    """:func:`resume_lazy_iterator` while capturing a resume function (list indices are
    guarded, as a list iterator's are)."""
    from ..dynamic_shapes import specialize_deep
    from .lists import ListVariable, TupleVariable

    def const(var):
        return specialize_deep(var.as_python_constant())

    def build(spec):
        if not isinstance(spec, TupleVariable) or not spec.items:
            unimplemented(gbt.UNMODELLED_VALUE, "a resumed loop's iterator")
        kind = const(spec.items[0])
        parts = spec.items[1:]
        if kind == "list":
            lst, index, reverse = parts[0], int(const(parts[1])), bool(const(parts[2]))
            if type(lst) is not ListVariable:
                unimplemented(gbt.UNMODELLED_VALUE, f"a resumed loop over {lst}")
            it = make_reversed(tx, lst) if reverse else make_iterator(tx, lst)
            it.call_method(tx, "__setstate__", [ConstantVariable(index)], {})
            return it
        if kind == "enumerate":
            return EnumerateVariable(build(parts[0]), int(const(parts[1])))
        if kind == "zip":
            return ZipVariable([build(s) for s in parts[0].items], bool(const(parts[1])))
        if kind == "map":
            return MapVariable(tx, parts[0], [build(s) for s in parts[1].items])
        return FilterVariable(tx, parts[0], build(parts[1]))

    if len(args) != 1 or kwargs:
        unimplemented(gbt.UNMODELLED_VALUE, "resume_lazy_iterator with these arguments")
    return build(args[0])


def set_iterator_at(s, pos: int):
    """``iter(s)`` that has given ``pos`` elements."""
    it = iter(s)
    for _ in range(pos):
        next(it)
    return it


def zip_of(iterators: tuple, strict: bool):
    """``zip(*iterators, strict=strict)``."""
    return zip(*iterators, strict=strict)
