"""Folded copies of user objects: writes to a private copy, and guarding all of an object's state.

The translator folds ``copy.deepcopy(obj)`` and ``dataclasses.asdict(obj)`` at capture time
(call_instructions.py). That is sound only when everything the copy reads of ``obj`` is
guarded (:func:`state_guards`, :func:`guard_state`), and the copy, a
:class:`~.user_defined.UserDefinedObjectVariable` marked ``private``, may then be written for
real during capture (:func:`private_setattr`) as long as the written copy never escapes the
frame (:func:`refuse_mutated_private`). :func:`refuse_code_running_write` refuses attribute
writes to any real object that would run code rather than store a value.
"""

from __future__ import annotations

import enum
import types

import torch

from .. import graph_break_types as gbt
from ..exc import unimplemented
from ..sources import AttrSource, ItemSource
from .base import VariableTracker
from .constant import ConstantVariable
from .user_defined import UserDefinedObjectVariable, class_lookup

# --- writes to private copies (``copy.deepcopy`` folded at capture time) -------------------


def refuse_code_running_write(obj, name: str) -> None:
    """Graph break when ``obj.name = value`` on a real object would run code rather than
    store the value in the instance ``__dict__``: a class ``__setattr__`` other than
    ``object``'s (or, for an nn.Module, ``nn.Module``'s, which the capture models), or a data
    descriptor of the class at ``name`` (a ``__set__``/``__delete__``: a property setter, a
    descriptor storing ``2 * value``) other than a ``__slots__`` member. The capture records
    attribute writes as plain stores that later reads in the frame see, while the replay
    runs the real ``setattr``: the two would disagree."""
    cls = type(obj)
    setter = class_lookup(cls, "__setattr__")
    modelled = (object.__setattr__,) + (
        (torch.nn.Module.__setattr__,) if isinstance(obj, torch.nn.Module) else ()
    )
    if setter not in modelled:
        unimplemented(
            gbt.SIDE_EFFECT, f"assignment to {cls.__name__}.{name} runs {cls.__name__}.__setattr__"
        )
    static = class_lookup(cls, name)
    if (
        static is not None
        and (hasattr(type(static), "__set__") or hasattr(type(static), "__delete__"))
        and not isinstance(static, types.MemberDescriptorType)
    ):
        unimplemented(
            gbt.SIDE_EFFECT,
            f"assignment to {cls.__name__}.{name} runs its descriptor"
            f" ({type(static).__name__}.__set__)",
        )


def is_private(var: VariableTracker) -> bool:
    """Whether ``var`` is a private copy (:attr:`UserDefinedObjectVariable.private`)."""
    return isinstance(var, UserDefinedObjectVariable) and var.private


def private_setattr(tx, obj: UserDefinedObjectVariable, name: str, value: VariableTracker | None):
    """``setattr(obj, name, value)`` (``value`` None: ``delattr(obj, name)``) on a private
    copy. ``object``'s method, or one of :data:`_TRUSTED_WRITERS`, writes the copy for real,
    which is unobservable outside the capture: nothing else holds the copy, and an output or
    a graph break that would hand the written copy out is refused
    (:func:`refuse_mutated_private`). Another class's method written in Python is inlined.
    The value must be a constant of the capture."""
    slot = "__setattr__" if value is not None else "__delattr__"
    method = class_lookup(type(obj.value), slot)
    if method is getattr(object, slot):
        _object_write(obj, name, value, getattr(object, slot))
    elif getattr(method, "__module__", None) in _TRUSTED_WRITERS:
        _object_write(obj, name, value, setattr if value is not None else delattr)
    elif isinstance(method, types.FunctionType):
        args = [obj, ConstantVariable(name)] + ([value] if value is not None else [])
        return tx.inline_user_function_obj(method, args, {})
    else:
        unimplemented(
            gbt.NON_PYTHON_CALL, f"{slot} of {type(obj.value).__name__} on a copied object"
        )
    return ConstantVariable(None)


# Modules whose ``__setattr__``/``__delattr__`` act on the object alone, run for real on a
# private copy: HF's strict dataclasses validate the value and then call the original
# ``__setattr__`` (huggingface_hub/dataclasses.py, ``__strict_setattr__``), and
# ``PreTrainedConfig.__setattr__`` maps the name through ``attribute_map``. Tracing the
# validators (typing introspection over dicts keyed by typing special forms) is not modelled.
_TRUSTED_WRITERS = frozenset({"huggingface_hub.dataclasses", "transformers.configuration_utils"})


def _object_write(obj: UserDefinedObjectVariable, name: str, value, write) -> None:
    """``write(copy, name[, value])`` on the private copy, for real; the value must be a
    constant of the capture."""
    args = [obj.value, name]
    if value is not None:
        if not value.is_python_constant():
            unimplemented(gbt.VALUE_NOT_CONSTANT, f"storing {value} on a copied object")
        args.append(value.as_python_constant())
    try:
        write(*args)
    except Exception as e:  # noqa: BLE001 - the frame runs unmodified instead
        unimplemented(
            gbt.EXCEPTION, f"writing {name!r} of a copied {type(obj.value).__name__}: {e}"
        )
    obj.mutated = True


def refuse_mutated_private(var: VariableTracker) -> None:
    """Graph break when ``var`` is a private copy written during capture, or a module built
    during capture (:func:`_construct_leaf_module`): handing it out (an output, a local live
    across a break) would give every call the one object this capture made, where eager
    gives each call its own."""
    if isinstance(var, UserDefinedObjectVariable) and var.mutated:
        unimplemented(
            gbt.ESCAPING_VALUE,
            f"a copied {type(var.value).__name__} modified in the captured code escapes",
        )
    if getattr(var, "constructed", False):
        unimplemented(
            gbt.ESCAPING_VALUE, f"an nn.Module built in the captured code ({var}) escapes"
        )


class PrivateObjectMethodVariable(VariableTracker):
    """``super().__setattr__``/``__delattr__``/``__getattribute__`` resolving to
    ``object``'s, on a private copy."""

    def __init__(self, obj: UserDefinedObjectVariable, name: str) -> None:
        super().__init__()
        self.obj = obj
        self.name = name

    def call_function(self, tx, args, kwargs):
        from .builder import wrap_constant_or_object

        if kwargs or not args or not args[0].is_python_constant():
            unimplemented(gbt.UNMODELLED_VALUE, f"super().{self.name} with these arguments")
        attr = args[0].as_python_constant()
        if self.name == "__getattribute__" and len(args) == 1:
            try:
                return wrap_constant_or_object(object.__getattribute__(self.obj.value, attr))
            except AttributeError:
                unimplemented(
                    gbt.EXCEPTION,
                    f"{type(self.obj.value).__name__} object has no attribute {attr!r}",
                )
        if self.name == "__setattr__" and len(args) == 2:
            _object_write(self.obj, attr, args[1], object.__setattr__)
            return ConstantVariable(None)
        if self.name == "__delattr__" and len(args) == 1:
            _object_write(self.obj, attr, None, object.__delattr__)
            return ConstantVariable(None)
        unimplemented(gbt.UNMODELLED_VALUE, f"super().{self.name} with these arguments")


# --- guarding all of an object's state (copy.deepcopy, dataclasses.asdict folded) ----------

_STATE_LEAVES = (int, float, complex, str, bytes, bool, type(None))
# Objects copy.deepcopy returns as they are (copy._deepcopy_atomic, or a __reduce__ to a
# name): guarded by identity.
_STATE_ATOMS = (
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.ModuleType,
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
)
# Hooks through which copying or converting an object runs code of its class.
_COPY_HOOKS = (
    "__deepcopy__",
    "__copy__",
    "__reduce__",
    "__reduce_ex__",
    "__getstate__",
    "__setstate__",
    "__getnewargs__",
    "__getnewargs_ex__",
)
_MAX_STATE_GUARDS = 4096


def state_guards(value, source) -> list[tuple[str, object, object]] | None:
    """The guards that pin down everything ``copy.deepcopy(value)`` (or
    ``dataclasses.asdict``/``astuple``/``replace``) reads of ``value`` at ``source``:
    ``(method, source, value)`` for the guard set's methods ``equals_match`` (exact type
    and ``==``), ``id_match``, ``type_match``, ``len_match`` and ``dict_keys_match``. An object is taken
    through its instance ``__dict__`` (read with ``[]``, not ``getattr``) when its class
    runs no code of its own while copied (no copy or pickle hook, no ``__slots__``, plain
    attribute access); containers item by item. None when something else is reached (a
    tensor, a module, an object with hooks, a cycle) or the state needs more than
    ``_MAX_STATE_GUARDS`` guards: the caller must not fold."""
    out: list[tuple[str, object, object]] = []
    seen: set[int] = set()

    def visit(v, src) -> bool:
        if len(out) > _MAX_STATE_GUARDS:
            return False
        t = type(v)
        if t in _STATE_LEAVES:
            out.append(("equals_match", src, v))
            return True
        if isinstance(v, (*_STATE_ATOMS, enum.Enum)):
            out.append(("id_match", src, v))
            return True
        if id(v) in seen:
            return False  # shared or cyclic: deepcopy's memo would matter
        seen.add(id(v))
        if t in (tuple, list):
            out.append(("len_match", src, v))
            return all(visit(item, ItemSource(src, i)) for i, item in enumerate(v))
        if t is dict:
            if not all(type(k) in (str, int) for k in v):
                return False
            out.append(("dict_keys_match", src, v))
            return all(visit(item, ItemSource(src, k)) for k, item in v.items())
        if isinstance(v, (torch.Tensor, torch.nn.Module)) or not hasattr(v, "__dict__"):
            return False
        if any(class_lookup(t, h) not in (None, class_lookup(object, h)) for h in _COPY_HOOKS):
            return False
        if "__slots__" in vars(t) or any("__slots__" in vars(k) for k in t.__mro__[1:-1]):
            return False
        d = v.__dict__
        if type(d) is not dict or not all(type(k) is str for k in d):
            return False
        dict_source = AttrSource(src, "__dict__")
        out.append(("type_match", src, v))
        out.append(("dict_keys_match", dict_source, d))
        return all(visit(item, ItemSource(dict_source, k)) for k, item in d.items())

    if source is None or not visit(value, source):
        return None
    return out


def guard_state(tx, value, source) -> bool:
    """Installs :func:`state_guards` of ``value``; False (nothing installed) when the state
    cannot be guarded."""
    found = state_guards(value, source)
    if found is None:
        return False
    guards = tx.output.guards
    for method, src, expected in found:
        getattr(guards, method)(src, expected)
    return True
