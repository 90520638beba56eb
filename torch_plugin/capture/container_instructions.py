"""Opcode handlers for subscripts, slices and building/unpacking containers.

Key class: :class:`ContainerInstructions`, a mixin of
:class:`~torch_plugin.capture.symbolic_convert.InstructionTranslatorBase` (one handler per
opcode, named after it: BINARY_SUBSCR, BUILD_TUPLE, DICT_MERGE, UNPACK_EX, ...). Kept apart from
the interpreter loop so each file stays one concept.
"""

from __future__ import annotations

import operator

from . import graph_break_types as gbt
from .dynamic_shapes import specialize_deep
from .exc import Unsupported, unimplemented
from .variables.base import VariableTracker
from .variables.builder import wrap_constant_or_object
from .variables.constant import ConstantVariable
from .variables.dicts import ConstDictVariable, dict_key
from .variables.lists import BaseListVariable, ListVariable, TupleVariable
from .variables.nn_module import NNModuleVariable
from .variables.tensor import TensorVariable

_GENERIC_BUILTINS = (list, tuple, dict, set, frozenset, type)


def _is_type_annotation(obj: VariableTracker) -> bool:
    """Whether ``obj`` is a typing special form or alias (``typing.List``,
    ``typing.Optional``, ``List[int]``) or a builtin container class, whose subscription
    builds a type annotation."""
    try:
        cls = obj.python_type()
    except Unsupported:
        return False
    if cls.__module__ == "typing":
        return obj.is_python_constant()
    if cls is type and obj.is_python_constant():
        return obj.as_python_constant() in _GENERIC_BUILTINS  # a class: id-guarded already
    return False


class ContainerInstructions:
    """Handlers for container and subscript opcodes (mixed into the translator)."""

    # --- subscripts -----------------------------------------------------------------------
    def getitem(self, obj: VariableTracker, key: VariableTracker) -> VariableTracker:
        if isinstance(obj, TensorVariable):
            return self.output.call_function(self, operator.getitem, [obj, key], {})
        if isinstance(obj, BaseListVariable):
            return obj.getitem(self, key)
        if isinstance(obj, ConstDictVariable):
            return obj.call_method(self, "__getitem__", [key], {})
        if isinstance(obj, NNModuleVariable):
            return obj.getitem(self, key)
        if isinstance(obj, ConstantVariable) and key.is_python_constant():
            return wrap_constant_or_object(obj.value[key.as_python_constant()])
        if _is_type_annotation(obj) and key.is_python_constant():
            # ``List[torch.Tensor]``, ``Optional[int]``, ``tuple[int, ...]``: a type
            # annotation built at run time (``torch.jit.annotate``'s first argument); typing's
            # subscription only builds (and caches) alias objects, so it runs at capture.
            return wrap_constant_or_object(obj.as_python_constant()[key.as_python_constant()])
        return obj.call_method(self, "__getitem__", [key], {})

    def BINARY_SUBSCR(self, inst):
        key = self.pop()
        obj = self.pop()
        self.push(self.getitem(obj, key))

    def BINARY_SLICE(self, inst):  # 3.12
        end = self.pop()
        start = self.pop()
        obj = self.pop()
        self.push(self.getitem(obj, self._slice([start, end])))

    def STORE_SUBSCR(self, inst):
        key = self.pop()
        obj = self.pop()
        value = self.pop()
        self._setitem(obj, key, value)

    def STORE_SLICE(self, inst):  # 3.12
        end = self.pop()
        start = self.pop()
        obj = self.pop()
        value = self.pop()
        self._setitem(obj, self._slice([start, end]), value)

    def _setitem(self, obj, key, value):
        if isinstance(obj, TensorVariable):
            _refuse_mask_assignment_with_grad(obj, key, value)
            self.output.call_function(self, operator.setitem, [obj, key, value], {})
        else:
            obj.call_method(self, "__setitem__", [key, value], {})

    def DELETE_SUBSCR(self, inst):
        key = self.pop()
        obj = self.pop()
        obj.call_method(self, "__delitem__", [key], {})

    def _slice(self, parts):
        if all(p.is_python_constant() for p in parts):
            return ConstantVariable(slice(*[p.as_python_constant() for p in parts]))
        unimplemented(gbt.VALUE_NOT_CONSTANT, "slice with non-constant bounds")

    def BUILD_SLICE(self, inst):
        self.push(self._slice(self.popn(inst.arg)))

    # --- building containers --------------------------------------------------------------
    def BUILD_TUPLE(self, inst):
        self.push(TupleVariable(self.popn(inst.arg)))

    def BUILD_LIST(self, inst):
        self.push(ListVariable(self.popn(inst.arg), mutable_local=True))

    def BUILD_SET(self, inst):
        # A set display builds a mutable ``set`` (``x in {1, 2}`` is a frozenset constant,
        # LOAD_CONST, not BUILD_SET): variables/sets.py
        from .variables.sets import SetVariable

        self.push(SetVariable.build(self, self.popn(inst.arg)))

    def BUILD_MAP(self, inst):
        flat = self.popn(2 * inst.arg)
        items = {}
        for k, v in zip(flat[::2], flat[1::2]):
            items[dict_key(k)] = v
        self.push(ConstDictVariable(items, mutable_local=True))

    def BUILD_CONST_KEY_MAP(self, inst):
        keys = self.pop().as_python_constant()
        values = self.popn(inst.arg)
        self.push(ConstDictVariable(dict(zip(keys, values)), mutable_local=True))

    def BUILD_STRING(self, inst):
        parts = self.popn(inst.arg)
        self.push(ConstantVariable("".join(p.as_python_constant() for p in parts)))

    def FORMAT_VALUE(self, inst):  # 3.11, 3.12
        flags = inst.arg
        spec = self.pop().as_python_constant() if flags & 0x04 else ""
        self.push(ConstantVariable(format(self._format_operand(self.pop(), flags & 0x03), spec)))

    def _format_operand(self, value: VariableTracker, conv: int):
        """An f-string field's value, converted (0 none, 1 ``!s``, 2 ``!r``, 3 ``!a``)."""
        if not value.is_python_constant():
            unimplemented(gbt.VALUE_NOT_CONSTANT, f"f-string formatting of {value}")
        # A symbolic size formats as its symbol's name (s0): the concrete value, guarded
        v = specialize_deep(value.as_python_constant())
        return {0: v, 1: str(v), 2: repr(v), 3: ascii(v)}[conv]

    def CONVERT_VALUE(self, inst):  # 3.13
        self.push(ConstantVariable(self._format_operand(self.pop(), inst.arg)))

    def FORMAT_SIMPLE(self, inst):  # 3.13
        self.push(ConstantVariable(format(self._format_operand(self.pop(), 0), "")))

    def FORMAT_WITH_SPEC(self, inst):  # 3.13
        spec = self.pop().as_python_constant()
        self.push(ConstantVariable(format(self._format_operand(self.pop(), 0), spec)))

    def LIST_APPEND(self, inst):
        v = self.pop()
        self.stack[-inst.arg].call_method(self, "append", [v], {})

    def LIST_EXTEND(self, inst):
        v = self.pop()
        self.stack[-inst.arg].call_method(self, "extend", [v], {})

    def LIST_TO_TUPLE(self, inst):
        self.push(TupleVariable(self.pop().unpack_var_sequence(self)))

    def SET_ADD(self, inst):  # a set comprehension
        v = self.pop()
        self.stack[-inst.arg].call_method(self, "add", [v], {})

    def SET_UPDATE(self, inst):  # {*a, *b}
        v = self.pop()
        self.stack[-inst.arg].call_method(self, "update", [v], {})

    def MAP_ADD(self, inst):
        v = self.pop()
        k = self.pop()
        self.stack[-inst.arg].call_method(self, "__setitem__", [k, v], {})

    def DICT_UPDATE(self, inst):
        v = self.pop()
        self.stack[-inst.arg].call_method(self, "update", [v], {})

    def DICT_MERGE(self, inst):
        v = self.pop()
        target = self.stack[-inst.arg]
        if isinstance(v, ConstDictVariable):
            for k in v.items:
                if k in target.items:
                    unimplemented(gbt.EXCEPTION, f"got multiple values for keyword argument {k!r}")
        target.call_method(self, "update", [v], {})

    def UNPACK_SEQUENCE(self, inst):
        items = self.pop().unpack_var_sequence(self)
        if len(items) != inst.arg:
            unimplemented(gbt.EXCEPTION, f"cannot unpack {len(items)} values into {inst.arg}")
        for item in reversed(items):
            self.push(item)

    def UNPACK_EX(self, inst):
        items = self.pop().unpack_var_sequence(self)
        before, after = inst.arg & 0xFF, inst.arg >> 8
        if len(items) < before + after:
            unimplemented(gbt.EXCEPTION, "not enough values to unpack")
        middle = items[before : len(items) - after]
        result = (
            items[:before]
            + [ListVariable(middle, mutable_local=True)]
            + items[len(items) - after :]
        )
        for item in reversed(result):
            self.push(item)


def _refuse_mask_assignment_with_grad(obj, key, value) -> None:
    """Graph break for ``t[mask] = v`` with a boolean (or uint8) tensor index while autograd
    records it (``t`` or ``v`` requires grad, grad mode on): its backward gathers through
    ``nonzero(mask)``, a data-dependent shape that AOTAutograd cannot trace, so compiling the
    graph failed (wav2vec2's SpecAugment in training). The assignment runs in CPython."""
    import torch

    keys = key.items if isinstance(key, TupleVariable) else [key]
    masks = [
        k
        for k in keys
        if isinstance(k, TensorVariable) and k.example.dtype in (torch.bool, torch.uint8)
    ]
    if not masks or not torch.is_grad_enabled():
        return
    tensors = [v for v in (obj, value) if isinstance(v, TensorVariable)]
    if any(t.example.requires_grad for t in tensors):
        unimplemented(
            gbt.DATA_DEPENDENT,
            "t[mask] = v with a boolean mask while autograd records it (its backward has a "
            "data-dependent shape)",
        )
