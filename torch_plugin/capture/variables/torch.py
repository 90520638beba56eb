"""Functions of the torch namespace and torch's context managers.

Key classes: :class:`TorchFunctionVariable` (``torch.cat``, ``torch.nn.functional.relu``,
``torch.Tensor.add``, ...: recorded as ``call_function`` nodes when they produce tensors,
folded to constants when they only read metadata), :class:`GradModeVariable`
(``torch.no_grad()`` / ``torch.enable_grad()`` / ``torch.set_grad_enabled(b)`` used as
``with`` blocks).
"""

from __future__ import annotations

import torch

from ..exc import unimplemented
from .base import CallableVariable, VariableTracker
from .constant import ConstantVariable

# torch functions that report compilation state: libraries take their compile-friendly
# paths when these return True, as under torch.compile.
_IS_COMPILING = {torch.compiler.is_compiling, torch.compiler.is_dynamo_compiling}
try:
    import torch._dynamo

    _IS_COMPILING.add(torch._dynamo.is_compiling)
    _IS_COMPILING.add(torch._dynamo.external_utils.is_compiling)
except Exception:  # pragma: no cover - older/newer torch layouts
    pass
_CONSTANT_FALSE = {torch.jit.is_scripting, torch.jit.is_tracing, torch._C._get_tracing_state}
# Functions with effects outside the graph: never recorded.
_SIDE_EFFECT_FNS = {
    torch.manual_seed,
    torch.seed,
    torch.set_default_dtype,
    torch.set_default_device,
    torch.use_deterministic_algorithms,
    torch.save,
    torch.load,
    torch.set_printoptions,
    torch._C._set_grad_enabled,
    torch.autograd.backward,
    torch.autograd.grad,
}


class TorchFunctionVariable(CallableVariable):
    """A callable from the torch namespace."""

    def call_function(self, tx, args, kwargs):
        fn = self.fn
        if fn in _IS_COMPILING:
            return ConstantVariable(True)
        if fn in _CONSTANT_FALSE:
            return ConstantVariable(False if fn is not torch._C._get_tracing_state else None)
        if fn in _SIDE_EFFECT_FNS:
            unimplemented(f"call to {getattr(fn, '__name__', fn)} (an effect outside the graph)")
        if fn in (torch.no_grad, torch.enable_grad):
            return GradModeVariable(fn is torch.enable_grad)
        if fn is torch.set_grad_enabled:
            if len(args) != 1 or not args[0].is_python_constant():
                unimplemented("torch.set_grad_enabled with a non-constant argument")
            return GradModeVariable(bool(args[0].as_python_constant()), eager=True, tx=tx)
        if fn is torch.is_grad_enabled:
            return ConstantVariable(torch.is_grad_enabled())
        if fn is torch.is_tensor:
            from .tensor import TensorVariable

            return ConstantVariable(isinstance(args[0], TensorVariable))
        if isinstance(fn, type):
            if fn in (torch.Size, torch.device, torch.dtype, torch.finfo, torch.iinfo) and all(
                a.is_python_constant() for a in args
            ):
                from .builder import wrap_constant_or_object

                return wrap_constant_or_object(fn(*[a.as_python_constant() for a in args]))
            unimplemented(f"constructing torch class {fn.__qualname__}")
        return tx.output.call_function(tx, fn, list(args), dict(kwargs))

    def var_getattr(self, tx, name):
        from .builder import wrap_value

        return wrap_value(tx, getattr(self.fn, name), None)

    def __repr__(self) -> str:
        return f"TorchFunctionVariable({getattr(self.fn, '__qualname__', self.fn)})"


class GradModeVariable(VariableTracker):
    """A grad-mode context manager. Entering it records ``torch._C._set_grad_enabled`` in
    the graph and switches the real grad mode for the rest of the trace; exiting restores."""

    def __init__(self, enabled: bool, eager: bool = False, tx=None) -> None:
        super().__init__()
        self.enabled = enabled
        self.prev: bool | None = None
        if eager:  # torch.set_grad_enabled(b) takes effect when called
            self._enter(tx)

    def _enter(self, tx) -> None:
        self.prev = torch.is_grad_enabled()
        tx.output.set_grad_enabled(self.enabled)

    def enter(self, tx) -> VariableTracker:
        if self.prev is None:
            self._enter(tx)
        return ConstantVariable(None)

    def exit(self, tx) -> VariableTracker:
        tx.output.set_grad_enabled(self.prev)
        return ConstantVariable(None)

    def call_method(self, tx, name, args, kwargs):
        if name == "__enter__":
            return self.enter(tx)
        if name == "__exit__":
            return self.exit(tx)
        return super().call_method(tx, name, args, kwargs)

    def call_function(self, tx, args, kwargs):
        # @torch.no_grad() used as a decorator on a function
        unimplemented("torch.no_grad() used as a decorator inside captured code")
