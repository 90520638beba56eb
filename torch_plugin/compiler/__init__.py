"""The "plugin" compiler's Python side: ATen FX graph → C++ IR → passes → executor.

The pipeline itself (IR, verifier, passes, code generation, executor) is C++
(``csrc/compiler``, ``csrc/runtime``, ``csrc/libs``), reached through ``torch_plugin._C._compiler``.

Key parts:
- :mod:`.lowering`: FX ATen graph → IR (``lower``), and :class:`~.lowering.Unsupported`.
- :mod:`.pipeline`: the backend's driver, running the stages of :mod:`.stages`
  (captured → lowered → compiled; inference and training side by side).
- :func:`configure_runtime`: the C++ runtime's options, from :mod:`torch_plugin.config`.
- :mod:`.decompositions`: the decomposition table given to AOTAutograd.
- :mod:`.options`: options and their environment variables.
"""

from __future__ import annotations

from torch_plugin import config

# The runtime options its steps read as they are built (csrc/runtime/options.h); the others
# (cache folder, host compiler, oneDNN library) are read once, at import.
_PER_GRAPH = ("onednn_weights", "cublaslt_tuning", "cublaslt_candidates", "cudnn_threads")


def configure_runtime(at_import: bool = False) -> None:
    """Hands the C++ runtime its options (``_C._runtime.configure``) from
    :func:`torch_plugin.config.runtime_options` (the C++ side reads no environment variable):
    all of them at import, and those its steps read as they are built whenever a graph is
    compiled."""
    opts = config.runtime_options()
    if not at_import:
        from torch_plugin.compiler import options

        opts = {key: opts[key] for key in _PER_GRAPH}
        opts.update(options.runtime_overrides())  # optimize(options=...), mode="max-autotune"
    from torch_plugin import _C

    _C._runtime.configure(opts)
