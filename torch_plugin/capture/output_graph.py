"""The FX graph being built for one captured frame, and its compilation.

Key class: :class:`OutputGraph`. It owns the ``torch.fx.Graph``, the FakeTensorMode that
propagates shapes/dtypes/devices, the graph inputs (one placeholder per tensor source), the
parameters/buffers/submodules referenced by ``get_attr`` / ``call_module`` nodes, and the
:class:`~torch_plugin.capture.guards.GuardSet`. Recording an operation (running it on
FakeTensors, adding its node) is :class:`~.operation_recording.OperationRecorder`'s part,
a mixin in operation_recording.py; symbolic sizes, one variable per real object, graph
inputs and attributes, and the global state tracing switched are here.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from collections.abc import Callable
from typing import Any

import sympy
import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from . import dynamic_shapes
from . import graph_break_types as gbt
from .exc import Unsupported, unimplemented
from .guards import GuardSet
from .operation_recording import OperationRecorder
from .shape_guards import Binding
from .side_effects import SideEffects
from .sources import AttrSource, Source
from .variables.base import VariableTracker
from .variables.tensor import TensorVariable


def _sanitize(name: str) -> str:
    name = re.sub(r"[^0-9a-zA-Z_]+", "_", name).strip("_")
    return name if name and not name[0].isdigit() else f"_{name}"


class OutputGraph(OperationRecorder):
    """Graph, inputs, attributes and guards of one capture."""

    def __init__(self, code_name: str, dim_policy: dynamic_shapes.DimPolicy | None = None) -> None:
        self.code_name = code_name
        self.graph = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.guards = GuardSet()
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
        # Created with the first dynamic input (see _ensure_shape_env).
        self.shape_env: ShapeEnv | None = None
        self.dim_policy = dim_policy or dynamic_shapes.DimPolicy(None, False)
        # Which input size/stride each symbol stands for (shape_guards.Binding), and the
        # graph node computing each symbolic expression used as an argument.
        self.shape_bindings: list[Binding] = []
        self._sym_nodes: dict = {}
        # (name, symbol, (min, max), user location) of each symbolic dim that
        # torch._dynamo.mark_dynamic gave a range (dynamic_shapes.check_ranges).
        self.ranged_dims: list[tuple] = []
        # While ranged_dims is not empty: the user location of each ShapeEnv guard (by
        # index in shape_env.guards) that the translator added, for check_ranges' message.
        self.shape_guard_locations: dict[int, Any] = {}
        self._conv_targets: set | None = None
        self.input_sources: list[Source] = []
        self.example_inputs: list[torch.Tensor] = []
        self._inputs_by_source: dict[Source, TensorVariable] = {}
        # One variable per real object (variables/builder.wrap_value): id -> (object, var);
        # the object is held so that its id is not reused during the capture.
        self._vars_by_id: dict[int, tuple[Any, VariableTracker]] = {}
        # Version counters of the graph inputs' FakeTensors when they were created: an input
        # whose counter moved was mutated in place by the graph (add_distinct_guards).
        self._input_versions: dict[Source, int | None] = {}
        self._attr_names: dict[int, str] = {}
        self._attr_sources: dict[str, Source] = {}  # get_attr name -> where it was read
        # Set by the frame converter: modules reached from the frame's arguments are guarded
        # on their type, their tensors are graph inputs (capture/shared_modules.py).
        self.share_modules = False
        # (root instruction index, location) of each ``tensor.requires_grad = True``
        # recorded with grad mode on (check_requires_grad_assignments)
        self.requires_grad_assignments: list = []
        self._names: set[str] = set()
        self.side_effects = SideEffects()
        # Objects the transformed code loads from their sources and passes to the runner
        # after the graph inputs (input containers to return or mutate, closure cells).
        self.runtime_sources: list[Source] = []
        self._grad_enabled_at_start = torch.is_grad_enabled()
        self.grad_mode_changed = False
        # Real contexts entered while tracing (autocast regions): (token, exit) pairs,
        # innermost last; restore_global_state exits the ones still open.
        self._real_contexts: list = []
        # While a branch on a tensor is traced (conditionals.py): a TorchDispatchMode that
        # sees each ATen op the recorded calls run (random ops are refused there).
        self.branch_dispatch_mode = None
        # FakeTensors whose memory a conditional's output may share on one way of its
        # branch (the output's own and those of the tensors it may be): an in-place write
        # to any of them is a graph break (OperationRecorder._check_branch_aliases).
        self.branch_aliased: list[torch.Tensor] = []

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

    def _to_fake_input(self, t: torch.Tensor, source: Source, node: torch.fx.Node) -> torch.Tensor:
        """The FakeTensor of graph input ``t``: symbolic sizes in the dims the policy makes
        dynamic; records the bindings and tells the TENSOR_MATCH guard which sizes and
        strides it must not compare."""
        dims = self.dim_policy.dynamic_dims(source.name(), t) if t.dim() else []
        if not any(dims):
            return self.to_fake(t)
        self._ensure_shape_env()
        from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

        context = StatelessSymbolicContext(
            dynamic_sizes=[DimDynamic.DYNAMIC if d else DimDynamic.STATIC for d in dims],
            constraint_sizes=[None] * len(dims),
        )
        fake = self.fake_mode.from_tensor(
            t, source=_ShapeSource(source.name()), symbolic_context=context
        )
        dyn_sizes, dyn_strides = [], []
        for kind, values, flags in (
            ("size", fake.size(), dyn_sizes),
            ("stride", fake.stride(), dyn_strides),
        ):
            for dim, v in enumerate(values):
                symbolic = dynamic_shapes.is_symbolic(v)
                flags.append(symbolic)
                if symbolic:
                    self.shape_bindings.append(Binding(source, kind, dim, v.node.expr))
                    if kind == "size" and isinstance(v.node.expr, sympy.Symbol):
                        self._sym_nodes.setdefault(v.node.expr, (node, dim))
        self.guards.tensor_dynamic(source, dyn_sizes, dyn_strides)
        return fake

    def dynamic_int_input(self, value: int, source: Source):
        """A symbolic int for the int input at ``source`` when the policy makes it dynamic
        (see ``DimPolicy.dynamic_int``), else None. Its graph input (a placeholder) is only
        added if the graph uses it (``_expr_node``)."""
        if not self.dim_policy.dynamic_int(source.name(), value) or value in (0, 1):
            # 0 and 1 are specialized (the caller adds an EQUALS_MATCH guard), as sizes are:
            # AOTAutograd would make a symbol with hint 0 or 1 a constant without a guard.
            return None
        self._ensure_shape_env()
        from torch.fx.experimental.symbolic_shapes import DimDynamic

        sym = self.shape_env.create_unspecified_symint_and_symbol(
            value, _ShapeSource(source.name()), DimDynamic.DYNAMIC
        )
        if not dynamic_shapes.is_symbolic(sym):
            return None
        self.shape_bindings.append(Binding(source, "int", 0, sym.node.expr))
        self._sym_nodes.setdefault(sym.node.expr, ("int", source, sym))
        return sym

    def locate_new_shape_guards(self, location: Callable[[], Any]) -> None:
        """Attribute the ShapeEnv guards added since the last call to ``location()`` (the
        instruction just interpreted)."""
        n = len(self.shape_env.guards) if self.shape_env is not None else 0
        if n > len(self.shape_guard_locations):
            where = location()
            for i in range(len(self.shape_guard_locations), n):
                self.shape_guard_locations[i] = where

    def _ensure_shape_env(self) -> None:
        """Give the FakeTensorMode a ShapeEnv, on the first dynamic input only: a ShapeEnv
        costs ~20 ms to create (seconds for the first one in a process, which imports
        more of torch), too much for every static capture. Data-dependent output shapes and
        scalar outputs stay unsupported (they raise, and the translator breaks the graph
        there), as without a ShapeEnv."""
        if self.shape_env is None:
            self.shape_env = ShapeEnv(
                allow_dynamic_output_shape_ops=False, allow_scalar_outputs=False
            )
            self.fake_mode.shape_env = self.shape_env
            self.fake_mode.static_shapes = False

    def has_dynamic_shapes(self) -> bool:
        return bool(self.shape_bindings)

    def backend_context(self):
        """Context for the backend compile: with symbolic sizes, a TracingContext holding this
        capture's FakeTensorMode, so AOTAutograd and Inductor trace with the same symbols
        (and the guards they add land in this ShapeEnv)."""
        import contextlib

        if not self.has_dynamic_shapes():
            return contextlib.nullcontext()
        from torch._guards import TracingContext, tracing

        return tracing(TracingContext(self.fake_mode))

    def sym_arg(self, value: Any) -> Any:
        """A symbolic number used as an operation's argument, as a graph value: a node that
        computes it from the inputs' sizes (``x.size(0)``, sums and products of those), or,
        for expressions without such a form, its concrete value (which adds a guard)."""
        import sympy as sp

        if not dynamic_shapes.is_symbolic(value):
            return dynamic_shapes.specialize(value)
        if not isinstance(value, torch.SymInt):
            return dynamic_shapes.specialize(value)
        expr = self.shape_env.simplify(value.node.expr)
        node = self._expr_node(expr, sp)
        return node if node is not None else dynamic_shapes.specialize(value)

    def _expr_node(self, expr, sp):
        if isinstance(expr, sp.Integer):
            return int(expr)
        cached = self._sym_nodes.get(expr)
        if isinstance(cached, torch.fx.Node):
            return cached
        if isinstance(cached, tuple) and cached[0] == "int":  # an int input: a placeholder
            _, source, sym = cached
            last = self._last_placeholder()
            name = self._unique(source.name())
            with (
                self.graph.inserting_after(last)
                if last is not None
                else self.graph.inserting_before(None)
            ):
                node = self.graph.placeholder(name)
            node.meta["example_value"] = sym
            self.input_sources.append(source)
            # The SymInt itself, not its hint: AOTAutograd makes a plain int example its
            # own fresh symbol (or, for 0 and 1, a constant) that no guard of ours covers.
            self.example_inputs.append(sym)
            self._sym_nodes[expr] = node
            return node
        if isinstance(cached, tuple):  # (input placeholder, dim): emit x.size(dim) once
            placeholder, dim = cached
            last = self._last_placeholder()
            with self.graph.inserting_after(last):
                node = self.graph.call_method("size", (placeholder, dim))
            node.meta["example_value"] = placeholder.meta["example_value"].size(dim)
            self._sym_nodes[expr] = node
            return node
        from torch.utils._sympy.functions import FloorDiv

        ops = {sp.Add: operator.add, sp.Mul: operator.mul, FloorDiv: operator.floordiv}
        op = next((f for cls, f in ops.items() if isinstance(expr, cls)), None)
        if op is None:
            return None
        args = [self._expr_node(a, sp) for a in expr.args]
        if any(a is None for a in args):
            return None
        result = args[0]
        for a in args[1:]:
            examples = [
                x.meta["example_value"] if isinstance(x, torch.fx.Node) else x for x in (result, a)
            ]
            node = self.graph.call_function(op, (result, a))
            node.meta["example_value"] = op(*examples)
            result = node
        self._sym_nodes[expr] = result
        return result

    # --- one variable per real object -------------------------------------------------------
    def known_variable(self, value: Any, source: Source | None) -> VariableTracker | None:
        """The variable already standing for ``value`` (the same object) in this capture, or
        None. Reached now through ``source``: an ``ALIAS`` guard ties the two sources."""
        entry = self._vars_by_id.get(id(value))
        if entry is None or entry[0] is not value:
            return None
        var = entry[1]
        if source is not None and var.source is not None and var.source != source:
            self.guards.alias(var.source, source, True)
        elif source is not None and var.source is None:
            # first seen as a value computed at capture (no source, no guard): the object
            # at `source` must be that very object on a later call
            self.guards.id_match(source, value)
        return var

    def remember_variable(self, value: Any, var: VariableTracker) -> None:
        self._vars_by_id.setdefault(id(value), (value, var))

    def add_distinct_guards(self) -> None:
        """``DISTINCT`` guards where the capture relied on two sources NOT being one object:
        a tensor input the graph mutates in place against every other tensor input, and a
        mutated input container or object against every other one of its type. Called once
        the frame is translated, before its guard tree is built."""
        tensors = [(s, v) for s, v in self._inputs_by_source.items()]
        mutated = [
            s
            for s, v in tensors
            if self._input_versions.get(s, 0) is None
            or v.example._version != self._input_versions.get(s, 0)
        ]
        for m in mutated:
            for s, _ in tensors:
                if s != m and self._inputs_by_source[s] is not self._inputs_by_source[m]:
                    self.guards.alias(m, s, False)
        written = self.side_effects.mutated_objects()
        if not written:
            return
        objects = [
            (value, var)
            for value, var in self._vars_by_id.values()
            if var.source is not None and not isinstance(var, TensorVariable)
        ]
        for value, var in objects:
            if id(value) not in written:
                continue
            for other, other_var in objects:
                if other is not value and type(other) is type(value):
                    self.guards.alias(var.source, other_var.source, False)

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
            unimplemented(gbt.FAKE_TENSOR, f"tensor subclass {type(value).__name__} as input")
        name = self._unique(source.name())
        last = self._last_placeholder()
        with (
            self.graph.inserting_after(last)
            if last is not None
            else self.graph.inserting_before(None)
        ):
            node = self.graph.placeholder(name)
        fake = self._to_fake_input(value, source, node)
        ranges = dynamic_shapes.dim_ranges(value) if value.dim() else {}
        for dim, bounds in ranges.items():
            name = f"{source.name()}.size()[{dim}]"
            where = tx.location() if tx is not None else None
            dynamic_shapes.check_size_in_range(name, value.size(dim), bounds, where)
            size = fake.size(dim)
            if dynamic_shapes.is_symbolic(size) and isinstance(size.node.expr, sympy.Symbol):
                self.ranged_dims.append((name, size.node.expr, bounds, where))
                # The range bounds the symbol, so the entry's shape guards check it: a later
                # size outside it compiles again (and raises there when still marked), as
                # under torch.compile.
                dynamic_shapes.constrain_to_range(self.shape_env, size.node.expr, bounds)
        # Inference tensors keep no version counter: count them as mutated (conservative:
        # DISTINCT guards against the other inputs) rather than failing the capture.
        self._input_versions[source] = None if fake.is_inference() else fake._version
        node.meta["example_value"] = fake
        var = TensorVariable(node, fake, source)
        self._inputs_by_source[source] = var
        self.input_sources.append(source)
        self.example_inputs.append(value)
        return var

    def real_tensor(self, var: TensorVariable) -> torch.Tensor | None:
        """The real tensor behind ``var`` when it is a graph input (the one seen at capture)
        or a graph attribute (a parameter or buffer), else None (a value the graph
        computes: no real object exists while capturing)."""
        if var.node.op == "placeholder" and var.source is not None:
            if self._inputs_by_source.get(var.source) is var:
                return self.example_inputs[self.input_sources.index(var.source)]
            return None
        if var.node.op == "get_attr" and isinstance(var.node.target, str):
            value = getattr(self.root, var.node.target, None)
            return value if isinstance(value, torch.Tensor) else None
        return None

    def _last_placeholder(self):
        last = None
        for node in self.graph.nodes:
            if node.op != "placeholder":
                break
            last = node
        return last

    def check_requires_grad_assignments(self) -> None:
        """``tensor.requires_grad = True`` in a graph where no input or parameter requires
        grad (and grad mode was on): an AOTAutograd backend would compile an inference graph,
        whose outputs never require grad, where eager's do. Raises Unsupported at the first
        such assignment (a graph break there, :func:`variables.tensor.set_requires_grad`)."""
        if not self.requires_grad_assignments:
            return
        if any(isinstance(t, torch.Tensor) and t.requires_grad for t in self.example_inputs):
            return  # graph inputs: their TENSOR_MATCH guards requires_grad
        for name, t in [*self.root.named_parameters(), *self.root.named_buffers()]:
            source = self._attr_sources.get(name)
            if t.requires_grad and source is not None:
                # get_attr tensors are guarded on identity only: freezing this one later
                # must recompile (and then break at the assignment)
                self.guards.equals_match(AttrSource(source, "requires_grad"), True)
                return
        index, location = self.requires_grad_assignments[0]
        err = Unsupported(
            "tensor.requires_grad = True in a graph where no input requires grad (its outputs "
            "would not require grad after an AOTAutograd backend)",
            location,
            gb_type=gbt.SIDE_EFFECT,
        )
        err.root_index = index
        raise err

    def shares_module(self, source: Source | None) -> bool:
        """Whether the module at ``source`` is captured shared (guarded on its type, its
        tensors graph inputs): in a shared-module capture, for modules reached from the
        frame's arguments (see capture/shared_modules.py)."""
        from .shared_modules import is_frame_argument

        return self.share_modules and is_frame_argument(source)

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
                self._attr_sources[name] = source
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

    def set_grad_enabled(self, enabled: bool) -> None:
        """Record a grad-mode switch in the graph and apply it for the rest of the trace."""
        self.graph.call_function(torch._C._set_grad_enabled, (enabled,))
        torch._C._set_grad_enabled(enabled)
        self.grad_mode_changed = True

    def enter_real_context(self, enter: Callable, exit: Callable) -> object:
        """Enter a context for real for the rest of the trace (``enter()``; ``exit(state)``
        undoes it). Returns a token for :meth:`exit_real_context`."""
        token = object()
        self._real_contexts.append((token, exit, enter()))
        return token

    def exit_real_context(self, token: object) -> None:
        if not self._real_contexts or self._real_contexts[-1][0] is not token:
            unimplemented(gbt.CONTEXT_MANAGER, "context managers exited out of order")
        _, exit, state = self._real_contexts.pop()
        exit(state)

    def runtime_arg(self, source: Source) -> int:
        """Index of ``source`` among the runtime arguments (added once)."""
        if source not in self.runtime_sources:
            self.runtime_sources.append(source)
        return self.runtime_sources.index(source)

    def check_global_state(self) -> None:
        if torch.is_grad_enabled() != self._grad_enabled_at_start:
            unimplemented(
                gbt.SIDE_EFFECT,
                "the captured code changes grad mode without restoring it (side effect)",
            )
        if self._real_contexts:
            unimplemented(
                gbt.CONTEXT_MANAGER, "the captured code leaves a torch.autocast region open"
            )

    def restore_global_state(self) -> None:
        """Undo what tracing switched for real (grad mode, open autocast regions)."""
        while self._real_contexts:
            _, exit, state = self._real_contexts.pop()
            exit(state)
        torch._C._set_grad_enabled(self._grad_enabled_at_start)


@dataclasses.dataclass(frozen=True)
class _ShapeSource(torch._guards.Source):
    """Names a graph input for the ShapeEnv (its symbols print as this source's sizes).
    torch 2.11's ``Source`` derives ``name`` from ``_name_template`` (a cached property)."""

    source_name: str

    @property
    def _name_template(self) -> str:
        return self.source_name

    @property
    def guard_source(self):
        return torch._guards.GuardSource.LOCAL
