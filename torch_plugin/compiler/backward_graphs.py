"""Random ops in AOTAutograd's graphs, shared by the AOTAutograd backends.

Random ops are never dead code: they advance the generator, so an unused ``torch.rand([])``
still changes every later draw. torch.fx's dead-code elimination (``Graph.eliminate_dead_code``,
which AOTAutograd runs on the graphs it traces) keeps them only outside a
``torch._guards.TracingContext`` or with Inductor's ``fallback_random`` on: inside one (the
backends compile a graph with symbolic sizes in the capture's TracingContext, see
``OutputGraph.backend_context``) it removes an unused random op, so a recompile with symbolic
sizes lost the draw and every later number differed from eager's (program generator seed
249). :func:`random_ops_kept` is the context the "aot_eager" and "plugin" backends compile in.

AOTAutograd's default partitioner can leave a random ATen op of the forward in the backward
graph with no user: with a ``torch.cond`` in the joint graph (torch 2.11), the ``rand``
that computed the predicate is copied into the backward graph, dead. Random ops are not
removed as dead code (they advance the generator), so each ``backward()`` drew one more
number than eager's and every later draw differed. Eager's backward never draws: a random
op whose result the backward graph does not use is removed.

Key functions: :func:`random_ops_kept`; :func:`drop_unused_random_ops`, called by the
"aot_eager", "inductor" and "plugin" backward compilers.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.fx

__all__ = ["drop_unused_random_ops", "random_ops_kept"]


@contextlib.contextmanager
def random_ops_kept() -> Iterator[None]:
    """A context in which torch.fx's dead-code elimination treats every random op
    (``nondeterministic_seeded``) as having an effect, also inside a TracingContext (where
    it reads ``torch._inductor.config.fallback_random``, set here for the duration; Inductor's
    own compiles are not run in it). The previous value is restored on exit."""
    import torch._inductor.config as inductor_config

    with inductor_config.patch(fallback_random=True):
        yield


def drop_unused_random_ops(gm: torch.fx.GraphModule) -> int:
    """Remove from backward graph ``gm`` each ATen op tagged ``nondeterministic_seeded``
    (``rand``, ``bernoulli``, ...) whose result nothing uses; recompiles ``gm`` when one was
    removed. Returns how many were removed."""
    removed = 0
    for node in reversed(list(gm.graph.nodes)):
        target = node.target
        if (
            node.op == "call_function"
            and not node.users
            and isinstance(target, torch._ops.OpOverload)
            and torch.Tag.nondeterministic_seeded in target.tags
            and not target._schema.is_mutable
        ):
            gm.graph.erase_node(node)
            removed += 1
    if removed:
        gm.recompile()
    return removed
