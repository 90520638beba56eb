"""Lowering: an ATen FX graph (from AOTAutograd) to the C++ IR (``_C._compiler.Graph``).

Every ``call_function`` node whose target is an ATen ``OpOverload`` becomes one IR node with
the op's schema-ordered arguments: tensors become IR values, everything else a constant
(dtype, layout and memory format as their c10 enum value, a device as its string).
``operator.getitem`` on a multi-output node selects one of the node's outputs. Placeholders
become graph inputs, or constants when frozen. Types come from each node's ``meta["val"]``
(FakeTensors): sizes, strides, dtype, device.

One device per graph: every tensor (inputs, constants, node outputs) is on the same CPU or
CUDA device, which the IR values carry and which chooses the pass pipeline and the executor's
kernels. A graph with tensors on several devices (a CPU scalar tensor beside CUDA tensors
included) or on another device type raises :class:`Unsupported`.

Key parts:
- :func:`lower`: the lowering; raises :class:`Unsupported` for graphs the IR does not take
  (non-ATen calls, several devices or a device other than cpu/cuda), which then run
  unmodified. Sizes must be static: a graph with symbolic sizes is specialised to each
  concrete size before it is lowered (:mod:`torch_plugin.compiler.size_variants`), so a
  symbolic size here (still :class:`Unsupported`) means a graph that did not go through it.
- :class:`Unsupported`.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import torch

from torch_plugin import _C

# c10::ScalarType, c10::Layout and c10::MemoryFormat values.
_DTYPES = {
    torch.uint8: 0, torch.int8: 1, torch.int16: 2, torch.int32: 3, torch.int64: 4,
    torch.float16: 5, torch.float32: 6, torch.float64: 7, torch.complex32: 8,
    torch.complex64: 9, torch.complex128: 10, torch.bool: 11, torch.bfloat16: 15,
}  # fmt: skip
_LAYOUTS = {torch.strided: 0, torch.sparse_coo: 1}
_MEMORY_FORMATS = {
    torch.contiguous_format: 0, torch.preserve_format: 1, torch.channels_last: 2,
    torch.channels_last_3d: 3,
}  # fmt: skip
# Device types the compiler has a pipeline for.
_DEVICE_TYPES = ("cpu", "cuda")


class Unsupported(Exception):
    """The graph uses something the IR does not represent; it runs unmodified instead."""


def dtype_code(dtype: torch.dtype) -> int:
    if dtype not in _DTYPES:
        raise Unsupported(f"dtype {dtype}")
    return _DTYPES[dtype]


def lower(gm: torch.fx.GraphModule, constants: dict[int, torch.Tensor], builder: Any = None) -> Any:
    """``gm`` as an IR graph; ``constants`` maps placeholder positions to frozen tensors.

    ``builder``: the ``_C._compiler.Graph`` (or an object with its builder methods, such as
    :class:`~torch_plugin.compiler.graph_cache.RecordingGraph`) to build into; a new graph
    by default. Returns the builder.
    """
    g = _C._compiler.Graph() if builder is None else builder
    env: dict[torch.fx.Node, Any] = {}
    device = _GraphDevice()
    placeholder_index = 0
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if placeholder_index in constants:
                value = constants[placeholder_index]
                device.check(node, value)
                env[node] = g.add_constant(value)
            else:
                t = _tensor_meta(node, node.meta.get("val"))
                env[node] = g.add_input(
                    dtype_code(t.dtype), _ints(t.shape), _ints(t.stride()), device.check(node, t)
                )
            placeholder_index += 1
        elif node.op == "get_attr":
            value = getattr(gm, node.target)
            if not isinstance(value, torch.Tensor):
                raise Unsupported(f"get_attr {node.target} of type {type(value).__name__}")
            device.check(node, value)
            env[node] = g.add_constant(value)
        elif node.op == "call_function":
            env[node] = _lower_call(g, node, env, device)
        elif node.op == "output":
            outputs = []
            for out in torch.fx.node.map_arg(node.args[0], lambda n: n) or ():
                if not isinstance(out, torch.fx.Node) or not isinstance(env.get(out), int):
                    raise Unsupported(f"graph output {out!r} is not a tensor")
                outputs.append(env[out])
            g.set_outputs(outputs)
        else:
            raise Unsupported(f"FX node kind {node.op}")
    return g


class _GraphDevice:
    """The one device of the graph being lowered (the first tensor's), checked on each."""

    def __init__(self) -> None:
        self.device: torch.device | None = None

    def check(self, node: torch.fx.Node, t: torch.Tensor) -> str:
        """``t``'s device as the IR spells it ("cpu", "cuda:0"); raises Unsupported when it
        is not cpu/cuda or not the graph's device."""
        d = t.device
        if d.type not in _DEVICE_TYPES:
            raise Unsupported(f"node {node.name} is on {d} (cpu and cuda only)")
        if d.type == "cuda" and d.index is None:
            d = torch.device(
                "cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0
            )
        if self.device is None:
            self.device = d
        elif d != self.device:
            raise Unsupported(
                f"node {node.name} is on {d}, the graph on {self.device} (one device per graph)"
            )
        return str(d)

    def spelled(self) -> str:
        return "cpu" if self.device is None else str(self.device)


def _lower_call(
    g: Any, node: torch.fx.Node, env: dict[torch.fx.Node, Any], device: _GraphDevice
) -> Any:
    if node.target is operator.getitem:
        base, index = node.args
        return env[base][index]
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        raise Unsupported(f"call to {target}")
    schema = target._schema
    args = _bind(schema, node.args, node.kwargs, env)
    val = node.meta.get("val")
    # One IR output per returned tensor, Tensor[] returns flattened.
    returns = schema.returns
    values = [val] if len(returns) == 1 else list(val)
    flat: list[Any] = []
    structure: list[Any] = []
    for ret, v in zip(returns, values):
        if isinstance(ret.type, torch._C.ListType):
            structure.append(list(range(len(flat), len(flat) + len(v))))
            flat.extend(v)
        elif ret.type.kind() in ("TensorType", "OptionalType"):
            structure.append(len(flat))
            flat.append(v)
        else:
            raise Unsupported(f"{target} returns {ret.type}")
    may_alias = any(r.alias_info is not None for r in returns)
    ns, name = schema.name.split("::")
    ids = g.add_node(f"{ns}::{name}", schema.overload_name or "default", args, len(flat), may_alias)
    for i, v in zip(ids, flat):
        if v is None:
            g.set_type(i, dtype_code(torch.float32), [0], [1], device.spelled())
        else:
            t = _tensor_meta(node, v)
            g.set_type(
                i, dtype_code(t.dtype), _ints(t.shape), _ints(t.stride()), device.check(node, t)
            )
    resolved = [ids[s] if isinstance(s, int) else [ids[k] for k in s] for s in structure]
    return resolved[0] if len(returns) == 1 else resolved


def _bind(schema: Any, args: Sequence[Any], kwargs: dict[str, Any], env: dict) -> list:
    """The node's arguments, one ``(kind, payload)`` per schema argument, in order."""
    out = []
    for i, arg in enumerate(schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            value = args[i]
        elif arg.name in kwargs:
            value = kwargs[arg.name]
        elif arg.has_default_value():
            value = arg.default_value
        else:
            raise Unsupported(f"{schema.name}: argument {arg.name} missing")
        out.append(_encode(schema.name, arg, value, env))
    return out


def _encode(op: str, arg: Any, value: Any, env: dict) -> tuple[str, Any]:
    if isinstance(value, torch.fx.Node):
        lowered = env[value]
        if not isinstance(lowered, int):
            raise Unsupported(f"{op}: argument {arg.name} is not a single tensor")
        return ("t", lowered)
    if isinstance(value, (list, tuple)) and any(isinstance(v, torch.fx.Node) for v in value):
        return ("l", [None if v is None else env[v] for v in value])
    if isinstance(value, (list, tuple)) and len(value) == 0 and "Tensor" in str(arg.type):
        return ("l", [])
    return ("c", _constant(op, arg, value))


def _constant(op: str, arg: Any, value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.dtype):
        return dtype_code(value)
    if isinstance(value, torch.layout):
        return _LAYOUTS[value]
    if isinstance(value, torch.memory_format):
        return _MEMORY_FORMATS[value]
    if isinstance(value, torch.device):
        if value.type not in _DEVICE_TYPES:
            raise Unsupported(f"{op}: device {value}")
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_constant(op, arg, v) for v in value]
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise Unsupported(f"{op}: symbolic argument {arg.name}")
    raise Unsupported(f"{op}: argument {arg.name} of type {type(value).__name__}")


def _tensor_meta(node: torch.fx.Node, val: Any) -> torch.Tensor:
    if not isinstance(val, torch.Tensor):
        raise Unsupported(f"node {node.name} has no tensor metadata")
    return val


def _ints(xs: Sequence[Any]) -> list[int]:
    out = []
    for x in xs:
        if not isinstance(x, int):
            raise Unsupported(f"symbolic size {x} (not specialised by size_variants)")
        out.append(int(x))
    return out
