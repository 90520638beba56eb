"""Backends: compilers for captured FX graphs, looked up by name.

Key parts:
- ``registry``: :func:`register_backend`, :func:`lookup_backend`, :func:`list_backends`,
  :func:`backend_with_mode`.
- One module per built-in backend, named after it, each with a ``register()`` function that
  registers it (name, modes): ``plugin`` (the project's compiler), ``eager`` (runs the FX
  graph as it is), ``aot_eager`` (AOTAutograd forward/backward graphs, run as they are),
  ``inductor`` (PyTorch's Inductor).
- :func:`call_backend`, :class:`BackendCompilerFailed` and :data:`CompilerFn` come from
  :mod:`torch_plugin.contract` (what capture and the backends share), re-exported here.

The built-in backends are registered by :func:`register_builtin_backends`, which the registry
calls once on its first use; importing a module here registers nothing.
"""

from torch_plugin.backends import registry
from torch_plugin.backends.registry import (
    backend_with_mode,
    list_backends,
    lookup_backend,
    register_backend,
)
from torch_plugin.contract import BackendCompilerFailed, CompilerFn, call_backend

__all__ = [
    "BackendCompilerFailed",
    "CompilerFn",
    "backend_with_mode",
    "call_backend",
    "list_backends",
    "lookup_backend",
    "register_backend",
    "register_builtin_backends",
]


def register_builtin_backends() -> None:
    """Register the built-in backends (each module's ``register()``), the default first.
    Called once, by the registry, on its first use."""
    from torch_plugin.backends import aot_eager, eager, inductor, plugin

    for module in (plugin, eager, aot_eager, inductor):
        module.register()


registry.on_first_use(register_builtin_backends)
