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

A backward graph returns None for each input that needs no gradient (the data, buffers),
which the IR cannot return: both graphs are compiled returning their tensors only, and the
call puts the Nones back (:func:`_without_none_outputs`); before issue #30 such a backward
graph, nearly every one, ran as its ATen graph, op by op.

The two graphs' dtypes are FakeTensor's. Where a real kernel returns another dtype than its
meta kernel (CPU batch norm of a bf16/fp16 input with fp32 weights saves fp32 statistics;
the meta kernel says bf16/fp16), the executor converts the result to the graph's dtype (the
ATen-call step, and the executor's inputs for a forward graph run as its ATen graph): a
generated kernel never reads it as another dtype (docs/internals/runtime.md).

Key parts: :func:`forward_compiler`, :func:`backward_compiler`, :data:`counters`.
"""

from __future__ import annotations

import collections
import logging
from typing import Any

import torch

from torch_plugin import _C
from torch_plugin.compiler import options, stages
from torch_plugin.compiler.backward_graphs import drop_unused_random_ops

log = logging.getLogger("torch_plugin.backends.plugin")

# Training graphs that run as their ATen graph, op by op: "unlowered_forward",
# "unlowered_backward" (the log names why).
counters: collections.Counter[str] = collections.Counter()


def forward_compiler(
    fx_graph: torch.fx.GraphModule, inputs: list[Any], facts: dict[str, Any] | None = None
) -> Any:
    """AOTAutograd's ``fw_compiler``: the forward graph, compiled without freezing.
    ``facts`` receives ``"unlowered_forward"`` (why) when the graph runs unmodified."""
    compiled = _without_none_outputs(fx_graph, _compile_training_graph)
    why = getattr(compiled, "unlowered", None)
    if why is not None:
        counters["unlowered_forward"] += 1
        if facts is not None:
            facts["unlowered_forward"] = why
    return compiled


def _backward(fx_graph: torch.fx.GraphModule, inputs: list[Any]) -> Any:
    drop_unused_random_ops(fx_graph)  # eager's backward draws no random number
    compiled = _without_none_outputs(fx_graph, _compile_training_graph)
    if getattr(compiled, "unlowered", None) is not None:
        counters["unlowered_backward"] += 1
    return compiled


# Channels-last cuDNN convolutions in training graphs (see _compile_training_graph).
CUDA_CONV_CHANNELS_LAST = False


def _compile_training_graph(fx_graph: torch.fx.GraphModule) -> Any:
    """``stages.compile_graph`` of a forward or backward graph, with CUDA convolutions left
    ATen's, in the graph's layout (unless :data:`CUDA_CONV_CHANNELS_LAST`): a forward graph
    returns its saved activations, and channels-last convolutions made every one of them a
    copy back to eager's layout (ResNet-50 batch 32 on an H100: 105 copies, 5.5 ms of a
    24.6 ms step), as the backward graph is traced for eager's strides."""
    with options.overridden({"cuda_conv_channels_last": CUDA_CONV_CHANNELS_LAST}):
        return stages.compile_graph(fx_graph)


def _without_none_outputs(fx_graph: torch.fx.GraphModule, compile_fn: Any) -> Any:
    """``compile_fn(fx_graph)`` for a graph whose outputs include None (a backward graph's
    gradient of an input that needs none: the data, a buffer), which the IR cannot return:
    the graph is compiled returning its tensors only, and the boxed call puts the Nones
    back in their places."""
    output = next(n for n in reversed(fx_graph.graph.nodes) if n.op == "output")
    outs = output.args[0]
    if not isinstance(outs, (list, tuple)) or all(o is not None for o in outs):
        return compile_fn(fx_graph)
    why = _reduced_precision(fx_graph)
    if why is not None:
        # The executor now converts the fp32 statistics CPU norms return to the IR's bf16/fp16
        # (test_meta_dtype_results.py), but rounding them there put a bf16-autocast
        # gradient up to ~5% from eager's (capture/test_capture_pure.py's autocast region):
        # such a CPU graph runs as its ATen graph, as every None-returning graph did before.
        log.info("plugin: the backward graph runs as its ATen graph: %s", why)
        return compile_fn(fx_graph)  # the IR refuses the None outputs: runs unmodified
    kept = [i for i, o in enumerate(outs) if o is not None]
    n = len(outs)
    output.args = (tuple(outs[i] for i in kept),)
    fx_graph.recompile()
    compiled = compile_fn(fx_graph)

    def run(args: list[Any]) -> list[Any]:
        tensors = compiled(args)
        full: list[Any] = [None] * n
        for i, t in zip(kept, tensors):
            full[i] = t
        return full

    run._boxed_call = True  # type: ignore[attr-defined]
    run.compiled = compiled  # type: ignore[attr-defined]
    unlowered = getattr(compiled, "unlowered", None)
    if unlowered is not None:
        run.unlowered = unlowered  # type: ignore[attr-defined]
    return run


def _reduced_precision(fx_graph: torch.fx.GraphModule) -> str | None:
    """Why ``fx_graph`` is not compiled with its None outputs removed: a bf16 or fp16 CPU
    value (see :func:`_without_none_outputs`); None when it has none.

    Only CPU graphs: there the meta kernel of a batch norm with bf16/fp16 input says its
    saved statistics are bf16/fp16 while the CPU kernel saves fp32 ones. On CUDA both say
    fp32, and refusing every bf16/fp16 value ran every autocast backward graph op by op
    (ResNet-50, BERT and GPT-2 bf16 training at 0.49-0.76x eager on an H100)."""
    for node in fx_graph.graph.nodes:
        val = node.meta.get("val")
        if (
            isinstance(val, torch.Tensor)
            and val.device.type == "cpu"
            and val.dtype in (torch.bfloat16, torch.float16)
        ):
            return f"{node.name} is {val.dtype} (statistics rounded to it differ from eager's)"
    return None


# AOTAutograd's ``bw_compiler``: the backward graph, compiled with capture off.
backward_compiler = _C.disable_wrapper(_backward)
