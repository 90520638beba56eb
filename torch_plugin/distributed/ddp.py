"""Splitting a captured graph at DistributedDataParallel's gradient buckets.

DDP all-reduces gradients in *buckets*: it walks the parameters in the order their gradients
become ready (about the reverse of their use in forward) and closes a bucket once it holds
at least a cap of bytes (1 MiB for the first bucket by default, ``bucket_cap_mb`` for the
others). An all-reduce starts as soon as every gradient of its bucket is ready, so it
overlaps with the rest of the backward pass. A graph compiled as one AOTAutograd function
produces every gradient at the end of its one backward node: no all-reduce could start
early. So a graph captured while DDP's forward runs is split into one subgraph per bucket,
each compiled by the chosen backend on its own (the idea of PyTorch's DDPOptimizer in
``torch/_dynamo/backends/distributed.py``; the code here is this project's own).

How the split is chosen (:func:`plan_split`):

1. The gradient parameters of the graph are the ones DDP reduces (``ddp.module``'s
   parameters that require grad and that DDP does not ignore), read through ``get_attr``
   nodes or arriving as graph inputs.
2. They are ordered by their last use in the graph, last first, and within one node last
   argument first: the order eager autograd produces their gradients in backward.
3. DDP's own bucket assignment (``torch.distributed._compute_bucket_assignment_by_size``)
   groups them with DDP's caps (:func:`bucket_caps`): the buckets DDP builds after its first
   iteration.
4. Walking the graph from its output, a node belongs to the highest bucket of any gradient
   parameter it or a later node reads, so the subgraphs follow graph order and each one
   holds the parameters of one bucket. Parameters used out of order stay in the subgraph
   where they are read (correct; their gradient is only ready later than DDP assumed).

``torch.fx.passes.split_module`` cuts the graph; each subgraph is compiled with example
inputs made from the values capture recorded for its inputs (real tensors of the same
shape, strides, dtype, device and ``requires_grad``, with random contents: compiling never
runs the user's graph); in a graph with symbolic sizes (dynamic shapes) the values with
symbolic sizes are passed as the FakeTensors capture recorded, so each subgraph is compiled
for every size (inside the capture's TracingContext, as the whole graph would be). Graphs
where nothing needs a gradient (evaluation under DDP) are compiled whole.

Key parts: :func:`active_ddp_module`, :func:`bucket_caps`, :func:`plan_split`,
:func:`bucket_splitting_compiler`, :class:`DDPSplit`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from torch_plugin.contract import CompilerFn
from torch_plugin.contract import stand_in as _stand_in
from torch_plugin.contract import stand_ins as _stand_ins

log = logging.getLogger("torch_plugin.ddp")


@dataclasses.dataclass(frozen=True)
class Subgraph:
    """One subgraph of a split graph, in forward order.

    Attributes:
        name: the submodule's name in the split graph (``submod_0``, ...).
        num_ops: its number of operation nodes.
        param_names: the graph names of the gradient parameters it reads.
        param_bytes: their size in bytes (numel x element size).
    """

    name: str
    num_ops: int
    param_names: tuple[str, ...]
    param_bytes: int


@dataclasses.dataclass(frozen=True)
class DDPSplit:
    """What splitting one captured graph at DDP's gradient buckets did.

    Attributes:
        bucket_caps: the byte caps used: the first bucket's, then the others'.
        num_buckets: how many buckets DDP's assignment makes of the graph's gradient
            parameters.
        subgraphs: the subgraphs compiled, in forward order (empty when the graph was
            compiled whole).
        not_split: why the graph was compiled whole, or None when it was split.
    """

    bucket_caps: tuple[int, ...]
    num_buckets: int
    subgraphs: tuple[Subgraph, ...] = ()
    not_split: str | None = None

    def describe(self) -> list[str]:
        """Readable lines for ``explain()`` and the ``ddp`` log channel."""
        caps = " then ".join(_mib(c) for c in self.bucket_caps)
        if self.not_split is not None:
            return [f"DDP: compiled whole ({self.not_split}); bucket caps {caps}"]
        head = (
            f"DDP: split into {len(self.subgraphs)} subgraphs at gradient buckets "
            f"({self.num_buckets} buckets; caps {caps}):"
        )
        lines = [head]
        for s in self.subgraphs:
            names = ", ".join(s.param_names) if s.param_names else "no parameters"
            lines.append(
                f"  {s.name}: {s.num_ops} ops, {_mib(s.param_bytes)} of parameters: {names}"
            )
        return lines


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.3g} MiB"


def active_ddp_module() -> torch.nn.Module | None:
    """The ``DistributedDataParallel`` module whose forward is running on this process (DDP
    marks itself while it calls the wrapped module), or None; None when torch.distributed is
    not built."""
    if not torch.distributed.is_available():
        return None
    from torch.nn.parallel import DistributedDataParallel

    get_active = getattr(DistributedDataParallel, "_get_active_ddp_module", None)
    return get_active() if get_active is not None else None


def bucket_caps(ddp: torch.nn.Module) -> list[int]:
    """The bucket byte caps DDP's reducer uses when it rebuilds its buckets after the first
    iteration: ``bucket_cap_mb_list`` if given; else the first bucket's cap
    (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``, 1 MiB, when ``bucket_cap_mb`` was
    left at its default, else ``bucket_cap_mb``) followed by ``bucket_cap_mb``. Source:
    ``DistributedDataParallel.__init__`` / ``_ddp_init_helper`` (torch/nn/parallel/distributed.py)."""
    caps = getattr(ddp, "bucket_bytes_cap_list", None)
    if caps:
        return [int(c) for c in caps]
    cap = int(ddp.bucket_bytes_cap)
    if getattr(ddp, "bucket_bytes_cap_default", False):
        first = min(int(torch.distributed._DEFAULT_FIRST_BUCKET_BYTES), cap)
    else:
        first = cap
    return [first, cap]


def reduced_parameters(ddp: torch.nn.Module) -> dict[int, str]:
    """``id(parameter) -> name`` for every parameter DDP all-reduces: the wrapped module's
    parameters that require grad and are not in ``parameters_to_ignore``."""
    ignored = set(getattr(ddp, "parameters_to_ignore", ()) or ())
    return {
        id(p): name
        for name, p in ddp.module.named_parameters()
        if p.requires_grad and name not in ignored
    }


def _op_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op not in ("placeholder", "get_attr", "output")]


def plan_split(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    reduced: dict[int, str],
    caps: Sequence[int],
) -> tuple[dict[torch.fx.Node, int], DDPSplit]:
    """Assign each operation node of ``gm`` to a subgraph (0 = first in forward order).

    ``reduced`` maps ``id(parameter)`` to its name for the parameters DDP reduces
    (:func:`reduced_parameters`); ``caps`` are DDP's bucket byte caps (:func:`bucket_caps`).
    Returns the assignment and a :class:`DDPSplit` (with ``not_split`` set, and every node
    in subgraph 0, when the graph is better compiled whole). The algorithm is in the module
    docstring.
    """
    caps = tuple(int(c) for c in caps)
    ops = _op_nodes(gm)
    whole = {n: 0 for n in ops}
    placeholder_index = {
        n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")
    }
    param_of: dict[torch.fx.Node, torch.Tensor] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = operator.attrgetter(node.target)(gm)
        elif node.op == "placeholder":
            index = placeholder_index[node]
            value = example_inputs[index] if index < len(example_inputs) else None
        else:
            continue
        if isinstance(value, torch.Tensor) and id(value) in reduced:
            param_of[node] = value
    if not param_of:
        return whole, DDPSplit(caps, 0, not_split="no parameter that DDP reduces")
    if not any(t.requires_grad for t in param_of.values()) or not torch.is_grad_enabled():
        return whole, DDPSplit(caps, 0, not_split="no gradient is computed")

    # Gradient parameters in the order backward produces their gradients.
    order: list[torch.fx.Node] = []
    seen: set[int] = set()
    for node in reversed(ops):
        # Eager autograd hands a node's gradients over last argument first (a linear
        # layer's bias before its weight); DDP's buckets follow that order.
        for inp in reversed(node.all_input_nodes):
            p = param_of.get(inp)
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                order.append(inp)
    tensors = [param_of[n] for n in order]
    bucket_indices, _ = torch.distributed._compute_bucket_assignment_by_size(tensors, list(caps))
    bucket_of_param: dict[int, int] = {}
    for b, indices in enumerate(bucket_indices):
        for i in indices:
            bucket_of_param[id(tensors[i])] = b
    num_buckets = len(bucket_indices)

    # Walk from the output: a node is in the highest bucket read by it or any later node.
    reverse_bucket: dict[torch.fx.Node, int] = {}
    current = 0
    for node in reversed(ops):
        for inp in node.all_input_nodes:
            p = param_of.get(inp)
            if p is not None:
                current = max(current, bucket_of_param[id(p)])
        reverse_bucket[node] = current
    used = sorted(set(reverse_bucket.values()), reverse=True)  # forward order
    if len(used) == 1:
        return whole, DDPSplit(caps, num_buckets, not_split="one bucket")
    forward_index = {b: i for i, b in enumerate(used)}
    assignment = {n: forward_index[b] for n, b in reverse_bucket.items()}

    names: list[list[str]] = [[] for _ in used]
    nbytes = [0] * len(used)
    counts = [0] * len(used)
    placed: set[int] = set()
    for node in ops:
        i = assignment[node]
        counts[i] += 1
        for inp in node.all_input_nodes:
            p = param_of.get(inp)
            if p is not None and id(p) not in placed:
                placed.add(id(p))
                names[i].append(reduced[id(p)])
                nbytes[i] += p.numel() * p.element_size()
    subgraphs = tuple(
        Subgraph(f"submod_{i}", counts[i], tuple(names[i]), nbytes[i]) for i in range(len(used))
    )
    return assignment, DDPSplit(caps, num_buckets, subgraphs)


class _CompiledSubgraph(torch.nn.Module):
    """A compiled subgraph, called by the split graph where its submodule was."""

    def __init__(self, compiled: Callable[..., Any], name: str) -> None:
        super().__init__()
        self.compiled = compiled
        self.subgraph_name = name

    def forward(self, *args: Any) -> Any:
        return self.compiled(*args)


class _SubgraphCompiler(torch.fx.Interpreter):
    """Walks the split graph once, compiling each subgraph with example inputs: the real
    inputs of the whole graph, its parameters, and stand-ins (:func:`torch_plugin.contract.real_like`) for the
    values earlier subgraphs produce. Nothing of the user's graph runs."""

    def __init__(self, split_gm: torch.fx.GraphModule, backend: CompilerFn) -> None:
        super().__init__(split_gm)
        self.backend = backend
        self.compiled: dict[str, Callable[..., Any]] = {}

    def call_module(self, target: Any, args: tuple, kwargs: dict) -> Any:
        sub = self.fetch_attr(target)
        output = next(n for n in sub.graph.nodes if n.op == "output")
        # Read before the backend runs: backends may rewrite the subgraph's outputs.
        stand_in = torch.fx.node.map_aggregate(
            output.args[0],
            lambda a: _stand_in(a.meta["example_value"]) if isinstance(a, torch.fx.Node) else a,
        )
        self.compiled[target] = self.backend(sub, _example_inputs(sub, args))
        return stand_in


def _example_inputs(sub: torch.fx.GraphModule, args: tuple) -> list[Any]:
    """What subgraph ``sub`` is compiled with for its inputs ``args``: stand-ins made together
    from the values capture recorded for its placeholders (:func:`torch_plugin.contract.
    stand_ins`), so that inputs which shared memory in the captured program (a view and its
    base, one made in an earlier subgraph and one in another) share it here too; parameters
    are passed as they are. Fresh stand-ins for each, as the values flow between subgraphs,
    would tell the backend they do not alias: a subgraph writing through a view and reading
    its base (``v = y.view(-1)[:5]`` cut from ``v.mul_(3); y.sum()``) was compiled as if the
    write could not change the read, and returned eager's result before the write. Without
    a recorded value for every placeholder, ``args`` themselves."""
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    recorded = [n.meta.get("example_value") for n in placeholders]
    if len(placeholders) != len(args) or any(r is None for r in recorded):
        return list(args)
    made = _stand_ins(recorded)
    return [a if isinstance(a, torch.nn.Parameter) else m for a, m in zip(args, made)]


_HIDDEN = "torch_plugin_example_value"


@contextlib.contextmanager
def _example_values_hidden(gm: torch.fx.GraphModule):
    """Moves each node's ``example_value`` to another meta key while the block runs (the
    split's copies of the nodes keep it there: :func:`_restore_example_values`)."""
    for node in gm.graph.nodes:
        if "example_value" in node.meta:
            node.meta[_HIDDEN] = node.meta.pop("example_value")
    try:
        yield
    finally:
        _restore_example_values(gm)


def _restore_example_values(gm: torch.fx.GraphModule) -> None:
    for module in gm.modules():
        if isinstance(module, torch.fx.GraphModule):
            for node in module.graph.nodes:
                if _HIDDEN in node.meta:
                    node.meta["example_value"] = node.meta.pop(_HIDDEN)


def compile_split(
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    assignment: dict[torch.fx.Node, int],
    backend: CompilerFn,
) -> Callable[..., Any]:
    """Cut ``gm`` into the subgraphs of ``assignment`` (node -> subgraph index, see
    :func:`plan_split`), compile each with ``backend`` and return the callable that runs
    them in order (``compiled(*inputs)`` returns what ``gm(*inputs)`` returns)."""
    from torch.fx.passes.split_module import split_module

    # split_module passes each size symbol a subgraph's values carry as an extra input,
    # found through a node whose ``example_value`` is that symbol (PyTorch's capture makes
    # them graph inputs). Capture's graphs have none: their symbols are sizes of the input
    # tensors, which each subgraph reads from the tensors it gets (and a size used as a value
    # is an ordinary node, passed like any value). So the example values are hidden from it.
    with _example_values_hidden(gm):
        split_gm = split_module(gm, None, lambda node: assignment[node])
    _restore_example_values(split_gm)
    compiler = _SubgraphCompiler(split_gm, backend)
    # Grad mode stays as it is: backends decide from it whether to build a backward graph.
    compiler.run(*example_inputs)
    for name, compiled in compiler.compiled.items():
        setattr(split_gm, name, _CompiledSubgraph(compiled, name))
    split_gm.recompile()
    return split_gm.forward


def bucket_splitting_compiler(
    backend: CompilerFn, ddp: torch.nn.Module, on_split: Callable[[DDPSplit], None]
) -> CompilerFn:
    """``backend`` wrapped to compile a graph captured inside ``ddp``'s forward as one
    subgraph per gradient bucket (:func:`plan_split`, :func:`compile_split`), or whole when
    that is better; ``on_split`` receives the :class:`DDPSplit` of each compile."""
    caps = bucket_caps(ddp)
    reduced = reduced_parameters(ddp)

    def compile_at_buckets(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Any:
        assignment, split = plan_split(gm, example_inputs, reduced, caps)
        on_split(split)
        for line in split.describe():
            log.info("%s", line)
        if split.not_split is not None:
            return backend(gm, example_inputs)
        return compile_split(gm, example_inputs, assignment, backend)

    return compile_at_buckets
