"""Wrap real Python values read by the translator into variables, installing guards.

:func:`wrap_value` is the one place that decides which variable kind a real value
becomes and which guard protects it (keyed by its source). :func:`wrap_constant_or_object`
does the same for values with no source (results computed at capture time).
"""

from __future__ import annotations

import builtins
import collections
import enum
import functools
import math
import operator
import os
import types
from typing import Any

import torch

from .. import torch_compile_interop
from ..sources import AttrSource, ItemSource, Source
from . import numpy_calls
from .base import VariableTracker
from .constant import ConstantVariable, is_immutable
from .dicts import ConstDictVariable
from .functions import UserFunctionVariable, UserMethodVariable
from .lists import ListVariable, NamedTupleVariable, TupleVariable
from .nn_module import NNModuleVariable
from .tensor import TensorVariable
from .torch import AutocastVariable, TorchFunctionVariable
from .user_defined import (
    PythonModuleVariable,
    UserDefinedClassVariable,
    UserDefinedObjectVariable,
    _model_output_base,
)

_BUILTIN_TYPES = {
    tuple,
    list,
    dict,
    int,
    float,
    bool,
    str,
    bytes,
    complex,
    set,
    frozenset,
    range,
    slice,
    zip,
    enumerate,
    reversed,
    map,
    filter,
    type,
    super,
    object,
    isinstance,
    len,
    iter,
    next,
}


def _in_torch(module_name: str) -> bool:
    """Whether a module name is torch or inside it (not torchvision, torchaudio, ...)."""
    return module_name == "torch" or module_name.startswith("torch.")


def _is_torch_callable(value: Any) -> bool:
    module = getattr(value, "__module__", None) or ""
    if isinstance(
        value, (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType)
    ):
        objclass = getattr(value, "__objclass__", None)
        if objclass is not None and issubclass(objclass, torch._C.TensorBase):
            return True
        self_obj = getattr(value, "__self__", None)
        if isinstance(self_obj, types.ModuleType) and _in_torch(self_obj.__name__):
            return True
    if module.startswith("torch._ops") or isinstance(
        value, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)
    ):
        return True
    if module == "torch" or module.startswith(
        (
            "torch.nn.functional",
            "torch.functional",
            "torch._C",
            "torch.fft",
            "torch.linalg",
            "torch.special",
            "torch._tensor",
            "torch._refs",
            "torch.compiler",
            "torch.jit",
            "torch.autograd.grad_mode",
            "torch.random",
        )
    ):
        return True
    if module.startswith("torch._dynamo") and getattr(value, "__name__", "") == "is_compiling":
        return True
    return False


def wrap_value(tx, value: Any, source: Source | None) -> VariableTracker:
    """The variable for a real value read from ``source`` (None: computed, not guarded).

    One variable per real object: a tensor, list, dict or user object already wrapped in
    this capture (read before through another source, an alias, a global) is the same
    variable again, so every mutation through any path is seen and replayed once; the
    two sources get an ``ALIAS`` guard (:meth:`OutputGraph.known_variable`)."""
    if not is_immutable(value):
        known = tx.output.known_variable(value, source)
        if known is not None:
            return known
    var = _wrap_new_value(tx, value, source)
    if (
        isinstance(
            var, (TensorVariable, ListVariable, ConstDictVariable, UserDefinedObjectVariable)
        )
        and not is_immutable(value)
        or type(value) in (set, collections.deque)
    ):
        tx.output.remember_variable(value, var)
    return var


def _wrap_new_value(tx, value: Any, source: Source | None) -> VariableTracker:
    guards = tx.output.guards
    if isinstance(value, _SCRIPTED):
        guards.id_match(source, value)
        return _wrap_scripted(value, source)
    if isinstance(value, torch.Tensor):
        guards.tensor_match(source, value)
        return tx.output.add_graph_input(tx, value, source)
    if isinstance(value, torch.nn.Module):
        shared = tx.output.shares_module(source)
        guards.nn_module(source, value, shared)
        var = NNModuleVariable(value, source, shared=shared)
        if shared:
            var._identity_guards = guards
        return var
    if value is os.environ:
        from .environ import EnvironVariable

        guards.id_match(source, value)
        return EnvironVariable(source)
    from .builtin_table import PureBuiltinVariable, bound_to_builtin_type, lookup

    if lookup(value) is not None:  # a C builtin modelled by builtin_table.py
        if not bound_to_builtin_type(value):
            guards.id_match(source, value)
        return PureBuiltinVariable(value, source)
    if isinstance(
        value,
        (
            types.FunctionType,
            types.BuiltinFunctionType,
            types.MethodDescriptorType,
            type,
            functools._lru_cache_wrapper,
        ),
    ):
        guards.id_match(source, value)
        return _wrap_callable(tx, value, source)
    if numpy_calls.foldable(value):  # np.sqrt, np.prod, np.finfo: run on constants
        guards.id_match(source, value)
        return numpy_calls.NumpyFunctionVariable(value, source)
    if type(value) is int and source is not None:
        symbolic = tx.output.dynamic_int_input(value, source)
        if symbolic is not None:
            guards.type_match(source, value)
            return ConstantVariable(symbolic, source)
    if (
        type(value) in (tuple, torch.Size)
        and source is not None
        and value
        and all(type(v) is int for v in value)
        and tx.output.dim_policy.dynamic is not False
    ):
        # A shape passed in (e.g. to a resume function after a graph break): each int is
        # its own input, so the ones that change become symbolic (see dynamic_int_input).
        guards.len_match(source, value)
        items = [wrap_value(tx, v, ItemSource(source, i)) for i, v in enumerate(value)]
        return ConstantVariable(type(value)(v.as_python_constant() for v in items), source)
    if is_immutable(value):
        if isinstance(value, (type(None), bool, enum.Enum, types.CodeType)):
            guards.id_match(source, value)
        else:
            guards.equals_match(source, value)
        return ConstantVariable(value, source)
    if type(value) in (set, frozenset):
        from .sets import wrap_input_set

        var = wrap_input_set(tx, value, source)
        if var is not None:
            return var
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):
        guards.len_match(source, value)
        items = [
            wrap_value(tx, v, ItemSource(source, i) if source else None)
            for i, v in enumerate(value)
        ]
        return NamedTupleVariable(items, type(value), source)
    if type(value) in (tuple, list):
        guards.len_match(source, value)
        items = [
            wrap_value(tx, v, ItemSource(source, i) if source else None)
            for i, v in enumerate(value)
        ]
        cls = TupleVariable if type(value) is tuple else ListVariable
        var = cls(items, source=source, mutable_local=source is None and cls is ListVariable)
        if source is not None and cls is ListVariable:
            var.real = value  # mutations are recorded and replayed on this object
        return var
    from .collections_objects import wrap_input

    var = wrap_input(tx, value, source)  # a deque or defaultdict
    if var is not None:
        return var
    if type(value) in (dict, collections.OrderedDict) and all(is_immutable(k) for k in value):
        guards.dict_keys_match(source, value)
        items = {
            k: wrap_value(tx, v, ItemSource(source, k) if source else None)
            for k, v in value.items()
        }
        var = ConstDictVariable(
            items, source=source, mutable_local=source is None, user_cls=type(value)
        )
        if source is not None:
            var.real = value  # mutations are recorded and replayed on this object
        return var
    if isinstance(value, types.MethodType):
        from ..sources import AttrSource

        func = value.__func__
        self_var = wrap_value(
            tx, value.__self__, AttrSource(source, "__self__") if source else None
        )
        if isinstance(func, types.FunctionType):
            guards.id_match(AttrSource(source, "__func__") if source else None, func)
            if isinstance(self_var, NNModuleVariable) and func is torch.nn.Module.__call__:
                return self_var
            return UserMethodVariable(func, self_var)
        return _wrap_callable(tx, value, source)
    if isinstance(value, types.ModuleType):
        guards.id_match(source, value)
        return PythonModuleVariable(value, source)
    if isinstance(value, functools.partial):
        from .partials import wrap_partial

        guards.id_match(source, value)
        # a partial of checkpoint (HF's _gradient_checkpointing_func) is rebuilt at the
        # graph break around the capture-off checkpoint, not loaded from its source
        return wrap_partial(tx, value, source, _is_checkpoint_var)
    if callable(value) and _is_torch_callable(value):
        guards.id_match(source, value)
        return TorchFunctionVariable(value, source)
    model_output = _model_output_base()
    if model_output is not None and source is not None and isinstance(value, model_output):
        from .model_output import ModelOutputVariable

        return ModelOutputVariable.wrap_input(tx, value, source)
    if isinstance(value, torch.amp.autocast_mode.autocast):
        # a context made before the capture (``@torch.autocast(...)`` keeps one in a cell)
        guards.id_match(source, value)
        return AutocastVariable(value, source)
    guards.type_match(source, value)
    if numpy_calls.is_numpy_data(value):  # an ndarray: never a constant (its data changes)
        return numpy_calls.NumpyArrayVariable(value, source)
    return UserDefinedObjectVariable(value, source, guards)


_SCRIPTED = (torch.jit.ScriptFunction, torch.jit.ScriptModule)


def _wrap_scripted(value, source) -> VariableTracker:
    """A TorchScript function or module. TorchScript code is opaque and must never run on
    FakeTensors (it reads data pointers: on CUDA an illegal memory access, issue #10), and
    the graph cannot call it by name. A scripted function that keeps its Python original
    (``torch.jit.script`` stores it as ``_torchdynamo_inline``) is inlined as that
    function, as PyTorch's capture does; anything else is an opaque object whose call
    breaks the graph."""
    original = getattr(value, "_torchdynamo_inline", None)
    if isinstance(value, torch.jit.ScriptFunction) and isinstance(original, types.FunctionType):
        return UserFunctionVariable(original)
    return UserDefinedObjectVariable(value, source)


_CHECKPOINT_WRAPPERS: dict = {}


def _checkpoint_functions() -> tuple:
    import torch.utils.checkpoint as cp

    return (cp.checkpoint, cp.checkpoint_sequential)


def _is_checkpoint_var(var: VariableTracker) -> bool:
    from .functions import DisabledFunctionVariable

    return isinstance(var, DisabledFunctionVariable) and var.fn in _CHECKPOINT_WRAPPERS.values()


# The variable of torch.utils.checkpoint.checkpoint, ``(wrapper, source) -> VariableTracker``:
# capture/activation_checkpoint.py (a stage above variables/, built on the conditionals)
# registers its CheckpointVariable here when imported; None: the call runs with capture off.
checkpoint_variable: Any = None


def _checkpoint_variable(value) -> VariableTracker:
    """``torch.utils.checkpoint.checkpoint``: a graph break at the call, which then runs for
    real *with capture off* for everything it calls. The checkpointed function must run the
    same code in forward and in the recomputation during backward (checkpoint matches the
    tensors each saves, in order); backward runs outside the ``optimize`` region, where the
    recomputation is eager, so the forward is eager too."""
    from torch_plugin import _C

    from ..sources import ObjectSource
    from .functions import DisabledFunctionVariable

    wrapper = _CHECKPOINT_WRAPPERS.get(value)
    if wrapper is None:
        wrapper = _CHECKPOINT_WRAPPERS[value] = _C.disable_wrapper(value)
    source = ObjectSource(wrapper, "checkpoint, capture off")
    import torch.utils.checkpoint as cp

    if value is cp.checkpoint and checkpoint_variable is not None:
        # traced as one tag_activation_checkpoint node where exact (activation_checkpoint.py)
        return checkpoint_variable(wrapper, source)
    return DisabledFunctionVariable(wrapper, source)


def _wrap_callable(tx, value, source) -> VariableTracker:
    from .builtin import BuiltinVariable

    if isinstance(value, _SCRIPTED):
        return _wrap_scripted(value, source)
    from .builtin_table import PureBuiltinVariable, lookup

    if lookup(value) is not None:  # e.g. a resume function's resume_iterator (a constant)
        return PureBuiltinVariable(value, source)
    if numpy_calls.foldable(value):  # np.float32 (a type), np.finfo
        return numpy_calls.NumpyFunctionVariable(value, source)
    if value in _checkpoint_functions():
        return _checkpoint_variable(value)
    if value in _BUILTIN_TYPES or (
        isinstance(value, types.BuiltinFunctionType)
        and getattr(builtins, value.__name__, None) is value
    ):
        return BuiltinVariable(value, source)
    if (
        getattr(operator, getattr(value, "__name__", ""), None) is value
        or getattr(math, getattr(value, "__name__", ""), None) is value
    ):
        return BuiltinVariable(value, source)
    if isinstance(value, type):
        if (
            _in_torch(value.__module__)
            and not issubclass(value, torch.nn.Module)
            and value is not torch.Tensor
        ):
            return TorchFunctionVariable(value, source)
        return UserDefinedClassVariable(value, source)
    orig = getattr(value, "_torchplugin_original", None)
    if orig is not None:  # a function wrapped by torch_plugin.optimize: inline the original
        return wrap_value(tx, orig, None)
    if getattr(value, "_torchplugin_disabled", False):
        from .functions import DisabledFunctionVariable

        return DisabledFunctionVariable(value, source)
    reason = torch_compile_interop.call_reason(value)
    if reason is not None:  # torch.compile'd or torch.compiler.disable'd: never traced
        from .functions import DisabledFunctionVariable

        return DisabledFunctionVariable(value, source, reason)
    if _is_torch_callable(value):
        return TorchFunctionVariable(value, source)
    if isinstance(value, types.FunctionType):
        return UserFunctionVariable(value, source)
    if isinstance(value, functools._lru_cache_wrapper) and isinstance(
        getattr(value, "__wrapped__", None), types.FunctionType
    ):
        # An lru_cache'd helper (HF's is_torch_distributed_available) is inlined: the cache
        # only remembers what the function returns for these arguments, which inlining
        # recomputes (its guards pin what it read), as torch.compile does.
        wrapped_source = AttrSource(source, "__wrapped__") if source is not None else None
        return UserFunctionVariable(value.__wrapped__, wrapped_source)
    return UserDefinedObjectVariable(value, source)


def wrap_constant_or_object(value: Any) -> VariableTracker:
    """Wrap a value computed at capture time (no source, so no guard)."""
    if is_immutable(value):
        return ConstantVariable(value)
    if type(value) in (tuple, list):
        items = [wrap_constant_or_object(v) for v in value]
        return (
            TupleVariable(items)
            if type(value) is tuple
            else ListVariable(items, mutable_local=True)
        )
    if type(value) is dict and all(is_immutable(k) for k in value):
        return ConstDictVariable(
            {k: wrap_constant_or_object(v) for k, v in value.items()}, mutable_local=True
        )
    if isinstance(value, torch.nn.Module):
        return NNModuleVariable(value)
    if value is os.environ:
        from .environ import EnvironVariable

        return EnvironVariable()
    if (
        isinstance(value, types.FunctionType)
        or isinstance(value, type)
        or callable(value)
        and not hasattr(value, "__dict__")
    ):
        return _wrap_callable(None, value, None)
    if isinstance(value, types.ModuleType):
        return PythonModuleVariable(value)
    if numpy_calls.is_numpy_data(value):
        return numpy_calls.NumpyArrayVariable(value)
    return UserDefinedObjectVariable(value)
