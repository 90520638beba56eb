"""The "eager" backend: runs the captured FX graph as it is, op by op.

Useful to tell capture problems from compiler problems: a wrong result under "eager" is a
capture bug.
"""

from collections.abc import Callable
from typing import Any

import torch


def eager(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
    """Return the graph's own ``forward`` (no module hooks, no compilation)."""
    return gm.forward
