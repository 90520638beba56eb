"""torch_plugin: make unmodified PyTorch programs faster with one line.

Public API:
- :func:`optimize` — capture Python frames into FX graphs and run them through a backend;
- :func:`disable` — run a function without capture;
- :func:`export` — capture a whole call as one standalone FX graph (errors on a graph break);
- :func:`reset` — forget every compiled frame;
- :func:`run` — run with the compiled frames only, never compiling (serving);
- :func:`explain` — run a function once and report its graphs, graph breaks and guards;
- :func:`set_logs` — switch the log channels (also ``TORCH_PLUGIN_LOGS``, ``config.logs``);
- :func:`list_backends`, :func:`lookup_backend`, :func:`register_backend` — the backend registry;
- :mod:`torch_plugin.config` — flags.

See README.md and docs/ for usage.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch  # noqa: F401 - before _C: the extension finds torch's libraries loaded

from . import _C
from .compiler import configure_runtime as _configure_runtime

_configure_runtime(at_import=True)  # before anything reads _C's runtime (has_onednn below)

# Built with oneDNN, but its library (torch_plugin/_onednn.so, which links libdnnl) does not
# load here: the "plugin" compiler runs convolutions and matrix products through ATen.
_onednn_error = getattr(getattr(_C, "_compiler", None), "onednn_error", None)
if _onednn_error:
    warnings.warn(
        f"torch_plugin: oneDNN is not available ({_onednn_error}); the 'plugin' compiler runs "
        "convolutions and matrix products through ATen. Install oneDNN's library "
        "(Debian/Ubuntu: `apt-get install libdnnl-dev`) to use its fused kernels.",
        stacklevel=2,
    )

from . import config
from .backends.registry import (
    BackendCompilerFailed,
    list_backends,
    lookup_backend,
    register_backend,
)
from .capture import CaptureError, stats
from .capture.dynamic_shapes import mark_dynamic
from .capture.eval_frame import (
    OptimizeContext,
    OptimizedModule,
    callback_for,
    disable,
    reset,
    run,
)
from .explain import ExplainOutput, explain
from .export import ExportError, export
from .logs import set_logs

__version__ = "0.1.0"


def optimize(
    backend: str | Callable = "plugin",
    *,
    nopython: bool = False,
    dynamic: bool | None = None,
    mode: str | None = None,
) -> OptimizeContext:
    """Capture frames run under the returned context into FX graphs compiled by ``backend``.

    Args:
        backend: a registered backend name ("plugin", the default, is the project's own
            compiler; "eager", "aot_eager", "inductor", see :func:`list_backends`) or a
            callable ``(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) ->
            Callable``.
        nopython: if True, a frame that cannot be captured raises :class:`CaptureError`
            instead of running unmodified.
        dynamic: symbolic sizes (dynamic shapes). None (default): *automatic dynamic*: a
            dimension whose size changes between two compiles of the same code is captured
            with a symbolic size from then on, so one entry serves all its sizes (>= 2).
            True: every dimension of every input tensor is symbolic from the first compile.
            False: always static (each new size compiles again). Dims marked with
            :func:`mark_dynamic` are symbolic in every mode. See docs/dynamic_shapes.md.
        mode: None or "default"; or "reduce-overhead": CUDA graphs for "plugin" (kept wherever
            a graph can be captured; by default they are used where safe and measured faster)
            and "inductor" (Inductor's ``triton.cudagraphs``). Other backends take no mode.

    Returns:
        An :class:`OptimizeContext`: use it as a decorator (``@optimize("eager")``), call it
        on a function or nn.Module (``optimize("inductor")(model)``; the module wrapper keeps
        ``state_dict``, parameters and attributes of the original), or as a context manager
        (``with optimize("eager"): f(x)``).

    Raises:
        ValueError: unknown backend name (the message lists the known ones), unknown mode,
            or a mode for a backend that takes none.
        TypeError: ``backend`` is neither a string nor a callable, or ``dynamic`` is not
            None, True or False.
    """
    if dynamic not in (None, True, False):
        raise TypeError(f"optimize(dynamic=...) must be None, True or False, got {dynamic!r}")
    return OptimizeContext(callback_for(backend, nopython, dynamic, mode))


__all__ = [
    "BackendCompilerFailed",
    "CaptureError",
    "ExplainOutput",
    "ExportError",
    "OptimizeContext",
    "OptimizedModule",
    "config",
    "disable",
    "explain",
    "export",
    "list_backends",
    "lookup_backend",
    "mark_dynamic",
    "optimize",
    "register_backend",
    "reset",
    "run",
    "set_logs",
    "stats",
]
