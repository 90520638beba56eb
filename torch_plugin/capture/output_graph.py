"""The FX graph being built for one captured frame, and its compilation.

Key class: :class:`OutputGraph`. It owns the ``torch.fx.Graph``, the FakeTensorMode that
propagates shapes/dtypes/devices, the graph inputs (one placeholder per tensor source), the
parameters/buffers/submodules referenced by ``get_attr`` / ``call_module`` nodes, and the
:class:`~torch_plugin.capture.guards.GuardSet`. :meth:`OutputGraph.compile` hands the graph
to the backend and returns the callable the transformed bytecode calls.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode

from .exc import unimplemented
from .guards import GuardSet
from .side_effects import SideEffects
from .sources import Source
from .variables.base import VariableTracker
from .variables.constant import ConstantVariable, is_immutable
from .variables.tensor import TensorVariable


def _sanitize(name: str) -> str:
    name = re.sub(r"[^0-9a-zA-Z_]+", "_", name).strip("_")
    return name if name and not name[0].isdigit() else f"_{name}"


class OutputGraph:
    """Graph, inputs, attributes and guards of one capture."""

    def __init__(self, code_name: str) -> None:
        self.code_name = code_name
        self.graph = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.guards = GuardSet()
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        self.input_sources: list[Source] = []
        self.example_inputs: list[torch.Tensor] = []
        self._inputs_by_source: dict[Source, TensorVariable] = {}
        self._attr_names: dict[int, str] = {}
        self._names: set[str] = set()
        self.side_effects = SideEffects()
        # Objects the transformed code loads from their sources and passes to the runner
        # after the graph inputs (input containers to return or mutate, closure cells).
        self.runtime_sources: list[Source] = []
        self._grad_enabled_at_start = torch.is_grad_enabled()
        self.grad_mode_changed = False

    # --- names and fakes ------------------------------------------------------------------
    def _unique(self, hint: str) -> str:
        base = _sanitize(hint)
        name, i = base, 0
        while name in self._names or hasattr(self.root, name):
            i += 1
            name = f"{base}_{i}"
        self._names.add(name)
        return name

    def to_fake(self, t: torch.Tensor) -> torch.Tensor:
        return self.fake_mode.from_tensor(t, static_shapes=True)

    # --- graph inputs and attributes ------------------------------------------------------
    def add_graph_input(self, tx, value: torch.Tensor, source: Source | None) -> TensorVariable:
        """A tensor from the frame's inputs becomes a placeholder loaded from ``source``."""
        if source is None:
            # A tensor reachable only through a value computed at capture time: keep it as a
            # graph attribute (a constant of this entry).
            return self.register_attr_tensor(tx, value, None)
        if source in self._inputs_by_source:
            return self._inputs_by_source[source]
        if type(value) not in (torch.Tensor, torch.nn.Parameter) and not isinstance(
            value, torch.nn.Parameter
        ):
            unimplemented(f"tensor subclass {type(value).__name__} as input")
        name = self._unique(source.name())
        last = self._last_placeholder()
        with (
            self.graph.inserting_after(last)
            if last is not None
            else self.graph.inserting_before(None)
        ):
            node = self.graph.placeholder(name)
        fake = self.to_fake(value)
        node.meta["example_value"] = fake
        var = TensorVariable(node, fake, source)
        self._inputs_by_source[source] = var
        self.input_sources.append(source)
        self.example_inputs.append(value)
        return var

    def _last_placeholder(self):
        last = None
        for node in self.graph.nodes:
            if node.op != "placeholder":
                break
            last = node
        return last

    def register_attr_tensor(
        self, tx, value: torch.Tensor, source: Source | None
    ) -> TensorVariable:
        """A module parameter/buffer: a ``get_attr`` node referencing the real tensor."""
        key = id(value)
        name = self._attr_names.get(key)
        if name is None:
            name = self._unique(source.name() if source is not None else "const_tensor")
            if isinstance(value, torch.nn.Parameter):
                self.root.register_parameter(name, value)
            else:
                self.root.register_buffer(name, value)
            self._attr_names[key] = name
            if source is not None:
                self.guards.id_match(source, value)
        node = self.graph.get_attr(name)
        fake = self.to_fake(value)
        node.meta["example_value"] = fake
        return TensorVariable(node, fake, source)

    def register_module(self, module: torch.nn.Module, source: Source | None) -> str:
        key = id(module)
        name = self._attr_names.get(key)
        if name is None:
            name = self._unique(source.name() if source is not None else type(module).__name__)
            self.root.add_module(name, module)
            self._attr_names[key] = name
        return name

    # --- recording operations -----------------------------------------------------------
    def _to_args(self, value: Any, fake: bool):
        if isinstance(value, TensorVariable):
            return value.example if fake else value.node
        if isinstance(value, VariableTracker):
            from .variables.dicts import ConstDictVariable
            from .variables.lists import BaseListVariable

            if isinstance(value, BaseListVariable):
                return value.python_cls(self._to_args(v, fake) for v in value.items)
            if isinstance(value, ConstDictVariable):
                return {k: self._to_args(v, fake) for k, v in value.items.items()}
            if isinstance(value, ConstantVariable):
                return value.value
            if value.is_python_constant():
                const = value.as_python_constant()
                if is_immutable(const):
                    return const
            unimplemented(f"argument {value} to a torch operation")
        return value

    def _record(
        self, tx, kind: str, target, args: list, kwargs: dict, run: Callable
    ) -> VariableTracker:
        node_args = tuple(self._to_args(a, False) for a in args)
        node_kwargs = {k: self._to_args(v, False) for k, v in kwargs.items()}
        fake_args = tuple(self._to_args(a, True) for a in args)
        fake_kwargs = {k: self._to_args(v, True) for k, v in kwargs.items()}
        try:
            with self.fake_mode:
                example = run(*fake_args, **fake_kwargs)
        except (
            torch._subclasses.fake_tensor.DataDependentOutputException,
            torch._subclasses.fake_tensor.DynamicOutputShapeException,
        ) as e:
            unimplemented(
                f"data-dependent operation {getattr(target, '__name__', target)}: {type(e).__name__}"
            )
        except NotImplementedError as e:
            unimplemented(
                f"{getattr(target, '__name__', target)} is not supported on FakeTensor: {e}"
            )
        except Exception as e:
            unimplemented(f"{getattr(target, '__name__', target)} raised {type(e).__name__}: {e}")
        if not _contains_tensor(example):
            # metadata-only result (e.g. torch.is_floating_point): a constant of the capture
            from .variables.builder import wrap_constant_or_object

            return wrap_constant_or_object(example)
        node = self.graph.create_node(kind, target, node_args, node_kwargs)
        node.meta["example_value"] = example
        node.meta["stack_trace"] = tx.current_location_text()
        return self._wrap_result(tx, node, example)

    def _wrap_result(self, tx, node: torch.fx.Node, example: Any) -> VariableTracker:
        from .variables.lists import ListVariable, NamedTupleVariable, TupleVariable

        if isinstance(example, torch.Tensor):
            return TensorVariable(node, example)
        if isinstance(example, (tuple, list)):
            items = []
            for i, ex in enumerate(example):
                if isinstance(ex, torch.Tensor):
                    n = self.graph.call_function(operator.getitem, (node, i))
                    n.meta["example_value"] = ex
                    items.append(TensorVariable(n, ex))
                elif _contains_tensor(ex):
                    n = self.graph.call_function(operator.getitem, (node, i))
                    items.append(self._wrap_result(tx, n, ex))
                else:
                    from .variables.builder import wrap_constant_or_object

                    items.append(wrap_constant_or_object(ex))
            if isinstance(example, tuple) and type(example) is not tuple:
                return NamedTupleVariable(items, type(example))
            return (
                TupleVariable(items)
                if isinstance(example, tuple)
                else ListVariable(items, mutable_local=True)
            )
        unimplemented(f"operation returning {type(example).__name__}")

    def call_function(self, tx, fn, args: list, kwargs: dict) -> VariableTracker:
        return self._record(tx, "call_function", fn, args, kwargs, fn)

    def call_method(self, tx, name: str, args: list, kwargs: dict) -> VariableTracker:
        def run(self_, *a, **k):
            return getattr(self_, name)(*a, **k)

        return self._record(tx, "call_method", name, args, kwargs, run)

    def call_module(
        self, tx, module: torch.nn.Module, source, args: list, kwargs: dict
    ) -> VariableTracker:
        name = self.register_module(module, source)
        return self._record(tx, "call_module", name, args, kwargs, module)

    def set_grad_enabled(self, enabled: bool) -> None:
        """Record a grad-mode switch in the graph and apply it for the rest of the trace."""
        self.graph.call_function(torch._C._set_grad_enabled, (enabled,))
        torch._C._set_grad_enabled(enabled)
        self.grad_mode_changed = True

    def runtime_arg(self, source: Source) -> int:
        """Index of ``source`` among the runtime arguments (added once)."""
        if source not in self.runtime_sources:
            self.runtime_sources.append(source)
        return self.runtime_sources.index(source)

    def check_global_state(self) -> None:
        if torch.is_grad_enabled() != self._grad_enabled_at_start:
            unimplemented("the captured code changes grad mode without restoring it (side effect)")

    def restore_global_state(self) -> None:
        torch._C._set_grad_enabled(self._grad_enabled_at_start)


def _contains_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)):
        return any(_contains_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_contains_tensor(v) for v in value.values())
    return False
