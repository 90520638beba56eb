"""nn.Module instances.

Key class: :class:`NNModuleVariable`. Calling a module checks it has no hooks, then either
records the functional call its forward amounts to (Linear, Conv*d, LayerNorm, activations:
:func:`functional_form`), a ``call_module`` node (other modules defined by torch.nn whose
forward changes no state, e.g. eval-mode BatchNorm2d, pooling: :func:`call_module_is_pure`),
or inlines the module's ``forward`` (user modules, Sequential/ModuleList iteration, and
torch.nn modules with state effects such as train-mode BatchNorm, whose
``num_batches_tracked.add_(1)`` and running-statistics update then become graph operations).
Parameters and buffers become ``get_attr`` nodes that reference the module's own tensors, so
in-place updates (optimizer steps, running statistics) stay visible. Every module read is
guarded on identity and ``training``.
"""

from __future__ import annotations

import inspect
import types

import torch

from .. import graph_break_types as gbt
from .. import torch_compile_interop
from ..exc import unimplemented
from ..sources import AttrSource
from .base import VariableTracker
from .constant import ConstantVariable
from .lists import ListVariable, TupleVariable

_CONTAINERS = (
    torch.nn.Sequential,
    torch.nn.ModuleList,
    torch.nn.ModuleDict,
    torch.nn.ParameterList,
    torch.nn.ParameterDict,
)


def is_torch_leaf_module(module: torch.nn.Module) -> bool:
    """Modules defined by torch.nn (not containers, not subclassed by users) become call_module nodes."""
    cls = type(module)
    if isinstance(module, _CONTAINERS):
        return False
    return cls.__module__.startswith(
        ("torch.nn.modules", "torch.ao.nn", "torch.nn.qat", "torch.nn.intrinsic")
    )


def _functional_forms() -> dict:
    """torch.nn modules whose ``forward`` is one functional call: type -> (function,
    attributes passed positionally after the input, attributes passed by keyword). Such a
    call is recorded as that function over the module's attributes (parameters become
    ``get_attr`` nodes, other attributes guarded constants), as torch.compile's inlining of
    ``torch.nn`` forwards does: the graph then calls the kernel directly, without
    ``Module.__call__``. Source: the forward of each class in torch/nn/modules/."""
    F = torch.nn.functional
    nn = torch.nn
    conv = ("weight", "bias", "stride", "padding", "dilation", "groups")
    return {
        nn.Linear: (F.linear, ("weight", "bias"), ()),
        nn.Conv1d: (F.conv1d, conv, ()),
        nn.Conv2d: (F.conv2d, conv, ()),
        nn.Conv3d: (F.conv3d, conv, ()),
        nn.ReLU: (F.relu, ("inplace",), ()),
        nn.SiLU: (F.silu, ("inplace",), ()),
        nn.GELU: (F.gelu, (), ("approximate",)),
        nn.Sigmoid: (torch.sigmoid, (), ()),
        nn.Tanh: (torch.tanh, (), ()),
        nn.LayerNorm: (F.layer_norm, ("normalized_shape", "weight", "bias", "eps"), ()),
        nn.Dropout: (F.dropout, ("p", "training", "inplace"), ()),
    }


_FUNCTIONAL_FORMS: dict | None = None


def parameter_free_forms() -> frozenset:
    """The classes of :func:`_functional_forms` whose call reads no parameter (activations,
    dropout): building one draws no random number and allocates no tensor."""
    forms = _functional_forms()
    return frozenset(
        cls
        for cls, (_, positional, keywords) in forms.items()
        if not {"weight", "bias"} & {*positional, *keywords}
    )


def functional_form(module: torch.nn.Module):
    """The (function, positional attrs, keyword attrs) that ``module``'s forward amounts to,
    or None (record a ``call_module`` node instead)."""
    global _FUNCTIONAL_FORMS
    if _FUNCTIONAL_FORMS is None:
        _FUNCTIONAL_FORMS = _functional_forms()
    form = _FUNCTIONAL_FORMS.get(type(module))
    if form is None or "forward" in module.__dict__:
        return None
    if getattr(module, "padding_mode", "zeros") != "zeros":
        return None  # Conv*d with reflect/replicate/circular padding pads first
    return form


def has_state_effects(module: torch.nn.Module) -> bool:
    """Whether ``module``'s own forward (a torch.nn class) changes state outside its output:
    train-mode BatchNorm/InstanceNorm with running statistics (``num_batches_tracked``,
    running mean and variance), Embedding with ``max_norm`` (renormalizes its weight in
    place), quantization modules (observers update their statistics), lazy modules not yet
    initialized. Such a module must not run on FakeTensors at capture (the real buffers would
    be updated once per capture and never by the graph): its forward is inlined instead."""
    from torch.nn.modules.batchnorm import _BatchNorm
    from torch.nn.modules.instancenorm import _InstanceNorm
    from torch.nn.modules.lazy import LazyModuleMixin

    if isinstance(module, (_BatchNorm, _InstanceNorm)):
        return bool(module.training and module.track_running_stats)
    if isinstance(module, (torch.nn.Embedding, torch.nn.EmbeddingBag)):
        return module.max_norm is not None
    if isinstance(module, LazyModuleMixin):
        return True
    return type(module).__module__.startswith(("torch.ao.", "torch.nn.qat", "torch.nn.quantized"))


# State-dict and load hooks of an nn.Module instance (torch/nn/modules/module.py).
_STATE_DICT_HOOKS = (
    "_state_dict_hooks",
    "_state_dict_pre_hooks",
    "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks",
)


def _has_state_dict_hooks(module: torch.nn.Module) -> bool:
    """Whether ``module`` has state-dict or load hooks. A ``call_module`` node makes the
    compiled graph hold the module, and such hooks may reference its owner: FSDP2 registers
    them on every module whose parameters it manages, closing over its parameter group and
    so the whole model. The compiled entry would then keep alive the model its identity
    guards watch, and never be dropped (capture_hook.md, "Entries die with the objects they
    are specialized to"). Such a module's forward is inlined instead."""
    d = module.__dict__
    return any(d.get(name) for name in _STATE_DICT_HOOKS)


def call_module_is_pure(module: torch.nn.Module) -> bool:
    """A torch.nn leaf module may become a ``call_module`` node (which capture runs on
    FakeTensors to learn its output's metadata) only when neither it nor any submodule it
    may call has hooks or state effects: hooks must never see FakeTensors, and effects
    must happen in the graph, on every call, not once at capture."""
    return not any(_has_hooks(m) or has_state_effects(m) for m in module.modules())


def _has_hooks(module: torch.nn.Module) -> bool:
    from torch.nn.modules import module as module_mod

    return bool(
        module._forward_hooks
        or module._forward_pre_hooks
        or module._backward_hooks
        or getattr(module, "_backward_pre_hooks", None)
        or module_mod._global_forward_hooks
        or module_mod._global_forward_pre_hooks
        or module_mod._global_backward_hooks
        or getattr(module_mod, "_global_backward_pre_hooks", None)
    )


class NNModuleVariable(VariableTracker):
    """A real nn.Module reached from the frame (guarded by identity and ``training``).

    ``shared`` (capture/shared_modules.py): guarded on its type instead; its parameters and
    buffers are graph inputs, its forward is inlined (never a ``call_module`` node, which
    names one object), and its identity is guarded only where the object itself is used as
    a constant."""

    def __init__(self, module: torch.nn.Module, source=None, shared: bool = False) -> None:
        super().__init__(source)
        self.module = module
        self.shared = shared
        self._identity_guards = None

    def python_type(self) -> type:
        return type(self.module)

    def as_python_constant(self):
        if self.shared and self._identity_guards is not None:
            self._identity_guards.id_match(self.source, self.module)
            self._identity_guards = None
        return self.module

    def _attr_tensor(self, tx, value: torch.Tensor, name: str) -> VariableTracker:
        """A parameter, buffer or tensor attribute: the graph's own constant (``get_attr``)
        or, for a shared module, a graph input loaded from the module at each call."""
        if self.shared:
            from .builder import wrap_value

            return wrap_value(tx, value, self._child_source(name))
        return tx.output.register_attr_tensor(tx, value, self._child_source(name))

    def truthiness(self, tx) -> bool:
        if isinstance(self.module, _CONTAINERS):
            self.guard_structure(tx)
            return len(self.module) > 0
        return True

    def _child_source(self, name: str):
        return AttrSource(self.source, name) if self.source is not None else None

    def var_getattr(self, tx, name: str) -> VariableTracker:
        from .builder import wrap_value

        m = self.module
        d = m.__dict__
        if "_parameters" in d and name in d["_parameters"]:
            p = d["_parameters"][name]
            if p is None:
                self._guard_none(tx, name)
                return ConstantVariable(None)
            return self._attr_tensor(tx, p, name)
        if "_buffers" in d and name in d["_buffers"]:
            b = d["_buffers"][name]
            if b is None:
                self._guard_none(tx, name)
                return ConstantVariable(None)
            return self._attr_tensor(tx, b, name)
        if "_modules" in d and name in d["_modules"]:
            sub = d["_modules"][name]
            return wrap_value(tx, sub, self._child_source(name))
        if name in d:
            value = d[name]
            if isinstance(value, torch.Tensor):
                return self._attr_tensor(tx, value, name)
            if type(value) is int and self.source is not None:
                # a module's int attribute (``layer_idx``, ``num_heads``) is a constant of
                # the graph, never an automatic-dynamic int (those are the frame's inputs)
                tx.output.guards.equals_match(self._child_source(name), value)
                return ConstantVariable(value, self._child_source(name))
            return wrap_value(tx, value, self._child_source(name))
        try:
            static = inspect.getattr_static(m, name)
        except AttributeError:
            unimplemented(gbt.EXCEPTION, f"{type(m).__name__} has no attribute {name!r}")
        if name in _TREE_WALKS and static is getattr(torch.nn.Module, name):
            from .base import BoundMethodVariable

            return BoundMethodVariable(self, name)
        return class_attribute(tx, self, static, name)

    def call_function(self, tx, args, kwargs):
        m = self.module
        reason = torch_compile_interop.module_call_reason(m)
        if reason is not None:
            unimplemented(gbt.RUNS_OUTSIDE_CAPTURE, reason)
        self.require_no_hooks(tx)
        form = functional_form(m)
        if form is not None and len(args) == 1 and not kwargs:
            fn, positional, keywords = form
            extra = [self.var_getattr(tx, name) for name in positional]
            kw = {name: self.var_getattr(tx, name) for name in keywords}
            return tx.output.call_function(tx, fn, [args[0], *extra], kw)
        if (
            not self.shared
            and is_torch_leaf_module(m)
            and type(m).forward is getattr(type(m), "forward", None)
            and "forward" not in m.__dict__
            and call_module_is_pure(m)
            and not _has_state_dict_hooks(m)
        ):
            self.guard_submodules_no_hooks(tx)
            return tx.output.call_module(tx, m, self.source, list(args), dict(kwargs))
        call = type(m).__call__
        if call is not torch.nn.Module.__call__:
            return tx.inline_user_function_obj(call, [self, *args], kwargs)
        return self.call_forward(tx, args, kwargs)

    def _guard_none(self, tx, name: str) -> None:
        """A shared module's parameter or buffer slot holding None (``bias=False``): the
        graph is only valid for modules where it is None too."""
        if self.shared:
            tx.output.guards.id_match(self._child_source(name), None)

    def require_no_hooks(self, tx) -> None:
        """Capture inlines a module's call only while it has no hooks (they would have to
        run around it): a graph break otherwise, and a guard that no hook was added since."""
        if _has_hooks(self.module):
            unimplemented(
                gbt.NN_MODULE, f"call of {type(self.module).__name__} with forward/backward hooks"
            )
        tx.output.guards.no_module_hooks(self.source)

    def guard_submodules_no_hooks(self, tx) -> None:
        """A ``call_module`` node runs the module's own ``__call__`` (hooks included) on
        every call: its submodules must have none at capture (``call_module_is_pure``) and
        none later."""
        for path, _ in self.module.named_modules():
            if path:
                tx.output.guards.no_module_hooks(_path_source(self.source, path))

    def guard_structure(self, tx) -> None:
        """What iterating, ``len``, indexing by position, ``children()`` or ``modules()``
        read: the names and order of the module's submodules, parameters and buffers (a
        module appended to a Sequential after capture must recompile)."""
        if self.source is None:
            return
        m = self.module
        for attr in ("_modules", "_parameters", "_buffers"):
            if attr in m.__dict__:
                tx.output.guards.dict_keys_match(AttrSource(self.source, attr), m.__dict__[attr])

    def call_forward(self, tx, args, kwargs):
        m = self.module
        if "forward" in m.__dict__:
            fwd = m.__dict__["forward"]
            from .builder import wrap_value

            return wrap_value(tx, fwd, self._child_source("forward")).call_function(
                tx, args, kwargs
            )
        fwd = type(m).forward
        if fwd is torch.nn.Module.forward:
            unimplemented(gbt.EXCEPTION, f"{type(m).__name__} has no forward()")
        return tx.inline_user_function_obj(fwd, [self, *args], kwargs)

    def call_method(self, tx, name, args, kwargs):
        if name in ("__call__", "_call_impl", "_wrapped_call_impl"):
            return self.call_function(tx, args, kwargs)
        if name == "forward":
            if _has_hooks(self.module):
                pass  # forward() called directly bypasses hooks
            return self.call_forward(tx, args, kwargs)
        if name == "__len__" and isinstance(self.module, _CONTAINERS):
            self.guard_structure(tx)
            return ConstantVariable(len(self.module))
        if name == "__getitem__" and isinstance(self.module, _CONTAINERS):
            return self.getitem(tx, args[0])
        if name in _TREE_WALKS and getattr(type(self.module), name) is getattr(
            torch.nn.Module, name
        ):
            return self.walk_tree(tx, name, args, kwargs)
        if name in ("keys", "values", "items") and isinstance(self.module, torch.nn.ModuleDict):
            self.guard_structure(tx)
            subs = [(k, self.var_getattr(tx, k)) for k in self.module.keys()]
            if name == "keys":
                return ListVariable([ConstantVariable(k) for k, _ in subs], mutable_local=True)
            if name == "values":
                return ListVariable([v for _, v in subs], mutable_local=True)
            return ListVariable(
                [TupleVariable([ConstantVariable(k), v]) for k, v in subs], mutable_local=True
            )
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def walk_tree(self, tx, name: str, args, kwargs) -> VariableTracker:
        """``children()``, ``named_children()``, ``modules()``, ``named_modules()``,
        ``parameters()``, ``named_parameters()``, ``buffers()``, ``named_buffers()`` (timm's
        RegNet iterates ``self.children()``): run for real on the module (these read only its
        registries), each yielded module or tensor wrapped through its attribute path from
        this module (so it is guarded, and a tensor is the graph's own ``get_attr``), every
        visited module's registries guarded. An iterator over a list, as eager returns a
        generator."""
        from .lists import ListIteratorVariable

        if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
            unimplemented(gbt.NN_MODULE, f"nn.Module.{name}() with non-constant arguments")
        call_args = [a.as_python_constant() for a in args]
        call_kwargs = {k: v.as_python_constant() for k, v in kwargs.items()}
        m = self.module
        named = name if name.startswith("named_") else "named_" + name
        if name in ("children", "named_children") and (call_args or call_kwargs):
            unimplemented(gbt.NN_MODULE, f"nn.Module.{name}() with arguments")
        try:
            if named in ("named_parameters", "named_buffers") and "prefix" not in call_kwargs:
                if call_args:
                    call_kwargs["prefix"] = call_args.pop(0)
                prefix = call_kwargs.get("prefix", "")
            elif named == "named_modules":
                sig = inspect.signature(torch.nn.Module.named_modules).bind(
                    m, *call_args, **call_kwargs
                )
                prefix = sig.arguments.get("prefix", "")
            else:
                prefix = call_kwargs.get("prefix", "")
            items = list(getattr(m, named)(*call_args, **call_kwargs))
        except TypeError as e:
            unimplemented(gbt.EXCEPTION, f"nn.Module.{name}(): {e}")
        for path, sub in m.named_modules():
            _var_at(tx, self, path).guard_structure(tx)
        out = []
        for key, value in items:
            path = key[len(prefix) + 1 :] if prefix and key.startswith(prefix + ".") else key
            if prefix and key == prefix:
                path = ""
            var = _var_at(tx, self, path)
            out.append(TupleVariable([ConstantVariable(key), var]) if named == name else var)
        return ListIteratorVariable(out)

    def getitem(self, tx, index: VariableTracker) -> VariableTracker:
        m = self.module
        key = index.as_python_constant()
        if isinstance(m, torch.nn.ModuleDict):
            return self.var_getattr(tx, key)
        self.guard_structure(tx)
        if isinstance(m, (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ParameterList)):
            if isinstance(key, slice):
                if isinstance(m, torch.nn.ParameterList):
                    unimplemented(gbt.NN_MODULE, "slicing a ParameterList")
                return ModuleSliceVariable(self, list(m._modules)[key])
            names = (
                list(m._modules)
                if not isinstance(m, torch.nn.ParameterList)
                else [str(i) for i in range(len(m))]
            )
            n = len(names)
            if not -n <= key < n:
                unimplemented(gbt.EXCEPTION, f"{type(m).__name__} index {key} out of range")
            return self.var_getattr(tx, names[key % n])
        unimplemented(gbt.NN_MODULE, f"indexing {type(m).__name__}")

    def unpack_var_sequence(self, tx):
        m = self.module
        self.guard_structure(tx)
        if isinstance(m, (torch.nn.Sequential, torch.nn.ModuleList)):
            return [self.var_getattr(tx, name) for name in m._modules]
        if isinstance(m, torch.nn.ParameterList):
            return [self.var_getattr(tx, str(i)) for i in range(len(m))]
        if isinstance(m, (torch.nn.ModuleDict, torch.nn.ParameterDict)):
            return [ConstantVariable(k) for k in m.keys()]
        unimplemented(gbt.NN_MODULE, f"iteration over {type(m).__name__}")

    def __repr__(self) -> str:
        return f"NNModuleVariable({type(self.module).__name__})"


_TREE_WALKS = frozenset(
    {
        "children",
        "named_children",
        "modules",
        "named_modules",
        "parameters",
        "named_parameters",
        "buffers",
        "named_buffers",
    }
)


def _path_source(source, path: str):
    """The source of ``module.<path>`` (a dotted attribute path from ``named_modules``)."""
    if source is None:
        return None
    for part in path.split("."):
        source = AttrSource(source, part)
    return source


def _var_at(tx, root: NNModuleVariable, path: str) -> VariableTracker:
    """The variable of ``root.<path>`` (a submodule, parameter or buffer), read attribute
    by attribute so each step is guarded as a direct read would be."""
    var = root
    if path:
        for part in path.split("."):
            var = var.var_getattr(tx, part)
    return var


def class_attribute(tx, obj_var: VariableTracker, static, name: str) -> VariableTracker:
    """Resolve a class-level attribute found by ``inspect.getattr_static`` on an instance."""
    from .builder import wrap_constant_or_object
    from .functions import UserFunctionVariable, UserMethodVariable

    if isinstance(static, types.FunctionType):
        return UserMethodVariable(static, obj_var)
    if isinstance(static, staticmethod):
        return (
            UserFunctionVariable(static.__func__)
            if isinstance(static.__func__, types.FunctionType)
            else wrap_constant_or_object(static.__func__)
        )
    if isinstance(static, classmethod):
        from .user_defined import UserDefinedClassVariable

        return UserMethodVariable(static.__func__, UserDefinedClassVariable(obj_var.python_type()))
    if isinstance(static, property):
        if static.fget is None:
            unimplemented(gbt.EXCEPTION, f"property {name!r} has no getter")
        return tx.inline_user_function_obj(static.fget, [obj_var], {})
    if isinstance(static, types.MemberDescriptorType) or hasattr(type(static), "__get__"):
        from .attribute_rules import descriptor_attribute

        described = descriptor_attribute(tx, obj_var, static, name)
        if described is not None:
            return described
        if isinstance(
            static,
            (types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType),
        ):
            unimplemented(
                gbt.NON_PYTHON_CALL, f"C method {name!r} of {obj_var.python_type().__name__}"
            )
        unimplemented(
            gbt.NN_MODULE, f"descriptor attribute {name!r} of {obj_var.python_type().__name__}"
        )
    from .builder import wrap_value

    return wrap_value(
        tx, static, AttrSource(obj_var.source, name) if obj_var.source is not None else None
    )


class ModuleSliceVariable(VariableTracker):
    """``container[a:b]`` of a ``Sequential`` or ``ModuleList`` (``self.layers[:n]`` in HF
    decoders). Eager builds a new container holding the same child modules; the translator
    keeps the parent's variable and the children's names instead, so each child is still
    reached (and guarded) through the parent's source. It models what code does with such a
    slice: iterate, ``len``, index or slice it again, ``isinstance`` (its type is the
    container's), and, for a ``Sequential``, call it (each child in turn). Anything else is
    a graph break."""

    def __init__(self, parent: NNModuleVariable, names: list[str]) -> None:
        super().__init__()
        self.parent = parent
        self.names = names

    def python_type(self) -> type:
        return type(self.parent.module)

    def truthiness(self, tx) -> bool:
        return bool(self.names)

    def _children(self, tx) -> list[VariableTracker]:
        return [self.parent.var_getattr(tx, name) for name in self.names]

    def unpack_var_sequence(self, tx):
        return self._children(tx)

    def getitem(self, tx, index: VariableTracker) -> VariableTracker:
        key = index.as_python_constant()
        if isinstance(key, slice):
            return ModuleSliceVariable(self.parent, self.names[key])
        n = len(self.names)
        if not isinstance(key, int) or not -n <= key < n:
            unimplemented(
                gbt.EXCEPTION, f"{self.python_type().__name__} slice index {key!r} out of range"
            )
        return self.parent.var_getattr(tx, self.names[key % n])

    def call_method(self, tx, name, args, kwargs):
        if name == "__len__" and not args and not kwargs:
            return ConstantVariable(len(self.names))
        if name == "__getitem__" and len(args) == 1 and not kwargs:
            return self.getitem(tx, args[0])
        if name == "__iter__" and not args and not kwargs:
            from .lists import ListIteratorVariable

            return ListIteratorVariable(self._children(tx))
        unimplemented(gbt.NN_MODULE, f"method {name!r} of a sliced {self.python_type().__name__}")

    def call_function(self, tx, args, kwargs):
        if not isinstance(self.parent.module, torch.nn.Sequential) or kwargs or len(args) != 1:
            unimplemented(gbt.NN_MODULE, f"call of a sliced {self.python_type().__name__}")
        value = args[0]
        for child in self._children(tx):
            value = child.call_function(tx, [value], {})
        return value

    def __repr__(self) -> str:
        return f"ModuleSliceVariable({self.python_type().__name__}{self.names})"
