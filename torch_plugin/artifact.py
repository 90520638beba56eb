"""The "plugin" compiler's artifact of a model: capture, then compile to an FX graph module.

:func:`compile_to_graph_module` sits above both halves: it captures a model with
:func:`torch_plugin.export` (the compiler never imports the capture's public API) and hands
the graph to AOTAutograd and the "plugin" compiler's inference stages, then writes the
compiled graph as an FX graph module (:func:`torch_plugin.compiler.fx_artifact.to_graph_module`).

Key parts: :func:`compile_to_graph_module`.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from torch_plugin.compiler.fx_artifact import PluginGraphModule, to_graph_module

__all__ = ["compile_to_graph_module"]


def compile_to_graph_module(model: Any, *example_inputs: torch.Tensor) -> PluginGraphModule:
    """Compile ``model(*example_inputs)`` for inference with the "plugin" compiler and return
    the compiled artifact.

    ``model``: an ``nn.Module``, a function, or an FX ``GraphModule`` already captured (its
    placeholders take ``example_inputs``). Others are captured whole with
    :func:`torch_plugin.export`. The ATen graph comes from AOTAutograd under ``no_grad`` with
    the plugin decompositions; parameters and buffers are frozen into constants, as the
    "plugin" backend does for inference. The module takes the example inputs' tensors, in
    order, and returns a tuple of the model's output tensors (flattened). Its constants are
    the parameters as they were at this call.

    Raises:
        torch_plugin.CaptureError / torch_plugin.ExportError: the model does not capture as
            one graph.
        NotImplementedError: the compiler does not take this graph (the backend would run
            it unmodified; the reason is in the message).
    """
    if isinstance(model, torch.fx.GraphModule):
        gm = model
    else:
        from torch_plugin.export import export

        gm, _ = export(model, *example_inputs)
    return _compile_graph_module(gm, *example_inputs)


def _compile_graph_module(gm: torch.fx.GraphModule, *example_inputs: Any) -> PluginGraphModule:
    """Compile the captured graph ``gm`` (its placeholders take ``example_inputs``) for
    inference with the "plugin" compiler and return the compiled artifact.

    The ATen graph comes from AOTAutograd under ``no_grad`` with the plugin decompositions;
    parameters and buffers are frozen into constants, as the "plugin" backend does for
    inference. The module takes the example inputs' tensors, in order, and returns a tuple of
    the graph's output tensors (flattened). Its constants are the parameters as they were at
    this call. ``gm`` itself is not rewritten.

    Raises:
        NotImplementedError: the compiler does not take this graph (the backend would run
            it unmodified; the reason is in the message).
    """
    from torch._functorch.aot_autograd import aot_module_simplified

    from torch_plugin.compiler.decompositions import decomposition_table
    from torch_plugin.compiler.graph_outputs import flatten_graph_outputs
    from torch_plugin.compiler.stages import CompiledGraph, compile_graph

    # Same parameters and submodules, own graph: the caller's module is not rewritten.
    gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
    if isinstance(gm.graph._codegen, torch.fx.graph._PyTreeCodeGen):
        # An exported graph takes and returns pytrees; AOTAutograd wants flat inputs and
        # outputs (its placeholders already are the flattened arguments: the tensors).
        gm.graph._codegen = torch.fx.graph.CodeGen()
        gm.recompile()
    flatten_graph_outputs(gm)
    params = [
        *dict(gm.named_parameters(remove_duplicate=False)).values(),
        *dict(gm.named_buffers(remove_duplicate=False)).values(),
    ]
    compiled: list[Any] = []

    def inference_compiler(fx_graph: torch.fx.GraphModule, inputs: list[Any]) -> Any:
        compiled.append(compile_graph(fx_graph, params))
        return compiled[-1]

    with torch.no_grad():
        aot_module_simplified(
            gm,
            list(example_inputs),
            fw_compiler=inference_compiler,
            inference_compiler=inference_compiler,
            decompositions=decomposition_table(),
            keep_inference_input_mutations=True,
        )
    if not compiled or not isinstance(compiled[-1], CompiledGraph):
        raise NotImplementedError(
            "the plugin compiler runs this graph unmodified (see the torch_plugin.compiler "
            "log for the reason); there is no compiled artifact"
        )
    if compiled[-1].num_frozen != len(params):
        raise NotImplementedError(
            "the parameters were not frozen (TORCH_PLUGIN_FREEZE=0?); the compiled graph "
            "takes them as inputs"
        )
    return to_graph_module(compiled[-1])
