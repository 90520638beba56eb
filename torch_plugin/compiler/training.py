"""The training stages of the "plugin" compiler: AOTAutograd's forward and backward graphs.

When grad mode is on and a parameter, buffer or input requires grad, AOTAutograd traces a
joint graph and splits it into a forward and a backward graph joined by an
``autograd.Function``; each is compiled here by :func:`torch_plugin.compiler.stages.compile_graph`
without freezing (the parameters are inputs: they change between steps) and without the
graph cache. AOTAutograd's runtime wrapper stays (it owns the ``autograd.Function``). The
backward graph is compiled lazily, on the first ``backward()``, from the autograd engine,
possibly while an ``optimize`` region is active on the thread: it is compiled with capture
off. On CUDA both graphs are compiled the same way, without CUDA graphs; the driver
(:mod:`torch_plugin.compiler.pipeline`) runs the captured graph as eager instead when the
forward graph does not lower (:func:`forward_compiler` reports it). The optimizer step that
follows a backward is compiled separately (:mod:`torch_plugin.compiler.optimizer_step`).

Key parts: :func:`forward_compiler`, :func:`backward_compiler`.
"""

from __future__ import annotations

from typing import Any

import torch

from torch_plugin import _C
from torch_plugin.compiler import stages


def forward_compiler(
    fx_graph: torch.fx.GraphModule, inputs: list[Any], facts: dict[str, Any] | None = None
) -> Any:
    """AOTAutograd's ``fw_compiler``: the forward graph, compiled without freezing.
    ``facts`` receives ``"unlowered_forward"`` (why) when the graph runs unmodified."""
    compiled = stages.compile_graph(fx_graph)
    why = getattr(compiled, "unlowered", None)
    if facts is not None and why is not None:
        facts["unlowered_forward"] = why
    return compiled


def _backward(fx_graph: torch.fx.GraphModule, inputs: list[Any]) -> Any:
    return stages.compile_graph(fx_graph)


# AOTAutograd's ``bw_compiler``: the backward graph, compiled with capture off.
backward_compiler = _C.disable_wrapper(_backward)
