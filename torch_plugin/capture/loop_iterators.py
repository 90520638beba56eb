"""The iterators of ``for`` loops on the stack at a graph break that the resume function
makes again itself (:func:`loop_iterators`), so that capturing the resume function models them
again and the rest of the loop is captured: iterators over values that cannot change are
handed as the items they would still give, live list iterators by (list, index), dict and set
iterators by (container, kind, reverse, position) beside the real iterator
(``container_iterators.hand_iterator`` picks after the breaking instruction), and lazy
``enumerate``/``zip``/``map``/``filter`` over live lists by a description
``container_iterators.resume_lazy_iterator`` rebuilds. Used by ``graph_break.py``."""

from __future__ import annotations

from .reconstruct import reaches
from .variables.constant import ConstantVariable
from .variables.container_iterators import (
    DictIteratorVariable,
    EnumerateVariable,
    FilterVariable,
    MapVariable,
    SetIteratorVariable,
    ZipVariable,
)
from .variables.iterators import IteratorVariable
from .variables.lists import ListIteratorVariable, ListVariable, TupleVariable


def loop_iterators(stack: list, local_values: dict, f_globals: dict) -> dict[int, tuple]:
    """The iterators on the stack (a ``for`` loop's) that the resume function makes itself,
    so that capturing it models them again: id -> (stack kind, parts to rebuild).

    - an iterator over values that cannot change (a tuple's, a module list's; ``enumerate``
      or ``zip`` of such) is handed as the list of the items it would still give
      (``"iter"``): making them now runs no code and changes nothing;
    - a live iterator over a list as ``(lst, index)`` (``"list_iter"``: ``iter(lst)`` there,
      positioned at ``index``, over the same list object the locals hold), and
      ``enumerate`` of one as ``(lst, index, count)`` (``"enum_list_iter"``).

    An iterator that something else also holds (a local ``it = iter(lst)``, a second stack
    slot) and every other iterator is handed as the real iterator (one object for all its
    holders; the resume function then runs as Python)."""
    out: dict[int, tuple] = {}
    for v in stack:
        if not isinstance(v, IteratorVariable):
            continue
        others = [o for o in stack if o is not v] + list(local_values.values())
        if reaches(others, v):
            continue
        items = _fixed_remaining(v)
        if items is not None:
            out[id(v)] = ("iter", items)
            continue
        live = _live_iterator_parts(v)
        if live is not None:
            out[id(v)] = ("live_iter", [v, live[0]], *live[1:])
            continue
        inner, count = (v.inner, v.count) if isinstance(v, EnumerateVariable) else (v, None)
        if type(inner) is ListIteratorVariable and not inner.reverse and not inner.exhausted:
            if count is None:
                out[id(v)] = ("list_iter", [inner.seq], inner.index)
                continue
            if f_globals.get("enumerate", enumerate) is enumerate:  # not shadowed
                out[id(v)] = ("enum_list_iter", [inner.seq], inner.index, count)
                continue
        parts: list = []
        spec = _lazy_spec(v, parts)
        if spec is not None:
            out[id(v)] = ("lazy_iter", parts, spec)
    return out


def _lazy_spec(v, parts: list):
    """The description ``container_iterators.resume_lazy_iterator`` makes ``v`` again from
    (``"lazy_iter"``): list iterators over live lists (by index) and ``enumerate``/``zip``/
    ``map``/``filter`` over such; the variables it holds (lists, functions) are appended to
    ``parts``. None for any other iterator (or an exhausted list iterator, which stays
    exhausted in CPython even if its list grows)."""
    if type(v) is ListIteratorVariable:
        if type(v.seq) is not ListVariable or v.exhausted:
            return None
        parts.append(v.seq)
        return ("list", v.seq, v.index, v.reverse)
    if type(v) is EnumerateVariable:
        inner = _lazy_spec(v.inner, parts)
        return None if inner is None else ("enumerate", inner, v.count)
    if type(v) is ZipVariable:
        inners = [_lazy_spec(i, parts) for i in v.inners]
        return None if None in inners else ("zip", tuple(inners), v.strict)
    if type(v) is MapVariable:
        inners = [_lazy_spec(i, parts) for i in v.inners]
        if None in inners:
            return None
        parts.append(v.fn)
        return ("map", v.fn, tuple(inners))
    if type(v) is FilterVariable:
        inner = _lazy_spec(v.inner, parts)
        if inner is None:
            return None
        parts.append(v.fn)
        return ("filter", v.fn, inner)
    return None


def _live_iterator_parts(v) -> tuple | None:
    """``(container, kind, reverse, pos)`` of a loop's dict or set iterator that the resume
    function can make again (``"live_iter"``: the real iterator goes along, and
    ``container_iterators.hand_iterator`` picks, after the breaking instruction, which of
    the two the resume function gets), else None."""
    if type(v) is DictIteratorVariable:
        if v.exhausted or not v._unchanged():
            return None
        return (v.dict_var, v.kind, v.reverse, v.pos)
    if type(v) is SetIteratorVariable:
        if v.exhausted or not v._unchanged() or list(set(v.order)) != v.order:
            return None
        return (v.set_var, "set", False, v.pos)
    return None


def _fixed_remaining(v) -> list | None:
    """The items ``v`` would still give, when they cannot change and taking them runs no
    code (a snapshot list iterator, ``enumerate``/``zip`` of such); else None."""
    if type(v) is ListIteratorVariable and v.seq is None:
        return v.remaining()
    if isinstance(v, EnumerateVariable):
        inner = _fixed_remaining(v.inner)
        if inner is None:
            return None
        return [TupleVariable([ConstantVariable(v.count + i), x]) for i, x in enumerate(inner)]
    if isinstance(v, ZipVariable) and not v.strict:
        parts = [_fixed_remaining(i) for i in v.inners]
        if any(p is None for p in parts):
            return None
        return [TupleVariable(list(group)) for group in zip(*parts)]
    return None
