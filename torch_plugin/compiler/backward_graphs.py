"""Clean-ups of AOTAutograd's backward graphs shared by the AOTAutograd backends.

AOTAutograd's default partitioner can leave a random ATen op of the forward in the backward
graph with no user: with a ``torch.cond`` in the joint graph (torch 2.11), the ``rand``
that computed the predicate is copied into the backward graph, dead. Random ops are not
removed as dead code (they advance the generator), so each ``backward()`` drew one more
number than eager's and every later draw differed. Eager's backward never draws: a random
op whose result the backward graph does not use is removed.

Key function: :func:`drop_unused_random_ops`, called by the "aot_eager", "inductor" and
"plugin" backward compilers.
"""

from __future__ import annotations

import torch
import torch.fx

__all__ = ["drop_unused_random_ops"]


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
