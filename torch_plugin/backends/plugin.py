"""The "plugin" backend: the project's own compiler (torch_plugin/compiler, csrc/compiler).

AOTAutograd (``aot_module_simplified``) traces the captured graph into ATen graphs with the
decomposition table of :mod:`torch_plugin.compiler.decompositions`; each graph is compiled by
:func:`torch_plugin.compiler.compile.compile_graph`. An inference graph (no input or
parameter needs a gradient, or grad mode is off) is frozen: the parameters and buffers that
AOTAutograd lifts into its first inputs become constants, guarded on identity and version.
Forward and backward graphs of training are compiled without freezing; the backward graph is
compiled lazily, with capture off (see ``aot_eager``).

Key parts:
- :func:`plugin`: the backend, registered as ``"plugin"`` and exposed to ``torch.compile``
  through the ``torch_dynamo_backends`` entry-point group (pyproject.toml).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from torch_plugin.backends.aot_eager import flatten_graph_outputs, without_capture


def plugin(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
    """Compile ``gm`` with the "plugin" compiler."""
    from torch._functorch.aot_autograd import aot_module_simplified

    from torch_plugin.compiler.compile import compile_graph
    from torch_plugin.compiler.decompositions import decomposition_table

    # AOTAutograd's graphs take the module's parameters, then its buffers, then the inputs.
    params = {
        **dict(gm.named_parameters(remove_duplicate=False)),
        **dict(gm.named_buffers(remove_duplicate=False)),
    }
    params_flat = list(params.values())

    def inference_compiler(fx_graph: torch.fx.GraphModule, inputs: list[Any]) -> Any:
        frozen = params_flat if _placeholders_match(fx_graph, params_flat) else []
        return compile_graph(fx_graph, frozen)

    def training_compiler(fx_graph: torch.fx.GraphModule, inputs: list[Any]) -> Any:
        return compile_graph(fx_graph)

    rebuild = flatten_graph_outputs(gm)
    compiled = aot_module_simplified(
        gm,
        example_inputs,
        fw_compiler=training_compiler,
        bw_compiler=without_capture(training_compiler),
        inference_compiler=inference_compiler,
        decompositions=decomposition_table(),
        keep_inference_input_mutations=True,
    )

    def run(*args: Any) -> Any:
        return rebuild(compiled(*args))

    return run


def _placeholders_match(fx_graph: torch.fx.GraphModule, params: list[torch.Tensor]) -> bool:
    """Whether the graph's first placeholders have the parameters' shapes and dtypes (and so
    are the parameters, lifted by AOTAutograd in this order)."""
    placeholders = [n for n in fx_graph.graph.nodes if n.op == "placeholder"]
    if len(placeholders) < len(params):
        return False
    for node, p in zip(placeholders, params):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.shape != p.shape or val.dtype != p.dtype:
            return False
    return True
