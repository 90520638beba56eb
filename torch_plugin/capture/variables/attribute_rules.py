"""Attribute reads and writes that follow Python's lookup rules beyond plain data (issue #31).

Each rule answers one attribute operation exactly as CPython would, or raises Unsupported
(a graph break) where the answer is not known at capture time:

- **custom attributes on tensors** (``t.foo = 1``): on a graph input (a tensor with a
  source) the write is a recorded side effect, replayed on the tensor found at the source
  after the graph; later reads in the frame see it. On a tensor the graph computes, the
  attributes live on its variable (``TensorVariable.py_attrs``): such a tensor leaving the
  frame (returned, live at a graph break) is a graph break, since the graph's output is a
  new tensor object. Names the tensor's class defines (``data``, ``shape``, properties) are
  never shadowed.
- **``.grad``**: a graph input's ``.grad`` is read for real and guarded at ``x.grad``
  (None, or a tensor input); a tensor the graph computes that does not require grad has
  ``.grad`` None (eager warns only for non-leaves that require grad: those still break).
- **``del obj.name``** on a user object seen through a source: a recorded deletion
  (replayed by ``delattr``), when the instance ``__dict__`` holds the name (guarded by its
  keys) and the class has no ``__delattr__`` nor a descriptor of that name.
- **class attributes written in the frame** (``Cls.count += 1``): a recorded ``setattr``
  on the class (classes are guarded by identity), replayed after the graph; reads of the
  class attribute see the new value, and an instance read that would find it through the
  MRO is a graph break (capture never writes the real class before the graph runs).
- **slots and descriptors**: a ``__slots__`` member of an object with a source is read for
  real and guarded at its source; a user descriptor whose ``__get__`` is a Python function
  is inlined as ``type(d).__get__(d, obj, type(obj))``.
- **function attributes** (``fn.scale``): read from the function's ``__dict__``, guarded at
  ``fn.scale`` through the function's source.
"""

from __future__ import annotations

import types

import torch

from .. import graph_break_types as gbt
from ..exc import unimplemented
from ..sources import AttrSource
from .base import VariableTracker
from .constant import ConstantVariable
from .lists import TupleVariable


def _class_defines(cls: type, name: str) -> bool:
    from .user_defined import class_lookup

    return class_lookup(cls, name) is not None


def tensor_store_attr(tx, obj, name: str, value: VariableTracker) -> None:
    """``t.name = value`` on a tensor variable (not ``requires_grad``)."""
    from .tensor import refuse_ambiguous_identity

    refuse_ambiguous_identity(obj, f"assignment to attribute {name!r}")
    cls = obj.python_type()
    if _class_defines(cls, name) or type(cls).__setattr__ is not type.__setattr__:
        unimplemented(gbt.SIDE_EFFECT, f"assignment to tensor attribute {name!r}")
    if getattr(cls, "__setattr__", object.__setattr__) is not object.__setattr__:
        unimplemented(gbt.SIDE_EFFECT, f"assignment to attribute {name!r} of a {cls.__name__}")
    if obj.source is not None:
        real = tx.output.real_tensor(obj)
        if real is None:
            unimplemented(gbt.SIDE_EFFECT, f"assignment to attribute {name!r} of a tensor")
        tx.output.side_effects.store_attr(real, name, value, obj.source)
        return
    attrs = obj.__dict__.setdefault("py_attrs", {})
    attrs[name] = value


def tensor_pending_attr(tx, obj, name: str) -> VariableTracker | None:
    """The value ``obj.name`` was given earlier in the frame, or None. On a tensor whose
    identity depends on a branch (``TensorVariable.ambiguous_identity``), a value given to
    the tensor of one way is a graph break."""
    if getattr(obj, "ambiguous_identity", False):
        for way in obj.ways:
            if tensor_pending_attr(tx, way, name) is not None:
                from .tensor import refuse_ambiguous_identity

                refuse_ambiguous_identity(obj, f"reading attribute {name!r}")
    attrs = obj.__dict__.get("py_attrs")
    if attrs and name in attrs:
        return attrs[name]
    if obj.source is not None and tx.output.side_effects:
        real = tx.output.real_tensor(obj)
        if real is not None:
            return tx.output.side_effects.pending_attr(real, name)
    return None


def check_tensor_escapes(var: VariableTracker) -> None:
    """A graph-computed tensor carrying Python attributes cannot leave the frame: the
    graph's output is another tensor object."""
    if var.__dict__.get("py_attrs"):
        unimplemented(
            gbt.ESCAPING_VALUE, "a tensor with attributes set in the frame leaves the frame"
        )


def tensor_grad(tx, obj) -> VariableTracker:
    """``t.grad`` (see the module docstring)."""
    from .builder import wrap_value

    if obj.source is not None:
        real = tx.output.real_tensor(obj)
        if real is not None and obj.node.op == "placeholder":
            return wrap_value(tx, real.grad, AttrSource(obj.source, "grad"))
        unimplemented(gbt.UNMODELLED_VALUE, "reading tensor.grad")
    if obj.example.requires_grad:
        unimplemented(gbt.UNMODELLED_VALUE, "reading .grad of a tensor that requires grad")
    return ConstantVariable(None)


def delete_object_attr(tx, obj, name: str) -> None:
    """``del obj.name`` on a user object variable with a source."""
    from .user_defined import UserDefinedObjectVariable

    if not isinstance(obj, UserDefinedObjectVariable) or obj.source is None:
        unimplemented(gbt.SIDE_EFFECT, f"deletion of attribute {name!r} (side effect)")
    real = obj.value
    cls = type(real)
    if cls.__delattr__ is not object.__delattr__ or _class_defines(cls, name):
        unimplemented(gbt.SIDE_EFFECT, f"deletion of attribute {name!r} of a {cls.__name__}")
    effects = tx.output.side_effects
    pending = effects.pending_attr(real, name)
    inst_dict = getattr(real, "__dict__", None)
    existed = inst_dict is not None and name in inst_dict
    if pending is None and not existed:
        unimplemented(gbt.EXCEPTION, f"{cls.__name__} object has no attribute {name!r}")
    if inst_dict is not None:
        tx.output.guards.dict_keys_match(AttrSource(obj.source, "__dict__"), inst_dict)
    # An attribute first set in this frame is deleted by dropping the pending write: the
    # real object never had it, and ``delattr`` on it after the graph would raise.
    effects.delete_attr(real, name, obj.source, existed=existed)


def class_store_attr(tx, cls_var, name: str, value: VariableTracker) -> None:
    """``Cls.name = value`` on a class variable: a side effect replayed after the graph."""
    cls = cls_var.value
    if type(cls) is not type:  # a metaclass may intercept the write
        unimplemented(gbt.SIDE_EFFECT, f"assignment to attribute {name!r} of class {cls}")
    static = cls.__dict__.get(name)
    if static is not None and hasattr(type(static), "__set__"):
        unimplemented(gbt.SIDE_EFFECT, f"assignment to descriptor {name!r} of class {cls}")
    tx.output.side_effects.store_attr(cls, name, value)


def class_pending(tx, cls: type, name: str) -> VariableTracker | None:
    """The value a class attribute was given earlier in the frame (``Cls.name = v``) when
    reading it through ``cls`` finds that write first in the MRO, else None."""
    effects = tx.output.side_effects
    if not effects:
        return None
    for klass in cls.__mro__:
        pending = effects.pending_attr(klass, name)
        if pending is not None:
            return pending
        if name in klass.__dict__:
            return None
    return None


def check_instance_read(tx, obj_type: type, name: str) -> None:
    """An instance read that reaches a class attribute written earlier in the frame: a
    graph break (the instance may shadow it; see the module docstring)."""
    if class_pending(tx, obj_type, name) is not None:
        unimplemented(gbt.SIDE_EFFECT, f"reading {name!r} through an instance after a class write")


def descriptor_attribute(tx, obj_var, static, name: str) -> VariableTracker | None:
    """A ``__slots__`` member or a user descriptor on an instance, or None (not handled)."""
    from .builder import wrap_value

    if isinstance(static, types.MemberDescriptorType):
        source = getattr(obj_var, "source", None)
        real = getattr(obj_var, "value", None)
        if source is None or real is None or static.__objclass__ not in type(real).__mro__:
            return None
        try:
            value = getattr(real, name)
        except AttributeError:
            unimplemented(gbt.EXCEPTION, f"slot {name!r} of {type(real).__name__} is unset")
        return wrap_value(tx, value, AttrSource(source, name))
    if name == "__dict__" and isinstance(static, types.GetSetDescriptorType):
        return instance_dict(tx, obj_var)
    getter = getattr(type(static), "__get__", None)
    if isinstance(getter, types.FunctionType) and not isinstance(static, torch.nn.Module):
        from ..sources import ObjectSource
        from .user_defined import UserDefinedClassVariable

        cls = obj_var.python_type()
        # the descriptor's own state is read through a source, so it is guarded
        desc = wrap_value(tx, static, ObjectSource(static, f"{cls.__name__}.{name}"))
        args = [desc, obj_var, UserDefinedClassVariable(cls)]
        return tx.inline_user_function_obj(getter, args, {})
    return None


def instance_dict(tx, obj_var) -> VariableTracker | None:
    """``obj.__dict__`` (and ``vars(obj)``) of a user object read through a source, or of
    an object built in the frame: the frame's one variable of that dict
    (:class:`InstanceDictVariable`, :class:`NewObjectDictVariable`), or None."""
    from .new_object import NewObjectVariable
    from .user_defined import UserDefinedObjectVariable

    if isinstance(obj_var, NewObjectVariable):
        return NewObjectDictVariable(obj_var)
    real = getattr(obj_var, "value", None)
    if (
        not isinstance(obj_var, UserDefinedObjectVariable)
        or obj_var.source is None
        or getattr(obj_var, "private", False)
        or type(getattr(real, "__dict__", None)) is not dict
    ):
        return None
    known = tx.output.side_effects.dict_view(real)
    if known is not None:
        return known  # ``o.__dict__ is o.__dict__``: one dict, one variable
    return InstanceDictVariable(tx, obj_var, AttrSource(obj_var.source, "__dict__"))


def _instance_dict_base():
    from .dicts import ConstDictVariable

    return ConstDictVariable


def check_dict_write(cls: type, key) -> str:
    """The attribute name ``obj.__dict__[key] = value`` writes, when a later ``obj.key``
    in the frame reads exactly that value (the capture answers such reads from its pending
    writes): ``key`` is a str, the class has no data descriptor at that name (it would
    take the read over), and reads attributes the default way. Else a graph break."""
    from .user_defined import class_lookup

    if type(key) is not str:
        unimplemented(gbt.SIDE_EFFECT, f"__dict__[{key!r}]: a key that is not a str")
    static = class_lookup(cls, key)
    if static is not None and (
        hasattr(type(static), "__set__") or hasattr(type(static), "__delete__")
    ):
        unimplemented(
            gbt.SIDE_EFFECT,
            f"__dict__[{key!r}] of a {cls.__name__}: its class has a data descriptor there",
        )
    if class_lookup(cls, "__getattribute__") not in (None, object.__getattribute__):
        unimplemented(
            gbt.SIDE_EFFECT, f"__dict__ write on a {cls.__name__} (custom __getattribute__)"
        )
    return key


class _DictWrites:
    """The dict methods that write, for a variable modelling an instance ``__dict__``, in
    terms of :meth:`setitem` and :meth:`delitem` (each subclass's one way to write)."""

    def _write_call(self, tx, name, args, kwargs):
        from .dicts import ConstDictVariable, dict_key

        entries = self.items
        if name == "__setitem__" and len(args) == 2 and not kwargs:
            self.setitem(tx, dict_key(args[0]), args[1])
            return ConstantVariable(None)
        if name == "__delitem__" and len(args) == 1 and not kwargs:
            self.delitem(tx, dict_key(args[0]))
            return ConstantVariable(None)
        if name in ("update", "__ior__"):
            # the pairs as dict.update reads them (a temporary dict of the frame), then
            # written one at a time in that order, as dict_merge does
            pairs = ConstDictVariable({}, mutable_local=True)
            pairs.call_method(tx, "update", args, kwargs)
            for k, v in pairs.items.items():
                self.setitem(tx, k, v)
            return self if name == "__ior__" else ConstantVariable(None)
        if name == "setdefault" and 1 <= len(args) <= 2 and not kwargs:
            k = dict_key(args[0])
            if k not in entries:
                self.setitem(tx, k, args[1] if len(args) == 2 else ConstantVariable(None))
            return entries[k]
        if name == "pop" and 1 <= len(args) <= 2 and not kwargs:
            k = dict_key(args[0])
            if k in entries:
                value = entries[k]
                self.delitem(tx, k)
                return value
            if len(args) == 2:
                return args[1]
            unimplemented(gbt.EXCEPTION, f"__dict__.pop of missing key {k!r} (KeyError)")
        if name == "popitem" and not args and not kwargs:
            if not entries:
                unimplemented(gbt.EXCEPTION, "__dict__.popitem(): dictionary is empty")
            k = next(reversed(entries))
            value = entries[k]
            self.delitem(tx, k)
            return TupleVariable([ConstantVariable(k), value])
        if name == "clear" and not args and not kwargs:
            for k in list(entries):
                self.delitem(tx, k)
            return ConstantVariable(None)
        unimplemented(gbt.SIDE_EFFECT, f"__dict__.{name}() with these arguments")


class InstanceDictVariable(_DictWrites, _instance_dict_base()):
    """An instance's ``__dict__`` read in the frame (``obj.__dict__``, ``vars(obj)``) of a
    user object with a source: the real dict's entries (keys guarded, values read through
    item sources) with the frame's pending attribute writes and deletions applied, in the
    order CPython's dict would hold them. One variable per object and capture
    (``SideEffects.register_dict_view``): attribute writes later in the frame update it,
    and writes through it (``d[k] = v``, ``del d[k]``, ``update``, ``setdefault``, ``pop``,
    ``popitem``, ``clear``, ``|=``) are attribute side effects replayed as the same dict
    operations on the object found at the source (no ``__setattr__``, no descriptor runs);
    later reads of ``obj.k`` in the frame see them (:func:`check_dict_write`). Returned or
    live at a break it is the same object (its source, read after the replay)."""

    def __init__(self, tx, obj_var, source) -> None:
        from ..sources import ItemSource
        from .builder import wrap_value

        real = obj_var.value
        self.obj = real
        self.obj_source = obj_var.source
        self.effects = tx.output.side_effects
        d = real.__dict__
        tx.output.guards.dict_keys_match(source, d)
        effects = self.effects.attr_effects(real)
        written = {name for _, name, _ in effects}
        items = {
            k: (None if k in written else wrap_value(tx, v, ItemSource(source, k)))
            for k, v in d.items()
        }
        for kind, name, value in effects:  # in the order the dict saw them
            if kind in ("delattr", "dictdel", "resetattr", "redictset"):
                items.pop(name, None)
            if kind not in ("delattr", "dictdel"):
                items[name] = value
        super().__init__(items, source)
        self.same_object_at_source = True
        self.effects.register_dict_view(real, self)

    def setitem(self, tx, key, value: VariableTracker) -> None:
        from .object_copies import refuse_mutated_private

        name = check_dict_write(type(self.obj), key)
        refuse_mutated_private(value)
        self.effects.store_attr(self.obj, name, value, self.obj_source, via_dict=True)

    def delitem(self, tx, key) -> None:
        if key not in self.items:
            unimplemented(gbt.EXCEPTION, f"del __dict__[{key!r}]: no such key (KeyError)")
        existed = key in self.obj.__dict__  # guarded (DICT_KEYS_MATCH at the source)
        self.effects.delete_attr(self.obj, key, self.obj_source, existed, via_dict=True)

    def call_method(self, tx, name, args, kwargs):
        if name in _DICT_WRITES:
            return self._write_call(tx, name, args, kwargs)
        return super().call_method(tx, name, args, kwargs)


_DICT_WRITES = frozenset(
    {"__setitem__", "__delitem__", "update", "pop", "popitem", "clear", "setdefault", "__ior__"}
)


class NewObjectDictVariable(_DictWrites, _instance_dict_base()):
    """``obj.__dict__`` of an object built in the frame (new_object.py): its attribute
    table itself (``NewObjectVariable.attrs``), so writes either way are seen both ways.
    Writes through it follow :func:`check_dict_write`. It cannot leave the frame (returned,
    stored, live at a break): it would have to be the dict of the object built then."""

    def __init__(self, obj_var) -> None:
        super().__init__({}, mutable_local=True)
        self.obj_var = obj_var
        self.items = obj_var.attrs  # the same KeyEntries: one dict
        self.escape_refused = f"the __dict__ of a {obj_var.cls.__name__} built in the frame"

    def setitem(self, tx, key, value: VariableTracker) -> None:
        self.items[check_dict_write(self.obj_var.cls, key)] = value

    def delitem(self, tx, key) -> None:
        if key not in self.items:
            unimplemented(gbt.EXCEPTION, f"del __dict__[{key!r}]: no such key (KeyError)")
        del self.items[key]

    def call_method(self, tx, name, args, kwargs):
        if name in _DICT_WRITES:
            return self._write_call(tx, name, args, kwargs)
        return super().call_method(tx, name, args, kwargs)


def descriptor_store(tx, obj_var, name: str, value: VariableTracker) -> bool:
    """``obj.name = value`` on a user object whose class has, at ``name``, a property with a
    Python setter or a data descriptor whose ``__set__`` is Python: that setter is inlined
    (what it does is traced like any code: its own attribute writes are side effects).
    False when neither applies (the caller's rules then decide)."""
    from .builder import wrap_value
    from .user_defined import UserDefinedObjectVariable, class_lookup

    real = getattr(obj_var, "value", None)
    if not isinstance(obj_var, UserDefinedObjectVariable) or real is None:
        return False
    cls = type(real)
    if class_lookup(cls, "__setattr__") is not object.__setattr__:
        return False
    static = class_lookup(cls, name)
    if isinstance(static, property):
        if not isinstance(static.fset, types.FunctionType):
            return False
        tx.inline_user_function_obj(static.fset, [obj_var, value], {})
        return True
    setter = getattr(type(static), "__set__", None)
    if not isinstance(setter, types.FunctionType) or isinstance(static, torch.nn.Module):
        return False
    from ..sources import ObjectSource

    desc = wrap_value(tx, static, ObjectSource(static, f"{cls.__name__}.{name}"))
    tx.inline_user_function_obj(setter, [desc, obj_var, value], {})
    return True


def function_attribute(tx, fn_var, name: str) -> VariableTracker | None:
    """``fn.name`` for a function attribute in ``fn.__dict__`` (needs the function's
    source for the guard), or None."""
    from .builder import wrap_value

    fn = getattr(fn_var, "fn", None)
    source = getattr(fn_var, "source", None)
    if fn is None or source is None or name not in getattr(fn, "__dict__", {}):
        return None
    return wrap_value(tx, fn.__dict__[name], AttrSource(source, name))
