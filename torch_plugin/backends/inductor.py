"""The "inductor" backend: hands the captured graph to PyTorch's Inductor.

``torch._inductor.compile_fx.compile_fx(gm, example_inputs)`` is Inductor's whole entry point
and works outside ``torch.compile``: it makes its own FakeTensorMode and tracing context when
none is active, runs AOTAutograd (which lifts the graph's parameters and buffers into inputs,
so training works and gradients reach the module's parameters), generates C++/OpenMP kernels
on CPU or Triton kernels on GPU, and caches them on disk (``/tmp/torchinductor_$USER``).

Two things differ from our backend contract and are adapted here:
- ``compile_fx`` returns a graph's outputs as a flat list; :func:`inductor` flattens the
  graph's outputs first (as AOTAutograd needs anyway) and rebuilds the original structure
  (a tuple stays a tuple). Like every backend it may rewrite ``gm``.
- Inductor compiles the backward graph lazily, on the first ``backward()``, which may run
  inside an ``optimize`` region: its compiler runs with capture off (see ``aot_eager``).
- Its result carries ``_boxed_call = True`` copied from an inner function although it takes
  unboxed arguments; our wrapper is a plain ``compiled(*inputs)`` function.

Inductor is imported on first use, so ``import torch_plugin`` stays fast. The first compile
in a process also probes the CPU's vector instruction sets by building and loading small
test programs, which takes about 20 s on a 2-core machine.
"""

from collections.abc import Callable
from typing import Any

import torch

from torch_plugin.backends.aot_eager import flatten_graph_outputs, without_capture
from torch_plugin.backends.registry import register_backend


def inductor(
    gm: torch.fx.GraphModule,
    example_inputs: list[torch.Tensor],
    config_patches: dict[str, Any] | None = None,
) -> Callable[..., Any]:
    """Compile ``gm`` with Inductor's ``compile_fx`` (``config_patches``: Inductor config
    overrides for this graph, as ``torch.compile(options=...)`` passes them)."""
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    rebuild = flatten_graph_outputs(gm)
    # The backward graph is compiled on the first backward(), outside the compiled forward
    # call, maybe inside an optimize region: keep capture off while Inductor compiles.
    compiled = compile_fx(
        gm,
        example_inputs,
        inner_compile=without_capture(compile_fx_inner),
        config_patches=config_patches,
    )

    def run(*args: Any) -> Any:
        return rebuild(compiled(*args))

    return run


def inductor_reduce_overhead(
    gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]
) -> Callable[..., Any]:
    """:func:`inductor` with CUDA graphs (``triton.cudagraphs``), as
    ``torch.compile(mode="reduce-overhead")``."""
    return inductor(gm, example_inputs, {"triton.cudagraphs": True})


def register() -> None:
    """Register :func:`inductor` as the backend ``"inductor"``, with the mode
    "reduce-overhead" (:func:`inductor_reduce_overhead`)."""
    register_backend(inductor, "inductor", modes={"reduce-overhead": inductor_reduce_overhead})
