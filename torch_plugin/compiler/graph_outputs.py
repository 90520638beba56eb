"""A captured graph's outputs as the flat tuple AOTAutograd needs, and back.

AOTAutograd (``aot_module_simplified``) takes a graph that returns a flat tuple of values;
a captured graph (from ``torch.compile``'s interop or ``export``) may return nested lists,
dicts or one value. :func:`flatten_graph_outputs` rewrites such a graph in place and gives
back how to rebuild what it returned; the "plugin" compiler and the ``aot_eager`` and
``inductor`` backends use it.

Key parts: :func:`flatten_graph_outputs`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree


def flatten_graph_outputs(gm: torch.fx.GraphModule) -> Callable[[Sequence[Any]], Any]:
    """Make ``gm`` return a flat tuple; return a function that maps such a tuple (or list)
    back to what ``gm`` returned before. Graphs that already return a flat tuple are left
    alone."""
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    # FX stores containers in node args as immutable_list/immutable_dict; gm's generated
    # code builds plain lists and dicts, so rebuild those.
    result = _plain_containers(output.args[0])
    leaves, spec = pytree.tree_flatten(result)
    if spec == pytree.tree_structure(tuple(leaves)):  # already a flat tuple
        return tuple
    output.args = (tuple(leaves),)
    gm.recompile()
    if spec.is_leaf():  # one value
        return lambda outputs: outputs[0]
    return lambda outputs: pytree.tree_unflatten(list(outputs), spec)


def _plain_containers(value: Any) -> Any:
    """``value`` with FX's immutable_list/immutable_dict replaced by list/dict, recursively."""
    if isinstance(value, dict):
        return {k: _plain_containers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain_containers(v) for v in value]
    if type(value) is tuple:
        return tuple(_plain_containers(v) for v in value)
    return value
