"""Functions of the torch namespace and torch's context managers.

Key classes: :class:`TorchFunctionVariable` (``torch.cat``, ``torch.nn.functional.relu``,
``torch.Tensor.add``, ...: recorded as ``call_function`` nodes when they produce tensors,
folded to constants when they only read metadata), :class:`GradModeVariable`
(``torch.no_grad()`` / ``torch.enable_grad()`` / ``torch.set_grad_enabled(b)`` used as
``with`` blocks), :class:`AutocastVariable` (``torch.autocast`` / ``torch.amp.autocast`` /
``torch.cpu.amp.autocast`` ``with`` blocks, and functions decorated with them).

Context managers are modelled, not run: entering one records a node in the graph (so the
compiled code switches the state on every call) and switches the real state for the rest
of the trace (so FakeTensors get the dtypes and ``requires_grad`` the region produces);
``OutputGraph.restore_global_state`` undoes the real switches when the trace ends, however
it ends. Functions that set global state directly (``torch.set_autocast_enabled``, seeds,
default dtype, ...) are never recorded or run at capture: they break the graph and run
for real.
"""

from __future__ import annotations

import re

import torch

from .. import graph_break_types as gbt
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
    torch.set_rng_state,
    torch.random.set_rng_state,
    torch.random.fork_rng,
}
# Names of torch-namespace functions that change global state (torch.set_autocast_enabled,
# torch._C._set_cudnn_enabled, torch.autocast_increment_nesting, ...): never recorded (the
# graph would drop them) nor run at capture (they would change the real state).
_STATEFUL_NAME = re.compile(
    r"^_?((set|reset|clear|enable|disable|push|pop)_|autocast_(increment|decrement)_"
    r"|manual_seed|seed$|fork_rng|use_deterministic)"
)


def _changes_global_state(fn) -> bool:
    if fn in _SIDE_EFFECT_FNS:
        return True
    if getattr(fn, "__objclass__", None) is not None or isinstance(fn, type):
        return False  # a Tensor method (``Tensor.set_``) or a class
    if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return False
    return bool(_STATEFUL_NAME.match(getattr(fn, "__name__", "") or ""))


def _is_autocast_class(fn) -> bool:
    return isinstance(fn, type) and issubclass(fn, torch.amp.autocast_mode.autocast)


class TorchFunctionVariable(CallableVariable):
    """A callable from the torch namespace."""

    def call_function(self, tx, args, kwargs):
        fn = self.fn
        if fn in _IS_COMPILING:
            return ConstantVariable(True)
        if fn in _CONSTANT_FALSE:
            return ConstantVariable(False if fn is not torch._C._get_tracing_state else None)
        if fn in (torch.no_grad, torch.enable_grad):
            return GradModeVariable(fn is torch.enable_grad)
        if fn is torch.set_grad_enabled:
            if len(args) != 1 or not args[0].is_python_constant():
                unimplemented(
                    gbt.VALUE_NOT_CONSTANT, "torch.set_grad_enabled with a non-constant argument"
                )
            return GradModeVariable(bool(args[0].as_python_constant()), eager=True, tx=tx)
        if fn is torch.jit.annotate and len(args) == 2 and not kwargs:
            return args[1]  # TorchScript's type hint; in Python it returns its value
        if fn is torch.is_grad_enabled:
            return ConstantVariable(torch.is_grad_enabled())
        if fn is torch.is_tensor:
            from .tensor import TensorVariable

            return ConstantVariable(isinstance(args[0], TensorVariable))
        if fn is torch.inference_mode:
            return InferenceModeVariable.create(args, kwargs)
        if fn in _CHECKS:
            return _call_check(tx, fn, list(args), dict(kwargs))
        if _is_autocast_class(fn):
            return AutocastVariable.create(fn, args, kwargs)
        if _changes_global_state(fn):
            unimplemented(
                gbt.SIDE_EFFECT,
                f"call to {getattr(fn, '__name__', fn)} (an effect outside the graph)",
            )
        if isinstance(fn, type):
            if fn in (torch.Size, torch.device, torch.dtype, torch.finfo, torch.iinfo) and all(
                a.is_python_constant() for a in args
            ):
                from .builder import wrap_constant_or_object

                return wrap_constant_or_object(fn(*[a.as_python_constant() for a in args]))
            unimplemented(gbt.OBJECT_CONSTRUCTION, f"constructing torch class {fn.__qualname__}")
        return tx.output.call_function(tx, fn, list(args), dict(kwargs))

    def var_getattr(self, tx, name):
        from .builder import wrap_value

        return wrap_value(tx, getattr(self.fn, name), None)

    def __repr__(self) -> str:
        return f"TorchFunctionVariable({getattr(self.fn, '__qualname__', self.fn)})"


# torch._check and its kin: (index of the condition, index of the message) in the arguments.
_CHECKS = {
    torch._check: (0, 1),
    torch._check_index: (0, 1),
    torch._check_value: (0, 1),
    torch._check_type: (0, 1),
    torch._check_not_implemented: (0, 1),
    torch._check_with: (1, 2),
}


def _call_check(tx, fn, args: list, kwargs: dict) -> VariableTracker:
    """``torch._check(cond, message)``: ``message`` (often a lambda building the text) is
    called only when ``cond`` is false. A condition known at capture: true is None (the
    message never runs), false a graph break (CPython raises with the message). A symbolic
    condition is recorded as before, the message left out (it is only the error's text)."""
    cond_at, msg_at = _CHECKS[fn]
    cond = args[cond_at] if len(args) > cond_at else kwargs.get("cond")
    if cond is None:
        unimplemented(gbt.EXCEPTION, f"{fn.__name__}() without a condition")
    if cond.is_python_constant():
        value = cond.as_python_constant()
        if isinstance(value, bool):
            if value:
                return ConstantVariable(None)
            unimplemented(gbt.EXCEPTION, f"{fn.__name__}() of a false condition (raises)")
    args = args[:msg_at]
    kwargs.pop("message", None)
    return tx.output.call_function(tx, fn, args, kwargs)


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
        unimplemented(
            gbt.CONTEXT_MANAGER, "torch.no_grad() used as a decorator inside captured code"
        )


class AutocastVariable(VariableTracker):
    """A ``torch.autocast`` context (a real, not yet entered ``autocast`` object holds its
    resolved device, dtype, enabled and cache flags). Entering records
    ``torch.amp._enter_autocast(device, dtype, enabled, cache_enabled)`` in the graph and
    enters the same context for real for the rest of the trace (FakeTensor propagation then
    gives the autocast dtypes); exiting records ``torch.amp._exit_autocast`` of the enter
    node and exits the real one. AOTAutograd (aot_eager, inductor, plugin) traces through the
    two nodes, so its ATen graph holds the casts; the eager backend runs them."""

    def __init__(self, mode, source=None) -> None:
        super().__init__(source)
        self.mode = mode
        self._node = None
        self._cleanup = None

    @staticmethod
    def create(cls, args, kwargs) -> AutocastVariable:
        if not all(a.is_python_constant() for a in args) or not all(
            v.is_python_constant() for v in kwargs.values()
        ):
            unimplemented(gbt.VALUE_NOT_CONSTANT, f"{cls.__qualname__} with non-constant arguments")
        # Constructing it reads global state (the default autocast dtype) only, which the
        # global-state guard covers.
        mode = cls(
            *[a.as_python_constant() for a in args],
            **{k: v.as_python_constant() for k, v in kwargs.items()},
        )
        return AutocastVariable(mode)

    def values(self) -> tuple:
        m = self.mode
        return (m.device, m.fast_dtype, m._enabled, m._cache_enabled)

    def python_type(self) -> type:
        return type(self.mode)

    def enter(self, tx) -> VariableTracker:
        if self._node is not None:
            unimplemented(gbt.CONTEXT_MANAGER, "entering one torch.autocast object twice")
        vals = self.values()
        self._node = tx.output.graph.call_function(torch.amp._enter_autocast, vals)
        self._cleanup = tx.output.enter_real_context(
            lambda: torch.amp._enter_autocast(*vals), torch.amp._exit_autocast
        )
        return ConstantVariable(None)

    def exit(self, tx) -> VariableTracker:
        if self._node is None:
            unimplemented(
                gbt.CONTEXT_MANAGER, "exiting a torch.autocast that was not entered in this frame"
            )
        tx.output.graph.call_function(torch.amp._exit_autocast, (self._node,))
        tx.output.exit_real_context(self._cleanup)
        self._node = None
        return ConstantVariable(None)

    def call_method(self, tx, name, args, kwargs):
        if name == "__enter__":
            return self.enter(tx)
        if name == "__exit__":
            return self.exit(tx)
        return super().call_method(tx, name, args, kwargs)

    def call_function(self, tx, args, kwargs):
        # ``torch.autocast(...)(fn)`` while tracing; functions decorated before the capture
        # are inlined (their ``with`` reaches the real object through a closure cell).
        unimplemented(
            gbt.CONTEXT_MANAGER, "torch.autocast used as a decorator inside captured code"
        )

    def __repr__(self) -> str:
        return f"AutocastVariable{self.values()}"


class InferenceModeVariable(VariableTracker):
    """A ``torch.inference_mode(mode)`` context (not yet entered). Entering records
    ``torch.autograd.grad_mode._enter_inference_mode(mode)`` in the graph and enters it for
    real for the rest of the trace (FakeTensors made inside are inference tensors, as the
    real ones will be); exiting records ``_exit_inference_mode`` of the enter node, as
    torch.compile's graphs do. A graph break inside the block breaks at the ``with``
    statement (the context cannot be rebuilt half-entered)."""

    def __init__(self, mode: bool) -> None:
        super().__init__()
        self.mode = mode
        self._node = None
        self._cleanup = None

    @staticmethod
    def create(args, kwargs) -> InferenceModeVariable:
        values = [*args, *kwargs.values()]
        if len(values) > 1 or (kwargs and set(kwargs) != {"mode"}):
            unimplemented(gbt.CONTEXT_MANAGER, "torch.inference_mode with these arguments")
        if values and not (
            values[0].is_python_constant() and isinstance(values[0].as_python_constant(), bool)
        ):
            unimplemented(gbt.VALUE_NOT_CONSTANT, "torch.inference_mode(mode) with a non-bool")
        return InferenceModeVariable(values[0].as_python_constant() if values else True)

    def python_type(self) -> type:
        return torch.inference_mode

    def enter(self, tx) -> VariableTracker:
        if self._node is not None:
            unimplemented(gbt.CONTEXT_MANAGER, "entering one torch.inference_mode twice")
        grad_mode = torch.autograd.grad_mode
        mode = self.mode
        self._node = tx.output.graph.call_function(grad_mode._enter_inference_mode, (mode,))
        self._cleanup = tx.output.enter_real_context(
            lambda: grad_mode._enter_inference_mode(mode), grad_mode._exit_inference_mode
        )
        return ConstantVariable(None)

    def exit(self, tx) -> VariableTracker:
        if self._node is None:
            unimplemented(
                gbt.CONTEXT_MANAGER, "exiting a torch.inference_mode not entered in this frame"
            )
        grad_mode = torch.autograd.grad_mode
        tx.output.graph.call_function(grad_mode._exit_inference_mode, (self._node,))
        tx.output.exit_real_context(self._cleanup)
        self._node = None
        return ConstantVariable(None)

    def call_method(self, tx, name, args, kwargs):
        if name == "__enter__":
            return self.enter(tx)
        if name == "__exit__":
            return self.exit(tx)
        return super().call_method(tx, name, args, kwargs)

    def call_function(self, tx, args, kwargs):
        unimplemented(
            gbt.CONTEXT_MANAGER, "torch.inference_mode used as a decorator inside captured code"
        )

    def __repr__(self) -> str:
        return f"InferenceModeVariable({self.mode})"
