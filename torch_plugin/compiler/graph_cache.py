"""Disk cache of lowered inference graphs: a warm restart skips AOTAutograd's tracing.

Tracing a captured graph into an ATen graph (AOTAutograd: a metadata pass and a
functionalized ``make_fx`` trace, both on FakeTensors) is most of the "plugin" backend's
compile time on a large inference graph (ResNet-50: see docs/internals/compiler.md,
"Compile time"). Its result, once lowered, is a short list of calls on the IR builder
(``_C._compiler.Graph``): add an input, add a node with these schema-ordered arguments,
give an output this type. This module records that list (a *lowering recipe*) while a graph
is lowered, stores it on disk, and replays it on a later compile of the same graph.

What is cached: the recipe's ops, names, constant arguments, sizes, strides, dtypes and
devices — never tensor values — as validated JSON with a content hash
(:mod:`torch_plugin.compiler.recipe_format`; no pickle: an entry is data, never code).
Frozen parameters are referenced by their position and come from the
live module on every replay, so a recipe cannot return stale weights. Graphs with other
tensor constants (``get_attr`` tensors in the ATen graph) are not cached.

When a recipe is used: only for inference graphs (AOTAutograd's inference path: no input
requires grad, or grad mode is off) whose AOTAutograd runtime wrapper does nothing, which
:func:`trivially_wrapped` checks on the traced graph: the graph's placeholders are exactly
the parameters, buffers and inputs (no deduplicated or synthetic-base arguments), it has no
mutable op (no input mutation kept in the graph), and it returns exactly the captured
graph's outputs, each a fresh tensor (no output aliases an input or another output).
Everything else (training, aliasing, mutation) always goes through AOTAutograd.

The key (:func:`graph_key`) hashes everything the recipe depends on: the captured graph's
code and the identity of each callable it calls, the metadata (sizes, strides, dtype,
requires_grad) of every parameter, buffer and example input, grad mode, the compiler
options, the torch version, and the source of the Python files that produce the recipe
(backends/plugin.py, compiler/lowering.py, compiler/decompositions.py, this file). The C++
passes run after the replay, so they are not part of the key.

Key parts:
- :func:`graph_key`, :func:`load`, :func:`store`.
- :class:`RecordingGraph`: an IR builder that records its calls.
- :class:`Recipe`, :func:`replay`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from torch_plugin import _C
from torch_plugin.compiler import recipe_format
from torch_plugin.compiler.recipe_format import FORMAT as _FORMAT

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Recipe:
    """A lowered graph as the builder calls that made it.

    ``calls``: ``(method, args, result)`` in order, with ``add_constant`` recorded as
    ``("frozen", index, id)``; ``num_frozen``: how many leading graph arguments are frozen
    parameters (the rest are inputs).
    """

    calls: list[tuple[str, tuple, Any]]
    num_frozen: int


class Uncacheable(Exception):
    """The graph being recorded cannot be cached (a tensor constant that is not frozen)."""


class RecordingGraph:
    """``_C._compiler.Graph`` that records every builder call (see :class:`Recipe`).

    ``frozen``: the tensors lowering will pass to ``add_constant`` for frozen placeholders,
    by position. A call to ``add_constant`` with any other tensor marks the recording as
    uncacheable (``self.cacheable`` False); building goes on unaffected.
    """

    def __init__(self, frozen: dict[int, torch.Tensor]):
        self.graph = _C._compiler.Graph()
        self.calls: list[tuple[str, tuple, Any]] = []
        self.cacheable = True
        self._frozen = {id(t): i for i, t in frozen.items()}

    def _call(self, method: str, *args: Any) -> Any:
        result = getattr(self.graph, method)(*args)
        self.calls.append((method, args, result))
        return result

    def add_input(self, dtype: int, sizes: list[int], strides: list[int], device: str) -> int:
        return self._call("add_input", dtype, sizes, strides, device)

    def add_constant(self, t: torch.Tensor) -> int:
        result = self.graph.add_constant(t)
        index = self._frozen.get(id(t))
        if index is None:
            self.cacheable = False
        self.calls.append(("frozen", (index,), result))
        return result

    def add_node(self, op: str, overload: str, args: list, n: int, may_alias: bool) -> list[int]:
        return self._call("add_node", op, overload, args, n, may_alias)

    def set_type(
        self, i: int, dtype: int, sizes: list[int], strides: list[int], device: str
    ) -> None:
        self._call("set_type", i, dtype, sizes, strides, device)

    def set_outputs(self, ids: list[int]) -> None:
        self._call("set_outputs", ids)


def replay(recipe: Recipe, frozen: Sequence[torch.Tensor]) -> Any:
    """The IR graph ``recipe`` describes, with ``frozen[i]`` as frozen parameter ``i``.

    Raises ValueError when the builder hands out other value ids than it did when the
    recipe was recorded (a recipe from another build of the extension).
    """
    g = _C._compiler.Graph()
    for method, args, expected in recipe.calls:
        if method == "frozen":
            result = g.add_constant(frozen[args[0]].detach())
        else:
            result = getattr(g, method)(*args)
        if result != expected:
            raise ValueError(f"graph cache: {method} returned {result}, recorded {expected}")
    return g


def trivially_wrapped(
    fx_graph: torch.fx.GraphModule, num_args: int, num_outputs: int
) -> str | None:
    """Why calling ``fx_graph`` (AOTAutograd's inference graph) directly with the
    ``num_args`` flat arguments would differ from calling AOTAutograd's wrapper of it, or
    None when it would not (see the module docstring)."""
    placeholders = 0
    outputs: list[Any] = []
    for node in fx_graph.graph.nodes:
        if node.op == "placeholder":
            placeholders += 1
        elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            if node.target._schema.is_mutable:
                return f"mutable op {node.target}"
        elif node.op == "output":
            outputs = list(torch.fx.node.map_arg(node.args[0], lambda n: n) or ())
    if placeholders != num_args:
        return f"{placeholders} placeholders for {num_args} arguments"
    if len(outputs) != num_outputs:
        return f"{len(outputs)} outputs for {num_outputs} graph outputs"
    if len(set(outputs)) != len(outputs):
        return "an output is returned twice"
    for out in outputs:
        if not isinstance(out, torch.fx.Node) or out.op != "call_function":
            return f"output {out} is not computed by the graph"
        target = out.target
        if not isinstance(target, torch._ops.OpOverload):
            return f"output {out} comes from {target}"
        if any(r.alias_info is not None for r in target._schema.returns):
            return f"output {out} may alias an input ({target})"
    return None


@functools.cache
def _source_hash() -> str:
    """Hash of the Python sources that produce a recipe."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for rel in (
        "backends/plugin.py",
        "compiler/lowering.py",
        "compiler/decompositions.py",
        "compiler/graph_cache.py",
        "compiler/recipe_format.py",
    ):
        h.update(rel.encode())
        h.update((root / rel).read_bytes())
    return h.hexdigest()


def _tensor_meta(t: torch.Tensor) -> str:
    return f"{t.dtype}{tuple(t.shape)}{t.stride()}{t.storage_offset()}{t.device}{t.requires_grad}"


def _has_symbolic_placeholder(gm: torch.fx.GraphModule) -> bool:
    """Whether a placeholder of ``gm`` is a symbolic number or a tensor with a symbolic size
    or stride (its capture-time ``example_value``)."""
    sym = (torch.SymInt, torch.SymFloat, torch.SymBool)
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        value = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(value, sym):
            return True
        if isinstance(value, torch.Tensor) and any(
            isinstance(v, torch.SymInt) for v in (*value.shape, *value.stride())
        ):
            return True
    return False


def _tracing_state() -> str:
    """The global torch state that changes the ATen graph AOTAutograd traces from the same
    captured graph: autocast (ambient, entered outside the captured frame, so not in the
    graph's code) per device type, and the default dtype. A recipe traced under autocast
    replayed without it ran the bf16 graph for fp32 inputs (wrong results, and kernels whose
    baked dtypes read past their buffers)."""
    parts = [f"default_dtype={torch.get_default_dtype()}"]
    for device in ("cpu", "cuda"):
        enabled = torch.is_autocast_enabled(device)
        dtype = torch.get_autocast_dtype(device) if enabled else None
        parts.append(f"autocast_{device}={enabled}:{dtype}")
    parts.append(f"autocast_cache={torch.is_autocast_cache_enabled()}")
    return ",".join(parts)


def graph_key(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    params: dict[str, torch.Tensor],
    options: dict[str, Any],
) -> str | None:
    """The cache key of compiling ``gm`` for inference, or None when it must not be cached
    (an input that is not a plain static-shape tensor, or an argument passed twice)."""
    tensors = list(params.values()) + list(example_inputs)
    if len({id(t) for t in tensors}) != len(tensors):
        return None
    if _has_symbolic_placeholder(gm):
        # A graph captured with symbolic sizes has the code of its static twin, and its
        # example inputs have concrete sizes: it is never cached (the recipe of one would
        # be replayed for the other, issue #10).
        return None
    h = hashlib.sha256()
    h.update(f"{_FORMAT}|{torch.__version__}|{_source_hash()}|{sorted(options.items())}".encode())
    h.update(f"|grad={torch.is_grad_enabled()}|{_tracing_state()}|".encode())
    for t in tensors:
        if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.is_sparse:
            return None
        if any(not isinstance(s, int) for s in (*t.shape, *t.stride())):
            return None
    for name, t in params.items():
        h.update(f"{name}:{_tensor_meta(t)};".encode())
    for t in example_inputs:
        h.update(f"in:{_tensor_meta(t)};".encode())
    h.update(gm.code.encode())
    # The code names callables by their global name; add what each one is.
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method"):
            t = node.target
            h.update(f"{getattr(t, '__module__', '')}.{getattr(t, '__qualname__', t)};".encode())
        elif node.op == "call_module":
            mod = gm.get_submodule(node.target)
            h.update(f"{type(mod).__module__}.{type(mod).__qualname__}:{mod!r};".encode())
        elif node.op == "get_attr":
            value = getattr(gm, node.target, None)
            if isinstance(value, torch.Tensor):
                if node.target not in params:
                    return None  # a tensor constant: its value would be part of the recipe
            else:
                h.update(repr(value).encode())
    return h.hexdigest()


def _path(cache_dir: str, key: str) -> Path:
    return Path(cache_dir) / "graphs" / f"{key}.json"


# Entries already reported unusable in this process (each is logged once).
_reported: set[str] = set()


def load(cache_dir: str, key: str) -> Recipe | None:
    """The recipe stored under ``key``, or None: missing, or unusable (not this format, a
    wrong content hash, a field that does not validate; see :mod:`.recipe_format`), which is
    logged once and then overwritten by the recompile."""
    path = _path(cache_dir, key)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        _report(path, f"unreadable: {e}")
        return None
    try:
        calls, num_frozen = recipe_format.loads(data, key)
    except recipe_format.BadEntry as e:
        _report(path, str(e))
        return None
    from torch_plugin.cache import touch

    touch(path)  # used now: least-recently-used eviction keeps it
    return Recipe(calls, num_frozen)


def _report(path: Path, why: str) -> None:
    if str(path) not in _reported:
        _reported.add(str(path))
        log.warning("plugin: ignoring graph cache entry %s (%s); recompiling", path, why)


def _make_private_dirs(folder: Path) -> None:
    """``mkdir -p`` with every folder it creates 0700 (``Path.mkdir(parents=True)`` gives the
    parents the default mode)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for f in reversed(missing):
        with contextlib.suppress(FileExistsError):
            f.mkdir(mode=0o700)


def store(cache_dir: str, key: str, recipe: Recipe) -> None:
    """Writes ``recipe`` under ``key`` atomically (a temporary file with an unpredictable name
    in the same folder, flushed to disk, then renamed: a concurrent reader sees all or
    nothing). Folders are created 0700, files 0600. An unwritable cache directory is logged,
    not raised. Then least recently used entries are evicted until the cache is under its size
    limit (:func:`torch_plugin.cache.enforce_limit`)."""
    path = _path(cache_dir, key)
    try:
        _make_private_dirs(path.parent)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(recipe_format.dumps(recipe, key))
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as e:
        log.warning("plugin: cannot write the graph cache entry %s: %s", path, e)
        return
    from torch_plugin.cache import enforce_limit

    try:
        freed = enforce_limit(Path(cache_dir))
    except (OSError, ValueError) as e:
        log.warning("plugin: cannot keep the cache under its size limit: %s", e)
    else:
        if freed:
            log.info("plugin: evicted %d bytes of least recently used cache entries", freed)
