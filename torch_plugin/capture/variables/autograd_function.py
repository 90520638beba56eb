"""``torch.autograd.Function.apply`` in captured code (issue #12).

Bloom's ``GeLUFunction.apply(x)`` in every MLP was a graph break (``Function.apply`` asks
``torch._C._are_functorch_transforms_active()``, an opaque call).

- Grad mode off (inference under ``torch.no_grad()``), or no tensor argument requiring grad:
  ``apply`` computes ``forward(ctx, *args)`` and records nothing for backward, so
  :class:`AutogradFunctionApplyVariable` inlines ``forward`` with a
  :class:`FunctionCtxVariable` as ``ctx``: ``save_for_backward``,
  ``mark_non_differentiable``, ``mark_dirty`` and ``set_materialize_grads`` do nothing
  observable then, ``needs_input_grad`` says which arguments are tensors requiring grad (as
  in eager), and attributes stored on ``ctx`` are kept for reads by ``forward`` itself.
- Grad mode on: ``forward`` is inlined the same way only to check that it has no effect
  beyond its result (no recorded side effect); its nodes are then dropped and the graph calls
  ``cls.apply`` (through :func:`apply_function`), so the user's ``backward`` runs: eagerly
  under the "eager" backend, traced by AOTAutograd (which calls it on its tracing tensors)
  under "aot_eager", "plugin" and "inductor", as PyTorch's capture keeps it.

Grad mode is part of every entry's global-state guard. Not modelled (graph breaks): keyword
arguments, ``setup_context``-style functions, a ``forward`` returning one of its inputs
(``apply`` then returns a view of it, not the input), ``ctx`` escaping, with grad a
``backward`` that is not a Python staticmethod or a ``forward`` with side effects.

Key classes: :class:`AutogradFunctionApplyVariable`, :class:`FunctionCtxVariable`;
:func:`apply_function`.
"""

from __future__ import annotations

import inspect
import types

import torch

from .. import graph_break_types as gbt
from ..exc import unimplemented
from .base import VariableTracker
from .constant import ConstantVariable
from .lists import TupleVariable

_CTX_NO_OPS = ("save_for_backward", "mark_non_differentiable", "mark_dirty",
               "set_materialize_grads", "save_for_forward")  # fmt: skip


class _NoOpMethod(VariableTracker):
    def call_function(self, tx, args, kwargs):
        return ConstantVariable(None)


class FunctionCtxVariable(VariableTracker):
    """The ``ctx`` of an inlined ``forward`` (module doc). ``needs_input_grad``: per
    argument, whether it is a tensor that requires grad (as eager reports it, grad mode
    aside; guarded by each tensor's guard)."""

    def __init__(self, needs_input_grad: list[bool]) -> None:
        super().__init__()
        self.needs_input_grad = needs_input_grad
        self.attrs: dict[str, VariableTracker] = {}

    def python_type(self) -> type:
        return torch.autograd.function.FunctionCtx

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name in self.attrs:
            return self.attrs[name]
        if name in _CTX_NO_OPS:
            return _NoOpMethod()
        if name == "needs_input_grad":
            return TupleVariable([ConstantVariable(b) for b in self.needs_input_grad])
        unimplemented(gbt.AUTOGRAD_FUNCTION, f"ctx.{name} in an inlined autograd.Function.forward")

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        if name in _CTX_NO_OPS or name in ("needs_input_grad", "saved_tensors"):
            unimplemented(gbt.AUTOGRAD_FUNCTION, f"assignment to ctx.{name}")
        self.attrs[name] = value

    def call_method(self, tx, name, args, kwargs):
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def __repr__(self) -> str:
        return "FunctionCtxVariable()"


def _contains(var: VariableTracker, targets: list[VariableTracker]) -> bool:
    if any(var is t for t in targets):
        return True
    if isinstance(var, TupleVariable) or hasattr(var, "items") and isinstance(var.items, list):
        return any(_contains(v, targets) for v in var.items)
    return False


_APPLY_FUNCTIONS: dict[type, types.FunctionType] = {}


def apply_function(cls: type) -> types.FunctionType:
    """A function calling ``cls.apply``, one per class: the graph's call target (FX prints a
    bound classmethod under the base class's name, ``torch.autograd.function.apply``). It is
    an attribute of this module under a name that encodes the class's module and qualified
    name (:func:`__getattr__` rebuilds it), so a graph module calling it survives
    ``torch.save``/``torch.load`` in another process."""
    fn = _APPLY_FUNCTIONS.get(cls)
    if fn is None:

        def apply(*args):
            return cls.apply(*args)

        parts = [*cls.__module__.split("."), "", *cls.__qualname__.split(".")]
        apply.__name__ = apply.__qualname__ = "apply" + "".join(f"_{len(p)}{p}" for p in parts)
        apply.__module__ = __name__
        fn = _APPLY_FUNCTIONS[cls] = apply
    return fn


def __getattr__(name: str):
    """The :func:`apply_function` of the class a name made by it encodes (PEP 562)."""
    import importlib
    import re

    if not name.startswith("apply_"):
        raise AttributeError(name)
    parts, rest = [], name[len("apply") :]
    while rest:
        match = re.match(r"_(\d+)", rest)
        if match is None:
            raise AttributeError(name)
        n, rest = int(match.group(1)), rest[match.end() :]
        parts.append(rest[:n])
        rest = rest[n:]
    if "" not in parts:
        raise AttributeError(name)
    cut = parts.index("")
    obj = importlib.import_module(".".join(parts[:cut]))
    for attr in parts[cut + 1 :]:
        obj = getattr(obj, attr)
    if not (isinstance(obj, type) and issubclass(obj, torch.autograd.Function)):
        raise AttributeError(name)  # noqa: TRY004 - module attribute protocol
    return apply_function(obj)


class AutogradFunctionApplyVariable(VariableTracker):
    """``cls.apply`` for a ``torch.autograd.Function`` subclass ``cls`` (module doc)."""

    def __init__(self, cls: type) -> None:
        super().__init__()
        self.cls = cls

    def python_type(self) -> type:
        return types.MethodType

    def call_function(self, tx, args, kwargs):
        cls = self.cls
        from .tensor import TensorVariable

        grad = torch.is_grad_enabled() and any(
            isinstance(a, TensorVariable) and a.example.requires_grad for a in args
        )
        if kwargs:
            unimplemented(gbt.AUTOGRAD_FUNCTION, f"{cls.__name__}.apply with keyword arguments")
        setup = inspect.getattr_static(cls, "setup_context")
        if setup is not inspect.getattr_static(torch.autograd.Function, "setup_context"):
            unimplemented(
                gbt.AUTOGRAD_FUNCTION, f"{cls.__name__} defines setup_context (not modelled)"
            )
        forward = inspect.getattr_static(cls, "forward")
        if not isinstance(forward, staticmethod) or not isinstance(
            forward.__func__, types.FunctionType
        ):
            unimplemented(
                gbt.AUTOGRAD_FUNCTION, f"{cls.__name__}.forward is not a Python staticmethod"
            )
        from .functions import UserFunctionVariable

        if grad:
            backward = inspect.getattr_static(cls, "backward")
            if not isinstance(backward, staticmethod) or not isinstance(
                backward.__func__, types.FunctionType
            ):
                unimplemented(
                    gbt.AUTOGRAD_FUNCTION, f"{cls.__name__}.backward is not a Python staticmethod"
                )
            if not all(isinstance(a, TensorVariable) or a.is_python_constant() for a in args):
                unimplemented(
                    gbt.AUTOGRAD_FUNCTION,
                    f"{cls.__name__}.apply with arguments other than tensors/constants",
                )
            graph = tx.output.graph
            nodes_before = set(graph.nodes)
            effects_before = tx.output.side_effects.snapshot()
        ctx = FunctionCtxVariable(
            [isinstance(a, TensorVariable) and bool(a.example.requires_grad) for a in args]
        )
        result = tx.inline_user_function(UserFunctionVariable(forward.__func__), [ctx, *args], {})
        if _contains(result, list(args)):
            unimplemented(
                gbt.AUTOGRAD_FUNCTION,
                f"{cls.__name__}.forward returns one of its inputs (apply returns a view)",
            )
        if _contains(result, [ctx]):
            unimplemented(gbt.AUTOGRAD_FUNCTION, f"{cls.__name__}.forward returns its ctx")
        if not grad:
            return result
        # Grad mode on: forward was traced only to check that it has no effect outside its
        # result; its nodes are dropped and the graph calls ``cls.apply`` itself, which keeps
        # the user's backward (AOTAutograd traces through it).
        if tx.output.side_effects.snapshot() != effects_before:
            unimplemented(
                gbt.AUTOGRAD_FUNCTION, f"{cls.__name__}.forward has side effects (grad mode on)"
            )
        added = [n for n in graph.nodes if n not in nodes_before]
        calls = {n for n in added if n.op in ("call_function", "call_method", "call_module")}
        for node in reversed(added):
            if node in calls:
                if any(u not in calls for u in node.users):
                    unimplemented(
                        gbt.AUTOGRAD_FUNCTION, f"{cls.__name__}.forward's values escape its result"
                    )
                graph.erase_node(node)
        return tx.output.call_function(tx, apply_function(cls), list(args), {})

    def __repr__(self) -> str:
        return f"AutogradFunctionApplyVariable({self.cls.__qualname__})"
