"""Opcode handlers for operators: arithmetic, comparisons, ``is``, ``in`` and unary operators.

Key class: :class:`OperatorInstructions`, a mixin of
:class:`~torch_plugin.capture.symbolic_convert.InstructionTranslatorBase` (one handler per
opcode, named after it: BINARY_OP, COMPARE_OP, IS_OP, CONTAINS_OP, UNARY_*, CALL_INTRINSIC_1),
with the helpers ``binary_op``, ``compare`` and ``is_`` that builtins (``operator.add``,
``max``) reuse. On tensors an operator is a graph node; on constants it runs at capture time.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from . import graph_break_types as gbt
from .bytecode_compat import PY313
from .dynamic_shapes import has_symbolic, specialize_deep
from .exc import Unsupported, unimplemented
from .variables import container_ops, numpy_calls, sets
from .variables.base import NullVariable, VariableTracker
from .variables.builder import wrap_constant_or_object
from .variables.constant import BINARY_OPS, COMPARE_OPS, INPLACE_OPS, ConstantVariable
from .variables.dicts import ConstDictVariable
from .variables.lists import BaseListVariable, ListVariable, TupleVariable, contains
from .variables.new_object import NewObjectVariable
from .variables.nn_module import NNModuleVariable
from .variables.sets import SetVariable
from .variables.tensor import TensorVariable, refuse_ambiguous_identity
from .variables.user_defined import UserDefinedObjectVariable


class OperatorInstructions:
    """Operator opcodes of the translator. See the module docstring."""

    def binary_op(self, op: str, a: VariableTracker, b: VariableTracker) -> VariableTracker:
        fn = BINARY_OPS.get(op) or INPLACE_OPS.get(op)
        if fn is None:
            unimplemented(gbt.UNSUPPORTED_BYTECODE, f"binary operator {op}")
        if isinstance(a, SetVariable) or isinstance(b, SetVariable):
            return sets.binary_op(self, op, a, b)
        from .variables import collections_objects

        modelled = collections_objects.binary_op(self, op, a, b)
        if modelled is not None:
            return modelled
        modelled = container_ops.binary_op(self, op, a, b)
        if modelled is not None:
            return modelled
        if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
            if op.endswith("=") and isinstance(a, TensorVariable):
                return self.output.call_function(self, fn, [a, b], {})
            return self.output.call_function(self, BINARY_OPS[op.rstrip("=")], [a, b], {})
        # In-place operators on a list or dict mutate the object (every alias sees it):
        # list += any iterable is list.extend, list *= n repeats in place, dict |= is update
        if op == "+=" and type(a) is ListVariable and a.python_cls is list:
            a.call_method(self, "extend", [b], {})
            return a
        if op == "*=" and type(a) is ListVariable and a.python_cls is list:
            if not b.is_python_constant() or not isinstance(b.as_python_constant(), int):
                unimplemented(gbt.VALUE_NOT_CONSTANT, f"list *= {b}")
            if not a.mutable_local:
                unimplemented(gbt.SIDE_EFFECT, "in-place *= on a list from the frame's inputs")
            a.items[:] = a.items * b.as_python_constant()
            return a
        if op == "|=" and isinstance(a, ConstDictVariable) and isinstance(b, ConstDictVariable):
            a.call_method(self, "update", [b], {})
            return a
        if (
            op == "*"
            and isinstance(b, BaseListVariable)
            and a.is_python_constant()
            and isinstance(a.as_python_constant(), int)
        ):
            a, b = b, a  # n * sequence is sequence * n
        if (
            isinstance(a, BaseListVariable)
            and op in ("+", "+=")
            and isinstance(b, BaseListVariable)
        ):
            if op == "+=" and isinstance(a, ListVariable):
                if not a.mutable_local:
                    unimplemented(gbt.SIDE_EFFECT, "in-place += on a list from the frame's inputs")
                a.items.extend(b.items)
                return a
            return (
                type(a)(a.items + b.items, mutable_local=True)
                if isinstance(a, ListVariable)
                else TupleVariable(a.items + b.items)
            )
        if isinstance(a, BaseListVariable) and op in ("*", "*=") and b.is_python_constant():
            items = a.items * b.as_python_constant()
            return (
                ListVariable(items, mutable_local=True)
                if isinstance(a, ListVariable)
                else TupleVariable(items)
            )
        if (
            isinstance(a, ConstDictVariable)
            and isinstance(b, ConstDictVariable)
            and op in ("|", "|=")
        ):
            return ConstDictVariable({**a.items, **b.items}, mutable_local=True)
        if a.is_python_constant() and b.is_python_constant():
            av, bv = a.as_python_constant(), b.as_python_constant()
            if op.endswith("=") and isinstance(av, (list, dict, set, bytearray)):
                # an in-place operator mutates the object: computing a new one (as the
                # operator without "=") would leave every alias (a caller's set) unchanged
                unimplemented(
                    gbt.SIDE_EFFECT,
                    f"in-place {op} on a {type(av).__name__} (mutation not modelled)",
                )
            if isinstance(bv, (list, dict, set)):
                fn = BINARY_OPS[op.rstrip("=")]
            if _is_numpy_value(av) or _is_numpy_value(bv):
                # NumPy cannot compute on a symbolic int (np.int64(2) * s0 would become an
                # int where eager gives np.int64): its concrete value, under a guard
                from .dynamic_shapes import specialize

                av, bv = specialize(av), specialize(bv)
            if isinstance(av, (str, bytes)) and op.rstrip("=") == "%":
                # printf-style formatting: a symbolic size formats as its symbol's name
                av, bv = specialize_deep(av), specialize_deep(bv)
            av, bv = _bool_as_int(av, bv), _bool_as_int(bv, av)
            if _is_numpy_value(av) or _is_numpy_value(bv):
                # an overflow or division by zero warns (or raises) in eager: a graph break
                return wrap_constant_or_object(numpy_calls.run(fn, av, bv))
            try:
                return wrap_constant_or_object(fn(av, bv))
            except TypeError:
                if not (has_symbolic(av) or has_symbolic(bv)):
                    raise
            # SymInt/SymBool lack some operators ((s0 > 3) ^ True): the concrete values,
            # under a guard
            return wrap_constant_or_object(fn(specialize_deep(av), specialize_deep(bv)))
        unimplemented(gbt.UNMODELLED_VALUE, f"operator {op} on {a} and {b}")

    def compare(self, op: str, a: VariableTracker, b: VariableTracker) -> VariableTracker:
        if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
            return self.output.call_function(self, COMPARE_OPS[op], [a, b], {})
        if isinstance(a, SetVariable) or isinstance(b, SetVariable):
            return sets.compare(self, op, a, b)
        modelled = container_ops.compare(self, op, a, b)
        if modelled is not None:
            return modelled
        if a.is_python_constant() and b.is_python_constant():
            return ConstantVariable(COMPARE_OPS[op](a.as_python_constant(), b.as_python_constant()))
        if op in ("==", "!=") and a is b:
            return ConstantVariable(op == "==")
        unimplemented(gbt.UNMODELLED_VALUE, f"comparison {op} between {a} and {b}")

    def is_(self, a: VariableTracker, b: VariableTracker) -> bool:
        if a is b:
            return True
        if isinstance(a, NewObjectVariable) or isinstance(b, NewObjectVariable):
            return False  # an object built in the frame is no other object
        tensor_a, tensor_b = isinstance(a, TensorVariable), isinstance(b, TensorVariable)
        if tensor_a and tensor_b:
            if a.node is not b.node:
                refuse_ambiguous_identity(a, "`is`")
                refuse_ambiguous_identity(b, "`is`")
            # two get_attr nodes of one attribute read the same real tensor
            return a.node is b.node or (
                a.node.op == b.node.op == "get_attr" and a.node.target == b.node.target
            )
        if tensor_a or tensor_b:
            return False
        if isinstance(a, (NullVariable,)) or isinstance(b, NullVariable):
            return False
        for x, y in ((a, b), (b, a)):
            if (
                isinstance(y, ConstantVariable)
                and y.value is None
                and not isinstance(x, ConstantVariable)
            ):
                if isinstance(x, UserDefinedObjectVariable):
                    return False  # its type is guarded; its identity does not matter here
                try:
                    x.as_python_constant()
                except Unsupported:
                    return False
        try:
            return a.as_python_constant() is b.as_python_constant()
        except Unsupported:
            pass
        if type(a) is not type(b) and not (
            isinstance(a, ConstantVariable) or isinstance(b, ConstantVariable)
        ):
            return False
        unimplemented(gbt.UNMODELLED_VALUE, f"`is` between {a} and {b}")

    def BINARY_OP(self, inst):
        b = self.pop()
        a = self.pop()
        self.push(self.binary_op(inst.argrepr, a, b))

    def COMPARE_OP(self, inst):
        b = self.pop()
        a = self.pop()
        op = inst.argval
        if isinstance(op, str) and op.startswith("bool("):
            op = op[5:-1]
        result = self.compare(op, a, b)
        if (
            PY313
            and inst.arg & 16
            and not (isinstance(result, TensorVariable) and self.next_is_conditional_jump())
        ):  # 3.13: the result converted to bool (a tensor: a break, or a conditional)
            result = ConstantVariable(bool(result.truthiness(self)))
        self.push(result)

    def IS_OP(self, inst):
        b = self.pop()
        a = self.pop()
        result = self.is_(a, b)
        self.push(ConstantVariable(result != bool(inst.arg)))

    def CONTAINS_OP(self, inst):
        container = self.pop()
        item = self.pop()
        if isinstance(container, (BaseListVariable,)):
            result = contains(self, container.items, item).value
        elif (
            isinstance(container, (ConstDictVariable, NNModuleVariable, SetVariable))
            or not container.is_python_constant()
        ):
            result = container.call_method(self, "__contains__", [item], {}).as_python_constant()
        else:
            if isinstance(item, TensorVariable):
                unimplemented(gbt.DATA_DEPENDENT, "`in` test on a tensor")
            result = item.as_python_constant() in container.as_python_constant()
        self.push(ConstantVariable(result != bool(inst.arg)))

    def _unary(self, fn):
        v = self.pop()
        modelled = container_ops.unary(self, fn.__name__, v)
        if modelled is not None:
            self.push(modelled)
        elif isinstance(v, TensorVariable):
            self.push(self.output.call_function(self, fn, [v], {}))
        elif v.is_python_constant():
            value = v.as_python_constant()
            try:
                result = numpy_calls.run(fn, value) if _is_numpy_value(value) else fn(value)
            except TypeError:
                if not has_symbolic(value):
                    raise
                # SymInt has no ~, SymBool no unary -: the concrete value, under a guard
                result = fn(specialize_deep(value))
            self.push(wrap_constant_or_object(result))
        else:
            unimplemented(gbt.UNMODELLED_VALUE, f"unary {fn.__name__} on {v}")

    def UNARY_NEGATIVE(self, inst):
        self._unary(operator.neg)

    def UNARY_POSITIVE(self, inst):
        self._unary(operator.pos)

    def UNARY_INVERT(self, inst):
        self._unary(operator.invert)

    def UNARY_NOT(self, inst):
        from .conditionals import TensorBoolVariable

        value = self.pop()
        if isinstance(value, TensorBoolVariable):  # a flag set in a captured branch
            self.push(value.negated(self))
            return
        self.push(ConstantVariable(not value.truthiness(self)))

    def CALL_INTRINSIC_1(self, inst):  # 3.12
        if inst.argrepr == "INTRINSIC_UNARY_POSITIVE":
            self._unary(operator.pos)
        elif inst.argrepr == "INTRINSIC_LIST_TO_TUPLE":
            self.push(TupleVariable(self.pop().unpack_var_sequence(self)))
        else:
            unimplemented(gbt.UNSUPPORTED_BYTECODE, f"CALL_INTRINSIC_1 {inst.argrepr}")


def _bool_as_int(value, other):
    """``value`` as an int when it is a bool and ``other`` a symbolic int or float: Python
    computes ``True + n`` as ``1 + n``, but a SymInt's arithmetic takes no bool (sympy
    raises "BooleanAtom not allowed in this context")."""
    if isinstance(value, bool) and isinstance(other, (torch.SymInt, torch.SymFloat)):
        return int(value)
    return value


def _is_numpy_value(value: Any) -> bool:
    """A NumPy scalar or array (its arithmetic result types are NumPy's)."""
    return (type(value).__module__ or "").split(".")[0] == "numpy"
