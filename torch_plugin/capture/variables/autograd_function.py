"""``torch.autograd.Function.apply`` in captured code, with grad mode off (issue #12).

Bloom's ``GeLUFunction.apply(x)`` in every MLP was a graph break (``Function.apply`` asks
``torch._C._are_functorch_transforms_active()``, an opaque call). With grad mode off, as in
inference under ``torch.no_grad()``, ``apply`` computes ``forward(ctx, *args)`` and records
nothing for backward, so :class:`AutogradFunctionApplyVariable` inlines ``forward`` with a
:class:`FunctionCtxVariable` as ``ctx``: ``save_for_backward``, ``mark_non_differentiable``,
``mark_dirty`` and ``set_materialize_grads`` do nothing observable then, ``needs_input_grad``
says which arguments are tensors requiring grad (as in eager), and attributes stored on ``ctx`` are kept for reads by ``forward`` itself.
Grad mode is part of every entry's global-state guard, so a call with grad mode on does not
reuse the entry. Not modelled (graph breaks): grad mode on (the backward would have to be
captured), keyword arguments, ``setup_context``-style functions, a ``forward`` returning one
of its inputs (``apply`` then returns a view of it, not the input), ``ctx`` escaping.

Key classes: :class:`AutogradFunctionApplyVariable`, :class:`FunctionCtxVariable`.
"""

from __future__ import annotations

import inspect
import types

import torch

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
        unimplemented(f"ctx.{name} in an inlined autograd.Function.forward")

    def store_attr(self, tx, name: str, value: VariableTracker) -> None:
        if name in _CTX_NO_OPS or name in ("needs_input_grad", "saved_tensors"):
            unimplemented(f"assignment to ctx.{name}")
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


class AutogradFunctionApplyVariable(VariableTracker):
    """``cls.apply`` for a ``torch.autograd.Function`` subclass ``cls`` (module doc)."""

    def __init__(self, cls: type) -> None:
        super().__init__()
        self.cls = cls

    def python_type(self) -> type:
        return types.MethodType

    def call_function(self, tx, args, kwargs):
        cls = self.cls
        if torch.is_grad_enabled():
            unimplemented(
                f"{cls.__name__}.apply with grad mode on (an autograd.Function's backward is "
                "not captured)"
            )
        if kwargs:
            unimplemented(f"{cls.__name__}.apply with keyword arguments")
        setup = inspect.getattr_static(cls, "setup_context")
        if setup is not inspect.getattr_static(torch.autograd.Function, "setup_context"):
            unimplemented(f"{cls.__name__} defines setup_context (not modelled)")
        forward = inspect.getattr_static(cls, "forward")
        if not isinstance(forward, staticmethod) or not isinstance(
            forward.__func__, types.FunctionType
        ):
            unimplemented(f"{cls.__name__}.forward is not a Python staticmethod")
        from .functions import UserFunctionVariable
        from .tensor import TensorVariable

        ctx = FunctionCtxVariable(
            [isinstance(a, TensorVariable) and bool(a.example.requires_grad) for a in args]
        )
        result = tx.inline_user_function(UserFunctionVariable(forward.__func__), [ctx, *args], {})
        if _contains(result, list(args)):
            unimplemented(
                f"{cls.__name__}.forward returns one of its inputs (apply returns a view)"
            )
        if _contains(result, [ctx]):
            unimplemented(f"{cls.__name__}.forward returns its ctx")
        return result

    def __repr__(self) -> str:
        return f"AutogradFunctionApplyVariable({self.cls.__qualname__})"
