"""The "aot_eager" backend: AOTAutograd's graphs, run as they are.

AOTAutograd (``torch._functorch.aot_autograd.aot_module_simplified``) traces the captured
graph down to ATen ops, functionalizes it and, when gradients are needed, splits it into a
forward and a backward graph joined by an autograd.Function. This backend runs those graphs
without compiling them, so a difference from "eager" points at AOTAutograd's tracing (or at
the captured graph's assumptions about it), not at a compiler.

Parameters and buffers the graph reads through ``get_attr`` nodes (or through submodules) are
lifted by AOTAutograd into graph inputs and passed from the module on every call, so
gradients reach the module's own ``nn.Parameter`` objects.

AOTAutograd compiles the backward graph lazily, on the first ``backward()``, and runs it
from the autograd engine: both happen outside the compiled forward call, possibly while an
``optimize`` region is active on the thread. So the compilers here compile and run their
graphs with capture off (:func:`without_capture`); otherwise the capture hook would try to
translate every frame of the backward compiler and the backward graph's own code.

Key parts:
- :func:`aot_eager`: the backend.
- :func:`flatten_graph_outputs`: AOTAutograd needs a graph that returns a flat tuple; this
  rewrites one that does not and gives back how to rebuild its outputs.
- :func:`without_capture`: ``fn`` wrapped to run with the capture hook off on this thread.
"""

from collections.abc import Callable, Sequence
from typing import Any

import torch

from torch_plugin.backends.registry import register_backend

# Shared with the "plugin" compiler, which owns it (compiler/ never imports backends/).
from torch_plugin.compiler.backward_graphs import drop_unused_random_ops, random_ops_kept
from torch_plugin.compiler.graph_outputs import flatten_graph_outputs


def aot_eager(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
    """Trace ``gm`` with AOTAutograd and run the resulting ATen graphs uncompiled."""
    from torch._functorch.aot_autograd import aot_module_simplified

    rebuild = flatten_graph_outputs(gm)
    # An unused random op stays (it advances the generator), also with symbolic sizes.
    with random_ops_kept():
        compiled = aot_module_simplified(
            gm,
            example_inputs,
            fw_compiler=_boxed_nop,
            bw_compiler=_boxed_nop_backward,
            # Inference graphs that mutate an input keep the mutation in the graph (as
            # torch.compile's aot_eager does) instead of replaying it afterwards.
            keep_inference_input_mutations=True,
        )

    def run(*args: Any) -> Any:
        return rebuild(compiled(*args))

    return run


def register() -> None:
    """Register :func:`aot_eager` as the backend ``"aot_eager"``."""
    register_backend(aot_eager, "aot_eager")


def _boxed_nop(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
    """AOTAutograd's compiler hook: no compilation. It calls compilers' results "boxed",
    with one list of arguments."""
    forward = without_capture(gm.forward)

    def run(args: list[Any]) -> Any:
        return forward(*args)

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


def _boxed_nop_backward(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any]
) -> Callable[..., Any]:
    """:func:`_boxed_nop` for the backward graph, less its unused random ops
    (:func:`torch_plugin.compiler.backward_graphs.drop_unused_random_ops`)."""
    drop_unused_random_ops(gm)
    return _boxed_nop(gm, example_inputs)


def without_capture(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` wrapped so that it, and every frame it starts, runs with the capture hook off
    on the calling thread (also inside an ``optimize`` region); the previous state is
    restored afterwards, also when ``fn`` raises."""
    from torch_plugin import _C

    return _C.disable_wrapper(fn)
