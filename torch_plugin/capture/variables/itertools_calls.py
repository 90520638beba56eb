"""``itertools`` iterators built in captured code: ``chain``, ``islice``, ``product``,
``zip_longest``, ``repeat``, ``count``, ``accumulate``, ``pairwise``, ``combinations``,
``combinations_with_replacement``, ``permutations`` (``chain.from_iterable`` is in
builtin_table.py).

Key function: :func:`call`. Each becomes an iterator variable over the argument variables
(:class:`~.iterators.LazyIteratorVariable` when it must pull its inputs one item at a time,
as CPython does, so a generator argument runs exactly as far as in eager), never a real
itertools object: the items are the captured values themselves (tensors stay graph values).
Sources: the "roughly equivalent" pure-Python code in the itertools documentation.
"""

from __future__ import annotations

import itertools

from .. import graph_break_types as gbt
from ..exc import unimplemented
from .base import VariableTracker
from .constant import ConstantVariable
from .iterators import LazyIteratorVariable, as_iterator
from .lists import ListIteratorVariable, TupleVariable

SUPPORTED = frozenset(
    {
        itertools.chain,
        itertools.islice,
        itertools.product,
        itertools.zip_longest,
        itertools.repeat,
        itertools.count,
        itertools.accumulate,
        itertools.pairwise,
        itertools.combinations,
        itertools.combinations_with_replacement,
        itertools.permutations,
    }
)
# Consume their iterable whole when built (as the C code does: ``tuple(iterable)``) and
# produce tuples of its items by index; the index tuples come from the real function on
# ``range(n)``, so their order is CPython's.
_BY_INDEX = (
    itertools.combinations,
    itertools.combinations_with_replacement,
    itertools.permutations,
)


def _const(var: VariableTracker | None, what: str, default=None):
    if var is None:
        return default
    if not var.is_python_constant():
        unimplemented(gbt.VALUE_NOT_CONSTANT, f"itertools.{what} with a non-constant argument")
    return var.as_python_constant()


def call(tx, cls: type, args: list, kwargs: dict) -> VariableTracker:
    """``cls(*args, **kwargs)`` for a class in :data:`SUPPORTED`; a graph break for a call
    eager would reject or one this does not model."""
    name = cls.__name__
    if cls is itertools.chain and not kwargs:
        return _chain(tx, args)
    if cls is itertools.islice and not kwargs and 2 <= len(args) <= 4:
        return _islice(tx, args)
    if cls is itertools.product and set(kwargs) <= {"repeat"}:
        repeat = _const(kwargs.get("repeat"), name, 1)
        pools = [as_iterator(tx, a).unpack_var_sequence(tx) for a in args] * repeat
        return ListIteratorVariable([TupleVariable(list(p)) for p in itertools.product(*pools)])
    if cls is itertools.zip_longest and set(kwargs) <= {"fillvalue"}:
        fill = kwargs.get("fillvalue", ConstantVariable(None))
        return _zip_longest([as_iterator(tx, a) for a in args], fill)
    if cls is itertools.repeat and 1 <= len(args) + len(kwargs) <= 2:
        obj = args[0] if args else kwargs.get("object")
        times = args[1] if len(args) > 1 else kwargs.get("times")
        if obj is None:
            unimplemented(gbt.UNSUPPORTED_BUILTIN, "itertools.repeat without an object")
        if times is None:
            return LazyIteratorVariable(lambda: obj, "repeat")
        return ListIteratorVariable([obj] * max(0, int(_const(times, name))))
    if cls is itertools.count and len(args) + len(kwargs) <= 2:
        start = _const(args[0] if args else kwargs.get("start"), name, 0)
        step = _const(args[1] if len(args) > 1 else kwargs.get("step"), name, 1)
        state = [start]

        def produce():
            value = state[0]
            state[0] = value + step
            return ConstantVariable(value)

        return LazyIteratorVariable(produce, "count")
    if cls is itertools.accumulate and 1 <= len(args) <= 2 and set(kwargs) <= {"func", "initial"}:
        func = args[1] if len(args) > 1 else kwargs.get("func")
        return _accumulate(tx, as_iterator(tx, args[0]), func, kwargs.get("initial"))
    if cls is itertools.pairwise and len(args) == 1 and not kwargs:
        return _pairwise(as_iterator(tx, args[0]))
    if cls in _BY_INDEX and 1 <= len(args) + len(kwargs) <= 2 and set(kwargs) <= {"r"}:
        pool = as_iterator(tx, args[0] if args else kwargs["iterable"]).unpack_var_sequence(tx)
        r = args[1] if len(args) > 1 else kwargs.get("r")
        if r is None and cls is not itertools.permutations:
            unimplemented(gbt.EXCEPTION, f"itertools.{name} without r (TypeError in eager)")
        r_value = None if r is None else _const(r, name)
        if r_value is not None and (not isinstance(r_value, int) or r_value < 0):
            unimplemented(gbt.EXCEPTION, f"itertools.{name} with r={r_value!r}")
        index_tuples = cls(range(len(pool)), r_value) if r is not None else cls(range(len(pool)))
        return ListIteratorVariable([TupleVariable([pool[i] for i in t]) for t in index_tuples])
    unimplemented(gbt.UNSUPPORTED_BUILTIN, f"itertools.{name} with these arguments")


def _chain(tx, args: list) -> VariableTracker:
    its = [as_iterator(tx, a) for a in args]
    pos = [0]

    def produce():
        while pos[0] < len(its):
            item = its[pos[0]].next_item()
            if item is not None:
                return item
            pos[0] += 1
        return None

    return LazyIteratorVariable(produce, "chain")


def _islice(tx, args: list) -> VariableTracker:
    it = as_iterator(tx, args[0])
    bounds = [_const(a, "islice") for a in args[1:]]
    start, stop, step = slice(*bounds).start or 0, slice(*bounds).stop, slice(*bounds).step or 1
    if start < 0 or (stop is not None and stop < 0) or step < 1:
        unimplemented(gbt.EXCEPTION, "itertools.islice with negative bounds (ValueError in eager)")
    state = {"next": start, "index": 0}

    def produce():
        if stop is not None and state["next"] >= stop:
            return None
        while True:
            item = it.next_item()
            if item is None:
                return None
            index = state["index"]
            state["index"] += 1
            if index == state["next"]:
                state["next"] += step
                return item

    return LazyIteratorVariable(produce, "islice")


def _zip_longest(its: list, fill: VariableTracker) -> VariableTracker:
    done = [False] * len(its)

    def produce():
        items = []
        for i, it in enumerate(its):
            item = None if done[i] else it.next_item()
            if item is None:
                done[i] = True
                item = fill
            items.append(item)
        if all(done):
            return None
        return TupleVariable(items)

    return LazyIteratorVariable(produce, "zip_longest")


def _accumulate(tx, it, func, initial) -> VariableTracker:
    state: dict = {"total": initial, "started": initial is not None, "emitted_initial": False}

    def produce():
        if initial is not None and not state["emitted_initial"]:
            state["emitted_initial"] = True
            return initial
        item = it.next_item()
        if item is None:
            return None
        if not state["started"]:
            state["started"] = True
            state["total"] = item
        elif func is None or (func.is_python_constant() and func.as_python_constant() is None):
            state["total"] = tx.binary_op("+", state["total"], item)
        else:
            state["total"] = func.call_function(tx, [state["total"], item], {})
        return state["total"]

    return LazyIteratorVariable(produce, "accumulate")


def _pairwise(it) -> VariableTracker:
    state = {"prev": None, "started": False}

    def produce():
        if not state["started"]:
            state["started"] = True
            state["prev"] = it.next_item()
            if state["prev"] is None:
                return None
        item = it.next_item()
        if item is None:
            return None
        pair = TupleVariable([state["prev"], item])
        state["prev"] = item
        return pair

    return LazyIteratorVariable(produce, "pairwise")
