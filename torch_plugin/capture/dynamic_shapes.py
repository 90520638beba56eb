"""Which tensor dimensions are captured with symbolic sizes (dynamic shapes).

A dimension is *dynamic* when the graph is traced with a symbol for its size (PyTorch's
``ShapeEnv`` and FakeTensor, see ``OutputGraph.add_graph_input``), so one cache entry serves
every size that satisfies the entry's shape guards. Three things make a dimension dynamic:

- :func:`mark_dynamic` on the tensor (always respected), or torch.compile's markers
  ``torch._dynamo.mark_dynamic`` and ``maybe_mark_dynamic`` (read from the attributes they
  set, ``_dynamo_dynamic_indices`` and ``_dynamo_weak_dynamic_indices``). A ``min``/``max``
  range given to ``torch._dynamo.mark_dynamic`` is checked as torch.compile checks it
  (:func:`check_ranges`): a size outside it at a compile, or a capture whose guards hold only
  for part of it (a Python ``if`` on the size, a specialization), raises PyTorch's
  ``ConstraintViolationError`` naming the dimension, the bounds and the user's file and line.
  The range also bounds the symbol, so the entry's shape guards check it and a later size
  outside it compiles again. Without a range, a marked size that capture must specialize is
  specialized without an error, as for ``maybe_mark_dynamic``;
- ``optimize(..., dynamic=True)``: every dimension of every input tensor;
- *automatic dynamic* (the default, ``dynamic=None``): when a code object is compiled again
  and an input tensor (by source, e.g. ``L['x']``) has a different size in some dimension
  than at the previous compile of that code object, that dimension is dynamic from this
  compile on. The same holds for int inputs (``L['n']``): an int that changed is a
  symbolic int from then on (resume functions after a graph break receive sizes as ints). So a function called with batch sizes 1, 2, 3, ... compiles for 1 (static),
  then once more for 2 with a symbolic batch size that serves 3, 4, ... as well.
  ``dynamic=False`` turns this off (every new size recompiles).

``torch._dynamo.mark_static(t, dim)`` (the attribute ``_dynamo_static_indices``) keeps a
dimension static under ``dynamic=True`` and automatic dynamic; a dimension marked dynamic too
stays dynamic (as in torch.compile, mark_dynamic wins).

As in PyTorch, sizes 0 and 1 are never symbolic (the ShapeEnv specializes them), and a
symbolic size is guarded ``>= 2``.

Key parts: :func:`mark_dynamic`, :class:`DimPolicy` (the decision for one capture),
:func:`specialize` (a symbolic value made concrete, which adds a guard), :func:`dim_ranges`
and :func:`check_ranges` (torch._dynamo.mark_dynamic's ``min``/``max``), :func:`reset`.
"""

from __future__ import annotations

import types
import weakref
from typing import Any

import torch

# code object -> {source name: sizes at the last compile, None where a size has varied}
_frame_state: weakref.WeakKeyDictionary[types.CodeType, dict[str, list[int | None]]] = (
    weakref.WeakKeyDictionary()
)

_MARK_ATTR = "_torchplugin_dynamic_dims"
# Code objects whose shape guards the guard tree could not evaluate: captured static.
_static_code: weakref.WeakSet[types.CodeType] = weakref.WeakSet()


def mark_dynamic(t: torch.Tensor, dim: int | list[int] | tuple[int, ...]) -> None:
    """Capture dimension ``dim`` (or each of a list of dims) of ``t`` with a symbolic size,
    from the first compile on, so calls with other sizes in that dimension reuse the entry.

    Raises TypeError when ``t`` is not a tensor and IndexError when a dim is out of range.
    Sizes 0 and 1 stay static even when marked (PyTorch specializes them).
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"mark_dynamic expects a torch.Tensor, got {type(t).__name__}")
    dims = [dim] if isinstance(dim, int) else list(dim)
    marked = set(getattr(t, _MARK_ATTR, ()))
    for d in dims:
        if not isinstance(d, int) or not -t.dim() <= d < t.dim():
            raise IndexError(f"mark_dynamic: dim {d!r} is out of range for a {t.dim()}-d tensor")
        marked.add(d % t.dim())
    setattr(t, _MARK_ATTR, frozenset(marked))


def marked_dims(t: torch.Tensor) -> frozenset:
    """The dims marked dynamic on ``t``: by :func:`mark_dynamic`, or by
    ``torch._dynamo.mark_dynamic`` / ``maybe_mark_dynamic``."""
    own = getattr(t, _MARK_ATTR, frozenset())
    theirs = _dynamo_dims(t, "_dynamo_dynamic_indices") | _dynamo_dims(
        t, "_dynamo_weak_dynamic_indices"
    )
    return own | theirs if theirs else own


def static_dims(t: torch.Tensor) -> frozenset:
    """The dims ``torch._dynamo.mark_static`` marked static on ``t``."""
    return _dynamo_dims(t, "_dynamo_static_indices")


def _dynamo_dims(t: torch.Tensor, attr: str) -> frozenset:
    """The dims in ``t``'s torch._dynamo marker ``attr`` (a set of ints it may hold), taken
    modulo ``t.dim()``; out-of-range entries are ignored."""
    dims = t.__dict__.get(attr) if hasattr(t, "__dict__") else None
    if not dims:
        return frozenset()
    n = t.dim()
    return frozenset(d % n for d in dims if isinstance(d, int) and -n <= d < n)


def dim_ranges(t: torch.Tensor) -> dict[int, tuple[int | None, int | None]]:
    """The ``min``/``max`` bounds ``torch._dynamo.mark_dynamic(t, dim, min=..., max=...)``
    gave ``t``'s dims (the attribute ``_dynamo_dynamic_range``), by dim taken modulo
    ``t.dim()``: ``(min, max)``, either None where not given; dims marked several times get
    the intersection. Dims marked without bounds are left out."""
    marks = t.__dict__.get("_dynamo_dynamic_range") if hasattr(t, "__dict__") else None
    out: dict[int, tuple[int | None, int | None]] = {}
    n = t.dim()
    for mark in marks or ():
        dim, lo, hi = (getattr(mark, k, None) for k in ("dim", "min", "max"))
        if not isinstance(dim, int) or not -n <= dim < n or (lo is None and hi is None):
            continue
        old_lo, old_hi = out.get(dim % n, (None, None))
        lo = lo if old_lo is None else old_lo if lo is None else max(lo, old_lo)
        hi = hi if old_hi is None else old_hi if hi is None else min(hi, old_hi)
        out[dim % n] = (lo, hi)
    return out


def _range_text(name: str, lo: int | None, hi: int | None) -> str:
    left = f"{lo} <= " if lo is not None else ""
    right = f" <= {hi}" if hi is not None else ""
    return f"{left}{name}{right}"


def check_size_in_range(name: str, size: int, bounds: tuple, where: Any) -> None:
    """Raise ``ConstraintViolationError`` when ``size`` (of the dim ``name``, e.g.
    ``L['x'].size()[0]``) is outside ``bounds`` (:func:`dim_ranges`); ``where``: the user's
    location (printed below the message)."""
    lo, hi = bounds
    if (lo is None or size >= lo) and (hi is None or size <= hi):
        return
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    raise ConstraintViolationError(
        f"{name} = {size} is not in the range [{lo}, {hi}] given to "
        f"torch._dynamo.mark_dynamic ({_range_text(name, lo, hi)})\n{where}"
    )


def constrain_to_range(shape_env: Any, sym: Any, bounds: tuple) -> None:
    """Narrow ``sym``'s value range in ``shape_env`` to ``bounds`` (:func:`dim_ranges`; the
    lower bound is at least 2: sizes 0 and 1 are never symbolic)."""
    from torch.utils._sympy.numbers import int_oo

    lo, hi = bounds
    shape_env.constrain_symbol_range(
        sym, max(2, lo if lo is not None else 2), hi if hi is not None else int_oo
    )


def check_ranges(
    shape_env: Any, ranged: list, code: types.CodeType, guard_locations: dict | None = None
) -> None:
    """Raise ``ConstraintViolationError`` (as torch.compile does) when the capture of
    ``code`` holds only for part of a range that ``torch._dynamo.mark_dynamic`` gave: its
    symbol was specialized to one value, or a guard on it (a Python ``if`` on the size, a
    backend's decision) is false for some size in the range. ``ranged``: ``(name, symbol,
    (min, max), location)`` of each ranged symbolic dim; ``guard_locations``: the user
    location of each guard (by index in ``shape_env.guards``) the translator added. Called
    after the backend (whose guards count too). The message names the dim, its range, the
    guard and the user's file and line that made it (or, for a backend's guard or a
    specialization, where the input was read)."""
    if not ranged or shape_env is None:
        return
    import sympy
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError
    from torch.utils._sympy.numbers import int_oo
    from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

    # Sizes 0 and 1 are never symbolic: a symbol's range starts at 2 whatever min says.
    bounds = {
        sym: ValueRanges(max(2, lo if lo is not None else 2), hi if hi is not None else int_oo)
        for _, sym, (lo, hi), _ in ranged
    }
    names = {sym: sympy.Symbol(name, integer=True) for name, sym, _, _ in ranged}
    problems: list[str] = []
    bad: list[str] = []
    for name, sym, (lo, hi), where in ranged:
        fixed = shape_env.replacements.get(sym)
        if fixed is not None and fixed.is_number:
            bad.append(name)
            problems.append(
                f"{name} was specialized to {fixed} (the code needs that one size), but the "
                f"range {_range_text(name, lo, hi)} was given to torch._dynamo.mark_dynamic; "
                f"the input was read at\n{where}"
            )
    for index, guard in enumerate(shape_env.guards):
        expr = guard.expr
        free = expr.free_symbols
        if not free or not free <= bounds.keys():
            continue
        holds = bound_sympy(expr, {s: bounds[s] for s in free})
        if holds.is_singleton() and bool(holds.lower):
            continue
        bad.extend(n for n, s, _, _ in ranged if s in free)
        ranges = ", ".join(_range_text(n, lo, hi) for n, s, (lo, hi), _ in ranged if s in free)
        made_at = (guard_locations or {}).get(index)
        if made_at is not None:
            origin = f"made at\n{made_at}"
        else:
            wheres = "\n".join(str(w) for _, s, _, w in ranged if s in free)
            origin = f"added by the backend; the input was read at\n{wheres}"
        problems.append(
            f"not all values of {ranges} (given to torch._dynamo.mark_dynamic) satisfy the "
            f"generated guard {expr.xreplace(names)}, {origin}"
        )
    if problems:
        dims = ", ".join(dict.fromkeys(bad))
        raise ConstraintViolationError(
            f"Constraints violated ({dims}) in {code.co_qualname} ({code.co_filename}:"
            f"{code.co_firstlineno})! Remove the range or the code that narrows it.\n  - "
            + "\n  - ".join(problems)
        )


class DimPolicy:
    """Decides, for one capture of ``code``, which dims of each input tensor are dynamic.

    ``dynamic``: None (automatic, the default), True (all dims) or False (only marked dims).
    Calling :meth:`dynamic_dims` also records the sizes for the next automatic decision.
    """

    def __init__(self, code: types.CodeType | None, dynamic: bool | None) -> None:
        self.code = code
        self.dynamic = dynamic

    def dynamic_dims(self, source_name: str, t: torch.Tensor) -> list[bool]:
        n = t.dim()
        if self.code is not None and self.code in _static_code:
            return [False] * n
        marked = marked_dims(t)
        static = static_dims(t) - marked
        if self.dynamic is True:
            return [i not in static for i in range(n)]
        auto = [False] * n
        if self.dynamic is None and self.code is not None:
            state = _frame_state.setdefault(self.code, {})
            sizes = list(t.shape)
            prev = state.get(source_name)
            if prev is None or len(prev) != n:
                state[source_name] = sizes
            else:
                merged = [p if p == s else None for p, s in zip(prev, sizes)]
                state[source_name] = merged
                auto = [m is None for m in merged]
        return [(auto[i] and i not in static) or i in marked for i in range(n)]

    def dynamic_int(self, source_name: str, value: int) -> bool:
        """Whether the int input at ``source_name`` is symbolic: with ``dynamic=True``, or
        automatically once it had another value at a previous compile of this code (e.g. a
        batch size passed to a resume function after a graph break)."""
        if self.code is not None and self.code in _static_code:
            return False
        if self.dynamic is True:
            return True
        if self.dynamic is False or self.code is None:
            return False
        state = _frame_state.setdefault(self.code, {})
        key = f"int:{source_name}"
        prev = state.get(key)
        if prev is None:
            state[key] = [value]
            return False
        if prev[0] is not None and prev[0] != value:
            state[key] = [None]
        return state[key][0] is None


def is_symbolic(value: Any) -> bool:
    """True for SymInt/SymFloat/SymBool values that are not constants."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_bool, is_concrete_int

    if isinstance(value, torch.SymInt):
        return not is_concrete_int(value)
    if isinstance(value, torch.SymBool):
        return not is_concrete_bool(value)
    return isinstance(value, torch.SymFloat)


def specialize(value: Any) -> Any:
    """``value`` with every symbolic number replaced by its concrete value at capture time.

    Converting a symbol to a Python number makes the ShapeEnv record a guard (e.g.
    ``Eq(s0, 8)``), so the entry is only reused for that value: correct, but a new value
    recompiles. Used where a value must become a Python constant (returned from the frame,
    stored by a side effect, loaded by reconstructed bytecode).
    """
    if isinstance(value, torch.SymInt):
        return int(value)
    if isinstance(value, torch.SymFloat):
        return float(value)
    if isinstance(value, torch.SymBool):
        return bool(value)
    if isinstance(value, torch.Size):
        return torch.Size([specialize(v) for v in value])
    if isinstance(value, tuple) and type(value) is tuple:
        return tuple(specialize(v) for v in value)
    if isinstance(value, slice):
        return slice(specialize(value.start), specialize(value.stop), specialize(value.step))
    return value


def specialize_deep(value: Any) -> Any:
    """:func:`specialize` through lists, dicts, tuples and sets too: for a value about to
    become text (``str``, ``repr``, ``format``, f-strings, ``%``), whose characters must be
    the concrete numbers (a SymInt's ``str`` is its symbol's name, ``s0``)."""
    if type(value) is list:
        return [specialize_deep(v) for v in value]
    if type(value) is tuple:
        return tuple(specialize_deep(v) for v in value)
    if type(value) is dict:
        return {specialize_deep(k): specialize_deep(v) for k, v in value.items()}
    if type(value) in (set, frozenset):
        return type(value)(specialize_deep(v) for v in value)
    return specialize(value)


def has_symbolic(value: Any) -> bool:
    """True when ``value`` is, or holds (in a list, tuple, dict, slice or Size), a symbolic
    number."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    if isinstance(value, (list, tuple)):
        return any(has_symbolic(v) for v in value)
    if isinstance(value, dict):
        return any(has_symbolic(k) or has_symbolic(v) for k, v in value.items())
    if isinstance(value, slice):
        return any(has_symbolic(v) for v in (value.start, value.stop, value.step))
    return False


def force_static(code: types.CodeType) -> None:
    """Capture ``code`` with static shapes from now on (its shape guards were unsupported)."""
    _static_code.add(code)


def reset() -> None:
    """Forget the sizes seen by automatic dynamic (called by ``torch_plugin.reset``)."""
    _frame_state.clear()
    _static_code.clear()
