"""The "plugin" compiler's Python side: ATen FX graph → C++ IR → passes → executor.

The pipeline itself (IR, verifier, passes, code generation, executor) is C++
(``csrc/compiler``, ``csrc/runtime``, ``csrc/libs``), reached through ``torch_plugin._C._compiler``.

Key parts:
- :mod:`.lowering`: FX ATen graph → IR (``lower``), and :class:`~.lowering.Unsupported`.
- :mod:`.compile`: :func:`~.compile.compile_graph`, one ATen graph to a :class:`CompiledGraph`;
  freezing's guards on parameter identity and version.
- :mod:`.decompositions`: the decomposition table given to AOTAutograd.
- :mod:`.options`: options and their environment variables.
"""

from __future__ import annotations

import os

# Connected to config.runtime_options() at merge. The C++ runtime's options
# (csrc/runtime/options.h), read from the environment where the C++ side used to read it.
_PER_GRAPH = {
    "onednn_weights": "TORCH_PLUGIN_ONEDNN_WEIGHTS",
    "cublaslt_tuning": "TORCH_PLUGIN_CUBLASLT_TUNING",
    "cublaslt_candidates": "TORCH_PLUGIN_CUBLASLT_CANDIDATES",
}


def configure_runtime(at_import: bool = False) -> None:
    """Hands the C++ runtime its options (``_C._runtime.configure``) from the environment: all
    of them at import, and those its steps read as they are built whenever a graph is compiled."""
    env = os.environ.get
    opts = {key: env(name, "") for key, name in _PER_GRAPH.items()}
    if at_import:
        xdg, home = env("XDG_CACHE_HOME"), env("HOME")
        cache = xdg and f"{xdg}/torch_plugin" or home and f"{home}/.cache/torch_plugin"
        opts["cache_dir"] = env("TORCH_PLUGIN_CACHE_DIR") or cache or ""
        opts["cxx"] = env("CXX", "")
        opts["onednn_library"] = env("TORCH_PLUGIN_ONEDNN_LIBRARY", "")
    from torch_plugin import _C

    _C._runtime.configure(opts)
