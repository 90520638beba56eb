"""torch_plugin: make unmodified PyTorch programs faster with one line.

Public API:
- :func:`optimize` — capture Python frames into FX graphs and run them through a backend;
- :func:`disable` — run a function without capture;
- :func:`export` — capture a whole call as one standalone FX graph (errors on a graph break);
- :func:`reset` — forget every compiled frame;
- :func:`run` — run with the compiled frames only, never compiling (serving);
- :func:`explain` — run a function once and report its graphs, graph breaks and guards;
- :func:`decompile` — the transformed code and resume functions of a function that ran, as
  Python source in files (with the optional ``depyf``);
- :func:`set_logs` — switch the log channels (also ``TORCH_PLUGIN_LOGS``, ``config.logs``);
- :func:`list_backends`, :func:`lookup_backend`, :func:`register_backend` — the backend registry;
- :mod:`torch_plugin.config` — flags.

See README.md and docs/ for usage. This module only re-exports; nothing in the package
imports it (docs/internals/README.md).
"""

from __future__ import annotations

import warnings

from .python_versions import check_supported as _check_supported

_check_supported()  # a clear ImportError on an unsupported Python, before _C is loaded

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
        "(`python3 -m pip install onednn-cpu-gomp`) to use its fused kernels.",
        stacklevel=2,
    )

from . import config
from .api import optimize
from .backends.registry import list_backends, lookup_backend, register_backend
from .capture import CaptureError, RecompileError, stats
from .capture.dynamic_shapes import mark_dynamic
from .capture.eval_frame import OptimizeContext, OptimizedModule, disable, reset, run
from .contract import BackendCompilerFailed
from .decompile import DecompileOutput, decompile
from .explain import ExplainOutput, explain
from .export import ExportError, export
from .logs import set_logs

__version__ = "0.1.0"


__all__ = [
    "BackendCompilerFailed",
    "CaptureError",
    "DecompileOutput",
    "ExplainOutput",
    "ExportError",
    "OptimizeContext",
    "OptimizedModule",
    "RecompileError",
    "config",
    "decompile",
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
