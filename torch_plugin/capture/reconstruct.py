"""Rebuilding the translator's values as real Python objects in the graph-break bytecode.

At a graph break (graph_break.py) the values on the stack and in the live locals are
symbolic; the transformed code must hand real objects to the instruction that runs natively
and to the resume function. :class:`Reconstructor` emits the bytecode that builds each one:
a tensor from the graph's outputs, a value with a source by reloading it, a constant by
loading it, a container or object the frame built by building it again, each mutable
container exactly once so aliasing is kept. The helpers here find what a value holds
(:func:`tensors_in`, :func:`symbolic_outputs`), refuse values that cannot be rebuilt
(:func:`check_rebuildable`), and load values read from sources before the side-effect replay
can rebind them (:func:`preload_sourced_values`).
"""

from __future__ import annotations

import functools
import types
from typing import Any

import bytecode as bc
import torch
import torch.fx

from . import graph_break_types as gbt
from .bytecode_emission import CodeGen
from .dynamic_shapes import is_symbolic, specialize
from .exc import unimplemented
from .variables.base import BoundMethodVariable, VariableTracker
from .variables.constant import ConstantMethodVariable, ConstantVariable
from .variables.dicts import ConstDictVariable, DictViewVariable
from .variables.functions import UserMethodVariable
from .variables.lists import ListVariable, NamedTupleVariable, TupleVariable
from .variables.tensor import TensorMethodVariable, TensorVariable


class Reconstructor:
    """Emits bytecode that rebuilds variables as real Python values."""

    def __init__(self, gen: CodeGen, graph_out: str | None, output_index: dict[int, int]) -> None:
        self.gen = gen
        self.graph_out = graph_out
        self.output_index = output_index  # id(fx node) -> position in the graph's outputs
        self.temps: dict[int, str] = {}
        # (local holding the replay's memo, ids of the containers it built): reused as is
        self.replayed: tuple[str, set] | None = None
        self._preparing: set[int] = set()  # objects built by the frame, being prepared

    def _emit(self, name: str, arg: Any = bc.UNSET) -> None:
        self.gen._emit(name, arg)

    def prepare(self, var: VariableTracker) -> None:
        """Rebuild mutable containers once, into temporaries, so every use shares them (the
        side-effect replay's own objects when it built them)."""
        from .variables.model_output import ModelOutputVariable
        from .variables.new_object import NewObjectVariable
        from .variables.partials import PartialVariable
        from .variables.sets import SetVariable

        if isinstance(var, NewObjectVariable):
            if id(var) in self._preparing:
                unimplemented(
                    gbt.ESCAPING_VALUE,
                    "objects built in the frame that reach each other are live at a break",
                )
            self._preparing.add(id(var))
        for child in _children(var):
            self.prepare(child)
        self._preparing.discard(id(var))
        if (
            not isinstance(
                var,
                (
                    ListVariable,
                    TupleVariable,
                    ConstDictVariable,
                    ModelOutputVariable,
                    NewObjectVariable,
                    SetVariable,
                    PartialVariable,
                ),
            )
            and not hasattr(var, "rebuild_call")
            or var.source is not None
        ):
            return
        if id(var) in self.temps:
            return
        if self.replayed is not None and id(var) in self.replayed[1]:
            self.gen.load_fast(self.replayed[0])
            self.gen.load_const(id(var))
            self.gen.binary_subscr()
        else:
            self._build(var)
        name = f"__tp_v{len(self.temps)}"
        self.gen.store_fast(name)
        self.temps[id(var)] = name

    def __call__(self, var: VariableTracker) -> None:
        if id(var) in self.temps:
            self.gen.load_fast(self.temps[id(var)])
            return
        self._build(var)

    def _build(self, var: VariableTracker) -> None:
        gen = self.gen
        if getattr(var, "escape_refused", None):
            unimplemented(gbt.ESCAPING_VALUE, f"{var.escape_refused} is live at a graph break")
        from .variables.builtin_table import frame_class_escape

        why = frame_class_escape(var)
        if why is not None:
            unimplemented(gbt.ESCAPING_VALUE, why)
        if isinstance(var, TensorVariable):
            pos = self.output_index.get(id(var.node))
            if pos is not None:
                gen.load_fast(self.graph_out)
                gen.load_const(pos)
                gen.binary_subscr()
            elif var.source is not None:
                var.source.reconstruct(gen)
            else:
                unimplemented(gbt.ESCAPING_VALUE, f"cannot rebuild {var}")
            return
        if isinstance(var, ConstantVariable):
            if var.source is not None and is_symbolic(var.value):
                var.source.reconstruct(gen)  # a symbolic int input: the same value
            else:
                self._load_value(var.value)
            return
        if var.source is not None:  # the same object (mutations were replayed on it)
            var.source.reconstruct(gen)
            return
        if hasattr(var, "rebuild_call"):  # collections_objects.py: deque, defaultdict, ...
            helper, helper_args = var.rebuild_call()
            self.call_helper(helper, helper_args)
            return
        if isinstance(var, NamedTupleVariable):
            self.call_helper(
                _make_namedtuple, [ConstantVariable(var.tuple_cls), TupleVariable(var.items)]
            )
            return
        if isinstance(var, TupleVariable):
            for item in var.items:
                self(item)
            self._emit("BUILD_TUPLE", len(var.items))
            return
        if isinstance(var, ListVariable):
            for item in var.items:
                self(item)
            self._emit("BUILD_LIST", len(var.items))
            return
        if isinstance(var, ConstDictVariable):
            from .variables.dicts import refuse_identity_keys

            refuse_identity_keys(var.items, "rebuilding it at a graph break")
            if var.user_cls is not dict:
                unimplemented(gbt.ESCAPING_VALUE, f"cannot rebuild a {var.user_cls.__name__}")
            for key, value in var.items.items():
                gen.load_const(key)
                self(value)
            self._emit("BUILD_MAP", len(var.items))
            return
        if isinstance(var, DictViewVariable):
            self.call_helper(_dict_view, [var.dict_var, ConstantVariable(var.kind)])
            return
        from .variables.sets import SetVariable, make_set

        if isinstance(var, SetVariable):
            self.call_helper(
                make_set, [ConstantVariable(var.python_type()), TupleVariable(var.items)]
            )
            return
        from .variables.functions import PartialVariable

        if isinstance(var, PartialVariable):
            self.call_helper(
                _make_partial,
                [
                    var.func,
                    TupleVariable(list(var.args)),
                    TupleVariable([ConstantVariable(k) for k in var.keywords]),
                    TupleVariable(list(var.keywords.values())),
                    TupleVariable([ConstantVariable(k) for k in var.attrs]),
                    TupleVariable(list(var.attrs.values())),
                ],
            )
            return
        if isinstance(var, TensorMethodVariable):
            self(var.tensor)
            gen.load_attr(var.name)
            return
        if isinstance(var, (BoundMethodVariable,)):
            self(var.obj)
            gen.load_attr(var.name)
            return
        if isinstance(var, ConstantMethodVariable):
            self(var.obj)
            gen.load_attr(var.name)
            return
        if isinstance(var, UserMethodVariable):
            self.call_helper(types.MethodType, [_Real(var.fn), var.obj])
            return
        from .variables.model_output import ModelOutputVariable

        if isinstance(var, ModelOutputVariable):
            keys = tuple(var.fields)
            self.call_helper(
                _make_model_output,
                [
                    ConstantVariable(var.cls),
                    ConstantVariable(keys),
                    TupleVariable(list(var.fields.values())),
                ],
            )
            return
        from .variables.new_object import NewObjectVariable, make_object

        if isinstance(var, NewObjectVariable):
            self.call_helper(
                make_object,
                [
                    ConstantVariable(var.cls),
                    ConstantVariable(tuple(var.attrs)),
                    TupleVariable(list(var.attrs.values())),
                ],
            )
            return
        from .variables.torch import GradModeVariable

        if isinstance(var, GradModeVariable) and var.prev is None:
            # ``torch.no_grad()`` / ``torch.enable_grad()`` not entered yet (a graph break at
            # its ``with`` statement): a new one, entered by the resumed code
            self.call_helper(torch.enable_grad if var.enabled else torch.no_grad, [])
            return
        if _is_real_stable(var):
            from .variables.object_copies import refuse_mutated_private

            refuse_mutated_private(var)
            gen.load_object(var.as_python_constant(), "obj")
            return
        unimplemented(gbt.ESCAPING_VALUE, f"cannot rebuild {var} after a graph break")

    def _load_value(self, value: Any) -> None:
        """A constant; its symbolic ints come from the graph's outputs (see
        ``symbolic_outputs``), so they keep their runtime value without a guard."""
        gen = self.gen
        pos = self.output_index.get(id(value)) if isinstance(value, torch.SymInt) else None
        if pos is not None:
            gen.load_fast(self.graph_out)
            gen.load_const(pos)
            gen.binary_subscr()
            return
        if type(value) in (tuple, torch.Size) and any(
            id(v) in self.output_index for v in _symbolic_ints(value)
        ):
            if type(value) is torch.Size:
                gen.load_global(gen.install_global(torch.Size, "size_cls"), push_null=True)
            for v in value:
                self._load_value(v)
            gen._emit("BUILD_TUPLE", len(value))
            if type(value) is torch.Size:
                gen.call(1)
            return
        gen.load_const(specialize(value))

    def call_helper(self, fn: Any, args: list[VariableTracker]) -> None:
        gen = self.gen
        gen.load_global(gen.install_global(fn, "helper"), push_null=True)
        for a in args:
            if isinstance(a, _Real):
                gen.load_object(a.value, "obj")
            else:
                self(a)
        gen.call(len(args))


class _Real(VariableTracker):
    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value


def preload_sourced_values(gen: CodeGen, values: list, replay) -> dict[int, str]:
    """Values read from a source (a global, an attribute, an item) that the rebuilt stack
    and locals hold, loaded into temporaries BEFORE the side-effect replay runs: the replay
    may rebind that source (``t2 = G; G = G + 1``: ``t2`` is the old object, but ``G`` now
    names the new one; fuzz seed 496). Only needed when there is a replay. Returns
    id(variable) -> temporary, for :class:`Reconstructor`."""
    from .variables.base import NullVariable

    out: dict[int, str] = {}
    if replay is None:
        return out

    def visit(var: VariableTracker) -> None:
        if isinstance(var, NullVariable) or id(var) in out:
            return
        if var.source is not None:
            name = f"__tp_pre{len(out)}"
            var.source.reconstruct(gen)
            gen.store_fast(name)
            out[id(var)] = name
            return
        for child in _children(var):
            visit(child)

    for v in values:
        visit(v)
    return out


def _children(var: VariableTracker) -> list[VariableTracker]:
    if isinstance(var, (TupleVariable, ListVariable)):
        return list(var.items)
    if isinstance(var, ConstDictVariable):
        return list(var.items.values())
    if hasattr(var, "rebuild_children"):  # an iterator (container_iterators.py)
        return var.rebuild_children()
    if isinstance(var, (TensorMethodVariable,)):
        return [var.tensor]
    if isinstance(var, (BoundMethodVariable, ConstantMethodVariable)):
        return [var.obj]
    if isinstance(var, UserMethodVariable):
        return [var.obj]
    if isinstance(var, DictViewVariable):
        return [var.dict_var]
    from .variables.sets import SetVariable

    if isinstance(var, SetVariable):
        return var.items
    if hasattr(var, "rebuild_call"):  # a deque (a dict subclass is a ConstDictVariable)
        return list(var.items)
    from .variables.functions import PartialVariable

    if isinstance(var, PartialVariable) and var.source is None:
        return [var.func, *var.args, *var.keywords.values(), *var.attrs.values()]
    from .variables.model_output import ModelOutputVariable

    if isinstance(var, ModelOutputVariable):
        return list(var.fields.values())
    from .variables.new_object import NewObjectVariable

    if isinstance(var, NewObjectVariable):
        return list(var.attrs.values())
    return []


def reaches(values: list, target: VariableTracker) -> bool:
    """Whether ``target`` is one of ``values`` or held inside one of them."""
    seen: set[int] = set()
    todo = list(values)
    while todo:
        var = todo.pop()
        if var is target:
            return True
        if id(var) in seen or var is None:
            continue
        seen.add(id(var))
        todo.extend(_children(var))
    return False


def _is_real_stable(var: VariableTracker) -> bool:
    from .variables.builtin import BuiltinVariable
    from .variables.functions import DisabledFunctionVariable, UserFunctionVariable
    from .variables.nn_module import NNModuleVariable
    from .variables.torch import TorchFunctionVariable
    from .variables.user_defined import (
        PythonModuleVariable,
        UserDefinedClassVariable,
        UserDefinedObjectVariable,
    )

    return (
        isinstance(
            var,
            (
                NNModuleVariable,
                UserDefinedClassVariable,
                UserDefinedObjectVariable,
                PythonModuleVariable,
                BuiltinVariable,
                TorchFunctionVariable,
                DisabledFunctionVariable,
            ),
        )
        or type(var) is UserFunctionVariable
    )


def _make_namedtuple(cls, items):
    return cls(*items) if hasattr(cls, "_fields") else cls(items)


def _make_model_output(cls, keys, values):
    return cls(**dict(zip(keys, values)))


def _make_partial(func, args, keys, values, attr_names=(), attr_values=()):
    out = functools.partial(func, *args, **dict(zip(keys, values)))
    for name, value in zip(attr_names, attr_values):
        setattr(out, name, value)
    return out


def _dict_view(d, kind):
    return getattr(d, kind)()


def _symbolic_ints(value: Any) -> list:
    """The symbolic ints in a constant (a SymInt, or a tuple / torch.Size holding some)."""
    if isinstance(value, torch.SymInt):
        return [value] if is_symbolic(value) else []
    if type(value) in (tuple, torch.Size):
        return [s for v in value for s in _symbolic_ints(v)]
    return []


class _SymOutput:
    """A graph output computing a symbolic int (``node``), next to the tensor outputs."""

    def __init__(self, node) -> None:
        self.node = node


def symbolic_outputs(output, values: list[VariableTracker]) -> list[tuple[int, _SymOutput]]:
    """(id of the SymInt, graph output) for every symbolic int the rebuilt stack and locals
    hold: passing them out of the graph keeps them symbolic (the resume function receives
    them as ints, dynamic from its second compile on) instead of specializing them."""
    found: list[tuple[int, _SymOutput]] = []
    seen: set[int] = set()

    def visit(var: VariableTracker) -> None:
        if id(var) in seen:
            return
        seen.add(id(var))
        if isinstance(var, ConstantVariable):
            if var.source is not None:
                return  # an input: rebuilt from its source
            for sym in _symbolic_ints(var.value):
                node = output.sym_arg(sym)
                if isinstance(node, torch.fx.Node):
                    found.append((id(sym), _SymOutput(node)))
            return
        for child in _children(var):
            visit(child)

    for v in values:
        visit(v)
    return found


def tensors_in(var: VariableTracker, out: list[TensorVariable], seen: set[int]) -> None:
    """Collect the tensor variables ``var`` holds (graph values to output)."""
    if id(var) in seen:
        return
    seen.add(id(var))
    if isinstance(var, TensorVariable):
        from .variables.tensor import refuse_forced_leaf

        refuse_forced_leaf(var)
        out.append(var)
        return
    for child in _children(var):
        tensors_in(child, out, seen)


def check_rebuildable(var: VariableTracker, seen: set | None = None) -> None:
    from .variables.functions import CellVariable, NestedUserFunctionVariable
    from .variables.torch import AutocastVariable, GradModeVariable, InferenceModeVariable

    if isinstance(var, GradModeVariable) and var.prev is None:
        return  # not entered yet: rebuilt as a new torch.no_grad() / torch.enable_grad()
    if isinstance(
        var,
        (
            NestedUserFunctionVariable,
            CellVariable,
            GradModeVariable,
            AutocastVariable,
            InferenceModeVariable,
        ),
    ):
        unimplemented(gbt.ESCAPING_VALUE, f"cannot rebuild {var} after a graph break")
    if isinstance(var, TensorVariable) and var.source is None:
        from .variables.attribute_rules import check_tensor_escapes

        check_tensor_escapes(var)
    seen = set() if seen is None else seen
    if id(var) in seen:
        return
    seen.add(id(var))
    for child in _children(var):
        check_rebuildable(child, seen)
