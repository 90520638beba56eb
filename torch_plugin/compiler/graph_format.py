"""The graph cache's on-disk form of a lowered IR graph: the IR's own export
(``_C._compiler.Graph.export()``) as versioned JSON carrying the SHA-256 of its own content,
validated field by field before the IR builder sees any of it, and built back into an IR
graph. A cache entry is data, never code: no pickle (issue #13: a planted pickle in the cache
ran ``os.system`` when it was loaded), and no tensor values (frozen parameters are referenced
by position and come from the live module).

A file is one JSON object::

    {"format": 6,
     "key": "<the graph-cache key the entry is stored under>",
     "sha256": "<hex SHA-256 of the canonical JSON of {"key": key, "graph": graph}>",
     "graph": {"device": "cpu" | "cuda[:N]",
               "num_frozen": N,
               "values": [[value_id, dtype, sizes, strides], ...],
               "inputs": [value_id, ...],
               "constants": [[value_id, frozen_index], ...],
               "nodes": [[op, overload, node_args, [output_id, ...]], ...],
               "outputs": [value_id, ...]}}

The key is inside the hashed content, so an entry copied or swapped to another key's file
does not validate for that key. ``values`` types every value of the graph (the export's
``values``; all on ``device``: a lowered graph has one); ``inputs`` and ``constants`` are
the export's, each constant a frozen parameter by its index (0 <= index < num_frozen);
``nodes`` are the export's nodes in order (a lowered graph's nodes have no attributes and no
body: the pass pipeline runs after the cache). ``dtype`` is a code of ``lowering._DTYPES``;
``op`` ``"namespace::name"`` naming a registered operator with that ``overload``; each node
argument is ``["t", value_id]``, ``["l", [value_id or null, ...]]`` or ``["c", constant]``
with a constant of null, booleans, numbers (``NaN``/``Infinity`` allowed), strings and lists
of these. Every value id is defined once (an input, a constant or a node output) before it
is used. Anything else (another format, a wrong hash, an unknown field, a bad code, a
dangling id) raises :class:`BadEntry`.

Key parts: :func:`entry_of` (an exported graph to an entry, or None when it cannot be
cached), :func:`dumps`, :func:`loads`, :func:`build`, :data:`FORMAT`, :class:`BadEntry`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

import torch

from torch_plugin import _C
from torch_plugin.compiler.lowering import _DTYPES

# Bumped when the format changes (6: the IR's export instead of a log of builder calls;
# 5: the key in the hashed content; 4: JSON with a content hash; 1-3 were pickles).
FORMAT = 6

_DTYPE_CODES = frozenset(_DTYPES.values())
_DEVICE = re.compile(r"cpu|cuda(:[0-9]{1,3})?")
_OP = re.compile(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*")
_OVERLOAD = re.compile(r"[A-Za-z0-9_]*")
_MAX_RANK = 64
_MAX_OUTPUTS = 1024
_MAX_CONSTANT_DEPTH = 4
_GRAPH_FIELDS = {"device", "num_frozen", "values", "inputs", "constants", "nodes", "outputs"}


class BadEntry(ValueError):
    """A cache entry that is not a valid graph of this format (the message says why)."""


def entry_of(exported: dict[str, Any], frozen: Sequence[torch.Tensor], device: str) -> Any:
    """The cacheable form (the ``graph`` object of a file) of ``exported`` (what
    ``Graph.export()`` returns for a lowered graph, before the pass pipeline), whose constants
    must be the tensors ``frozen`` (by identity: the ones lowering passed to
    ``add_constant``); None when it cannot be cached (another constant, or a node with
    attributes or a body)."""
    index = {id(t): i for i, t in enumerate(frozen)}
    constants = []
    for vid, tensor in exported["constants"]:
        i = index.get(id(tensor))
        if i is None:
            return None
        constants.append([vid, i])
    nodes = []
    for n in exported["nodes"]:
        if n["attrs"] or n["body"] is not None:
            return None
        args = [[kind, payload] for kind, payload in n["args"]]
        nodes.append([n["op"], n["overload"], args, list(n["outputs"])])
    values = [[vid, t[0], list(t[1]), list(t[2])] for vid, t in sorted(exported["values"].items())]
    return {
        "device": device,
        "num_frozen": len(frozen),
        "values": values,
        "inputs": list(exported["inputs"]),
        "constants": constants,
        "nodes": nodes,
        "outputs": list(exported["outputs"]),
    }


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


def dumps(graph: Any, key: str) -> bytes:
    """The file content of ``graph`` (from :func:`entry_of`) stored under ``key``."""
    digest = hashlib.sha256(_canonical({"key": key, "graph": graph})).hexdigest()
    top = {"format": FORMAT, "key": key, "sha256": digest, "graph": graph}
    return json.dumps(top, allow_nan=True).encode()


def loads(data: bytes, key: str) -> dict[str, Any]:
    """The ``graph`` object of a file's content read for ``key``, validated (see the module
    docstring). Raises :class:`BadEntry`."""
    try:
        top = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise BadEntry(f"not JSON: {e}") from None
    _check(isinstance(top, dict) and set(top) == {"format", "key", "sha256", "graph"}, "fields")
    _check(top["format"] == FORMAT and _is_int(top["format"]), f"format {top['format']!r}")
    _check(top["key"] == key, "stored under another key")
    graph = top["graph"]
    _check(isinstance(top["sha256"], str), "sha256")
    digest = hashlib.sha256(_canonical({"key": key, "graph": graph})).hexdigest()
    _check(digest == top["sha256"], "content hash")
    _validate(graph)
    return graph


def build(graph: dict[str, Any], frozen: Sequence[torch.Tensor]) -> Any:
    """The IR graph (``_C._compiler.Graph``) of a validated ``graph``, with ``frozen[i]`` as
    frozen parameter ``i``. The builder hands out value ids in order; an id the export does
    not list (a constant no node uses, which the export leaves out) is made again as an
    unused empty constant, so every value keeps its id. Raises ValueError when the builder
    hands out other value ids than the exported graph had (an entry from another build of
    the extension)."""
    g = _C._compiler.Graph()
    device = graph["device"]
    types = {v[0]: v[1:] for v in graph["values"]}
    budget = [len(graph["values"]) + graph["num_frozen"] + 64]
    next_id = [0]

    def fill_to(vid: int) -> None:
        # Unused constants of the exported graph (not exported): same ids, never read.
        while next_id[0] < vid:
            budget[0] -= 1
            if budget[0] < 0:
                raise ValueError("graph cache: value ids leave too many gaps")
            next_id[0] = g.add_constant(_UNUSED) + 1

    leaves = [(vid, None) for vid in graph["inputs"]] + [(v, i) for v, i in graph["constants"]]
    for vid, index in sorted(leaves):
        fill_to(vid)
        if index is None:
            dtype, sizes, strides = types[vid]
            got = g.add_input(dtype, sizes, strides, device)
        else:
            got = g.add_constant(frozen[index].detach())
        _same_id(got, vid)
        next_id[0] = got + 1
    for op, overload, args, outputs in graph["nodes"]:
        if outputs:
            fill_to(outputs[0])
        may_alias = any(r.alias_info is not None for r in _op(op, overload)._schema.returns)
        node_args = [(kind, payload) for kind, payload in args]
        ids = g.add_node(op, overload, node_args, len(outputs), may_alias)
        _same_id(ids, outputs)
        for vid in outputs:
            dtype, sizes, strides = types[vid]
            g.set_type(vid, dtype, sizes, strides, device)
        if ids:
            next_id[0] = ids[-1] + 1
    g.set_outputs(graph["outputs"])
    return g


_UNUSED = torch.empty(0)


def _same_id(got: Any, expected: Any) -> None:
    if got != expected:
        raise ValueError(f"graph cache: the builder made value {got}, the entry has {expected}")


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise BadEntry(f"bad {what}")


def _is_int(x: Any) -> bool:
    return type(x) is int


def _ints(xs: Any, nonneg: bool) -> bool:
    return (
        isinstance(xs, list)
        and len(xs) <= _MAX_RANK
        and all(_is_int(x) and (x >= 0 or not nonneg) for x in xs)
    )


def _constant(c: Any, depth: int = 0) -> bool:
    if c is None or isinstance(c, (bool, int, float, str)):
        return True
    return (
        isinstance(c, list)
        and depth < _MAX_CONSTANT_DEPTH
        and all(_constant(x, depth + 1) for x in c)
    )


@functools.lru_cache(maxsize=4096)
def _op(op: str, overload: str) -> Any:
    ns, name = op.split("::")
    packet = getattr(getattr(torch.ops, ns), name)
    return getattr(packet, overload or "default")


def _op_exists(op: str, overload: str) -> bool:
    try:
        _op(op, overload)
        return True
    except (AttributeError, RuntimeError):
        return False


def _validate(graph: Any) -> None:
    _check(isinstance(graph, dict) and set(graph) == _GRAPH_FIELDS, "graph fields")
    device, num_frozen = graph["device"], graph["num_frozen"]
    _check(isinstance(device, str) and _DEVICE.fullmatch(device) is not None, "device")
    _check(_is_int(num_frozen) and num_frozen >= 0, "num_frozen")
    values = graph["values"]
    _check(isinstance(values, list), "values")
    typed: set[int] = set()
    for v in values:
        _check(isinstance(v, list) and len(v) == 4, "value")
        vid, dtype, sizes, strides = v
        _check(_is_int(vid) and vid >= 0 and vid not in typed, "value id")
        _check(_is_int(dtype) and dtype in _DTYPE_CODES, "dtype")
        _check(_ints(sizes, True) and _ints(strides, True) and len(sizes) == len(strides), "sizes")
        typed.add(vid)
    known: set[int] = set()

    def define(vid: Any) -> None:
        _check(_is_int(vid) and vid in typed and vid not in known, "defined value id")
        known.add(vid)

    _check(isinstance(graph["inputs"], list), "inputs")
    for vid in graph["inputs"]:
        define(vid)
    _check(isinstance(graph["constants"], list), "constants")
    for c in graph["constants"]:
        _check(isinstance(c, list) and len(c) == 2, "constant")
        define(c[0])
        _check(_is_int(c[1]) and 0 <= c[1] < num_frozen, "frozen index")
    _check(isinstance(graph["nodes"], list), "nodes")
    for i, n in enumerate(graph["nodes"]):
        try:
            _validate_node(n, known, define)
        except BadEntry as e:
            raise BadEntry(f"node {i}: {e}") from None
    _check(known == typed, "values (a value is typed but never defined)")
    outputs = graph["outputs"]
    _check(isinstance(outputs, list) and all(_is_int(v) and v in known for v in outputs), "outputs")


def _validate_node(n: Any, known: set[int], define: Any) -> None:
    _check(isinstance(n, list) and len(n) == 4, "node")
    op, overload, args, outputs = n
    _check(isinstance(op, str) and _OP.fullmatch(op) is not None, "op")
    _check(isinstance(overload, str) and _OVERLOAD.fullmatch(overload) is not None, "overload")
    _check(_op_exists(op, overload), f"op {op}.{overload} (not registered)")
    _check(isinstance(args, list), "node args")
    for a in args:
        _check(isinstance(a, list) and len(a) == 2, "node arg")
        kind, payload = a
        if kind == "t":
            _check(_is_int(payload) and payload in known, "tensor argument id")
        elif kind == "l":
            _check(isinstance(payload, list), "tensor list")
            _check(all(p is None or (_is_int(p) and p in known) for p in payload), "tensor ids")
        elif kind == "c":
            _check(_constant(payload), "constant")
        else:
            raise BadEntry(f"bad node argument kind {kind!r}")
    _check(isinstance(outputs, list) and len(outputs) <= _MAX_OUTPUTS, "outputs")
    for vid in outputs:
        define(vid)
