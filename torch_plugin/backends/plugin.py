"""The "plugin" backend: the project's own compiler, registered by name.

The compiler is :mod:`torch_plugin.compiler` (its driver,
:func:`torch_plugin.compiler.pipeline.compile_captured`, and the stages it runs:
captured → lowered → compiled, inference and training side by side) and ``csrc/``; this
module only exposes it as a backend.

Key parts:
- :func:`plugin`: the backend, registered as ``"plugin"`` and exposed to ``torch.compile``
  through the ``torch_dynamo_backends`` entry-point group (pyproject.toml).
- :func:`plugin_reduce_overhead`: the backend with ``mode="reduce-overhead"``.
- :func:`register`: called by :mod:`torch_plugin.backends` on first use of the registry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torch_plugin.backends.registry import register_backend
from torch_plugin.compiler.pipeline import MODES, compile_captured

__all__ = ["MODES", "plugin", "plugin_reduce_overhead", "register"]


def plugin(
    gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor], *, mode: str = "default"
) -> Callable[..., Any]:
    """Compile ``gm`` with the "plugin" compiler.

    ``mode``: "default", or "reduce-overhead" (CUDA graphs wherever they can be captured; see
    :mod:`torch_plugin.compiler.pipeline`). Raises ValueError for another mode.
    """
    return compile_captured(gm, example_inputs, mode)


def plugin_reduce_overhead(
    gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]
) -> Callable[..., Any]:
    """:func:`plugin` with ``mode="reduce-overhead"``."""
    return plugin(gm, example_inputs, mode="reduce-overhead")


def register() -> None:
    """Register :func:`plugin` as the backend ``"plugin"``, with the mode "reduce-overhead"
    (:func:`plugin_reduce_overhead`)."""
    register_backend(plugin, "plugin", modes={"reduce-overhead": plugin_reduce_overhead})
