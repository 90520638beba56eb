"""The FX graph being built for one captured frame, and its compilation.

Key class: :class:`OutputGraph`. It owns the ``torch.fx.Graph``, the FakeTensorMode that
propagates shapes/dtypes/devices, the graph inputs (one placeholder per tensor source), the
parameters/buffers/submodules referenced by ``get_attr`` / ``call_module`` nodes, and the
:class:`~torch_plugin.capture.guards.GuardSet`. :meth:`OutputGraph.compile` hands the graph
to the backend and returns the callable the transformed bytecode calls.
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

from .. import config
from . import dynamic_shapes
from .exc import Unsupported, unimplemented
from .guards import GuardSet
from .pure_calls import (
    check_fold_left_inputs_unchanged,
    describe_call,
    is_mutating_call,
    is_pure_call,
    overlapping_argument,
    tensor_versions,
)
from .shape_guards import Binding
from .side_effects import SideEffects
from .sources import AttrSource, Source
from .variables.base import VariableTracker
from .variables.constant import ConstantVariable, is_immutable
from .variables.tensor import TensorVariable


def _sanitize(name: str) -> str:
    name = re.sub(r"[^0-9a-zA-Z_]+", "_", name).strip("_")
    return name if name and not name[0].isdigit() else f"_{name}"


class OutputGraph:
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
        # Set by the frame converter: the graph's parameters may change in place without a
        # version bump (FSDP2); the compiled graph carries it to the backend in gm.meta.
        self.unversioned_parameters = False
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
            unimplemented(f"tensor subclass {type(value).__name__} as input")
        name = self._unique(source.name())
        last = self._last_placeholder()
        with (
            self.graph.inserting_after(last)
            if last is not None
            else self.graph.inserting_before(None)
        ):
            node = self.graph.placeholder(name)
        fake = self._to_fake_input(value, source, node)
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
                return self._const_arg(value.value, fake)
            if value.is_python_constant():
                const = value.as_python_constant()
                if is_immutable(const):
                    return self._const_arg(const, fake)
            unimplemented(f"argument {value} to a torch operation")
        return value

    def _record(
        self, tx, kind: str, target, args: list, kwargs: dict, run: Callable
    ) -> VariableTracker:
        node_args = tuple(self._to_args(a, False) for a in args)
        node_kwargs = {k: self._to_args(v, False) for k, v in kwargs.items()}
        fake_args = tuple(self._to_args(a, True) for a in args)
        fake_kwargs = {k: self._to_args(v, True) for k, v in kwargs.items()}
        if overlapping_argument(kind, target, fake_args, fake_kwargs):
            unimplemented(
                f"{describe_call(kind, target)} writes a tensor that another argument overlaps"
                " (eager decides: it raises or computes in place)"
            )
        versions = tensor_versions(fake_args, fake_kwargs) if config.debug_check_pure else None
        try:
            with self.fake_mode, self._guard_context(target, fake_args):
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
        if _holds_numpy_scalar((fake_args, fake_kwargs)):
            self._check_plain_scalars_agree(target, run, fake_args, fake_kwargs, example)
        if not _contains_tensor(example):
            if is_pure_call(kind, target):
                # metadata-only result (e.g. torch.is_floating_point): a constant of the
                # capture. Only calls known to be pure are folded (see pure_calls.py).
                if config.debug_check_pure:
                    check_fold_left_inputs_unchanged(target, fake_args, fake_kwargs, versions)
                from .variables.builder import wrap_constant_or_object

                return wrap_constant_or_object(example)
            if not is_mutating_call(kind, target, node_kwargs):
                unimplemented(
                    f"{describe_call(kind, target)} returned no tensor and is not known to be"
                    " pure (its effect cannot be replayed)"
                )
            if example is not None:
                unimplemented(
                    f"{describe_call(kind, target)} mutates a tensor and returns a"
                    f" {type(example).__name__}"
                )
            # An in-place call whose result is None (``t[i] = v``, ``Tensor.__setitem__``):
            # a graph node, so the mutation happens when the graph runs.
            node = self.graph.create_node(kind, target, node_args, node_kwargs)
            node.meta["example_value"] = None
            node.meta["stack_trace"] = tx.current_location_text()
            return ConstantVariable(None)
        node = self.graph.create_node(kind, target, node_args, node_kwargs)
        node.meta["example_value"] = example
        node.meta["stack_trace"] = tx.current_location_text()
        return self._wrap_result(tx, node, example, _argument_variables(args, kwargs))

    def _check_plain_scalars_agree(
        self, target, run: Callable, fake_args: tuple, fake_kwargs: dict, example: Any
    ) -> None:
        """The graph spells a NumPy scalar argument (``np.float64(2.5)``, a ``float``
        subclass) as the Python number of the same value (its FX code has no ``np``, see
        :func:`_plain_scalar`). Allowed only where that gives the same result's type, dtype,
        shape, strides, device and requires_grad as the NumPy scalar did (FakeTensor runs the
        call both ways): ``torch.tensor(np.float64(2.5))`` is float64 where
        ``torch.tensor(2.5)`` is float32, a graph break."""
        plain_args = _plain_scalar(fake_args)
        plain_kwargs = _plain_scalar(fake_kwargs)
        try:
            with self.fake_mode, self._guard_context(target, plain_args):
                plain = run(*plain_args, **plain_kwargs)
        except Exception:  # noqa: BLE001 - any difference is a graph break
            plain = _MISMATCH
        if not _same_metadata(example, plain):
            unimplemented(
                f"{getattr(target, '__name__', target)} with a NumPy scalar argument gives"
                " another result than with the Python number of its value"
            )

    def _guard_context(self, target, fake_args: tuple):
        """Convolutions on contiguous input and weight: no guards from the fake kernel.

        FakeTensor's convolution asks ATen which backend the real kernel would pick
        (``torch._C._select_conv_backend``), only to choose the output's memory format. On
        CPU that choice reads the batch size (oneDNN from 16 on), so a symbolic batch would
        get a guard ``s0 < 16`` and a batch sweep would compile three times. For contiguous
        input and weight every CPU backend returns a contiguous output
        (``_determine_backend_memory_format`` in ATen's Convolution.cpp), so the decision
        does not change the graph and need not be guarded.
        """
        import contextlib

        if not self.shape_bindings:
            return contextlib.nullcontext()
        if len(fake_args) < 2:
            return self._symbolic_context()
        if self._conv_targets is None:
            F = torch.nn.functional
            self._conv_targets = {
                F.conv1d,
                F.conv2d,
                F.conv3d,
                torch.conv1d,
                torch.conv2d,
                torch.conv3d,
                torch.ops.aten.convolution.default,
            }
        x, w = fake_args[0], fake_args[1]
        if (
            target in self._conv_targets
            and isinstance(x, torch.Tensor)
            and isinstance(w, torch.Tensor)
            and x.device.type == "cpu"
            and w.is_contiguous()
            and x.is_contiguous()
        ):
            stack = contextlib.ExitStack()
            stack.enter_context(self._symbolic_context())
            stack.enter_context(self.shape_env.suppress_guards())
            return stack
        return self._symbolic_context()

    def _symbolic_context(self):
        """PyTorch's Python dispatcher, on when sizes are symbolic: composite ops (matmul,
        ...) then decompose through their symbolic-size-aware Python decompositions instead
        of C++ code that reads concrete sizes (which would specialize a symbol, e.g.
        ``Eq(s0, 2)`` from a 4-d ``torch.matmul``). Dynamo does the same while tracing."""
        from torch._dispatch.python import enable_python_dispatcher

        return enable_python_dispatcher()

    def _wrap_result(
        self, tx, node: torch.fx.Node, example: Any, known: dict | None = None
    ) -> VariableTracker:
        """The variable for ``node``'s result. A tensor that is one of the call's tensor
        arguments (an in-place op's ``self``, an ``out=`` tensor, ``x.to(x.dtype)``: FakeTensor
        returns the very fake object it was given, as the real op returns the very tensor) is
        that argument's variable (``known``: id of its example -> variable), so ``x.add_(1) is
        x`` holds and every later use is that one variable. The node itself stays in the
        graph, in order, and carries the mutation (nothing removes unused nodes; AOTAutograd
        traces every node and functionalizes the mutation)."""
        from .variables.lists import ListVariable, NamedTupleVariable, TupleVariable

        known = known or {}
        if isinstance(example, torch.Tensor):
            same = known.get(id(example))
            if same is not None and same.example is example:
                return same
            return TensorVariable(node, example)
        if isinstance(example, (tuple, list)):
            items = []
            for i, ex in enumerate(example):
                if isinstance(ex, torch.Tensor):
                    n = self.graph.call_function(operator.getitem, (node, i))
                    n.meta["example_value"] = ex
                    items.append(self._wrap_result(tx, n, ex, known))
                elif _contains_tensor(ex):
                    n = self.graph.call_function(operator.getitem, (node, i))
                    items.append(self._wrap_result(tx, n, ex, known))
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
        run = _eval_batch_norm_shape_rule(module, args, kwargs) or module
        return self._record(tx, "call_module", name, args, kwargs, run)

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
            unimplemented("context managers exited out of order")
        _, exit, state = self._real_contexts.pop()
        exit(state)

    def runtime_arg(self, source: Source) -> int:
        """Index of ``source`` among the runtime arguments (added once)."""
        if source not in self.runtime_sources:
            self.runtime_sources.append(source)
        return self.runtime_sources.index(source)

    def check_global_state(self) -> None:
        if torch.is_grad_enabled() != self._grad_enabled_at_start:
            unimplemented("the captured code changes grad mode without restoring it (side effect)")
        if self._real_contexts:
            unimplemented("the captured code leaves a torch.autocast region open")

    def restore_global_state(self) -> None:
        """Undo what tracing switched for real (grad mode, open autocast regions)."""
        while self._real_contexts:
            _, exit, state = self._real_contexts.pop()
            exit(state)
        torch._C._set_grad_enabled(self._grad_enabled_at_start)

    def _const_arg(self, value: Any, fake: bool) -> Any:
        """A constant argument; symbolic numbers in it become graph values (see sym_arg)."""
        if fake:
            return value
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return self.sym_arg(value)
        if _holds_numpy_scalar(value):
            # checked to give the same result (_check_plain_scalars_agree)
            value = _plain_scalar(value)
        if isinstance(value, (tuple, list)) and any(
            isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool, tuple, list)) for v in value
        ):
            items = [self._const_arg(v, fake) for v in value]
            return type(value)(items) if type(value) in (tuple, list) else tuple(items)
        if isinstance(value, slice) and any(
            isinstance(v, torch.SymInt) for v in (value.start, value.stop, value.step)
        ):
            return slice(*(self._const_arg(v, fake) for v in (value.start, value.stop, value.step)))
        return value


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


def _argument_variables(args: list, kwargs: dict) -> dict:
    """id of each tensor argument's example -> its variable (also inside list, tuple and dict
    arguments): the variables a call's result may be (see ``OutputGraph._wrap_result``)."""
    from .variables.dicts import ConstDictVariable
    from .variables.lists import BaseListVariable

    found: dict = {}
    todo = [*args, *kwargs.values()]
    while todo:
        v = todo.pop()
        if isinstance(v, TensorVariable):
            found.setdefault(id(v.example), v)
        elif isinstance(v, BaseListVariable):
            todo.extend(v.items)
        elif isinstance(v, ConstDictVariable):
            todo.extend(v.items.values())
    return found


_MISMATCH = object()


def _is_numpy_scalar(value: Any) -> bool:
    """A NumPy scalar that is also a Python number (``np.float64`` subclasses ``float``,
    ``np.complex128`` ``complex``): a constant of the capture, but not one FX code can
    spell (it prints as ``np.float64(2.5)``)."""
    return (
        isinstance(value, (int, float, complex))
        and type(value) not in (int, float, complex, bool)
        and type(value).__module__ == "numpy"
    )


def _holds_numpy_scalar(value: Any) -> bool:
    if _is_numpy_scalar(value):
        return True
    if isinstance(value, (tuple, list)):
        return any(_holds_numpy_scalar(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_numpy_scalar(v) for v in value.values())
    return False


def _plain_scalar(value: Any) -> Any:
    """``value`` with each NumPy scalar replaced by the Python number of the same value
    (exact: ``np.float64`` is a double, as ``float``), inside tuples, lists and dicts."""
    if _is_numpy_scalar(value):
        for base in (float, int, complex):
            if isinstance(value, base):
                return base(value)
    if type(value) in (tuple, list):
        return type(value)(_plain_scalar(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain_scalar(v) for k, v in value.items()}
    return value


def _same_metadata(a: Any, b: Any) -> bool:
    """Whether two fake results agree in everything the graph's result would show
    except values (type, dtype, shape, strides, device, requires_grad; containers item by
    item; other values equal and of one type)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            type(a) is type(b)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and a.stride() == b.stride()
            and a.device == b.device
            and a.requires_grad == b.requires_grad
        )
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same_metadata, a, b))
    return type(a) is type(b) and a == b


def _contains_tensor(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (tuple, list)):
        return any(_contains_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_contains_tensor(v) for v in value.values())
    return False


def _eval_batch_norm_shape_rule(module: torch.nn.Module, args: list, kwargs: dict):
    """For a BatchNorm module that normalizes with its running statistics, a function
    giving its output's metadata (``empty_like`` of the input, which is what the kernel
    returns: same sizes, strides and dtype) without running it on FakeTensors, or None.

    FakeTensor has no fast kernel for batch norm and runs PyTorch's Python decomposition
    (about 30 ops) instead: 0.2-0.4 s of capturing a ResNet-50. The checks the
    decomposition would make on the input (rank, channel count) are made here; anything
    else (training mode, no running statistics, other arguments) returns None and takes
    the FakeTensor path.
    """
    if (
        not isinstance(module, torch.nn.modules.batchnorm._BatchNorm)
        or type(module).forward is not torch.nn.modules.batchnorm._BatchNorm.forward
        or module.training
        or module.running_mean is None
        or module.running_var is None
        or kwargs
        or len(args) != 1
        or not isinstance(args[0], TensorVariable)
    ):
        return None
    expected_dims = {
        torch.nn.BatchNorm1d: (2, 3),
        torch.nn.BatchNorm2d: (4,),
        torch.nn.BatchNorm3d: (5,),
    }.get(type(module))
    if expected_dims is None:
        return None

    def run(x: torch.Tensor) -> torch.Tensor:
        stats_dtype = module.running_mean.dtype
        if (
            x.dim() not in expected_dims
            or x.shape[1] != module.num_features  # the module raises the real error
            or any(isinstance(d, torch.SymInt) for d in x.shape)
            or not (x.dtype == stats_dtype or x.dtype in (torch.float16, torch.bfloat16))
            or not (
                x.is_contiguous()
                or (x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last))
            )
        ):
            return module(x)
        return torch.empty_like(x)

    return run
