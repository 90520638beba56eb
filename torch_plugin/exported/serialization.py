"""``torch.save`` / ``torch.load`` of exported graphs with ``torch.load``'s defaults.

``torch.load`` defaults to ``weights_only=True``: its unpickler builds tensors, primitive
containers and the globals allowlisted with ``torch.serialization.add_safe_globals``, and
calls (``REDUCE``) only those. A ``torch.fx.GraphModule`` pickles as Python source plus
``torch.fx.graph_module.reduce_graph_module``, which that unpickler refuses (rightly: a file
is untrusted input, and source is code to exec). :class:`ExportedGraph`'s ``__reduce__``
(:func:`reduce_exported`) writes instead ``load_exported(payload)``, where ``payload`` holds
only what the weights_only unpickler accepts: ``str``/``int``/``float``/``bool``/``None``/
``bytes``/``complex``, lists, tuples, dicts, tensors and ``nn.Parameter``. Importing
torch_plugin registers :func:`load_exported` with ``add_safe_globals``: **import
torch_plugin before** ``torch.load`` (otherwise PyTorch's weights_only unpickler raises
``UnpicklingError: ... Unsupported global: GLOBAL
torch_plugin.exported.serialization.load_exported ...``). ``torch.load(f,
weights_only=False)`` goes through the same function (and imports torch_plugin itself).

Payload (``format`` ``"torch_plugin.exported"``, ``version`` 1), a dict:

- ``graph``: ``{"nodes": [...], "codegen": {...}}``. A node is ``[op, name, target, args,
  kwargs]`` (``meta`` is not kept); ``args``/``kwargs`` are encoded values (below) where
  ``("node", name)`` refers to an earlier node. ``call_function`` targets are
  ``("function", qualified name)`` or ``("autograd_apply", module, qualname)``; other
  targets are strings, checked to be identifiers (dotted for ``get_attr``/``call_module``).
  ``codegen``: ``{"kind": "plain" | "pytree" | "export", "orig_args": [...], "in_spec":
  ..., "out_spec": ...}`` (pytree specs as ``{"type", "context", "children"}`` trees; FX's
  ``treespec_dumps`` cannot write named tuples).
- ``module``: the root module's state: ``{"training", "parameters": {name: Parameter},
  "buffers": {name: tensor}, "non_persistent": [names], "children": {name: module}}``; a
  child is ``{"kind": "torch.nn", "class": (module, qualname), "attrs": {...}, + state}``
  (a ``torch.nn`` class rebuilt by ``cls.__new__`` + ``nn.Module.__init__`` + its saved
  instance ``__dict__``: no class ``__init__`` runs) or ``{"kind": "project", "class":
  ..., "payload": ..., "training": ...}``.

Encoded values: ``None``, bools, ints, floats, strings, bytes, complex numbers and tensors
as themselves; lists as lists; everything else as a tagged tuple ``(tag, ...)``: ``tuple``,
``dict`` (a list of key/value pairs), ``odict``, ``set``, ``frozenset``, ``namedtuple``,
``size``, ``slice``, ``range``, ``ellipsis``, ``dtype``, ``device``, ``layout``,
``memory_format``, ``class`` and ``function`` references, ``treespec`` (a pytree spec, as
in ``codegen``), ``node``. Sharing is kept: a
tensor referenced twice is pickled once, so it loads as one tensor.

Allowlists (anything else is refused by :func:`reduce_exported`, i.e. by ``torch.save``,
with :class:`ExportSaveError` naming the node or module and what was refused):

- functions (``call_function`` targets, function values in module attributes and
  payloads): ``torch.ops.<ns>.<op>[.<overload>]``; the C operator bindings of ``torch``,
  ``torch._C._VariableFunctions``, ``torch._C._nn``, ``_fft``, ``_linalg``, ``_special``,
  ``_nested``, ``torch.fft``, ``torch.linalg``, ``torch.special``; the Python functions of
  ``torch.functional`` and ``torch.nn.functional``; ``torch.Tensor`` methods; the builtin
  functions of ``operator`` (not ``operator.call``) and ``math``; the builtins
  ``allowlist._BUILTINS``; ``torch._C._set_grad_enabled``, ``torch.amp._enter_autocast`` /
  ``_exit_autocast``, ``torch.sym_*``, ``torch._assert``/``_check``; torch_plugin's graph
  helpers (``exported.graph_module.tensor_setitem``,
  ``capture.variables.tensor.requires_grad_leaf``) and the ``apply`` of
  ``torch.autograd.Function`` subclasses (the class resolved as below). Attribute and
  method names (``getattr`` nodes, ``call_method`` targets, ``torch.Tensor.<name>``) may
  not be dunders other than the operator ones (``__add__``, ``__getitem__``, ...).
- modules: classes defined under ``torch.nn.`` (resolved by module and qualified name,
  subclasses of ``nn.Module``), without hooks, whose instance attributes encode; and
  torch_plugin's own modules implementing the payload protocol: ``payload(self) ->
  dict`` of encodable values and ``@classmethod from_payload(cls, payload) -> module``
  (:class:`~torch_plugin.exported.graph_module.ExportedOutput`, ``ExportGuards``).
- classes inside payloads (named tuple, ModelOutput and dict classes of an output
  structure, types in guards, ...) are written as ``("class", module, qualname)`` and
  resolved on load only if the module is already imported (``sys.modules``) or belongs to
  one of the packages ``allowlist.ALLOWED_PACKAGES`` (then imported); never from another
  standard-library module than ``collections``, ``typing`` and ``builtins``; and only if
  the name resolves to a class (not a function). A class defined in a script
  (``__main__``) or a user module therefore loads only where that module was imported
  first.
- tensors: ``torch.Tensor`` and ``nn.Parameter`` (other tensor subclasses are refused).

Loading exec's no code from the file: it runs FX's code generator on a graph whose
identifiers were checked and whose constants are reprs of the types above; the result
calls only the allowlisted functions, modules and classes.
"""

from __future__ import annotations

import collections
import keyword
import types
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.immutable_collections import immutable_dict, immutable_list

from . import graph_module
from .allowlist import (
    IDENTIFIER,
    ExportLoadError,
    ExportSaveError,
    allowed_name,
    class_ref,
    describe,
    function_ref,
    resolve_class,
    resolve_function,
)

FORMAT = "torch_plugin.exported"
VERSION = 1

#: Packages whose modules :func:`resolve_class` may import to resolve a class reference.
# --- values --------------------------------------------------------------------------------
_RAW = (type(None), bool, int, float, str, bytes, complex)
_FUNCTION_TYPES = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    torch._ops.OpOverload,
    torch._ops.OpOverloadPacket,
)
_MAX_DEPTH = 200


def encode_value(value: Any, where: str, depth: int = 0) -> Any:
    """``value`` in the payload's encoding (module docstring).

    Raises:
        ExportSaveError: a value of a type the format does not hold (named with ``where``)."""
    if depth > _MAX_DEPTH:
        raise ExportSaveError(f"{where}: value nested too deeply (a cycle?)")
    t = type(value)
    d = depth + 1
    if t in _RAW:
        return value
    if t in (torch.Tensor, torch.nn.Parameter):
        return value
    if isinstance(value, torch.Tensor):
        raise ExportSaveError(
            f"{where}: tensor subclass {describe(t)} cannot be saved (torch.Tensor and "
            "nn.Parameter only)"
        )
    if t is list or t is immutable_list:
        return [encode_value(v, where, d) for v in value]
    if t is tuple:
        return ("tuple", [encode_value(v, where, d) for v in value])
    if t is dict or t is immutable_dict or t is collections.OrderedDict:
        items = [[encode_value(k, where, d), encode_value(v, where, d)] for k, v in value.items()]
        return ("odict" if t is collections.OrderedDict else "dict", items)
    if t is set or t is frozenset:
        return (t.__name__, [encode_value(v, where, d) for v in value])
    if t is torch.Size:
        return ("size", [int(v) for v in value])
    if isinstance(value, tuple) and hasattr(t, "_fields"):
        return ("namedtuple", class_ref(t, where), [encode_value(v, where, d) for v in value])
    if t is slice:
        return (
            "slice",
            *(encode_value(v, where, d) for v in (value.start, value.stop, value.step)),
        )
    if t is range:
        return ("range", value.start, value.stop, value.step)
    if value is Ellipsis:
        return ("ellipsis",)
    if t is torch.dtype:
        return ("dtype", str(value).removeprefix("torch."))
    if t is torch.device:
        return ("device", str(value))
    if t is torch.layout:
        return ("layout", str(value).removeprefix("torch."))
    if t is torch.memory_format:
        return ("memory_format", str(value).removeprefix("torch."))
    if isinstance(value, torch.fx.Node):
        return ("node", value.name)
    if isinstance(value, pytree.TreeSpec):
        return ("treespec", encode_treespec(value, where))
    if isinstance(value, type):
        return class_ref(value, where)
    if isinstance(value, _FUNCTION_TYPES):
        return function_ref(value, where)
    raise ExportSaveError(
        f"{where}: a value of type {describe(t)} ({value!r:.80}) cannot be saved in the safe "
        "format (primitives, tuples, lists, dicts, tensors, dtypes, devices, classes and "
        "allowlisted functions only)"
    )


def decode_value(data: Any, nodes: dict | None = None, depth: int = 0) -> Any:
    """The value :func:`encode_value` encoded; ``nodes`` maps node names to graph nodes.

    Raises:
        ExportLoadError: malformed data, or a reference refused by the allowlists."""
    if depth > _MAX_DEPTH:
        raise ExportLoadError("value nested too deeply")
    t = type(data)
    d = depth + 1
    if t in _RAW or t in (torch.Tensor, torch.nn.Parameter):
        return data
    if t is list:
        return [decode_value(v, nodes, d) for v in data]
    if t is not tuple or not data or not isinstance(data[0], str):
        raise ExportLoadError(f"malformed value of type {t.__name__}")
    tag, rest = data[0], data[1:]
    try:
        if tag == "tuple":
            return tuple(decode_value(v, nodes, d) for v in rest[0])
        if tag in ("dict", "odict"):
            out = {} if tag == "dict" else collections.OrderedDict()
            for k, v in rest[0]:
                out[decode_value(k, nodes, d)] = decode_value(v, nodes, d)
            return out
        if tag in ("set", "frozenset"):
            items = [decode_value(v, nodes, d) for v in rest[0]]
            return set(items) if tag == "set" else frozenset(items)
        if tag == "size":
            return torch.Size([_int(v) for v in rest[0]])
        if tag == "namedtuple":
            cls = decode_value(rest[0], nodes, d)
            if not (issubclass(cls, tuple) and hasattr(cls, "_fields")):
                raise ExportLoadError(f"{describe(cls)} is not a named tuple class")
            return cls(*(decode_value(v, nodes, d) for v in rest[1]))
        if tag == "slice":
            return slice(*(decode_value(v, nodes, d) for v in rest))
        if tag == "range":
            return range(*(_int(v) for v in rest))
        if tag == "ellipsis":
            return Ellipsis
        if tag in ("dtype", "layout", "memory_format"):
            kind = {"dtype": torch.dtype, "layout": torch.layout}.get(tag, torch.memory_format)
            obj = getattr(torch, rest[0], None) if IDENTIFIER.match(rest[0]) else None
            if type(obj) is not kind:
                raise ExportLoadError(f"unknown {tag} {rest[0]!r}")
            return obj
        if tag == "device":
            if type(rest[0]) is not str:
                raise ExportLoadError("malformed device")
            return torch.device(rest[0])
        if tag == "class":
            return resolve_class(rest[0], rest[1])
        if tag in ("function", "autograd_apply"):
            return resolve_function(data)
        if tag == "treespec":
            return decode_treespec(rest[0])
        if tag == "node":
            if nodes is None or rest[0] not in nodes:
                raise ExportLoadError(f"reference to unknown node {rest[0]!r}")
            return nodes[rest[0]]
    except (TypeError, ValueError, IndexError, AttributeError, RuntimeError) as e:
        if isinstance(e, ExportLoadError):
            raise
        raise ExportLoadError(f"malformed {tag!r} value: {e}") from None
    raise ExportLoadError(f"unknown value tag {tag!r}")


def _int(v: Any) -> int:
    if type(v) is not int:
        raise ExportLoadError(f"expected an int, got {type(v).__name__}")
    return v


# --- pytree specs ----------------------------------------------------------------------------
def encode_treespec(spec: pytree.TreeSpec, where: str) -> Any:
    """A pytree spec as ``None`` (a leaf) or ``{"type", "context", "children"}``; the
    ``namedtuple`` node type is the string ``"namedtuple"``.

    Raises:
        ExportSaveError: a node type or context the format cannot hold."""
    if spec.is_leaf():
        return None
    node_type = spec.type
    if node_type is collections.namedtuple:
        type_ref: Any = "namedtuple"
    elif isinstance(node_type, type):
        type_ref = class_ref(node_type, where)
    else:
        raise ExportSaveError(f"{where}: pytree node type {node_type!r} cannot be saved")
    return {
        "type": type_ref,
        "context": encode_value(spec.context, f"{where} (pytree context)"),
        "children": [encode_treespec(c, where) for c in spec.children()],
    }


def decode_treespec(data: Any) -> pytree.TreeSpec:
    """The spec :func:`encode_treespec` wrote.

    Raises:
        ExportLoadError: malformed, or a node type that is not a registered pytree node (a
            named tuple's context must be a named tuple class)."""
    if data is None:
        return pytree.treespec_leaf()
    if type(data) is not dict or set(data) != {"type", "context", "children"}:
        raise ExportLoadError("malformed pytree spec")
    context = decode_value(data["context"])
    if data["type"] == "namedtuple":
        node_type: Any = collections.namedtuple
        if not (isinstance(context, type) and issubclass(context, tuple)):
            raise ExportLoadError(f"named tuple spec with context {context!r}")
    else:
        node_type = decode_value(data["type"])
        if node_type not in pytree.SUPPORTED_NODES:
            raise ExportLoadError(f"{describe(node_type)} is not a registered pytree node type")
    if type(data["children"]) is not list:
        raise ExportLoadError("malformed pytree spec")
    return pytree.TreeSpec(node_type, context, [decode_treespec(c) for c in data["children"]])


# --- modules -------------------------------------------------------------------------------
_MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))
_STATE_KEYS = frozenset({"training", "_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"})  # fmt: skip


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def _tensor_state(module: torch.nn.Module, where: str) -> dict:
    _refuse_hooks(module, where)
    for name, t in [*module._parameters.items(), *module._buffers.items()]:
        if t is not None and type(t) not in (torch.Tensor, torch.nn.Parameter):
            raise ExportSaveError(
                f"{_join(where, name)}: tensor subclass {describe(type(t))} cannot be saved"
            )
    return {
        "training": bool(module.training),
        "parameters": dict(module._parameters),
        "buffers": dict(module._buffers),
        "non_persistent": sorted(module._non_persistent_buffers_set),
        "children": {
            name: None if child is None else _encode_module(child, _join(where, name))
            for name, child in module._modules.items()
        },
    }


def _refuse_hooks(module: torch.nn.Module, where: str) -> None:
    hooks = [
        k
        for k in _MODULE_INTERNALS - _STATE_KEYS
        if getattr(module, k, None) and k != "_is_full_backward_hook"
    ]
    if hooks:
        raise ExportSaveError(
            f"module {where or '(the exported graph)'} ({describe(type(module))}) has hooks "
            f"({', '.join(sorted(hooks))}), which cannot be saved"
        )


def _encode_module(module: torch.nn.Module, where: str) -> dict:
    cls = type(module)
    _refuse_hooks(module, where)
    payload = getattr(module, "payload", None)
    if cls.__module__.startswith("torch_plugin.") and callable(payload):
        if not callable(getattr(cls, "from_payload", None)):
            raise ExportSaveError(f"module {where} ({describe(cls)}) has no from_payload")
        return {
            "kind": "project",
            "class": class_ref(cls, where),
            "payload": encode_value(payload(), f"module {where} ({describe(cls)}) payload"),
            "training": bool(module.training),
        }
    if not cls.__module__.startswith("torch.nn."):
        raise ExportSaveError(
            f"module {where} is of class {describe(cls)}, which is not a torch.nn module: only "
            "torch.nn modules (and torch_plugin's own) can be saved in the safe format, not "
            "user-defined classes"
        )
    attrs = {k: v for k, v in vars(module).items() if k not in _MODULE_INTERNALS}
    odd = [k for k in attrs if not IDENTIFIER.match(k) or k.startswith("__")]
    if odd:
        raise ExportSaveError(f"module {where} ({describe(cls)}): attributes {odd} cannot be saved")
    return {
        "kind": "torch.nn",
        "class": class_ref(cls, where),
        "attrs": encode_value(attrs, f"module {where} ({describe(cls)}) attributes"),
        **_tensor_state(module, where),
    }


def _restore_tensor_state(module: torch.nn.Module, data: dict, where: str) -> None:
    module.training = _typed(data["training"], bool, where)
    non_persistent = set(_typed(data["non_persistent"], list, where))
    for name, p in _typed(data["parameters"], dict, where).items():
        if p is not None and type(p) is not torch.nn.Parameter:
            raise ExportLoadError(f"{_join(where, name)}: parameter is a {type(p).__name__}")
        module.register_parameter(name, p)
    for name, b in _typed(data["buffers"], dict, where).items():
        if b is not None and type(b) is not torch.Tensor:
            raise ExportLoadError(f"{_join(where, name)}: buffer is a {type(b).__name__}")
        module.register_buffer(name, b, persistent=name not in non_persistent)
    for name, child in _typed(data["children"], dict, where).items():
        child = None if child is None else _decode_module(child, _join(where, name))
        module.add_module(name, child)


def _typed(value: Any, t: type, where: str) -> Any:
    if type(value) is not t:
        raise ExportLoadError(
            f"{where or 'root module'}: malformed payload (expected {t.__name__})"
        )
    return value


def _decode_module(data: dict, where: str) -> torch.nn.Module:
    _typed(data, dict, where)
    kind = data.get("kind")
    cls = decode_value(data.get("class"))
    if not issubclass(cls, torch.nn.Module):
        raise ExportLoadError(f"module {where}: {describe(cls)} is not an nn.Module")
    if kind == "project":
        if not cls.__module__.startswith("torch_plugin.") or not hasattr(cls, "from_payload"):
            raise ExportLoadError(f"module {where}: {describe(cls)} is not a torch_plugin module")
        module = cls.from_payload(decode_value(data["payload"]))
        if not isinstance(module, cls):
            raise ExportLoadError(f"module {where}: {describe(cls)}.from_payload gave {module!r}")
        module.training = _typed(data["training"], bool, where)
        return module
    if kind != "torch.nn" or not cls.__module__.startswith("torch.nn."):
        raise ExportLoadError(f"module {where}: {describe(cls)} is not a torch.nn module")
    attrs = decode_value(data["attrs"])
    if type(attrs) is not dict or any(
        not isinstance(k, str)
        or k in _MODULE_INTERNALS
        or not IDENTIFIER.match(k)
        or k.startswith("__")
        for k in attrs
    ):
        raise ExportLoadError(f"module {where}: malformed attributes")
    module = cls.__new__(cls)
    torch.nn.Module.__init__(module)
    module.__dict__.update(attrs)
    _restore_tensor_state(module, data, where)
    return module


# --- graphs --------------------------------------------------------------------------------
def _codegen_kinds() -> dict[str, type]:
    kinds = {"plain": torch.fx.graph.CodeGen, "pytree": torch.fx.graph._PyTreeCodeGen}
    if hasattr(graph_module, "ExportCodeGen"):
        kinds["export"] = graph_module.ExportCodeGen
    return kinds


def _encode_graph(graph: torch.fx.Graph) -> dict:
    nodes = []
    for node in graph.nodes:
        where = f"node {node.name} ({node.op} {describe(node.target)})"
        if node.op == "call_function":
            target = function_ref(node.target, where)
            if node.target is getattr and not (len(node.args) >= 2 and allowed_name(node.args[1])):
                raise ExportSaveError(f"{where}: getattr with name {node.args[1:2]!r}")
        else:
            target = node.target
            if node.op == "call_method" and not allowed_name(target):
                raise ExportSaveError(f"{where}: method name {target!r} cannot be saved")
        args = encode_value(node.args, where)
        kwargs = encode_value(node.kwargs, where)
        nodes.append([node.op, node.name, target, args, kwargs])
    codegen = graph._codegen
    kind = next((k for k, c in _codegen_kinds().items() if type(codegen) is c), None)
    if kind is None:
        raise ExportSaveError(f"graph code generator {describe(type(codegen))} cannot be saved")
    out: dict = {"kind": kind}
    if kind != "plain":
        info = codegen.pytree_info
        out["orig_args"] = list(info.orig_args)
        out["in_spec"] = encode_treespec(info.in_spec, "input structure")
        out["out_spec"] = (
            None if info.out_spec is None else encode_treespec(info.out_spec, "output structure")
        )
        out["has_out_spec"] = info.out_spec is not None
    return {"nodes": nodes, "codegen": out}


def _check_name(name: Any, dotted: bool, what: str) -> str:
    parts = name.split(".") if dotted and isinstance(name, str) else [name]
    if not all(
        isinstance(p, str) and IDENTIFIER.match(p) and not keyword.iskeyword(p) for p in parts
    ):
        raise ExportLoadError(f"{what}: {name!r} is not a valid identifier")
    return name


def _decode_graph(data: dict) -> torch.fx.Graph:
    graph = torch.fx.Graph()
    nodes: dict[str, torch.fx.Node] = {}
    ops = {"placeholder", "get_attr", "call_function", "call_method", "call_module", "output"}
    for entry in _typed(data["nodes"], list, "graph"):
        if type(entry) is not list or len(entry) != 5 or entry[0] not in ops:
            raise ExportLoadError("graph: malformed node")
        op, name, target, args, kwargs = entry
        _check_name(name, False, "node name")
        if name in nodes:
            raise ExportLoadError(f"graph: duplicate node {name}")
        if op == "call_function":
            target = decode_value(target)
            if not callable(target):
                raise ExportLoadError(f"node {name}: target is not a function")
        elif op in ("get_attr", "call_module"):
            _check_name(target, True, f"node {name} target")
        elif op == "call_method":
            if not allowed_name(target):
                raise ExportLoadError(f"node {name}: method name {target!r} is not allowed")
        elif op == "placeholder":
            _check_name(target.lstrip("*") if isinstance(target, str) else target, False, name)
        elif target != "output":
            raise ExportLoadError(f"node {name}: malformed output node")
        args, kwargs = decode_value(args, nodes), decode_value(kwargs, nodes)
        if type(args) is not tuple or type(kwargs) is not dict:
            raise ExportLoadError(f"node {name}: malformed arguments")
        for k in kwargs:
            _check_name(k, False, f"node {name} keyword")
        if target is getattr and not (len(args) >= 2 and allowed_name(args[1])):
            raise ExportLoadError(f"node {name}: getattr with name {args[1:2]!r} is not allowed")
        node = graph.create_node(op, target, args, kwargs, name=name)
        if node.name != name:
            raise ExportLoadError(f"graph: node name {name!r} was not kept ({node.name!r})")
        nodes[name] = node
    cg = _typed(data["codegen"], dict, "graph code generator")
    cls = _codegen_kinds().get(cg.get("kind"))
    if cls is None:
        raise ExportLoadError(f"unknown graph code generator {cg.get('kind')!r}")
    if cg["kind"] == "plain":
        graph._codegen = cls()
        return graph
    orig_args = _typed(cg["orig_args"], list, "graph arguments")
    for a in orig_args:
        _check_name(a, False, "graph argument")
    in_spec = decode_treespec(cg["in_spec"])
    if cg["kind"] == "export":
        keys = in_spec.child(1).context if in_spec.num_children == 2 else None
        if in_spec.type is not tuple or in_spec.child(1).type is not dict or keys is None:
            raise ExportLoadError("graph: malformed input structure")
        if not all(type(k) is str for k in keys):  # written as reprs
            raise ExportLoadError("graph: malformed keyword argument names")
    out_spec = decode_treespec(cg["out_spec"]) if cg.get("has_out_spec") else None
    graph._codegen = cls(torch.fx.graph._PyTreeInfo(orig_args, in_spec, out_spec))
    return graph


# --- the entry points ------------------------------------------------------------------------
def reduce_exported(gm: torch.fx.GraphModule) -> tuple:
    """``ExportedGraph.__reduce__``: ``(load_exported, (payload,))`` with the payload in the
    module docstring's format, holding only what ``torch.load(weights_only=True)`` builds.

    Args:
        gm: an exported graph (:class:`~torch_plugin.exported.graph_module.ExportedGraph`).

    Raises:
        ExportSaveError: a graph function, module class, class or value outside the
            allowlists (the message names the node or module and the object). There is no
            fallback that would save code: ``torch.load`` could not load it safely."""
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "graph": _encode_graph(gm.graph),
        "module": _tensor_state(gm, ""),
    }
    return (load_exported, (payload,))


def load_exported(payload: dict) -> torch.fx.GraphModule:
    """Rebuilds the exported graph :func:`reduce_exported` described (``torch.load`` calls
    it; it is registered with ``torch.serialization.add_safe_globals``).

    Args:
        payload: the dict :func:`reduce_exported` wrote.

    Returns:
        An :class:`~torch_plugin.exported.graph_module.ExportedGraph`.

    Raises:
        ExportLoadError: a malformed payload, a newer format version, or a reference the
            allowlists refuse (a class whose module is not imported, say)."""
    if type(payload) is not dict or payload.get("format") != FORMAT:
        raise ExportLoadError("not an exported graph payload")
    if type(payload.get("version")) is not int or payload["version"] > VERSION:
        raise ExportLoadError(
            f"exported graph format version {payload.get('version')!r} is newer than this "
            f"torch_plugin reads ({VERSION}): upgrade torch_plugin"
        )
    try:
        graph = _decode_graph(_typed(payload["graph"], dict, "graph"))
        state = _typed(payload["module"], dict, "module")
        root = torch.nn.Module()
        _restore_tensor_state(root, state, "")
    except KeyError as e:
        raise ExportLoadError(f"malformed exported graph payload (no {e})") from None
    gm = graph_module.ExportedGraph(root, graph, class_name="ExportedGraph")
    # GraphModule copies only what nodes reference (the guards submodule is called by the
    # generated code, not a node): the root's state as saved, in its order.
    gm._parameters = dict(root._parameters)
    gm._buffers = dict(root._buffers)
    gm._non_persistent_buffers_set = set(root._non_persistent_buffers_set)
    gm._modules = dict(root._modules)
    gm.training = root.training
    return gm


torch.serialization.add_safe_globals([load_exported])
graph_module.install_reducer(reduce_exported)
