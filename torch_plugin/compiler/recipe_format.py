"""The on-disk format of a lowering recipe (:class:`~torch_plugin.compiler.graph_cache.Recipe`):
versioned JSON carrying the SHA-256 of its own content, validated field by field before the
IR builder sees any of it. A cache entry is data, never code: no pickle (issue #13: a planted
pickle in the cache ran ``os.system`` when it was loaded).

A file is one JSON object::

    {"format": 5,
     "key": "<the graph-cache key the entry is stored under>",
     "sha256": "<hex SHA-256 of the canonical JSON of {"key": key, "recipe": recipe}>",
     "recipe": {"num_frozen": N,
                "calls": [[method, args, result], ...]}}

The key is inside the hashed content, so an entry copied or swapped to another key's file
does not validate for that key.

with one call per IR-builder call, in order (see ``graph_cache.RecordingGraph``):

| method | args | result |
|---|---|---|
| ``add_input`` | ``[dtype, sizes, strides, device]`` | new value id |
| ``frozen`` | ``[index]`` (0 <= index < num_frozen) | new value id |
| ``add_node`` | ``[op, overload, node_args, num_outputs, may_alias]`` | list of new value ids |
| ``set_type`` | ``[value_id, dtype, sizes, strides, device]`` | null |
| ``set_outputs`` | ``[[value_id, ...]]`` | null |

``dtype`` is a code of ``lowering._DTYPES``; ``device`` ``"cpu"`` or ``"cuda[:N]"``; ``op``
``"namespace::name"`` naming a registered operator with that ``overload``; each node argument is
``["t", value_id]``, ``["l", [value_id or null, ...]]`` or ``["c", constant]`` with a constant
of null, booleans, numbers (``NaN``/``Infinity`` allowed), strings and lists of these. Every
value id an entry uses must have been made by an earlier call. Anything else (another format,
a wrong hash, an unknown field, a bad code, a dangling id) raises :class:`BadEntry`.

Key parts: :func:`dumps`, :func:`loads`, :data:`FORMAT`, :class:`BadEntry`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from typing import Any

import torch

from torch_plugin.compiler.lowering import _DTYPES

# Bumped when the format changes (5: the key in the hashed content; 4: JSON with a content
# hash; 1-3 were pickles).
FORMAT = 5

_DTYPE_CODES = frozenset(_DTYPES.values())
_DEVICE = re.compile(r"cpu|cuda(:[0-9]{1,3})?")
_OP = re.compile(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*")
_OVERLOAD = re.compile(r"[A-Za-z0-9_]*")
_MAX_RANK = 64
_MAX_OUTPUTS = 1024
_MAX_CONSTANT_DEPTH = 4


class BadEntry(ValueError):
    """A cache entry that is not a valid recipe of this format (the message says why)."""


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=True).encode()


def dumps(recipe: Any, key: str) -> bytes:
    """The file content of ``recipe`` (a ``graph_cache.Recipe``) stored under ``key``."""
    calls = []
    for method, args, result in recipe.calls:
        if method == "add_node":
            op, overload, node_args, n, may_alias = args
            args = [op, overload, [[kind, payload] for kind, payload in node_args], n, may_alias]
        calls.append([method, list(args), result])
    body = {"num_frozen": recipe.num_frozen, "calls": calls}
    digest = hashlib.sha256(_canonical({"key": key, "recipe": body})).hexdigest()
    top = {"format": FORMAT, "key": key, "sha256": digest, "recipe": body}
    return json.dumps(top, allow_nan=True).encode()


def loads(data: bytes, key: str) -> tuple[list[tuple[str, tuple, Any]], int]:
    """``(calls, num_frozen)`` of a file's content read for ``key``, validated (see the module
    docstring). Raises :class:`BadEntry`."""
    try:
        top = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise BadEntry(f"not JSON: {e}") from None
    _check(isinstance(top, dict) and set(top) == {"format", "key", "sha256", "recipe"}, "fields")
    _check(top["format"] == FORMAT and _is_int(top["format"]), f"format {top['format']!r}")
    _check(top["key"] == key, "stored under another key")
    body = top["recipe"]
    _check(isinstance(top["sha256"], str), "sha256")
    digest = hashlib.sha256(_canonical({"key": key, "recipe": body})).hexdigest()
    _check(digest == top["sha256"], "content hash")
    _check(isinstance(body, dict) and set(body) == {"num_frozen", "calls"}, "recipe fields")
    num_frozen, raw_calls = body["num_frozen"], body["calls"]
    _check(_is_int(num_frozen) and num_frozen >= 0, "num_frozen")
    _check(isinstance(raw_calls, list), "calls")
    known: set[int] = set()
    calls = []
    for i, call in enumerate(raw_calls):
        _check(isinstance(call, list) and len(call) == 3, f"call {i}")
        method, args, result = call
        _check(isinstance(args, list), f"call {i}: args")
        try:
            calls.append(_call(method, args, result, num_frozen, known))
        except BadEntry as e:
            raise BadEntry(f"call {i} ({method!r}): {e}") from None
    return calls, num_frozen


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


def _meta(dtype: Any, sizes: Any, strides: Any, device: Any) -> None:
    _check(_is_int(dtype) and dtype in _DTYPE_CODES, "dtype")
    _check(_ints(sizes, True) and _ints(strides, True) and len(sizes) == len(strides), "sizes")
    _check(isinstance(device, str) and _DEVICE.fullmatch(device) is not None, "device")


def _new_id(result: Any, known: set[int]) -> None:
    _check(_is_int(result) and result >= 0 and result not in known, "result id")
    known.add(result)


def _constant(c: Any, depth: int = 0) -> bool:
    if c is None or isinstance(c, (bool, int, float, str)):
        return True
    return (
        isinstance(c, list)
        and depth < _MAX_CONSTANT_DEPTH
        and all(_constant(x, depth + 1) for x in c)
    )


@functools.lru_cache(maxsize=4096)
def _op_exists(op: str, overload: str) -> bool:
    ns, name = op.split("::")
    try:
        packet = getattr(getattr(torch.ops, ns), name)
        return (overload or "default") in packet.overloads()
    except (AttributeError, RuntimeError):
        return False


def _call(method: Any, args: list, result: Any, num_frozen: int, known: set[int]) -> tuple:
    if method == "add_input":
        _check(len(args) == 4, "arity")
        _meta(*args)
        _new_id(result, known)
        return (method, tuple(args), result)
    if method == "frozen":
        _check(len(args) == 1 and _is_int(args[0]) and 0 <= args[0] < num_frozen, "index")
        _new_id(result, known)
        return (method, tuple(args), result)
    if method == "add_node":
        _check(len(args) == 5, "arity")
        op, overload, node_args, n, may_alias = args
        _check(isinstance(op, str) and _OP.fullmatch(op) is not None, "op")
        _check(isinstance(overload, str) and _OVERLOAD.fullmatch(overload) is not None, "overload")
        _check(_op_exists(op, overload), f"op {op}.{overload} (not registered)")
        _check(_is_int(n) and 0 <= n <= _MAX_OUTPUTS and isinstance(may_alias, bool), "outputs")
        _check(isinstance(node_args, list), "node args")
        decoded = []
        for a in node_args:
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
            decoded.append((kind, payload))
        _check(isinstance(result, list) and len(result) == n, "results")
        for r in result:
            _new_id(r, known)
        return (method, (op, overload, decoded, n, may_alias), result)
    if method == "set_type":
        _check(len(args) == 5 and _is_int(args[0]) and args[0] in known, "value id")
        _meta(*args[1:])
        _check(result is None, "result")
        return (method, tuple(args), result)
    if method == "set_outputs":
        _check(len(args) == 1 and isinstance(args[0], list), "arity")
        _check(all(_is_int(v) and v in known for v in args[0]), "output ids")
        _check(result is None, "result")
        return (method, tuple(args), result)
    raise BadEntry(f"unknown method {method!r}")
