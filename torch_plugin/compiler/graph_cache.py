"""Disk cache of lowered inference graphs: a warm restart skips AOTAutograd's tracing.

Tracing a captured graph into an ATen graph (AOTAutograd: a metadata pass and a
functionalized ``make_fx`` trace, both on FakeTensors) is most of the "plugin" backend's
compile time on a large inference graph (ResNet-50: see docs/internals/compiler.md,
"Compile time"). This module stores the lowered IR graph (before the pass pipeline) through
the IR's own export (``_C._compiler.Graph.export()``), and a later compile of the same graph
builds it back instead of tracing.

What is cached: the graph's ops, constant arguments, sizes, strides, dtypes and device —
never tensor values — as validated JSON with a content hash
(:mod:`torch_plugin.compiler.graph_format`; no pickle: an entry is data, never code).
Frozen parameters are referenced by their position and come from the live module on every
build, so an entry cannot return stale weights. Graphs with other tensor constants
(``get_attr`` tensors in the ATen graph) are not cached.

When an entry is used: only for inference graphs (AOTAutograd's inference path: no input
requires grad, or grad mode is off) whose AOTAutograd runtime wrapper does nothing, which
:func:`trivially_wrapped` checks on the traced graph: the graph's placeholders are exactly
the parameters, buffers and inputs (no deduplicated or synthetic-base arguments), it has no
mutable op (no input mutation kept in the graph), and it returns exactly the captured
graph's outputs, each a fresh tensor or a view of a fresh intermediate that no other output
shares (no output aliases an input or another output); parameters tied to each other
(GPT-2's LM head) are passed twice, as AOTAutograd is, and the key says which are tied.
Everything else (training, aliasing, mutation) always goes through AOTAutograd.

The key (:func:`graph_key`) hashes everything the entry depends on: the captured graph's
code and the identity of each callable it calls, the metadata (sizes, strides, dtype,
requires_grad) of every parameter, buffer and example input, grad mode, the tracing state
(autocast, default dtype), the compiler options, the torch version, the entry format, and
the source of the Python files that produce the lowered graph (the compiler's stages,
lowering, decompositions, attention rewriting, this file and the format). The C++ passes run
after the cache, so they are not part of the key. The folder is
:mod:`torch_plugin.compiler.cache_dir`'s.

Key parts: :func:`graph_key`, :func:`load`, :func:`store`, :func:`trivially_wrapped`.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import operator
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from torch_plugin.compiler import cache_dir as cache_folder
from torch_plugin.compiler import graph_format, size_variants
from torch_plugin.compiler.graph_format import FORMAT as _FORMAT

# The cache log channel (TORCH_PLUGIN_LOGS=cache, torch_plugin.logs); its warnings reach the
# program's logging configuration while the channel is off.
log = logging.getLogger("torch_plugin.cache")


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
    bases = []
    for out in outputs:
        base = _fresh_base(out)
        if isinstance(base, str):
            return base
        bases.append(base)
    if len(set(bases)) != len(bases):
        # Two outputs share a buffer (a view of another output, two views of one
        # intermediate): AOTAutograd's wrapper regenerates one from the other.
        return "two outputs share one buffer"
    return None


def _fresh_base(out: Any) -> torch.fx.Node | str:
    """The node whose fresh buffer the graph output ``out`` is or views, through view ops
    (``aten.view``, a ``getitem`` of ``split``): GPT-2's logits are a view of the LM head's
    matrix product, which AOTAutograd (grad off, no other output of that buffer) returns as
    a plain output. A string (why not) when ``out`` is, or views, an input or a constant."""
    node = out
    while True:
        if not isinstance(node, torch.fx.Node) or node.op != "call_function":
            return f"output {out} is not computed by the graph"
        target = node.target
        if target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
            # One result of an op with several: a buffer of its own (native_layer_norm's
            # output), or a view of that op's input (split's parts).
            source = node.args[0].target
            if isinstance(source, torch._ops.OpOverload) and all(
                r.alias_info is None for r in source._schema.returns
            ):
                return node
            node = node.args[0]
            continue
        if not isinstance(target, torch._ops.OpOverload):
            return f"output {out} comes from {target}"
        schema = target._schema
        aliased = [r.alias_info for r in schema.returns if r.alias_info is not None]
        if not aliased:
            return node
        # A view op: its results alias its first argument (``self``) and nothing else.
        first = schema.arguments[0].alias_info if schema.arguments else None
        if (
            first is None
            or first.is_write
            or any(a.before_set != first.before_set for a in aliased)
            or not isinstance(node.args[0], torch.fx.Node)
        ):
            return f"output {out} may alias an input ({target})"
        node = node.args[0]


@functools.cache
def _source_hash() -> str:
    """Hash of the Python sources that produce a cached graph."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for rel in (
        "compiler/pipeline.py",
        "compiler/inference.py",
        "compiler/stages.py",
        "compiler/graph_outputs.py",
        "compiler/attention.py",
        "compiler/lowering.py",
        "compiler/decompositions.py",
        "compiler/graph_cache.py",
        "compiler/graph_format.py",
    ):
        h.update(rel.encode())
        h.update((root / rel).read_bytes())
    return h.hexdigest()


def _tensor_meta(t: torch.Tensor) -> str:
    return f"{t.dtype}{tuple(t.shape)}{t.stride()}{t.storage_offset()}{t.device}{t.requires_grad}"


def _has_symbolic_placeholder(gm: torch.fx.GraphModule) -> bool:
    """Whether a placeholder of ``gm`` is a symbolic number or a tensor with a symbolic size
    or stride (its capture-time ``example_value``): such a captured graph is compiled per
    size (:mod:`.size_variants`), never cached."""
    return size_variants.has_symbolic_sizes(gm)


def _tracing_state() -> str:
    """The global torch state that changes the ATen graph AOTAutograd traces from the same
    captured graph: autocast (ambient, entered outside the captured frame, so not in the
    graph's code) per device type, and the default dtype. A graph traced under autocast
    built again without it ran the bf16 graph for fp32 inputs (wrong results, and kernels whose
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
    tied = tied_parameters(list(params.values()), example_inputs)
    if tied is None:
        return None
    if _has_symbolic_placeholder(gm):
        # A graph captured with symbolic sizes has the code of its static twin, and its
        # example inputs have concrete sizes: it is never cached (the entry of one would
        # be used for the other, issue #10).
        return None
    h = hashlib.sha256()
    h.update(f"{_FORMAT}|{torch.__version__}|{_source_hash()}|{sorted(options.items())}".encode())
    h.update(f"|grad={torch.is_grad_enabled()}|{_tracing_state()}|tied={tied}|".encode())
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
                    return None  # a tensor constant: its value would be part of the entry
            else:
                h.update(repr(value).encode())
    return h.hexdigest()


def tied_parameters(params: Sequence[Any], inputs: Sequence[Any]) -> tuple[int, ...] | None:
    """For each parameter (or buffer) the position of its first occurrence in ``params``
    (GPT-2's ``lm_head.weight`` is ``wte.weight``: AOTAutograd is given it twice), or None
    when an input is passed twice or is also a parameter (AOTAutograd's wrapper then
    deduplicates or rebases the arguments at every call)."""
    first: dict[int, int] = {}
    tied = tuple(first.setdefault(id(t), i) for i, t in enumerate(params))
    for t in inputs:
        if id(t) in first:
            return None
        first[id(t)] = -1
    return tied


def _path(cache_dir: str, key: str) -> Path:
    return Path(cache_dir) / "graphs" / f"{key}.json"


# Entries already reported unusable in this process (each is logged once).
_reported: set[str] = set()


def load(cache_dir: str, key: str) -> dict[str, Any] | None:
    """The lowered graph stored under ``key`` (validated, for :func:`graph_format.build`), or
    None: missing, or unusable (not this format, a wrong content hash, a field that does not
    validate; see :mod:`.graph_format`), which is logged once and then overwritten by the
    recompile."""
    path = _path(cache_dir, key)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        log.info("graph cache: miss %s (no entry)", path)
        return None
    except OSError as e:
        _report(path, f"unreadable: {e}")
        return None
    try:
        graph = graph_format.loads(data, key)
    except graph_format.BadEntry as e:
        _report(path, str(e))
        return None
    cache_folder.touch(path)  # used now: least-recently-used eviction keeps it
    log.info("graph cache: hit %s", path)
    return graph


def _report(path: Path, why: str) -> None:
    if str(path) not in _reported:
        _reported.add(str(path))
        log.warning("plugin: ignoring graph cache entry %s (%s); recompiling", path, why)


def store(cache_dir: str, key: str, graph: dict[str, Any]) -> None:
    """Writes ``graph`` (from :func:`graph_format.entry_of`) under ``key``, atomically and
    private (:func:`cache_dir.write_private`). An unwritable cache directory is logged, not
    raised. Then least recently used entries are evicted until the cache is under its size
    limit (:func:`cache_dir.enforce_limit`)."""
    path = _path(cache_dir, key)
    try:
        cache_folder.write_private(path, graph_format.dumps(graph, key))
    except OSError as e:
        log.warning("plugin: cannot write the graph cache entry %s: %s", path, e)
        return
    log.info("graph cache: stored %s", path)
    try:
        freed = cache_folder.enforce_limit(Path(cache_dir))
    except (OSError, ValueError) as e:
        log.warning("plugin: cannot keep the cache under its size limit: %s", e)
    else:
        if freed:
            log.info("plugin: evicted %d bytes of least recently used cache entries", freed)
