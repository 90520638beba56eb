"""The guards of an exported graph, checked on every call before it computes.

A capture assumes things about its inputs: shapes and strides, dtypes, devices,
``requires_grad``, the structure of nested arguments, the values of ints and strings it
branched on, the relations between symbolic sizes. In ``optimize()`` a failed guard
recompiles; an exported graph has nothing to recompile, so it refuses the call instead:
:class:`ExportGuards` (the submodule ``_export_guards``, which the graph's ``forward`` calls
first, see :class:`torch_plugin.exported.graph_module.ExportCodeGen`) raises
:class:`ExportGuardError` naming the input, the value seen and the value assumed.

How. The capture's guards are compiled by :func:`torch_plugin.capture.guards.build_guard_tree`
into a builder; :class:`_Recorder` stands in for ``torch_plugin._C.RootGuardManager`` there
and records each builder call as data (a *path* from an argument slot of the captured frame,
the guard kind and its argument), so that the same calls can be replayed on a real
``RootGuardManager`` (one C++ call per check, ``RootGuardManager.check``) and saved with the
graph (:meth:`ExportGuards.payload`, plain data: no code). A call's ``(args, kwargs)`` are
mapped to the frame's argument slots by a *slot recipe* computed at export from the
function's signature.

Checked: every guard whose source starts at an argument of the call. Not checked, because a
bare call of the graph cannot see them (listed in :attr:`ExportGuards.unchecked`, in source
terms): guards on ``self`` of an exported module (its ``training`` flag, parameter
identities: the graph holds the module's parameters and runs as the module was at export),
globals and closure variables the code read (their values are constants of the graph), and
the global torch state (grad mode, autocast, default dtype ...: the graph's torch calls run
under the caller's state, as eager's would; a Python branch the code took on that state is
not re-taken).
"""

from __future__ import annotations

import collections
import inspect
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree


class ExportGuardError(RuntimeError):
    """A call of an exported graph with inputs its capture did not assume (the message names
    the input, the value seen, the value assumed and how to export for it)."""


_HOW_TO = (
    "The graph was exported for the example inputs' shapes, dtypes, devices and structure. "
    "To export for varying sizes, mark them before export: torch_plugin.mark_dynamic(x, dim), "
    "or torch_plugin.export(fn, *args, dynamic=True, **kwargs); for another dtype, device or "
    "structure, export again with such inputs."
)


# --- recording the guard tree's builder calls -----------------------------------------------
class _Node:
    """Stands for a GuardManager: records leaf guards under ``path``."""

    def __init__(self, rec: _Recorder, path: tuple | None, root: str) -> None:
        self._rec, self.path, self.root = rec, path, root

    def attr(self, name: str) -> _Node:
        return self._rec.node(self, ("attr", name))

    def item(self, key: Any) -> _Node:
        return self._rec.node(self, ("item", key))

    def _leaf(self, kind: str, arg: Any, desc: str) -> None:
        self._rec.leaf(self, kind, arg, desc)

    def add_type_match(self, cls, desc):
        self._leaf("type", cls, desc)

    def add_id_match(self, obj, desc):
        self._leaf("id", obj, desc)

    def add_equals_match(self, value, desc):
        self._leaf("equals", value, desc)

    def add_len_match(self, n, desc):
        self._leaf("len", n, desc)

    def add_dict_keys_match(self, keys, desc):
        self._leaf("dict_keys", list(keys), desc)

    def add_not_in_dict(self, key, desc):
        self._leaf("not_in_dict", key, desc)

    def add_empty_attr_dicts(self, names, desc):
        self._leaf("empty_attr_dicts", list(names), desc)

    def add_tensor_match(self, example, desc, check_strides=True, sizes=(), strides=()):
        spec = {
            "type": type(example),
            "dtype": example.dtype,
            "device": example.device,
            "layout": example.layout,
            "size": list(example.shape),
            "stride": list(example.stride()) if example.layout == torch.strided else None,
            "requires_grad": example.requires_grad,
            "check_strides": check_strides,
            "dynamic_sizes": list(sizes),
            "dynamic_strides": list(strides),
        }
        self._leaf("tensor", spec, desc)


class _Recorder(_Node):
    """Stands for a RootGuardManager in ``build_guard_tree``; ``slot_ok(slot)`` says which
    argument slots a bare call of the graph provides."""

    def __init__(self, slot_ok, hidden: set[tuple] = frozenset()) -> None:
        super().__init__(self, None, "")
        self.slot_ok = slot_ok
        self.hidden = hidden
        self.checks: list[tuple] = []  # (kind, path, arg, description)
        # root source -> descriptions of its guards that a bare call cannot check
        self.unchecked: dict[str, list[str]] = {}
        self.n_symbols = 0
        self.slot_names: dict[int, str] = {}

    def node(self, parent: _Node, step: tuple) -> _Node:
        path = None if parent.path is None else (*parent.path, step)
        if path in self.hidden:
            return _Node(self, None, f"{parent.root}[0] (self)")
        return _Node(self, path, parent.root)

    def leaf(self, node: _Node, kind: str, arg: Any, desc: str) -> None:
        if node.path is None:
            self.unchecked.setdefault(node.root, []).append(desc)
        else:
            self.checks.append((kind, node.path, arg, desc))

    def summary(self) -> list[str]:
        """One line per source a bare call cannot check: ``G['scale']: 2 guards (G['scale']
        == 2.0, ...)``."""
        out = []
        for root, descs in self.unchecked.items():
            shown = "; ".join(descs[:2]) + ("; ..." if len(descs) > 2 else "")
            out.append(f"{root}: {len(descs)} guard{'s' * (len(descs) != 1)} ({shown})")
        return out

    # root accessors
    def local(self, slot: int, name: str) -> _Node:
        self.slot_names[slot] = name
        return _Node(self, (("slot", slot),) if self.slot_ok(slot) else None, name)

    def global_(self, name: str) -> _Node:
        return _Node(self, None, f"G[{name!r}]")

    def closure(self, index: int, name: str) -> _Node:
        return _Node(self, None, name)

    def object_(self, obj: Any, name: str) -> _Node:
        return _Node(self, None, name)

    def add_global_state_match(self) -> None:
        self.unchecked["global torch state"] = [
            "grad mode, autocast, default dtype, deterministic algorithms, backend flags"
        ]

    def add_alias_guard(self, a: _Node, b: _Node, same: bool, desc: str) -> None:
        if a.path is None or b.path is None:
            self.unchecked.setdefault((a if a.path is None else b).root, []).append(desc)
        else:
            self.checks.append(("alias", a.path, (b.path, same), desc))

    def add_shape_symbol(self, node: _Node, kind: str, dim: int, name: str) -> int:
        if node.path is None:
            raise ValueError(f"a symbolic size of {name} is not read from the call's arguments")
        self.checks.append(("symbol", node.path, (kind, dim), name))
        self.n_symbols += 1
        return self.n_symbols - 1

    def add_shape_check(self, program, desc: str) -> None:
        self.checks.append(("shape", (), [tuple(p) for p in program], desc))


# --- slot recipes --------------------------------------------------------------------------
def slot_recipe(fn: Any, code, args: tuple, kwargs: dict) -> list[tuple] | None:
    """How a call's ``(args, kwargs)`` fill the argument slots of ``code``, the captured
    frame's code object, when ``fn`` (a function or an nn.Module) is called with them:
    one entry per slot, ``("arg", i)``, ``("kw", name)``, ``("varargs", start, with_self)``
    (the tuple ``args[start:]``, after a placeholder for the bound ``self`` when
    ``with_self``: a decorated method ``wrapper(*args, **kwargs)`` receives its module as
    ``args[0]``), ``("varkw", names)`` (the dict of those kwargs), ``("fixed",)`` (a default
    or ``self``: not given by the call). None when ``code`` is not ``fn``'s own code (a
    wrapper was captured through), so the slots cannot be known."""
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    method = inspect.ismethod(target)
    func = target.__func__ if method else target
    if getattr(func, "__code__", None) is not code:
        return None
    # The code's own signature (a decorated forward's __wrapped__ is not what was captured),
    # with the bound self as the first positional argument.
    sig = inspect.Signature.from_callable(func, follow_wrapped=False)
    offset = 1 if method else 0
    full_args = (_SELF,) * offset + tuple(args)
    try:
        bound = sig.bind(*full_args, **kwargs)
    except TypeError:
        return None
    params = sig.parameters
    n_pos = 0  # positional arguments of full_args consumed
    where: dict[str, tuple] = {}
    for name, value in bound.arguments.items():
        kind = params[name].kind
        if kind == inspect.Parameter.VAR_POSITIONAL:
            with_self = method and n_pos == 0
            where[name] = ("varargs", max(n_pos - offset, 0), with_self)
            n_pos = len(full_args)
        elif kind == inspect.Parameter.VAR_KEYWORD:
            where[name] = ("varkw", list(value))
        elif n_pos < len(full_args) and kind != inspect.Parameter.KEYWORD_ONLY:
            where[name] = ("fixed",) if value is _SELF else ("arg", n_pos - offset)
            n_pos += 1
        else:
            where[name] = ("kw", name)
    for name, param in params.items():
        if name not in where and param.kind == inspect.Parameter.VAR_POSITIONAL:
            where[name] = ("varargs", len(args), False)
        elif name not in where and param.kind == inspect.Parameter.VAR_KEYWORD:
            where[name] = ("varkw", [])
    n_slots = code.co_argcount + code.co_kwonlyargcount
    n_slots += bool(code.co_flags & inspect.CO_VARARGS) + bool(
        code.co_flags & inspect.CO_VARKEYWORDS
    )
    return [where.get(name, ("fixed",)) for name in code.co_varnames[:n_slots]]


class _SelfPlaceholder:
    """Stands for the bound ``self`` of an exported module's method among positional
    arguments (its guards are not checked: see :func:`hidden_paths`)."""

    def __repr__(self) -> str:
        return "<self>"


_SELF = _SelfPlaceholder()


def hidden_paths(recipe: list[tuple]) -> set[tuple]:
    """Guard paths a call does not give: ``args[0]`` of a ``*args`` slot that holds the
    bound self."""
    return {
        (("slot", i), ("item", 0))
        for i, entry in enumerate(recipe)
        if entry[0] == "varargs" and entry[2]
    }


def _slot_values(recipe: list[tuple], args: tuple, kwargs: dict) -> list:
    out = []
    for entry in recipe:
        how = entry[0]
        if how == "arg":
            out.append(args[entry[1]])
        elif how == "kw":
            out.append(kwargs[entry[1]])
        elif how == "varargs":
            rest = tuple(args[entry[1] :])
            out.append((_SELF, *rest) if entry[2] else rest)
        elif how == "varkw":
            out.append({k: kwargs[k] for k in entry[1]})
        else:
            out.append(None)
    return out


# --- the submodule -------------------------------------------------------------------------
class ExportGuards(torch.nn.Module):
    """Checks a call of an exported graph against what its capture assumed.

    ``checks``: the recorded guard-tree calls (kind, path, arg, description) on the captured
    frame's argument slots; ``recipe``: :func:`slot_recipe`; ``in_spec``: the pytree spec of
    the example call's ``(args, kwargs)`` (the structure of nested inputs is compared
    exactly); ``unchecked``: descriptions of the guards a bare call cannot check.

    Called as ``self._export_guards((args, kwargs))`` by the graph's forward. Raises
    :class:`ExportGuardError`. The checks run in C++ (``RootGuardManager.check``, built on
    the first call); only a failure builds a message in Python.
    """

    def __init__(self, checks, recipe, in_spec, unchecked, slot_names=()) -> None:
        super().__init__()
        self.slot_names = {int(k): v for k, v in dict(slot_names).items()}
        self.checks = list(checks)
        self.recipe = list(recipe)
        self.in_spec = in_spec
        self._structure = _compile_structure(in_spec)
        self.unchecked = list(unchecked)
        self._tree = None

    # what torch_plugin.exported.serialization saves and restores (plain data)
    def payload(self) -> dict:
        """This module's state as plain data for torch_plugin.exported.serialization (which
        encodes tuples, classes, dtypes, devices and pytree specs)."""
        return {
            "checks": [tuple(c) for c in self.checks],
            "recipe": [tuple(r) for r in self.recipe],
            "in_spec": self.in_spec,
            "unchecked": list(self.unchecked),
            "slot_names": [(k, v) for k, v in self.slot_names.items()],
        }

    @classmethod
    def from_payload(cls, payload: dict) -> ExportGuards:
        """The inverse of :meth:`payload`. The payload comes from a file (untrusted): its
        shape is validated; raises ``torch_plugin.exported.serialization.ExportLoadError``
        (a ValueError) naming what is malformed."""
        try:
            checks = [_valid_check(c) for c in payload["checks"]]
            recipe = [_valid_recipe_entry(r) for r in payload["recipe"]]
            in_spec = payload["in_spec"]
            _require(isinstance(in_spec, pytree.TreeSpec), "in_spec is not a pytree spec")
            unchecked = [_valid(str, u, "unchecked") for u in payload["unchecked"]]
            names = {
                _valid(int, k, "slot"): _valid(str, v, "slot name")
                for k, v in payload["slot_names"]
            }
        except (KeyError, TypeError, ValueError) as e:
            from .allowlist import ExportLoadError

            raise ExportLoadError(f"malformed exported guards: {e}") from None
        return cls(checks, recipe, in_spec, unchecked, names)

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_tree"] = None  # C++ object: rebuilt on the next call
        return state

    def forward(self, call: tuple) -> None:
        self.check(call)

    def check(self, call: tuple) -> None:
        """Raises :class:`ExportGuardError` unless ``call``, the ``(args, kwargs)`` of a call
        of the exported graph, satisfies the guards. (The generated forward calls this
        method directly: a module call would cost a few microseconds more.)"""
        args, kwargs = call
        if not _same_structure(call, self._structure):
            if _tracing(call):
                return
            raise ExportGuardError(
                "exported graph called with inputs of another structure: expected "
                f"{_describe_spec(self.in_spec)}, got {_describe_spec(pytree.tree_structure(call))}."
                f" {_HOW_TO}"
            )
        if not self.checks:
            return
        tree = self._tree
        if tree is None:
            tree = self._tree = _build_tree(self.checks, self.slot_names)
        values = _slot_values(self.recipe, args, kwargs)
        if not tree.check(values, _EMPTY, _EMPTY, None) and not _tracing(call):
            reason = tree.failure_reason(values, _EMPTY, _EMPTY, None)
            raise ExportGuardError(
                f"exported graph called with an input its capture did not assume: {reason}. "
                f"{_HOW_TO}"
            )

    def extra_repr(self) -> str:
        return f"{len(self.checks)} checks, {len(self.unchecked)} unchecked"


_EMPTY: dict = {}


def _tracing(call: tuple) -> bool:
    """Whether the call is FX symbolically tracing the exported graph (its inputs are
    proxies): the trace records the graph's computation, not the check."""
    return any(isinstance(leaf, torch.fx.Proxy) for leaf in pytree.tree_leaves(call))


# --- validation of a payload read from a file ----------------------------------------------
def _require(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(what)


def _valid(cls, value, what: str):
    _require(isinstance(value, cls) and not (cls is int and isinstance(value, bool)), what)
    return value


def _valid_path(path) -> tuple:
    steps = tuple(tuple(step) for step in path)
    for i, step in enumerate(steps):
        _require(len(step) == 2, f"path step {step!r}")
        how, arg = step
        if i == 0:
            _require(how == "slot" and isinstance(arg, int), f"path root {step!r}")
        else:
            _require(how in ("attr", "item"), f"path step {step!r}")
            if how == "attr":
                _valid(str, arg, "attribute name")
    return steps


_TENSOR_FIELDS = {
    "dtype": torch.dtype,
    "device": torch.device,
    "layout": torch.layout,
    "size": list,
    "requires_grad": bool,
    "check_strides": bool,
    "dynamic_sizes": list,
    "dynamic_strides": list,
}


def _valid_check(check) -> tuple:
    kind, path, arg, desc = check
    _valid(str, desc, "description")
    if kind == "shape":
        program = [tuple(p) for p in arg]
        for op, value in program:
            _valid(str, op, "shape op")
            _require(isinstance(value, (int, float)), "shape operand")
        return (kind, (), program, desc)
    path = _valid_path(path)
    _require(bool(path), "empty path")
    if kind == "type":
        _require(isinstance(arg, type), "type guard argument is not a class")
    elif kind == "len":
        _valid(int, arg, "length")
    elif kind in ("dict_keys", "empty_attr_dicts"):
        arg = list(arg)
    elif kind == "tensor":
        _require(isinstance(arg, dict), "tensor guard argument")
        for field, cls in _TENSOR_FIELDS.items():
            _valid(cls, arg[field], f"tensor guard field {field}")
        _require(arg["type"] in (torch.Tensor, torch.nn.Parameter), "tensor guard type")
        _require(all(isinstance(v, int) for v in arg["size"]), "tensor guard size")
        _require(
            arg["stride"] is None or all(isinstance(v, int) for v in arg["stride"]),
            "tensor guard stride",
        )
    elif kind == "alias":
        arg = (_valid_path(arg[0]), _valid(bool, arg[1], "alias flag"))
    elif kind == "symbol":
        _require(arg[0] in ("size", "stride", "int"), "symbol kind")
        arg = (arg[0], _valid(int, arg[1], "symbol dim"))
    else:
        _require(kind in ("id", "equals", "not_in_dict"), f"guard kind {kind!r}")
    return (kind, path, arg, desc)


def _valid_recipe_entry(entry) -> tuple:
    entry = tuple(entry)
    how = entry[0]
    if how == "arg":
        _valid(int, entry[1], "argument index")
    elif how == "kw":
        _valid(str, entry[1], "keyword")
    elif how == "varargs":
        _valid(int, entry[1], "varargs start")
        _valid(bool, entry[2], "varargs self flag")
    elif how == "varkw":
        entry = (how, [_valid(str, k, "keyword") for k in entry[1]])
    else:
        _require(entry == ("fixed",), f"slot recipe entry {entry!r}")
    return entry


def _compile_structure(spec) -> tuple | None:
    """``spec`` as nested tuples for :func:`_same_structure`: None for a leaf, else
    ``(type, context, children)`` (context: the length of a tuple or list, the key list of a
    dict, (pytree context, number of children) for other node types; children: the non-leaf children as
    ``(index, structure)`` pairs)."""
    if spec.is_leaf():
        return None
    children = tuple(
        (i, c) for i, c in enumerate(_compile_structure(c) for c in spec.children()) if c
    )
    if spec.type in (tuple, list):
        return (spec.type, spec.num_children, children)
    if spec.type is collections.namedtuple:  # pytree's node type for every named tuple
        return (spec.context, spec.num_children, children)
    if spec.type is dict:
        return (dict, list(spec.context), children)
    return (spec.type, (spec.context, spec.num_children), children)


def _same_structure(value: Any, structure: tuple | None) -> bool:
    """``value`` has exactly the pytree structure ``structure`` (:func:`_compile_structure`):
    types, lengths, dict keys and their order, other contexts, down to its leaves."""
    if structure is None:
        return True
    cls, context, children = structure
    if type(value) is not cls:
        return False
    if isinstance(context, int):  # tuple, list, named tuple
        if len(value) != context:
            return False
        items = value
    elif cls is dict:
        if list(value) != context:
            return False
        items = list(value.values()) if children else ()
    else:
        items, got = pytree.SUPPORTED_NODES[cls].flatten_fn(value)
        if got != context[0] or len(items) != context[1]:
            return False
    for i, child in children:
        if not _same_structure(items[i], child):
            return False
    return True


def _describe_spec(spec) -> str:
    text = str(spec)
    return text if len(text) <= 200 else text[:200] + "..."


# Recorded guard kinds replayed as one GuardManager method call (arg, description).
_LEAF_METHODS = {
    "type": "add_type_match",
    "id": "add_id_match",
    "equals": "add_equals_match",
    "len": "add_len_match",
    "dict_keys": "add_dict_keys_match",
    "not_in_dict": "add_not_in_dict",
    "empty_attr_dicts": "add_empty_attr_dicts",
}


def _build_tree(checks: list[tuple], slot_names: dict):
    """A RootGuardManager with ``checks`` replayed on it (no global-state match)."""
    from torch_plugin import _C

    root = _C.RootGuardManager()
    nodes: dict[tuple, Any] = {}

    def node_for(path: tuple):
        node = nodes.get(path)
        if node is None:
            *parent, (how, arg) = path
            if not parent:
                node = root.local(arg, slot_names.get(arg, f"argument {arg}"))
            elif how == "attr":
                node = node_for(tuple(parent)).attr(arg)
            else:
                node = node_for(tuple(parent)).item(arg)
            nodes[path] = node
        return node

    for kind, path, arg, desc in checks:
        if kind == "shape":
            root.add_shape_check(list(arg), desc)
            continue
        node = node_for(path)
        if kind in _LEAF_METHODS:
            getattr(node, _LEAF_METHODS[kind])(arg, desc)
        elif kind == "tensor":
            node.add_tensor_match(
                _example(arg),
                desc,
                arg["check_strides"],
                arg["dynamic_sizes"],
                arg["dynamic_strides"],
            )
        elif kind == "alias":
            root.add_alias_guard(node, node_for(arg[0]), arg[1], desc)
        elif kind == "symbol":
            root.add_shape_symbol(node, arg[0], arg[1], desc)
        else:
            raise ValueError(f"unknown exported guard kind {kind!r}")
    return root


def _example(spec: dict) -> torch.Tensor:
    """A tensor with the metadata ``spec`` describes, for ``add_tensor_match`` (which reads
    type, dispatch keys, dtype, device, layout, sizes and strides from an example)."""
    if spec["layout"] == torch.strided:
        t = torch.empty_strided(
            spec["size"], spec["stride"], dtype=spec["dtype"], device=spec["device"]
        )
    else:
        t = torch.empty(
            spec["size"], dtype=spec["dtype"], device=spec["device"], layout=spec["layout"]
        )
    if spec["requires_grad"]:
        t.requires_grad_(True)
    if spec["type"] is torch.nn.Parameter:
        t = torch.nn.Parameter(t, requires_grad=spec["requires_grad"])
    return t


def source_path(source) -> tuple | None:
    """The path :class:`_Recorder` records for the guards on ``source`` (argument slot, then
    attributes and items), or None for a source not under an argument."""
    from torch_plugin.capture.sources import AttrSource, ItemSource, LocalSource

    if isinstance(source, LocalSource):
        return (("slot", source.slot),)
    if isinstance(source, (AttrSource, ItemSource)):
        base = source_path(source.base)
        if base is None:
            return None
        step = ("attr", source.attr) if isinstance(source, AttrSource) else ("item", source.key)
        return (*base, step)
    return None


def export_guards(guard_set, shape_env, shape_bindings, fn, code, args, kwargs, in_spec):
    """The :class:`ExportGuards` of one export: the capture's ``guard_set`` (with the shape
    environment and bindings of a capture with symbolic sizes) recorded for the argument
    slots of ``code`` that a call of ``fn(*args, **kwargs)`` fills.

    Raises ValueError when a symbolic size is not read from the call's arguments."""
    from torch_plugin.capture.guards import build_guard_tree

    recipe = slot_recipe(fn, code, args, kwargs)
    if recipe is None:
        raise ValueError(
            f"the captured frame ({code.co_qualname}) is not the exported function's own code"
        )
    given = {i for i, r in enumerate(recipe) if r[0] != "fixed"}
    rec = _Recorder(lambda slot: slot in given, hidden_paths(recipe))
    build_guard_tree(guard_set, shape_env, shape_bindings, root=rec)
    return ExportGuards(rec.checks, recipe, in_spec, rec.summary(), rec.slot_names)
