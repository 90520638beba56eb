"""The compiled artifact: a compiled graph as a ``torch.fx.GraphModule`` of dispatcher ops.

After the C++ pass pipeline, a compiled graph is a list of steps: library calls
(``torch_plugin::conv_pointwise``, ``torch_plugin::linear_pointwise``), generated kernels
(``torch_plugin::fused``) and ATen calls (the fallback). :func:`to_graph_module` writes those
steps as an FX graph whose nodes call ``torch.ops.torch_plugin.*`` and ``torch.ops.aten.*``,
with the frozen and folded constants as buffers (``get_attr``) and each generated kernel's
source as a string attribute (``<kernel>_source``; a CUDA kernel's call also passes its
``target="cuda"``, entry and launch configuration as keyword arguments). The graph module

- prints as readable Python (``print(gm.code)``, ``gm.print_readable()``);
- runs on its tensors' device (CPU; CUDA for CUDA kernels) and matches the compiled
  graph (and eager PyTorch);
- re-traces: ``make_fx`` / FakeTensor go through the ops' Meta kernels;
- survives ``torch.save`` / ``torch.load(weights_only=False)``, also in a fresh process
  whose kernel cache is empty: ``torch_plugin::fused`` rebuilds each kernel from its
  source (and ``torch.load`` imports ``torch_plugin``, which registers the ops).

A second form, :func:`to_executor_graph_module`, is one call of
``torch.ops.torch_plugin.run_graph`` on the executor itself (a
``torch.classes.torch_plugin.Executor`` attribute): the fast path, through the dispatcher.
It prints, runs and re-traces (FakeTensor: the op's Meta kernel) but cannot be saved.

The step form is a description of the compiled graph, not its fast path: the C++ executor
(``CompiledGraph.executor``) runs the same steps without Python, with oneDNN primitives
whose weights are prepacked; the graph module's library ops run their reference CPU
kernels (ATen), and each call goes through the dispatcher from Python.

Key parts:
- :func:`to_graph_module`: a :class:`~torch_plugin.compiler.stages.CompiledGraph` (or an
  IR graph exported by ``_C._compiler.Graph.export()``) to a :class:`PluginGraphModule`.
- Compiling a model or a captured graph to its artifact (AOTAutograd, freezing, the pass
  pipeline, then :func:`to_graph_module`) is :func:`torch_plugin.artifact.compile_to_graph_module`.
- :class:`PluginGraphModule`: the ``GraphModule`` subclass that pickles with ``torch_plugin``
  imported on load and keeps kernel sources as attributes across a save and load.
- :func:`to_executor_graph_module`: a compiled graph as one ``run_graph`` call on its
  executor (:class:`ExecutorGraphModule`).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx

from torch_plugin import _C
from torch_plugin.compiler.lowering import _DTYPES, _LAYOUTS, _MEMORY_FORMATS

__all__ = [
    "ExecutorGraphModule",
    "PluginGraphModule",
    "to_executor_graph_module",
    "to_graph_module",
]

_DTYPE_OF = {code: dtype for dtype, code in _DTYPES.items()}
_LAYOUT_OF = {code: layout for layout, code in _LAYOUTS.items()}
_MEMORY_FORMAT_OF = {code: fmt for fmt, code in _MEMORY_FORMATS.items()}
_SOURCE_SUFFIX = "_source"


class PluginGraphModule(torch.fx.GraphModule):
    """A ``GraphModule`` of ``torch.ops.torch_plugin.*`` and ATen calls (see the module doc).

    Pickling stores the generated code, as for any ``GraphModule``; loading goes through
    :func:`_load`, which imports ``torch_plugin`` first (the ops must be registered before
    the code is re-traced) and turns kernel sources back into attribute reads.
    """

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        fn, args = super().__reduce__()
        return (_load, (fn, args))


def _load(fn: Any, args: tuple[Any, ...]) -> PluginGraphModule:
    """Unpickles a :class:`PluginGraphModule` (``fn(*args)`` is FX's own loader)."""
    loaded = fn(*args)
    gm = PluginGraphModule(loaded, loaded.graph, class_name="PluginGraphModule")
    # FX's loader re-traces the code, which inlines string attributes as literals.
    sources = {
        value: name
        for name, value in vars(loaded).items()
        if name.endswith(_SOURCE_SUFFIX) and isinstance(value, str)
    }
    for source, attr in sources.items():
        setattr(gm, attr, source)
    changed = False
    for node in list(gm.graph.nodes):
        if node.target is torch.ops.torch_plugin.fused.default and isinstance(node.args[1], str):
            attr = sources.get(node.args[1])
            if attr is None:
                continue
            with gm.graph.inserting_before(node):
                read = gm.graph.create_node("get_attr", attr)  # get_attr() warns for a str
            node.update_arg(1, read)
            changed = True
    if changed:
        gm.recompile()
    return gm


def to_graph_module(compiled: Any) -> PluginGraphModule:
    """The compiled graph ``compiled`` as an FX graph module of dispatcher ops.

    ``compiled``: a :class:`~torch_plugin.compiler.stages.CompiledGraph`, an IR graph
    (``_C._compiler.Graph``, after ``run_pipeline``), or the dict its ``export()`` returns.
    The module takes the compiled graph's runtime inputs (for a frozen graph: without
    the frozen parameters, which are buffers) as positional tensors and returns a tuple
    of its outputs. Raises ``NotImplementedError`` for an IR node it cannot express as
    a dispatcher call (an op unknown to ``torch.ops``, or with several list returns).
    """
    if isinstance(compiled, dict):
        exported = compiled
    elif isinstance(compiled, _C._compiler.Graph):
        exported = compiled.export()
    else:
        exported = compiled.ir_graph.export()
    return _Builder(exported).build()


class ExecutorGraphModule(torch.fx.GraphModule):
    """``run_graph(executor, [inputs]) -> outputs``: a compiled graph's C++ executor as one
    dispatcher call (see :func:`to_executor_graph_module`). Not picklable."""

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        raise TypeError(
            "a torch_plugin executor graph module cannot be saved (its executor holds oneDNN "
            "primitives and loaded kernels); save CompiledGraph.graph_module, the step-level "
            "FX graph, instead"
        )


def to_executor_graph_module(compiled: Any) -> ExecutorGraphModule:
    """The compiled graph ``compiled`` (a :class:`~torch_plugin.compiler.stages.CompiledGraph`)
    as an FX graph module with one node calling ``torch.ops.torch_plugin.run_graph.default``
    on its executor (the attribute ``executor``, a ``torch.classes.torch_plugin.Executor``).

    The module takes the compiled graph's runtime inputs (without frozen parameters) as
    positional CPU tensors of the compiled sizes and dtypes and returns a tuple of its
    outputs, with the strides the graph promised. Under FakeTensor or ``make_fx`` the op's
    Meta kernel gives the outputs' metadata. A wrong number of inputs, or an input of other
    sizes or dtype, raises RuntimeError naming the input.
    """
    executor = compiled.executor
    root = torch.nn.Module()
    root.executor = executor.script_object()
    graph = torch.fx.Graph()
    inputs = [graph.placeholder(f"arg{i}") for i in range(executor.num_inputs())]
    obj = graph.get_attr("executor")
    results = graph.call_function(torch.ops.torch_plugin.run_graph.default, (obj, inputs))
    graph.output(
        tuple(
            graph.call_function(operator.getitem, (results, i))
            for i in range(executor.num_outputs())
        )
    )
    return ExecutorGraphModule(root, graph, class_name="ExecutorGraphModule")


class _Builder:
    def __init__(self, exported: dict[str, Any]):
        self.ex = exported
        self.values: dict[int, tuple[int, list[int], list[int]]] = exported["values"]
        self.constants = dict(exported["constants"])
        self.graph = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.env: dict[int, torch.fx.Node] = {}

    def build(self) -> PluginGraphModule:
        for i, vid in enumerate(self.ex["inputs"]):
            self.env[vid] = self.graph.placeholder(f"arg{i}")
        for n in self.ex["nodes"]:
            if n["op"] == "torch_plugin::fused":
                self._fused(n)
            else:
                self._call(n)
        self.graph.output(tuple(self._value(v) for v in self.ex["outputs"]))
        gm = PluginGraphModule(self.root, self.graph, class_name="PluginGraphModule")
        gm.graph.lint()
        return gm

    def _value(self, vid: int) -> torch.fx.Node:
        node = self.env.get(vid)
        if node is None:
            if vid not in self.constants:
                raise NotImplementedError(f"IR value %{vid} is used before it is defined")
            name = f"_const{len(self.root._buffers)}"
            self.root.register_buffer(name, self.constants[vid])
            node = self.env[vid] = self.graph.get_attr(name)
        return node

    def _fused(self, n: dict[str, Any]) -> None:
        name = n["attrs"].get("name", "fused")
        inputs = [vid for kind, vid in n["args"] if kind == "t"]
        if "source" not in n["attrs"]:
            raise NotImplementedError(f"fusion group {name} has no generated source")
        source_attr = f"{name}{_SOURCE_SUFFIX}"
        setattr(self.root, source_attr, n["attrs"]["source"])
        source = self.graph.create_node("get_attr", source_attr)
        ins = [self.values[v] for v in inputs]
        outs = [self.values[v] for v in n["outputs"]]
        # A CUDA kernel also carries its entry and launch configuration (the op's
        # trailing arguments; a C++ kernel leaves them at their defaults).
        attrs = n["attrs"]
        target = attrs.get("target", "cpp")
        launch: dict[str, Any] = {}
        if target != "cpp":
            launch = {
                "target": target,
                "entry": attrs.get("entry", "kernel"),
                "grid": int(attrs.get("grid", 0)),
                "block": int(attrs.get("block", 0)),
                "shared_bytes": int(attrs.get("shared_bytes", 0)),
            }
        call = self.graph.create_node(
            "call_function",
            torch.ops.torch_plugin.fused.default,
            (
                [self._value(v) for v in inputs],
                source,
                [list(t[1]) for t in ins],
                [list(t[2]) for t in ins],
                [_DTYPE_OF[t[0]] for t in ins],
                [list(t[1]) for t in outs],
                [list(t[2]) for t in outs],
                [_DTYPE_OF[t[0]] for t in outs],
                name,
            ),
            launch,
            name=name,
        )
        call.meta["fusion_group"] = n["body"]
        for i, vid in enumerate(n["outputs"]):
            self.env[vid] = self.graph.call_function(operator.getitem, (call, i))

    def _call(self, n: dict[str, Any]) -> None:
        op = _resolve(n["op"], n["overload"])
        schema = op._schema
        if len(n["args"]) > len(schema.arguments):
            raise NotImplementedError(
                f"{n['op']}: {len(n['args'])} arguments, its schema has {len(schema.arguments)}"
            )
        positional: list[Any] = []
        kwargs: dict[str, Any] = {}
        defaults: list[bool] = []
        for arg, (kind, payload) in zip(schema.arguments, n["args"]):
            if kind == "t":
                value: Any = self._value(payload)
            elif kind == "l":
                value = [None if v is None else self._value(v) for v in payload]
            else:
                value = _constant(payload, str(arg.real_type))
            is_default = kind == "c" and arg.has_default_value() and _same(value, arg.default_value)
            if arg.kwarg_only:
                if not is_default:
                    kwargs[arg.name] = value
            else:
                positional.append(value)
                defaults.append(is_default)
        while defaults and defaults[-1]:  # trailing defaults are left out
            defaults.pop()
            positional.pop()
        name = n["op"].split("::")[-1]  # "conv_pointwise", "mean" (FX numbers repeats)
        call = self.graph.create_node("call_function", op, tuple(positional), kwargs, name=name)
        outputs = n["outputs"]
        returns = schema.returns
        if len(returns) == 1 and not isinstance(returns[0].type, torch.ListType):
            if outputs:
                self.env[outputs[0]] = call
            return
        # Several returns and/or a Tensor[] return, flattened by the lowering.
        lists = [i for i, r in enumerate(returns) if isinstance(r.type, torch.ListType)]
        if len(lists) > 1:
            raise NotImplementedError(f"{n['op']}: more than one list return")
        list_len = len(outputs) - (len(returns) - len(lists))
        flat = 0
        for i, r in enumerate(returns):
            item = (
                call if len(returns) == 1 else self.graph.call_function(operator.getitem, (call, i))
            )
            if i in lists:
                for k in range(list_len):
                    self.env[outputs[flat]] = self.graph.call_function(operator.getitem, (item, k))
                    flat += 1
            else:
                self.env[outputs[flat]] = item
                flat += 1


def _resolve(op: str, overload: str) -> torch._ops.OpOverload:
    ns, name = op.split("::")
    try:
        packet = getattr(getattr(torch.ops, ns), name)
        return getattr(packet, overload or "default")
    except (AttributeError, RuntimeError) as e:
        raise NotImplementedError(f"no dispatcher op {op}.{overload}") from e


def _constant(value: Any, real_type: str) -> Any:
    """An IR constant as the Python value the schema type ``real_type`` takes."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        if "ScalarType" in real_type:
            return _DTYPE_OF[value]
        if "MemoryFormat" in real_type:
            return _MEMORY_FORMAT_OF[value]
        if "Layout" in real_type:
            return _LAYOUT_OF[value]
    if isinstance(value, str) and "Device" in real_type:
        return torch.device(value)
    return value


def _same(value: Any, default: Any) -> bool:
    """Whether ``value`` is the schema default ``default`` (same type, equal)."""
    if isinstance(value, (list, tuple)) and isinstance(default, (list, tuple)):
        return len(value) == len(default) and all(_same(a, b) for a, b in zip(value, default))
    return type(value) is type(default) and value == default
