"""Python builtins (len, isinstance, getattr, range, zip, ...) and the operator module.

Key class: :class:`BuiltinVariable`. Each builtin has one handler method named
``call_<name>``. Operators on tensors become graph nodes; on constants they run for real.
Builtins with effects outside the program state the translator models (print, open, input)
are unsupported: the frame runs unmodified; ``setattr``/``delattr`` go where the
``STORE_ATTR``/``DELETE_ATTR`` opcodes go (tracked side effects, objects built or copied in
the captured code).
"""

from __future__ import annotations

import builtins
import math
import operator

import torch

from .. import graph_break_types as gbt
from ..dynamic_shapes import has_symbolic, specialize_deep
from ..exc import unimplemented
from . import builtin_table
from .base import CallableVariable
from .constant import ConstantVariable, is_immutable
from .container_iterators import (
    EnumerateVariable,
    FilterVariable,
    MapVariable,
    ZipVariable,
    make_reversed,
)
from .dicts import ConstDictVariable
from .iterators import (
    IteratorVariable,
    as_iterator,
)
from .lists import BaseListVariable, ListVariable, TupleVariable

_UNSUPPORTED = {
    print,
    input,
    open,
    exec,
    eval,
    compile,
    globals,
    locals,
    breakpoint,
    id,
    hash,
}
_PURE_CONSTANT_FNS = {
    abs,
    round,
    divmod,
    pow,
    chr,
    ord,
    bin,
    hex,
    oct,
    repr,
    ascii,
    format,
    callable,
    min,
    max,
    sum,
    all,
    any,
    sorted,
    str,
    int,
    float,
    bool,
    complex,
    bytes,
    frozenset,
    slice,
    range,
}


# Builtins whose result is text or a number's digits: a symbolic argument must be concrete
_TEXT_FNS = {str, repr, ascii, format, bin, hex, oct, chr, bytes}


def _symbolic_ints(args) -> bool:
    """Two int arguments, at least one symbolic (divmod computes as // and %)."""
    return (
        len(args) == 2
        and all(isinstance(v, (int, torch.SymInt)) and not isinstance(v, bool) for v in args)
        and has_symbolic(args)
    )


def _all_const(args, kwargs) -> bool:
    return all(a.is_python_constant() for a in args) and all(
        v.is_python_constant() for v in kwargs.values()
    )


def _consts(args, kwargs):
    return [a.as_python_constant() for a in args], {
        k: v.as_python_constant() for k, v in kwargs.items()
    }


class BuiltinVariable(CallableVariable):
    """A builtin function or type, or a function of the operator/math modules."""

    def truthiness(self, tx) -> bool:
        return True

    def call_function(self, tx, args, kwargs):
        from .builder import wrap_constant_or_object
        from .tensor import TensorVariable

        fn = self.fn
        if fn in _UNSUPPORTED:
            unimplemented(
                gbt.LOGGING if fn is print else gbt.UNSUPPORTED_BUILTIN,
                f"call to builtin {fn.__name__}()",
            )
        name = getattr(fn, "__name__", "")
        handler = (
            getattr(self, f"call_{name}", None) if getattr(builtins, name, None) is fn else None
        )
        if handler is not None:
            result = handler(tx, *args, **kwargs)
            if result is not None:
                return result
        if fn in _PURE_CONSTANT_FNS:  # never run a user object's methods at capture time
            items = builtin_table.user_code_args(tx, fn, list(args))
            if any(n is not o for n, o in zip(items, args)):
                return self.call_function(tx, items, kwargs)
        if getattr(operator, name, None) is fn or getattr(math, name, None) is fn:
            if any(isinstance(a, TensorVariable) for a in args):
                return tx.output.call_function(tx, fn, list(args), dict(kwargs))
        if _all_const(args, kwargs) and (
            fn in _PURE_CONSTANT_FNS
            or getattr(operator, name, None) is fn
            or getattr(math, name, None) is fn
        ):
            a, k = _consts(args, kwargs)
            if fn in _TEXT_FNS or (fn is divmod and not _symbolic_ints(a)):
                # the text of a symbolic size is its symbol's name (s0); divmod has no
                # SymFloat form: the concrete values, under a guard
                a, k = specialize_deep(a), specialize_deep(k)
            elif fn is divmod:
                return wrap_constant_or_object((a[0] // a[1], a[0] % a[1]))
            value = fn(*a, **k)
            if is_immutable(value) or isinstance(value, (list, dict)):
                return wrap_constant_or_object(value)
        unimplemented(gbt.UNSUPPORTED_BUILTIN, f"builtin {name}() with arguments {args}")

    # --- handlers: return None to fall through to the generic constant path ------------
    def call_len(self, tx, obj):
        if isinstance(obj, ConstantVariable):
            return ConstantVariable(len(obj.value))
        return obj.call_method(tx, "__len__", [], {})

    def call_isinstance(self, tx, obj, cls):
        classes = cls.as_python_constant()
        try:
            t = obj.python_type()
        except Exception:
            unimplemented(gbt.UNSUPPORTED_BUILTIN, f"isinstance() on {obj}")
        return ConstantVariable(issubclass(t, classes))

    def call_issubclass(self, tx, a, b):
        return ConstantVariable(issubclass(a.as_python_constant(), b.as_python_constant()))

    def call_type(self, tx, obj, *rest):
        from .builder import wrap_constant_or_object

        if rest:
            unimplemented(gbt.OBJECT_CONSTRUCTION, "type() with three arguments")
        return wrap_constant_or_object(obj.python_type())

    def call_getattr(self, tx, obj, name, *default):
        attr = name.as_python_constant()
        if default:
            try:
                return tx.getattr(obj, attr)
            except Exception:
                if _hasattr(tx, obj, attr) is False:
                    return default[0]
                raise
        return tx.getattr(obj, attr)

    def call_setattr(self, tx, obj, name, value):
        if not name.is_python_constant():
            unimplemented(gbt.VALUE_NOT_CONSTANT, "setattr() with a name not known at capture")
        tx.store_attr(obj, name.as_python_constant(), value)
        return ConstantVariable(None)

    def call_delattr(self, tx, obj, name):
        if not name.is_python_constant():
            unimplemented(gbt.VALUE_NOT_CONSTANT, "delattr() with a name not known at capture")
        tx.delete_attr(obj, name.as_python_constant())
        return ConstantVariable(None)

    def call_vars(self, tx, *args):
        if len(args) != 1:  # vars(): the frame's locals
            unimplemented(gbt.UNSUPPORTED_BUILTIN, "vars() without an argument")
        return tx.getattr(args[0], "__dict__")

    def call_hasattr(self, tx, obj, name):
        result = _hasattr(tx, obj, name.as_python_constant())
        if result is None:
            unimplemented(gbt.UNSUPPORTED_BUILTIN, f"hasattr() on {obj}")
        return ConstantVariable(result)

    def call_tuple(self, tx, *args):
        if not args:
            return TupleVariable([])
        return TupleVariable(args[0].unpack_var_sequence(tx))

    def call_list(self, tx, *args):
        if not args:
            return ListVariable([], mutable_local=True)
        return ListVariable(args[0].unpack_var_sequence(tx), mutable_local=True)

    def call_dict(self, tx, *args, **kwargs):
        items = {}
        if args:
            src = args[0]
            if isinstance(src, ConstDictVariable):
                items.update(src.items)
            else:
                for pair in src.unpack_var_sequence(tx):
                    k, v = pair.unpack_var_sequence(tx)
                    items[k.as_python_constant()] = v
        items.update(kwargs)
        return ConstDictVariable(items, mutable_local=True)

    def call_iter(self, tx, obj):
        return as_iterator(tx, obj)

    def call_next(self, tx, it, *default):
        if not isinstance(it, IteratorVariable):
            unimplemented(gbt.UNSUPPORTED_BUILTIN, f"next() on {it}")
        item = it.next_item()
        if item is None:
            if default:
                return default[0]
            unimplemented(gbt.EXCEPTION, "next() on an exhausted iterator (StopIteration)")
        return item

    # enumerate / zip / map / filter pull from their arguments' iterators one item at a time
    # (container_iterators.py), as CPython does: a list mutated in the loop is seen, map's
    # function runs per item
    def call_enumerate(self, tx, seq, start=None):
        first = start.as_python_constant() if start is not None else 0
        return EnumerateVariable(as_iterator(tx, seq), first)

    def call_zip(self, tx, *seqs, **kwargs):
        if set(kwargs) - {"strict"}:
            unimplemented(gbt.EXCEPTION, f"zip() got unexpected keyword arguments {set(kwargs)}")
        strict = kwargs.get("strict")
        if strict is not None and not strict.is_python_constant():
            unimplemented(gbt.VALUE_NOT_CONSTANT, "zip(strict=...) not known at capture")
        return ZipVariable(
            [as_iterator(tx, s) for s in seqs],
            bool(strict.as_python_constant()) if strict is not None else False,
        )

    def call_reversed(self, tx, seq):
        return make_reversed(tx, seq)

    def call_map(self, tx, fn, *seqs):
        return MapVariable(tx, fn, [as_iterator(tx, s) for s in seqs])

    def call_filter(self, tx, fn, seq):
        return FilterVariable(tx, fn, as_iterator(tx, seq))

    def call_range(self, tx, *args):
        if all(a.is_python_constant() for a in args):
            return ConstantVariable(range(*[a.as_python_constant() for a in args]))
        unimplemented(gbt.VALUE_NOT_CONSTANT, "range() with non-constant bounds")

    def call_bool(self, tx, *args):
        if not args:
            return ConstantVariable(False)
        return ConstantVariable(args[0].truthiness(tx))

    def call_any(self, tx, seq):
        # item by item: any() stops at the first true item (a generator runs no further)
        it = as_iterator(tx, seq)
        while (v := it.next_item()) is not None:
            if v.truthiness(tx):
                return ConstantVariable(True)
        return ConstantVariable(False)

    def call_all(self, tx, seq):
        it = as_iterator(tx, seq)
        while (v := it.next_item()) is not None:
            if not v.truthiness(tx):
                return ConstantVariable(False)
        return ConstantVariable(True)

    def call_sum(self, tx, seq, start=None):
        if seq.is_python_constant() and (start is None or start.is_python_constant()):
            return None
        items = seq.unpack_var_sequence(tx)
        total = start if start is not None else ConstantVariable(0)
        for item in items:
            total = tx.binary_op("+", total, item)
        return total

    def call_min(self, tx, *args, **kwargs):
        return self._minmax(tx, min, args, kwargs)

    def call_max(self, tx, *args, **kwargs):
        return self._minmax(tx, max, args, kwargs)

    def _minmax(self, tx, fn, args, kwargs):
        from .tensor import TensorVariable

        if kwargs:  # a key function may be user code: inlined, never run at capture time
            return builtin_table.call_minmax(tx, fn, args, kwargs)

        if not args:
            unimplemented(gbt.EXCEPTION, f"{fn.__name__} expected at least 1 argument")
        items = args[0].unpack_var_sequence(tx) if len(args) == 1 else list(args)
        if all(i.is_python_constant() for i in items):
            return ConstantVariable(fn(i.as_python_constant() for i in items))
        if any(isinstance(i, TensorVariable) for i in items):
            return builtin_table.pick_extreme(tx, fn, items, items)
        return None

    def call_super(self, tx, *args):
        from .user_defined import SuperVariable

        if len(args) == 2:
            return SuperVariable(args[0].as_python_constant(), args[1])
        if args:
            unimplemented(gbt.UNSUPPORTED_BUILTIN, "super() with one argument")
        return tx.zero_arg_super()

    def call_callable(self, tx, obj):
        from .functions import BaseUserFunctionVariable
        from .tensor import TensorVariable

        if isinstance(obj, TensorVariable):
            return ConstantVariable(False)
        from .partials import PartialVariable

        if isinstance(obj, (BaseUserFunctionVariable, PartialVariable)):
            return ConstantVariable(True)
        return None

    def call_object(self, tx, *args):
        unimplemented(gbt.OBJECT_CONSTRUCTION, "object() inside captured code")

    def var_getattr(self, tx, name):
        # ``dict.fromkeys``, ``set.add``, ``str.join``: attributes of a builtin type
        if isinstance(self.fn, type):
            attr = builtin_table.class_attr(self.fn, name)
            if attr is not None:
                return attr
        return super().var_getattr(tx, name)

    def call_sorted(self, tx, *args, **kwargs):
        if kwargs or not (args and args[0].is_python_constant()):
            return builtin_table.call_sorted(tx, list(args), kwargs)
        return None

    def call_set(self, tx, *args, **kwargs):
        return builtin_table.make_set(tx, set, list(args), kwargs)

    def call_frozenset(self, tx, *args, **kwargs):
        return builtin_table.make_set(tx, frozenset, list(args), kwargs)

    def call_abs(self, tx, *args):
        return builtin_table.abs_of(tx, args[0]) if len(args) == 1 else None

    def call_repr(self, tx, *args):
        return builtin_table.call_text(tx, repr, args[0]) if len(args) == 1 else None

    def call_str(self, tx, *args):
        if len(args) == 1:
            text = builtin_table.call_text(tx, str, args[0])
            if text is not None:
                return text
        if args and not args[0].is_python_constant():
            unimplemented(gbt.UNSUPPORTED_BUILTIN, f"str() of {args[0]}")

    def call_int(self, tx, *args):
        from .tensor import TensorVariable

        if args and isinstance(args[0], TensorVariable):
            unimplemented(gbt.DATA_DEPENDENT, "int() of a tensor reads tensor data")

    call_float = call_int

    def __repr__(self) -> str:
        return f"BuiltinVariable({getattr(self.fn, '__name__', self.fn)})"


def _hasattr(tx, obj, name):
    """True/False when hasattr can be decided without running user code, else None."""
    from .new_object import NewObjectVariable
    from .nn_module import NNModuleVariable
    from .partials import PartialVariable
    from .tensor import TensorVariable
    from .user_defined import UserDefinedObjectVariable, class_lookup

    if isinstance(obj, PartialVariable):
        return obj.has_attr(tx, name)
    if isinstance(obj, NewObjectVariable):
        if isinstance(class_lookup(obj.cls, name), property):
            # True when its getter runs (inlined); an exception, AttributeError included,
            # is not modelled: then CPython decides
            from ..exc import Unsupported

            try:
                obj.var_getattr(tx, name)
            except Unsupported:
                return None
            return True
        return obj.has_attr(name)
    if isinstance(obj, UserDefinedObjectVariable) and obj.source is not None:
        # Guarded on its type only: guard the answer, not the object's identity.
        return _user_object_hasattr(tx, obj, name)
    if isinstance(obj, NNModuleVariable) and obj.shared:
        return _shared_module_hasattr(tx, obj, name)
    if (
        isinstance(obj, (NNModuleVariable, UserDefinedObjectVariable, ConstantVariable))
        or obj.is_python_constant()
    ):
        value = obj.as_python_constant()
        return hasattr(value, name)
    if isinstance(obj, TensorVariable):
        return _tensor_hasattr(tx, obj, name)
    if isinstance(obj, (BaseListVariable, ConstDictVariable)):
        cls = obj.python_type()
        if hasattr(cls, name):
            return True
        if obj.source is not None and getattr(cls, "__dictoffset__", 0):
            # a subclass instance from the inputs (a named tuple subclass without
            # __slots__) may carry instance attributes, which the variable does not model
            return None
        return False
    return None


def _tensor_hasattr(tx, obj, name: str):
    """``hasattr`` on a tensor, answered as CPython looks the name up on the real tensor
    (never from its FakeTensor, whose class and instance attributes differ: ``fake_mode``).

    The tensor's class (``torch.Tensor``, or ``nn.Parameter``) is fixed by its guard (or by
    the graph, for a value computed in it): a method or other non-data attribute there is
    True. A data descriptor (``getset`` or property: ``__cuda_array_interface__``, ``mT``)
    runs its getter on the example, whose metadata (dtype, device, shape, requires_grad) the
    tensor's guard fixes: AttributeError is False, another exception (eager raises it) a
    graph break. Otherwise the instance ``__dict__`` decides: a graph input's or a
    parameter's real ``__dict__`` (``x.test = None`` before the call), guarded with
    ``DICT_KEYS_MATCH`` (True) or ``NOT_IN_DICT`` (False); a tensor computed in the graph is
    a new object with an empty one. None (a graph break) where the answer cannot be
    guarded."""
    from ..sources import AttrSource
    from .attribute_rules import tensor_pending_attr
    from .user_defined import class_lookup

    if obj.ambiguous_identity:
        # one of several objects (a branch on tensor data): the answer each of them gives,
        # when they agree and none has the name set in the frame
        answers = {
            None
            if tensor_pending_attr(tx, way, name) is not None
            else _tensor_hasattr(tx, way, name)
            for way in obj.ways
        }
        return answers.pop() if len(answers) == 1 else None
    real = tx.output.real_tensor(obj)
    cls = type(real) if real is not None else torch.Tensor
    if any(name in klass.__dict__ for klass in cls.__mro__):
        attr = class_lookup(cls, name)
        descr_type = type(attr)
        if not (hasattr(descr_type, "__set__") or hasattr(descr_type, "__delete__")):
            return True
        example = real if real is not None else obj.example
        try:
            attr.__get__(example, cls)
        except AttributeError:
            return False
        except Exception:  # noqa: BLE001 - eager raises it: CPython decides (graph break)
            return None
        return True
    if real is None:
        if obj.node.op in ("placeholder", "get_attr"):
            return None
        return False  # a new tensor: no instance attributes (captured code sets none)
    if obj.source is None:
        return None  # no guard can keep the answer
    instance_dict = AttrSource(obj.source, "__dict__")
    if name in real.__dict__:
        tx.output.guards.dict_keys_match(instance_dict, real.__dict__)
        return True
    tx.output.guards.not_in_dict(instance_dict, name)
    return False


def _shared_module_hasattr(tx, obj, name: str) -> bool:
    """``hasattr`` on a module guarded on its type (capture/shared_modules.py), with
    guards that keep the answer: True reads the attribute (a guarded read); False guards
    that neither the instance ``__dict__`` nor the module's registries hold it (nn.Module's
    ``__getattr__`` looks there; the class is type-guarded)."""
    from ..sources import AttrSource

    module = obj.module
    if hasattr(module, name):
        tx.getattr(obj, name)
        return True
    for registry in ("__dict__", "_parameters", "_buffers", "_modules"):
        if registry == "__dict__" or registry in module.__dict__:
            tx.output.guards.not_in_dict(AttrSource(obj.source, registry), name)
    return False


def _pending_instance_attr(tx, value, name: str) -> bool | None:
    """Whether the frame's pending writes leave ``name`` in ``value``'s instance
    ``__dict__`` (True: written, False: deleted), or None (not touched in the frame)."""
    for kind, written, _ in tx.output.side_effects.attr_effects(value):
        if written == name:
            return kind not in ("delattr", "dictdel")
    return None


def _user_object_hasattr(tx, obj, name: str):
    """``hasattr`` on a user object read from a source, with guards that keep the answer:
    True reads the attribute (its read is guarded as any attribute read); False guards that
    the instance ``__dict__`` still lacks it (the class is type-guarded); None (decide at
    run time) when it cannot be known. With a custom ``__getattr__``/``__getattribute__`` (HF
    configs) the answer comes from the real object, whose identity is then guarded (the
    answer itself is not)."""
    from ..sources import AttrSource
    from .user_defined import _has_custom_getattr

    value = obj.value
    if _has_custom_getattr(type(value)):
        return hasattr(obj.as_python_constant(), name)
    pending = _pending_instance_attr(tx, value, name)
    if pending is not None:
        # written or deleted earlier in the frame: the instance __dict__ has it, or not;
        # without it the class decides (it is guarded on its type)
        from .user_defined import class_lookup

        return pending or class_lookup(type(value), name) is not None
    if hasattr(value, name):
        tx.getattr(obj, name)
        return True
    if hasattr(value, "__dict__"):
        tx.output.guards.not_in_dict(AttrSource(obj.source, "__dict__"), name)
        return False
    return None
