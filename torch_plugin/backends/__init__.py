"""Backends: compilers for captured FX graphs, looked up by name.

Key parts:
- ``registry``: :func:`register_backend`, :func:`lookup_backend`, :func:`list_backends`,
  :func:`call_backend` and :class:`BackendCompilerFailed`.
- One module per built-in backend, named after it: ``eager`` (runs the FX graph as it is),
  ``aot_eager`` (AOTAutograd forward/backward graphs, run as they are), ``inductor``
  (PyTorch's Inductor).

The built-in backends are registered by :func:`register_builtin_backends`, which the registry
calls once on its first use; importing a module here registers nothing.
"""

from torch_plugin.backends.registry import (
    BackendCompilerFailed,
    CompilerFn,
    call_backend,
    list_backends,
    lookup_backend,
    register_backend,
)

__all__ = [
    "BackendCompilerFailed",
    "CompilerFn",
    "call_backend",
    "list_backends",
    "lookup_backend",
    "register_backend",
    "register_builtin_backends",
]


def register_builtin_backends() -> None:
    """Register the built-in backends under their names. Called once, by the registry."""
    from torch_plugin.backends import aot_eager, eager, inductor, plugin

    register_backend(eager.eager, "eager")
    register_backend(aot_eager.aot_eager, "aot_eager")
    register_backend(inductor.inductor, "inductor")
    register_backend(plugin.plugin, "plugin")
