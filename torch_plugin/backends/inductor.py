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

import functools
from collections.abc import Callable
from typing import Any

import torch

from torch_plugin.backends.aot_eager import flatten_graph_outputs, without_capture
from torch_plugin.backends.registry import register_backend


def inductor(
    gm: torch.fx.GraphModule,
    example_inputs: list[torch.Tensor],
    config_patches: dict[str, Any] | None = None,
    *,
    mode: str | None = None,
    options: dict[str, Any] | None = None,
) -> Callable[..., Any]:
    """Compile ``gm`` with Inductor's ``compile_fx``. ``mode``: one of :data:`MODES`
    (Inductor's own, ``torch._inductor.list_mode_options``); ``options``: Inductor config
    overrides (``"max_autotune"``, ``"triton.cudagraphs"``, ...), as ``torch.compile(
    options=...)`` takes them (:func:`check_options`); ``config_patches``: more overrides,
    applied last."""
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    patches = {**_mode_patches(mode), **check_options(options), **(config_patches or {})}
    rebuild = flatten_graph_outputs(gm)
    # The backward graph is compiled on the first backward(), outside the compiled forward
    # call, maybe inside an optimize region: keep capture off while Inductor compiles.
    compiled = compile_fx(
        gm,
        example_inputs,
        inner_compile=without_capture(functools.partial(_inner_compile, compile_fx_inner)),
        config_patches=patches or None,
    )

    def run(*args: Any) -> Any:
        return rebuild(compiled(*args))

    return run


# Inductor's modes (torch._inductor.list_mode_options names the patches each makes).
def _inner_compile(compile_fx_inner, gm, example_inputs, **kwargs):
    """Inductor's ``compile_fx_inner``; a backward graph first loses its unused random ops
    (:func:`torch_plugin.compiler.backward_graphs.drop_unused_random_ops`)."""
    if kwargs.get("is_backward"):
        from torch_plugin.compiler.backward_graphs import drop_unused_random_ops

        drop_unused_random_ops(gm)
    return compile_fx_inner(gm, example_inputs, **kwargs)


MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _mode_patches(mode: str | None) -> dict[str, Any]:
    if mode in (None, "default"):
        return {}
    if mode not in MODES:
        raise ValueError(f"inductor: unknown mode {mode!r}; modes: {', '.join(MODES)}")
    from torch._inductor import list_mode_options

    return dict(list_mode_options(mode))


def check_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """``options`` checked as ``torch.compile`` checks them for Inductor: each name (``-``
    read as ``_``) must be an Inductor config entry (ValueError naming the closest ones
    otherwise) and each value of that entry's type (TypeError)."""
    if not options:
        return {}
    if not isinstance(options, dict):
        raise TypeError(f"inductor: options must be a dict, got {type(options).__name__}")
    from torch._inductor import config

    known = config.get_config_copy()
    checked = {}
    for key, value in options.items():
        name = str(key).replace("-", "_")
        if name not in known:
            import difflib

            close = difflib.get_close_matches(name, known, n=5)
            raise ValueError(
                f"inductor: unknown option {key!r} (not a torch._inductor.config entry); "
                f"closest: {', '.join(close) or 'none'}"
            )
        kind = config.get_type(name)
        if isinstance(kind, type) and not isinstance(value, kind):
            raise TypeError(
                f"inductor: option {key!r} takes a {kind.__name__}, not {type(value).__name__}"
            )
        checked[name] = value
    return checked


def inductor_reduce_overhead(
    gm: torch.fx.GraphModule,
    example_inputs: list[torch.Tensor],
    *,
    options: dict[str, Any] | None = None,
) -> Callable[..., Any]:
    """:func:`inductor` with CUDA graphs (``triton.cudagraphs``), as
    ``torch.compile(mode="reduce-overhead")``."""
    return inductor(gm, example_inputs, mode="reduce-overhead", options=options)


def _mode_function(mode: str) -> Callable[..., Any]:
    moded = functools.partial(inductor, mode=mode)
    functools.update_wrapper(moded, inductor)
    moded.__name__ = moded.__qualname__ = "inductor_" + mode.replace("-", "_")
    return moded


def register() -> None:
    """Register :func:`inductor` as the backend ``"inductor"``, with Inductor's modes
    (:data:`MODES`) and options (:func:`check_options`)."""
    modes = {m: _mode_function(m) for m in MODES if m != "default"}
    modes["reduce-overhead"] = inductor_reduce_overhead
    register_backend(inductor, "inductor", modes=modes, options=check_options)
