"""Which tensor dimensions are captured with symbolic sizes (dynamic shapes).

A dimension is *dynamic* when the graph is traced with a symbol for its size (PyTorch's
``ShapeEnv`` and FakeTensor, see ``OutputGraph.add_graph_input``), so one cache entry serves
every size that satisfies the entry's shape guards. Three things make a dimension dynamic:

- :func:`mark_dynamic` on the tensor (always respected), or torch.compile's markers
  ``torch._dynamo.mark_dynamic`` and ``maybe_mark_dynamic`` (read from the attributes they
  set, ``_dynamo_dynamic_indices`` and ``_dynamo_weak_dynamic_indices``; a ``min``/``max``
  range is not enforced, and a marked size that capture must specialize is specialized
  without an error, as for ``maybe_mark_dynamic``);
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
:func:`specialize` (a symbolic value made concrete, which adds a guard), :func:`reset`.
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
