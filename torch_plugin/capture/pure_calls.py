"""Which recorded calls may be folded away, and which must stay in the graph for their effect.

The translator runs every torch call it records on FakeTensors. A call whose result holds a
tensor becomes a graph node. A call whose result holds no tensor is either

- *pure* (it only reads metadata: ``x.dim()``, ``torch.is_floating_point(x)``): its result
  is a constant of the capture and no node is needed; only calls on the lists below are
  treated so;
- *mutating* with a None result (``t[i] = v``, ``Tensor.__setitem__``): a graph node, so
  the mutation happens when the graph runs, on the real tensors;
- anything else: the graph breaks there, so CPython runs the call.

This is the rule "every call with an effect becomes a graph node or a graph break; only
calls known to be pure are folded" (issue #10). With ``config.debug_check_pure`` on (the
tests turn it on), each fold also checks that the fake run changed no input tensor's version
counter, which catches a mutating call wrongly listed as pure.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

# Tensor methods returning metadata (no tensor) that never change state.
PURE_METHODS = frozenset(
    {
        "size",
        "dim",
        "ndimension",
        "numel",
        "nelement",
        "stride",
        "storage_offset",
        "is_contiguous",
        "is_floating_point",
        "is_complex",
        "is_signed",
        "is_inference",
        "element_size",
        "get_device",
        "__len__",
        "type",  # with no argument: the type name (with one, a tensor: recorded)
    }
)
# Not listed, though pure: ``is_set_to``, ``is_shared``, ``is_pinned`` and ``has_names``
# answer from the storage, its memory kind or the names, which a FakeTensor does not carry
# (its answer is False whatever the real tensor's): folding them gave wrong results. They are
# graph breaks, so CPython asks the real tensor.

# torch functions returning metadata (no tensor) that never change state.
PURE_FUNCTIONS = frozenset(
    {
        torch.is_tensor,
        torch.is_floating_point,
        torch.is_complex,
        torch.is_nonzero,
        torch.numel,
        torch.result_type,
        torch.promote_types,
        torch.can_cast,
        torch.is_grad_enabled,
        torch.is_inference_mode_enabled,
        torch.get_default_dtype,
        torch.is_autocast_enabled,
        torch.is_storage,
        torch.typename,
        torch.broadcast_shapes,
        torch.Tensor.size,
        torch.Tensor.dim,
        torch.Tensor.numel,
        torch.Tensor.stride,
        torch.Tensor.is_contiguous,
        torch.Tensor.is_floating_point,
        torch.Tensor.element_size,
        torch.Tensor.get_device,
        torch._C._get_tracing_state,
        # Usage telemetry (torchvision ops and models call it): no state a program can read.
        torch._C._log_api_usage_once,
        torch.compiler.is_exporting,
        torch.get_autocast_dtype,
        torch.get_autocast_cpu_dtype,
        torch.get_autocast_gpu_dtype,
        torch.is_autocast_cpu_enabled,
        torch.cuda.is_available,
        torch.overrides.has_torch_function,
        torch.overrides.has_torch_function_unary,
        torch.overrides.has_torch_function_variadic,
        torch.overrides.is_tensor_like,
        # nn.MultiheadAttention / TransformerEncoderLayer's Python helpers: a mask's dtype,
        # a None mask (a given mask is a tensor result, recorded), the input-shape check
        torch.nn.functional._none_or_dtype,
        torch.nn.functional._canonical_mask,
        torch.nn.functional._mha_shape_check,
        # Checks of a condition known at capture time: a true one returns None; a false one
        # raises during the fake run (the graph breaks there and CPython raises it).
        torch._assert,
        torch._check,
        getattr,  # Tensor attributes read as call_function(getattr) (T, real, ...): tensors
        len,
    }
)

_SETITEM = frozenset({operator.setitem, torch.Tensor.__setitem__})


def describe_call(kind: str, target: Any) -> str:
    name = target if isinstance(target, str) else getattr(target, "__qualname__", None)
    name = name or getattr(target, "__name__", repr(target))
    return f"Tensor.{name}()" if kind == "call_method" else f"{name}()"


def is_pure_call(kind: str, target: Any) -> bool:
    """True if a call of ``target`` (a method name for ``call_method``) without a tensor
    result may be folded to its result."""
    if kind == "call_method":
        return target in PURE_METHODS
    if kind == "call_function":
        try:
            return target in PURE_FUNCTIONS
        except TypeError:  # unhashable callable
            return False
    return False


def is_mutating_call(kind: str, target: Any, kwargs: dict) -> bool:
    """True for in-place calls whose result is None but whose effect is on a tensor argument:
    ``operator.setitem`` / ``Tensor.__setitem__`` and in-place methods (name ending in
    ``_``)."""
    if kind == "call_method":
        return _is_inplace_method(target)
    if kind == "call_function":
        try:
            return target in _SETITEM
        except TypeError:
            return False
    return False


def _is_inplace_method(name: Any) -> bool:
    """``__setitem__`` or a method named ``*_`` (``add_``, ``copy_``)."""
    return name == "__setitem__" or (
        isinstance(name, str) and name.endswith("_") and not name.startswith("_")
    )


def tensor_versions(args: tuple, kwargs: dict) -> list[tuple[torch.Tensor, int]]:
    """(tensor, version counter) of each tensor in ``args``/``kwargs`` (lists, tuples and
    dicts searched), for :func:`check_fold_left_inputs_unchanged`."""
    out: list[tuple[torch.Tensor, int]] = []

    def visit(v: Any) -> None:
        if isinstance(v, torch.Tensor):
            # inference tensors keep no version counter (and are not written outside
            # inference mode): -1, never compared
            out.append((v, -1 if v.is_inference() else v._version))
        elif isinstance(v, (list, tuple)):
            for x in v:
                visit(x)
        elif isinstance(v, dict):
            for x in v.values():
                visit(x)

    visit(args)
    visit(kwargs)
    return out


def check_fold_left_inputs_unchanged(
    target: Any, args: tuple, kwargs: dict, versions: list | None
) -> None:
    """Debug check (``config.debug_check_pure``): a call folded as pure changed no tensor.

    Raises:
        AssertionError: naming the call, when an input's version counter moved (the call is
            wrongly on the pure lists, and folding it would drop its effect).
    """
    for t, version in versions or ():
        if version != -1 and t._version != version:
            raise AssertionError(
                f"torch_plugin: {describe_call('call_function', target)} was folded as pure"
                " but changed a tensor argument (its version counter moved)"
            )


_INPLACE_OPERATORS = frozenset(
    {
        operator.iadd,
        operator.isub,
        operator.imul,
        operator.itruediv,
        operator.ifloordiv,
        operator.imod,
        operator.ipow,
        operator.iand,
        operator.ior,
        operator.ixor,
        operator.ilshift,
        operator.irshift,
        operator.imatmul,
    }
)


def mutated_tensor(kind: str, target: Any, args: tuple) -> torch.Tensor | None:
    """The tensor an in-place call writes to (its first argument), or None for other calls:
    methods named ``*_`` (``add_``, ``copy_``) and their function forms
    (``torch.Tensor.add_(x, 1)``, ``torch.relu_``), ``__setitem__`` / ``operator.setitem`` and
    the in-place operators (``+=``)."""
    if not args or not isinstance(args[0], torch.Tensor):
        return None
    if kind == "call_method":
        return args[0] if _is_inplace_method(target) else None
    try:
        if target in _SETITEM or target in _INPLACE_OPERATORS:
            return args[0]
    except TypeError:
        return None
    return args[0] if _is_inplace_function(target) else None


def _is_inplace_function(target: Any) -> bool:
    """An in-place tensor operation called as a function: an unbound ``torch.Tensor`` method
    (``torch.Tensor.add_(x, 1)``) or a ``torch`` / ``torch.nn.functional`` function named
    ``*_`` (``torch.relu_``), each writing its first argument."""
    name = getattr(target, "__name__", None)
    if not isinstance(name, str) or not name.endswith("_") or name.startswith("_"):
        return False
    return any(
        getattr(namespace, name, None) is target
        for namespace in (torch.Tensor, torch, torch.nn.functional)
    )


def overlapping_argument(kind: str, target: Any, args: tuple, kwargs: dict) -> bool:
    """True when an in-place call reads another tensor that shares memory with the tensor it
    writes (``x.copy_(x[2, 1])``, ``x.add_(x.t())``). Eager PyTorch raises for many of these
    ("some elements of the input tensor and the written-to tensor refer to a single memory
    location") and computes others element by element; a functionalized graph (AOTAutograd)
    would silently compute something else. The translator breaks the graph there so CPython
    runs the call: eager's answer or eager's error. The same tensor passed again
    (``x.add_(x)``) is fine."""
    dst = mutated_tensor(kind, target, args)
    if dst is None:
        return False
    for other, _version in tensor_versions(args[1:], kwargs):
        if other is dst:
            continue
        try:
            aliased = torch._C._is_alias_of(other, dst)  # shares dst's storage
        except RuntimeError:  # a tensor kind without storage: no overlap known
            aliased = False
        if aliased:
            return True
    return False
