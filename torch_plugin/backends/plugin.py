"""The "plugin" backend: the project's own compiler, registered by name.

The compiler is :mod:`torch_plugin.compiler` (its driver,
:func:`torch_plugin.compiler.pipeline.compile_captured`, and the stages it runs:
captured → lowered → compiled, inference and training side by side) and ``csrc/``; this
module only exposes it as a backend, with its modes and options.

Modes (``optimize(mode=...)``, ``torch.compile(backend="plugin", mode=...)``), each the
pipeline's mode plus option overrides (:data:`MODE_PLANS`):

- ``"default"``: on CUDA the compiled graph is timed against the eager graph and the faster
  runs; a CUDA graph is kept where it is safe and measured faster.
- ``"reduce-overhead"``: the CUDA graph is kept wherever it can be captured, untimed.
- ``"max-autotune"``: as ``"default"``, and each inference graph with a convolution or matrix
  product is built twice, with its library plan (oneDNN, cuBLASLt, cuDNN calls with fused
  epilogues) and with generated kernels around ATen's products (library patterns off); the
  faster on the graph's example inputs runs (:mod:`torch_plugin.compiler.autotune`, CPU and
  CUDA). Each CUDA matrix product also times 64 of cuBLASLt's candidates (instead of 8) with
  cuBLAS's gemm.
- ``"max-autotune-no-cudagraphs"``: ``"max-autotune"`` without CUDA graphs.

Options (``options={...}``): :data:`torch_plugin.compiler.options.USER_OPTIONS`, checked by
:func:`check_options`; they override the environment for the graphs compiled with them
(:func:`torch_plugin.compiler.options.overridden`), including work done at a later call.

Key parts:
- :func:`plugin`: the backend, registered as ``"plugin"`` and exposed to ``torch.compile``
  through the ``torch_dynamo_backends`` entry-point group (pyproject.toml), which passes
  ``mode`` and ``options`` as keyword arguments.
- :func:`plugin_reduce_overhead` and the other mode functions; :data:`MODES`.
- :func:`register`: called by :mod:`torch_plugin.backends` on first use of the registry.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import torch

from torch_plugin import config
from torch_plugin.backends.registry import register_backend
from torch_plugin.compiler import optimizer_step
from torch_plugin.compiler import options as options_mod
from torch_plugin.compiler.pipeline import compile_captured

__all__ = ["MODES", "MODE_PLANS", "check_options", "plugin", "plugin_reduce_overhead", "register"]

# mode -> (the pipeline's mode, option overrides).
MODE_PLANS: dict[str, tuple[str, dict[str, Any]]] = {
    "default": ("default", {}),
    "reduce-overhead": ("reduce-overhead", {}),
    "max-autotune": ("max-autotune", {"cublaslt_candidates": 64}),
    "max-autotune-no-cudagraphs": (
        "max-autotune",
        {"cublaslt_candidates": 64, "cuda_graphs": False},
    ),
}
MODES = tuple(MODE_PLANS)


def check_options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The "plugin" compiler's options checked (:func:`torch_plugin.compiler.options.check`:
    an unknown name is a ValueError listing the valid ones, a wrong type a TypeError)."""
    return options_mod.check(options, "plugin")


def plugin(
    gm: torch.fx.GraphModule,
    example_inputs: list[torch.Tensor],
    *,
    mode: str | None = "default",
    options: Mapping[str, Any] | None = None,
) -> Callable[..., Any]:
    """Compile ``gm`` with the "plugin" compiler.

    ``mode``: one of :data:`MODES` (None is "default"); ``options``: see
    :func:`check_options`. Raises ValueError for another mode or an unknown option, TypeError
    for an option of the wrong type (``torch.compile`` calls this at the first compile).
    With ``TORCH_PLUGIN_DISABLE=1`` (read at each call), mode and options are checked and
    ``gm`` comes back uncompiled (``gm.forward``): ``torch.compile(backend="plugin")`` then
    runs the graphs Dynamo captured as they are.
    """
    mode = mode or "default"
    if mode not in MODE_PLANS:
        raise ValueError(f"plugin: unknown mode {mode!r}; modes: {', '.join(MODES)}")
    pipeline_mode, overrides = MODE_PLANS[mode]
    overrides = {**overrides, **check_options(options)}
    if config.optimization_disabled():
        # TORCH_PLUGIN_DISABLE=1 under torch.compile(backend="plugin"): Dynamo captured the
        # graph already; it runs as captured, uncompiled (TORCHDYNAMO_DISABLE=1 turns
        # torch.compile's capture off too).
        return gm.forward
    if not overrides:
        return compile_captured(gm, example_inputs, pipeline_mode)
    with options_mod.overridden(overrides):
        compiled = compile_captured(gm, example_inputs, pipeline_mode)
        # Later calls may compile too (a new size, a graph lowered again): same options.
        return options_mod.bound(compiled)


# Capture runs a captured call of optimizer.step() through this (contract.OPTIMIZER_STEP):
# SGD, Adam and AdamW updates compiled, other steps as the optimizer's own.
plugin.optimizer_step = optimizer_step.run  # type: ignore[attr-defined]


def plugin_reduce_overhead(
    gm: torch.fx.GraphModule,
    example_inputs: list[torch.Tensor],
    *,
    options: Mapping[str, Any] | None = None,
) -> Callable[..., Any]:
    """:func:`plugin` with ``mode="reduce-overhead"``."""
    return plugin(gm, example_inputs, mode="reduce-overhead", options=options)


def _mode_function(mode: str) -> Callable[..., Any]:
    """:func:`plugin` in ``mode``, as a function the registry returns for that mode."""
    moded = functools.partial(plugin, mode=mode)
    functools.update_wrapper(moded, plugin)  # copies __dict__: optimizer_step too
    moded.__name__ = moded.__qualname__ = "plugin_" + mode.replace("-", "_")
    return moded


def register() -> None:
    """Register :func:`plugin` as the backend ``"plugin"``, with its modes and options."""
    modes = {m: _mode_function(m) for m in MODES if m != "default"}
    modes["reduce-overhead"] = plugin_reduce_overhead
    plugin_reduce_overhead.optimizer_step = optimizer_step.run  # type: ignore[attr-defined]
    register_backend(plugin, "plugin", modes=modes, options=check_options)
