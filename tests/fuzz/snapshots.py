"""Snapshots of what a user can observe after a call, for the differential harness
(differential.py, which re-exports these names): :func:`snapshot` of an object graph
(tensors with a leaf's ``.grad``, containers (an optimizer's state, keyed by parameters),
objects' attributes, nn.Module state including integer buffers, closure cells,
``io.StringIO`` contents, identity between the objects reached, a raised exception's type)
and :func:`global_state` (grad mode, inference mode, default dtype, autocast)."""

from __future__ import annotations

import copyreg
import io
import types
from typing import Any

import torch


def _stringio(value: str, pos: int) -> io.StringIO:
    buf = io.StringIO(value)
    buf.seek(pos)
    return buf


# Worlds are deep-copied; a StringIO (a print target) copies with its contents and position.
copyreg.pickle(io.StringIO, lambda b: (_stringio, (b.getvalue(), b.tell())))

# (rtol, atol) per backend. eager and aot_eager run the same ATen kernels as eager PyTorch
# (aot_eager after decompositions), so they are exact up to the rounding of a decomposed or
# reordered float op; "plugin" and "inductor" generate their own kernels (vectorized, fused,
# other summation order).


class _Exc:
    """A raised exception as an observable (only the type is compared)."""

    def __init__(self, exc: BaseException) -> None:
        self.type = type(exc)
        self.msg = f"{type(exc).__name__}: {exc}"[:300]


def _skip_global(name: str, value: Any) -> bool:
    if name.startswith("__"):
        return True
    return isinstance(
        value,
        (
            types.ModuleType,
            types.FunctionType,
            types.BuiltinFunctionType,
            type,
            types.MethodType,
            functools_partial_type,
        ),
    )


functools_partial_type = type(__import__("functools").partial(int))


def snapshot(obj: Any, ids: dict | None = None, depth: int = 0) -> Any:
    """A comparable, detached copy of ``obj``: tensors cloned, containers and objects walked.

    ``ids`` numbers every mutable object reached (by identity), so a second path to the
    same object shows up as ``("alias", n)``: identity is part of what is compared.
    """
    if ids is None:
        ids = {}
    if depth > 12:
        return ("deep", type(obj).__name__)
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        return ("const", type(obj).__name__, obj)
    if isinstance(obj, (torch.dtype, torch.device, torch.Size, torch.memory_format)):
        return ("const", type(obj).__name__, obj)
    if isinstance(obj, _Exc):
        return ("raise", obj.type, obj.msg)
    key = id(obj)
    if key in ids:
        return ("alias", ids[key][0])
    ids[key] = (len(ids), obj)  # keep obj alive so ids stay unique during the walk
    n = ids[key][0]
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        attrs = _attrs(obj, ids, depth)  # x.tag = ... set by the program or its caller
        if obj.requires_grad and obj.is_leaf:  # what backward() left (a non-leaf's warns)
            attrs.append(("grad", snapshot(obj.grad, ids, depth + 1)))
        return (
            "tensor",
            n,
            t.clone() if t.layout == torch.strided else t,
            obj.requires_grad,
            obj.is_leaf if obj.requires_grad else None,
            attrs,
        )
    if isinstance(obj, torch.nn.Module):
        return _snapshot_module(obj, ids, depth)
    if isinstance(obj, (list, tuple)) or type(obj).__name__ == "deque":
        # a namedtuple (its subclass: __dict__ attributes) or deque (maxlen): type compared
        return (
            "list" if isinstance(obj, list) else "tuple",
            n,
            [snapshot(v, ids, depth + 1) for v in obj],
            type(obj).__qualname__ + str(getattr(obj, "maxlen", "")),
            _attrs(obj, ids, depth),
        )
    if isinstance(obj, dict):
        items = []
        # dict.copy is one C call (no finalizer runs inside it, where list(obj.items())
        # allocates as it goes and a finalizer may drop an installed global mid-copy:
        # "dictionary changed size during iteration", seen once in the full suite)
        # (subclasses keep their own order and items: an OrderedDict's is not its dict's)
        pairs = dict.copy(obj).items() if type(obj) is dict else list(obj.items())
        for k, v in pairs:
            if isinstance(k, str) and _skip_global(k, v):
                continue
            if isinstance(k, torch.Tensor):  # an optimizer's state: keyed by parameters
                # named by identity (a repr shows rounded values: compared exactly, it
                # would fail within the tolerance); the key's values where first reached
                key = snapshot(k, ids, depth + 1)
                label = f"<tensor #{key[1]}>"
                if key[0] != "alias":
                    items.append((label + " key", key))
                items.append((label, snapshot(v, ids, depth + 1)))
                continue
            items.append((repr(k), snapshot(v, ids, depth + 1)))
        factory = getattr(getattr(obj, "default_factory", None), "__qualname__", None)
        return ("dict", n, items, (type(obj).__qualname__, factory))
    if isinstance(obj, (set, frozenset)):
        return (type(obj).__name__, n, sorted(repr(v) for v in obj))
    if isinstance(obj, io.StringIO):
        return ("StringIO", n, obj.getvalue())
    if isinstance(obj, types.FunctionType):
        cells = []
        for name, cell in zip(obj.__code__.co_freevars, obj.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:
                value = "<empty cell>"
            if isinstance(value, (types.FunctionType, type, types.ModuleType)):
                continue
            cells.append((name, snapshot(value, ids, depth + 1)))
        return ("function", n, obj.__qualname__, cells)
    if isinstance(obj, type) and obj in _OBSERVED_CLASSES:
        return (
            "class",
            n,
            obj.__qualname__,
            [(k, snapshot(v, ids, depth + 1)) for k, v in _class_data(obj).items()],
        )
    if isinstance(obj, (types.ModuleType, type, types.BuiltinFunctionType, types.MethodType)):
        return ("opaque", type(obj).__name__)
    if isinstance(obj, types.GeneratorType):
        return ("generator", n, obj.gi_frame is None)  # exhausted or not
    if hasattr(obj, "__dict__"):
        attrs = [
            (k, snapshot(v, ids, depth + 1))
            for k, v in vars(obj).items()
            if not isinstance(v, (types.FunctionType, types.ModuleType, type))
        ]
        return ("object", n, type(obj).__qualname__, attrs)
    slots = [
        s for c in type(obj).__mro__ for s in getattr(c, "__slots__", ()) if s != "__weakref__"
    ]
    if slots:  # a __slots__ object: its slot values (unset ones named so)
        values = [(s, snapshot(getattr(obj, s, "<unset>"), ids, depth + 1)) for s in slots]
        return ("slots", n, type(obj).__qualname__, values)
    return ("other", n, type(obj).__qualname__, repr(obj)[:200])


# Classes in a case's ``observe``: data attributes compared and put back before every run.
_OBSERVED_CLASSES: set = set()


def _class_data(cls: type) -> dict:
    return {
        k: v
        for k, v in vars(cls).items()
        if not k.startswith("__") and not callable(v) and not hasattr(type(v), "__get__")
    }


def _attrs(obj: Any, ids: dict, depth: int) -> list:
    """Public instance attributes of a tensor or a tuple/list subclass (usually none)."""
    d = getattr(obj, "__dict__", None)
    if not d:
        return []
    return [
        (k, snapshot(v, ids, depth + 1))
        for k, v in list(d.items())
        if not k.startswith("_") and not isinstance(v, (types.FunctionType, types.ModuleType, type))
    ]


def _snapshot_module(mod: torch.nn.Module, ids: dict, depth: int) -> Any:
    n = ids[id(mod)][0]
    attrs = []
    for k, v in vars(mod).items():
        if k.startswith("_") or k == "training":
            continue
        if isinstance(v, (types.FunctionType, types.ModuleType, type, types.MethodType)):
            continue
        attrs.append((k, snapshot(v, ids, depth + 1)))
    params = [(k, snapshot(v, ids, depth + 1)) for k, v in mod._parameters.items()]
    buffers = [(k, snapshot(v, ids, depth + 1)) for k, v in mod._buffers.items()]
    children = [(k, snapshot(v, ids, depth + 1)) for k, v in mod._modules.items()]
    return ("module", n, type(mod).__qualname__, mod.training, params, buffers, children, attrs)


def global_state() -> dict:
    """Process-wide torch state a compiled frame must leave as eager does."""
    state = {
        "grad_enabled": torch.is_grad_enabled(),
        "inference_mode": torch.is_inference_mode_enabled(),
        "default_dtype": torch.get_default_dtype(),
        "autocast_cpu": torch.is_autocast_enabled("cpu"),
        "autocast_cpu_dtype": torch.get_autocast_dtype("cpu"),
    }
    if torch.cuda.is_available():
        state["autocast_cuda"] = torch.is_autocast_enabled("cuda")
    return state


def _restore_global_state() -> None:
    torch.set_grad_enabled(True)
    torch.set_default_dtype(torch.float32)
    torch.set_autocast_enabled("cpu", False)
    torch.set_autocast_dtype("cpu", torch.bfloat16)
