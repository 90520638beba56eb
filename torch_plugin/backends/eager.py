"""The "eager" backend: runs the captured FX graph as it is, op by op.

Useful to tell capture problems from compiler problems: a wrong result under "eager" is a
capture bug.
"""

from collections.abc import Callable
from typing import Any

import torch

from torch_plugin.backends.registry import register_backend


def eager(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
    """Return the graph's own ``forward`` (no module hooks, no compilation).

    The tensors the graph reads with ``get_attr`` (parameters and buffers) are also put in
    ``gm``'s instance ``__dict__``, so the generated code's ``self.<name>`` finds them by a
    plain attribute lookup instead of ``Module.__getattr__`` (about 1 µs each; a 20-layer
    MLP reads 40). They are the same objects as in ``_parameters`` / ``_buffers``; the
    capture's guards on their identity make a replaced parameter recompile.
    """
    for node in gm.graph.nodes:
        if node.op == "get_attr" and "." not in node.target:
            value = getattr(gm, node.target)
            if isinstance(value, torch.Tensor):
                gm.__dict__[node.target] = value
    return gm.forward


def register() -> None:
    """Register :func:`eager` as the backend ``"eager"``."""
    register_backend(eager, "eager")
