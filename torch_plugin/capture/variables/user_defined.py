"""User-defined objects and classes, and Python modules.

Key classes: :class:`UserDefinedObjectVariable` (any other object, e.g. a model config),
:class:`UserDefinedClassVariable` (a class), :class:`PythonModuleVariable` (``import``-ed
modules), :class:`SuperVariable` (``super()``). Data attributes are read for real and
guarded by their source, so the guard re-reads them on every call (also through a custom
``__getattribute__``); methods and properties defined in Python are inlined.
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import types
import weakref

import torch

from .. import graph_break_types as gbt
from ..exc import Unsupported, unimplemented
from ..sources import AttrSource, ItemSource
from .base import VariableTracker
from .constant import ConstantVariable

_READ_METHODS = (
    "__len__",
    "__getitem__",
    "__contains__",
    "keys",
    "values",
    "items",
    "get",
    "__iter__",
)


def class_lookup(cls: type, name: str):
    """``name`` as found in the ``__dict__`` of the first class of ``cls.__mro__`` that
    defines it (no descriptor is invoked), or None."""
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def _has_custom_getattr(cls: type) -> bool:
    return cls.__getattribute__ is not object.__getattribute__ or hasattr(cls, "__getattr__")


# Types whose attributes are data descriptors over immutable (or, for Field, never
# rewritten) values: an attribute read is the value itself.
_PLAIN_ATTRIBUTE_TYPES = (torch.finfo, torch.iinfo, dataclasses.Field)


class UserDefinedObjectVariable(VariableTracker):
    """A real object of a user class.

    An object read from a source is guarded on its type (``TYPE_MATCH``) and on each data
    attribute read (by that attribute's source), so a frame that receives a new object of
    the same class each call (a cache, a config built per call) reuses its entry. Its
    identity is guarded (``ID_MATCH``) only once the translator uses the object itself as a
    constant (:meth:`as_python_constant`: an ``is`` between two objects, a constant
    argument, a hash): ``guards`` is the frame's guard set until then.
    """

    def __init__(self, value, source=None, guards=None) -> None:
        super().__init__(source)
        self.value = value
        self._identity_guards = guards if source is not None else None
        # A private copy: an object this capture made (``copy.deepcopy`` run at capture
        # time), reachable from nothing outside it, so writing its attributes for real
        # changes no program state (see :func:`~.object_copies.private_setattr`). ``mutated`` once written.
        self.private = False
        self.mutated = False

    def python_type(self) -> type:
        return type(self.value)

    def is_python_constant(self) -> bool:
        return True

    def as_python_constant(self):
        if self._identity_guards is not None:
            self._identity_guards.id_match(self.source, self.value)
            self._identity_guards = None
        return self.value

    def truthiness(self, tx) -> bool:
        cls = type(self.value)
        if hasattr(cls, "__bool__") or hasattr(cls, "__len__"):
            # The answer may change between calls and no guard covers it: let CPython decide.
            unimplemented(
                gbt.UNMODELLED_VALUE,
                f"truth value of a {cls.__name__} object (defines __bool__/__len__)",
            )
        return True

    def var_getattr(self, tx, name: str) -> VariableTracker:
        from .builder import wrap_value
        from .nn_module import class_attribute

        source = AttrSource(self.source, name) if self.source is not None else None
        cls = type(self.value)
        if name == "__get__" and isinstance(
            self.value, (types.GetSetDescriptorType, types.MemberDescriptorType)
        ):
            return DescriptorGetVariable(self.value)
        if isinstance(self.value, _PLAIN_ATTRIBUTE_TYPES):
            # C types whose attributes are plain data (torch.finfo(dtype).min, a dataclass
            # Field's default): read now, guarded through the attribute's source if any.
            try:
                value = getattr(self.value, name)
            except AttributeError:
                unimplemented(gbt.EXCEPTION, f"{cls.__name__} object has no attribute {name!r}")
            return wrap_value(tx, value, source)
        if not _has_custom_getattr(cls):
            try:
                static = inspect.getattr_static(self.value, name)
            except AttributeError:
                unimplemented(gbt.EXCEPTION, f"{cls.__name__} object has no attribute {name!r}")
            inst_dict = getattr(self.value, "__dict__", None)
            if inst_dict is None or name not in inst_dict:
                if inst_dict is not None and source is not None:
                    # Guarded on its type, not identity: another object of the class
                    # may shadow the class attribute with an instance attribute.
                    tx.output.guards.not_in_dict(AttrSource(self.source, "__dict__"), name)
                return class_attribute(tx, self, static, name)
        else:
            static = class_lookup(cls, name)
            if isinstance(static, (types.FunctionType, property, staticmethod, classmethod)):
                return class_attribute(tx, self, static, name)
        try:
            value = getattr(self.value, name)
        except AttributeError:
            unimplemented(gbt.EXCEPTION, f"{cls.__name__} object has no attribute {name!r}")
        return wrap_value(tx, value, source)

    def call_method(self, tx, name, args, kwargs):
        static = getattr(type(self.value), name, None)
        if (
            self.source is None
            and name in _READ_METHODS
            and not isinstance(static, types.FunctionType)
            and all(a.is_python_constant() for a in args)
        ):
            # a value computed at capture time (e.g. a mappingproxy from inspect): read it
            from .builder import wrap_constant_or_object

            return wrap_constant_or_object(
                getattr(self.value, name)(*[a.as_python_constant() for a in args])
            )
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def unpack_var_sequence(self, tx):
        if self.source is None and not isinstance(
            getattr(type(self.value), "__iter__", None), types.FunctionType
        ):
            from .builder import wrap_constant_or_object

            try:
                return [wrap_constant_or_object(v) for v in list(self.value)]
            except TypeError:
                pass
        from .builtin_table import user_iter

        return user_iter(tx, self)

    def call_function(self, tx, args, kwargs):
        call = getattr(type(self.value), "__call__", None)
        if isinstance(call, types.FunctionType):
            from .functions import UserMethodVariable

            return UserMethodVariable(call, self).call_function(tx, args, kwargs)
        if type(self.value) is weakref.ReferenceType and not args and not kwargs:
            return self._weakref_referent(tx)
        unimplemented(gbt.NON_PYTHON_CALL, f"call of {type(self.value).__name__} object")

    def _weakref_referent(self, tx) -> VariableTracker:
        """``ref()`` of a ``weakref.ref`` (nn.RNNBase._weights_have_changed compares each
        flat weight with its weakref): the variable of its referent, when the capture already
        holds it with an identity guard (a parameter read through get_attr, a module). The
        weakref is guarded on identity: the same weakref object has the same referent while
        that is alive, and an identity-guarded referent's death drops the compiled entry
        (docs/internals/capture_hook.md), so the call can never return None instead."""
        referent = self.value()
        known = tx.output.known_variable(referent, None) if referent is not None else None
        if known is None and isinstance(referent, torch.Tensor):
            # a parameter or buffer already read through get_attr (identity-guarded)
            name = tx.output._attr_names.get(id(referent))
            source = tx.output._attr_sources.get(name) if name is not None else None
            if source is not None:
                known = tx.output.register_attr_tensor(tx, referent, source)
        if (
            known is None
            or known.source is None
            or (known.source, "ID_MATCH", None) not in tx.output.guards._guards
        ):
            unimplemented(
                gbt.NON_PYTHON_CALL,
                "call of a weakref whose referent is not a value the capture guards by identity",
            )
        self.as_python_constant()  # ID_MATCH on the weakref object
        return known

    def __repr__(self) -> str:
        return f"UserDefinedObjectVariable({type(self.value).__name__})"


class DescriptorGetVariable(VariableTracker):
    """``desc.__get__`` of a C getset or member descriptor (``torch.Tensor.ndim.__get__``,
    ``type(p).func.__get__``): ``desc.__get__(obj)`` is the attribute read ``obj.<name>``
    when ``obj``'s class finds this very descriptor at that name and reads attributes the
    default way (else a graph break); ``desc.__get__(None, cls)`` is the descriptor."""

    def __init__(self, desc) -> None:
        super().__init__()
        self.desc = desc

    def call_function(self, tx, args, kwargs):
        desc = self.desc
        if kwargs or not 1 <= len(args) <= 2:
            unimplemented(gbt.EXCEPTION, "descriptor __get__ with these arguments")
        obj = args[0]
        if obj.is_python_constant() and obj.as_python_constant() is None:
            return UserDefinedObjectVariable(desc)
        try:
            cls = obj.python_type()
        except Unsupported:
            cls = None
        if (
            cls is None
            or not issubclass(cls, desc.__objclass__)
            or class_lookup(cls, desc.__name__) is not desc
            or hasattr(cls, "__getattr__")
            # a C type's own attribute lookup (functools.partial's) still finds a data
            # descriptor of its class first; a Python __getattribute__ might not
            or not isinstance(cls.__getattribute__, types.WrapperDescriptorType)
        ):
            unimplemented(gbt.UNSUPPORTED_BUILTIN, f"{desc!r}.__get__ on {obj}")
        return tx.getattr(obj, desc.__name__)

    def __repr__(self) -> str:
        return f"DescriptorGetVariable({self.desc!r})"


class UserDefinedClassVariable(VariableTracker):
    """A class object. Calling it constructs only what the translator models."""

    def __init__(self, value: type, source=None) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return type(self.value)

    def as_python_constant(self):
        return self.value

    def truthiness(self, tx) -> bool:
        return True

    def var_getattr(self, tx, name: str) -> VariableTracker:
        from .builder import wrap_value
        from .functions import UserFunctionVariable, UserMethodVariable

        if name == "apply" and issubclass(self.value, torch.autograd.Function):
            from .autograd_function import AutogradFunctionApplyVariable

            return AutogradFunctionApplyVariable(self.value)
        static = class_lookup(self.value, name)
        if isinstance(static, staticmethod) and isinstance(static.__func__, types.FunctionType):
            return UserFunctionVariable(static.__func__)
        if isinstance(static, classmethod) and isinstance(static.__func__, types.FunctionType):
            return UserMethodVariable(static.__func__, self)
        if isinstance(static, types.FunctionType):
            return UserFunctionVariable(static)
        if isinstance(static, (types.MethodDescriptorType, types.WrapperDescriptorType)):
            owner = getattr(static, "__objclass__", None)
            if owner in (dict, list, set, frozenset, tuple):
                # ``defaultdict.__setitem__``, ``MyDict.get``: a builtin type's C method read
                # through a subclass, called with the object first
                from .builtin_table import UnboundMethodVariable

                return UnboundMethodVariable(owner, name)
        try:
            value = getattr(self.value, name)
        except AttributeError:
            unimplemented(gbt.EXCEPTION, f"class {self.value.__name__} has no attribute {name!r}")
        return wrap_value(
            tx, value, AttrSource(self.source, name) if self.source is not None else None
        )

    def _namedtuple_items(self, tx, args, kwargs) -> list[VariableTracker]:
        """The fields of ``cls(*args, **kwargs)`` for a namedtuple class, defaults included
        (``namedtuple(..., defaults=...)``: ``cls.__new__.__defaults__``, guarded by value
        when the class has a source; only immutable defaults, which eager shares between
        instances as a constant would be). A call eager would reject is a graph break."""
        from .builder import wrap_constant_or_object
        from .constant import is_immutable

        cls = self.value
        fields = cls._fields
        defaults = getattr(cls.__new__, "__defaults__", None) or ()
        if (
            len(args) > len(fields)
            or any(k not in fields for k in kwargs)
            or any(f in kwargs for f in fields[: len(args)])
        ):
            unimplemented(
                gbt.OBJECT_CONSTRUCTION,
                f"{cls.__name__}(...) with arguments that do not match its fields",
            )
        first_default = len(fields) - len(defaults)
        items = []
        for i, name in enumerate(fields):
            if i < len(args):
                items.append(args[i])
            elif name in kwargs:
                items.append(kwargs[name])
            elif i >= first_default and is_immutable(defaults[i - first_default]):
                items.append(wrap_constant_or_object(defaults[i - first_default]))
            else:
                unimplemented(
                    gbt.OBJECT_CONSTRUCTION,
                    f"{cls.__name__}(...) without field {name!r} (or a mutable default)",
                )
        if defaults and self.source is not None:
            tx.output.guards.equals_match(
                AttrSource(AttrSource(self.source, "__new__"), "__defaults__"), defaults
            )
        return items

    def call_function(self, tx, args, kwargs):
        from .lists import NamedTupleVariable

        cls = self.value
        if cls is collections.OrderedDict:
            # a new dict built from the arguments, as dict(...) is; rebuilt as an OrderedDict
            from .builtin import BuiltinVariable

            built = BuiltinVariable(dict).call_dict(tx, *args, **kwargs)
            built.user_cls = collections.OrderedDict
            return built
        from . import collections_objects, itertools_calls

        built = collections_objects.construct(tx, cls, args, kwargs)
        if built is not None:
            return built
        if cls in itertools_calls.SUPPORTED:
            return itertools_calls.call(tx, cls, list(args), dict(kwargs))
        if cls is __import__("functools").partial and args:
            from .partials import make_partial

            return make_partial(tx, args[0], args[1:], kwargs)
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):
            return NamedTupleVariable(self._namedtuple_items(tx, args, kwargs), cls)
        model_output = _model_output_base()
        if model_output is not None and issubclass(cls, model_output):
            from .model_output import ModelOutputVariable

            return ModelOutputVariable.create(tx, cls, args, kwargs)
        if all(a.is_python_constant() for a in args) and all(
            v.is_python_constant() for v in kwargs.values()
        ):
            if issubclass(cls, (int, float, str, bool, tuple, frozenset)) or issubclass(
                cls, __import__("enum").Enum
            ):
                from .builder import wrap_constant_or_object

                value = cls(
                    *[a.as_python_constant() for a in args],
                    **{k: v.as_python_constant() for k, v in kwargs.items()},
                )
                return wrap_constant_or_object(value)
        if issubclass(cls, torch.nn.Module):
            return _construct_leaf_module(cls, args, kwargs)
        from .new_object import NewObjectVariable, constructible

        if constructible(cls):
            return NewObjectVariable.create(tx, cls, args, kwargs, cls_source=self.source)
        unimplemented(
            gbt.OBJECT_CONSTRUCTION, f"constructing an object of class {cls.__qualname__}"
        )

    def __repr__(self) -> str:
        return f"UserDefinedClassVariable({self.value.__qualname__})"


def _construct_leaf_module(cls: type, args, kwargs) -> VariableTracker:
    """``cls(*args, **kwargs)`` for a torch.nn module whose forward is one functional call
    and that holds no parameter or buffer (``nn.ReLU()`` in DistilBERT's classifier forward),
    with constant arguments: the module is built now, as a private object of the capture,
    and its call is recorded as that functional call. Handing it out (returned, stored,
    live at a graph break) is refused (:func:`~.object_copies.refuse_mutated_private`): eager builds a new one
    per call. Other modules: a graph break."""
    from .nn_module import NNModuleVariable, parameter_free_forms

    constant = all(a.is_python_constant() for a in [*args, *kwargs.values()])
    # Only classes known to hold no parameter: building one must not draw random numbers
    # (nn.Linear's initialisation would advance the generator during capture).
    if constant and cls in parameter_free_forms():
        try:
            module = cls(
                *[a.as_python_constant() for a in args],
                **{k: v.as_python_constant() for k, v in kwargs.items()},
            )
        except Exception as e:  # noqa: BLE001 - eager raises it too; the frame runs as it is
            unimplemented(
                gbt.OBJECT_CONSTRUCTION,
                f"constructing nn.Module {cls.__name__} raised {type(e).__name__}: {e}",
            )
        if not any(True for _ in module.parameters()) and not any(True for _ in module.buffers()):
            var = NNModuleVariable(module)
            var.constructed = True
            return var
    unimplemented(
        gbt.OBJECT_CONSTRUCTION, f"constructing nn.Module {cls.__name__} inside the captured code"
    )


def _model_output_base():
    mod = __import__("sys").modules.get("transformers.utils.generic")
    return getattr(mod, "ModelOutput", None) if mod is not None else None


class PythonModuleVariable(VariableTracker):
    """An imported module. Attributes of torch's own modules are not guarded."""

    def __init__(self, value: types.ModuleType, source=None) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return types.ModuleType

    def as_python_constant(self):
        return self.value

    def truthiness(self, tx) -> bool:
        return True

    def var_getattr(self, tx, name: str) -> VariableTracker:
        from .builder import wrap_value

        try:
            value = getattr(self.value, name)
        except AttributeError:
            unimplemented(gbt.EXCEPTION, f"module {self.value.__name__} has no attribute {name!r}")
        stable = self.value.__name__ == "torch" or self.value.__name__.startswith(
            ("torch.", "math", "operator")
        )
        source = None if stable or self.source is None else AttrSource(self.source, name)
        return wrap_value(tx, value, source)

    def call_method(self, tx, name, args, kwargs):
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def __repr__(self) -> str:
        return f"PythonModuleVariable({self.value.__name__})"


class SuperVariable(VariableTracker):
    """``super(cls, obj)``: attribute lookup starts after ``cls`` in ``type(obj).__mro__``."""

    def __init__(self, cls: type, obj: VariableTracker) -> None:
        super().__init__()
        self.cls = cls
        self.obj = obj

    def var_getattr(self, tx, name: str) -> VariableTracker:
        from .builder import wrap_constant_or_object
        from .functions import UserFunctionVariable, UserMethodVariable
        from .nn_module import NNModuleVariable

        obj_type = self.obj.python_type()
        mro = obj_type.__mro__
        start = mro.index(self.cls) + 1 if self.cls in mro else 0
        for klass in mro[start:]:
            if name in klass.__dict__:
                attr = klass.__dict__[name]
                if attr is torch.nn.Module.__call__ and isinstance(self.obj, NNModuleVariable):
                    return _ModuleCallVariable(self.obj)
                if isinstance(attr, types.FunctionType):
                    return UserMethodVariable(attr, self.obj)
                if isinstance(attr, staticmethod):
                    return UserFunctionVariable(attr.__func__)
                if isinstance(attr, classmethod):
                    return UserMethodVariable(attr.__func__, UserDefinedClassVariable(obj_type))
                if isinstance(attr, property):
                    return tx.inline_user_function_obj(attr.fget, [self.obj], {})
                if klass is object and name == "__init__":
                    return _NoOpVariable()
                if klass is object and name in ("__setattr__", "__delattr__", "__getattribute__"):
                    from .object_copies import PrivateObjectMethodVariable, is_private

                    if is_private(self.obj):
                        return PrivateObjectMethodVariable(self.obj, name)
                if not hasattr(type(attr), "__get__"):
                    return wrap_constant_or_object(attr)
                if klass is dict and hasattr(self.obj, "base_method"):
                    return self.obj.base_method(name)  # collections_objects.py
                if klass is dict and name in _DICT_READS:
                    return _DictReadVariable(self.obj, name)
                unimplemented(
                    gbt.NON_PYTHON_CALL, f"super().{name} resolving to {type(attr).__name__}"
                )
        unimplemented(gbt.EXCEPTION, f"super() has no attribute {name!r}")

    def call_method(self, tx, name, args, kwargs):
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)


_DICT_READS = ("get", "__getitem__", "__contains__", "__len__", "keys")


class _DictReadVariable(VariableTracker):
    """A read-only dict method (``dict.get`` ...) called on a real dict subclass instance.
    The dict's keys are guarded and the value read is guarded by its item source."""

    def __init__(self, obj: VariableTracker, name: str) -> None:
        super().__init__()
        self.obj = obj
        self.name = name

    def call_function(self, tx, args, kwargs):
        from .builder import wrap_constant_or_object, wrap_value

        d = self.obj.as_python_constant()
        source = self.obj.source
        if kwargs or not all(a.is_python_constant() for a in args):
            unimplemented(gbt.VALUE_NOT_CONSTANT, f"dict.{self.name} with non-constant arguments")
        tx.output.guards.dict_keys_match(source, dict(d) if source is None else d)
        keys = [a.as_python_constant() for a in args]
        if self.name == "__len__":
            return ConstantVariable(dict.__len__(d))
        if self.name == "keys":
            return wrap_constant_or_object(list(dict.keys(d)))
        if self.name == "__contains__":
            return ConstantVariable(dict.__contains__(d, keys[0]))
        key = keys[0]
        if dict.__contains__(d, key):
            return wrap_value(
                tx,
                dict.__getitem__(d, key),
                ItemSource(source, key) if source is not None else None,
            )
        if self.name == "get":
            return args[1] if len(args) > 1 else ConstantVariable(None)
        unimplemented(gbt.EXCEPTION, f"KeyError: {key!r}")


class _ModuleCallVariable(VariableTracker):
    """``nn.Module.__call__`` bound to a module (reached through super())."""

    def __init__(self, module_var) -> None:
        super().__init__()
        self.module_var = module_var

    def call_function(self, tx, args, kwargs):
        from .nn_module import call_module_is_pure, is_torch_leaf_module

        m = self.module_var.module
        self.module_var.require_no_hooks(tx)
        if not self.module_var.shared and is_torch_leaf_module(m) and call_module_is_pure(m):
            self.module_var.guard_submodules_no_hooks(tx)
            return tx.output.call_module(tx, m, self.module_var.source, list(args), dict(kwargs))
        return self.module_var.call_forward(tx, args, kwargs)


class _NoOpVariable(VariableTracker):
    def call_function(self, tx, args, kwargs):
        return ConstantVariable(None)
