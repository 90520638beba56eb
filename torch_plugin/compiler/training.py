"""The training stages of the "plugin" compiler: AOTAutograd's forward and backward graphs.

When grad mode is on and a parameter, buffer or input requires grad, AOTAutograd traces a
joint graph and splits it into a forward and a backward graph joined by an
``autograd.Function``; each is compiled here by :func:`torch_plugin.compiler.stages.compile_graph`
without freezing (the parameters are inputs: they change between steps) and without the
graph cache. AOTAutograd's runtime wrapper stays (it owns the ``autograd.Function``). The
backward graph is compiled lazily, on the first ``backward()``, from the autograd engine,
possibly while an ``optimize`` region is active on the thread: it is compiled with capture
off. On CUDA, a graph that needs gradients runs as the eager graph (the driver,
:mod:`torch_plugin.compiler.pipeline`, decides that; GPU training is compiled by a later
part).

Key parts: :func:`forward_compiler`, :func:`backward_compiler`.
"""

from __future__ import annotations

from typing import Any

import torch

from torch_plugin import _C
from torch_plugin.compiler import stages
from torch_plugin.compiler.backward_graphs import drop_unused_random_ops


def forward_compiler(fx_graph: torch.fx.GraphModule, inputs: list[Any]) -> Any:
    """AOTAutograd's ``fw_compiler``: the forward graph, compiled without freezing."""
    return stages.compile_graph(fx_graph)


def _backward(fx_graph: torch.fx.GraphModule, inputs: list[Any]) -> Any:
    drop_unused_random_ops(fx_graph)  # eager's backward draws no random number
    return stages.compile_graph(fx_graph)


# AOTAutograd's ``bw_compiler``: the backward graph, compiled with capture off.
backward_compiler = _C.disable_wrapper(_backward)
