"""The backend registry: backend names to compiler functions, and the one place a backend runs.

A *backend* is a callable ``backend(gm, example_inputs) -> compiled``: ``gm`` is the captured
``torch.fx.GraphModule``, ``example_inputs`` the list of real tensors it is about to be called
with, and ``compiled(*inputs)`` must return what ``gm(*inputs)`` would return. Backends may
rewrite ``gm`` while compiling it.

Facts the capture layer states about a graph travel in ``gm.meta``:

- ``gm.meta[UNVERSIONED_PARAMETERS]`` (:data:`UNVERSIONED_PARAMETERS`) is True when the
  graph's parameters may be rewritten in place *without* a bump of their version counter
  (FSDP2's ``fully_shard`` all-gathers into the unsharded parameters before each forward and
  keeps their ``_version``): a backend must read them on every call and never freeze or
  cache their values.

Key parts:
- :data:`CompilerFn`: the type of a backend.
- :func:`register_backend`, :func:`lookup_backend`, :func:`list_backends`: names to backends.
  The built-in backends are registered by ``torch_plugin.backends.register_builtin_backends``
  on the registry's first use, never as a side effect of an import.
- :func:`call_backend`: compiles one captured graph; failures become
  :class:`BackendCompilerFailed` (or, with ``config.suppress_errors``, a warning and an eager
  fallback).
- :class:`BackendCompilerFailed`: names the backend and the graph, chains the backend's error.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, overload

import torch

from torch_plugin import config

log = logging.getLogger(__name__)

CompilerFn = Callable[[torch.fx.GraphModule, list[torch.Tensor]], Callable[..., Any]]
"""``backend(gm, example_inputs) -> compiled``, where ``compiled(*inputs)`` behaves like ``gm``."""

F = TypeVar("F", bound=Callable[..., Any])

UNVERSIONED_PARAMETERS = "torch_plugin.unversioned_parameters"
"""``gm.meta`` key: True when the graph's parameters may change in place without a version
bump, so a backend must not freeze them (see the module docstring)."""

_BACKENDS: dict[str, CompilerFn] = {}
_builtins_registered = False


class BackendCompilerFailed(RuntimeError):
    """A backend raised while compiling a captured graph.

    The message names the backend and the graph (its name, which says which user function it
    came from, and its number of nodes); the backend's exception is chained as ``__cause__``.

    Attributes:
        backend_name: the backend's registered name (or the callable's name).
        graph_name: the graph's description, as given by the capture layer.
        num_nodes: the number of nodes in the FX graph, placeholders and output included.
        inner_exception: the exception the backend raised.
    """

    def __init__(
        self, backend_name: str, graph_name: str, num_nodes: int, inner_exception: BaseException
    ):
        self.backend_name = backend_name
        self.graph_name = graph_name
        self.num_nodes = num_nodes
        self.inner_exception = inner_exception
        super().__init__(
            f"{_describe_failure(backend_name, graph_name, num_nodes, inner_exception)}\n"
            "Set torch_plugin.config.suppress_errors = True to run such graphs eagerly "
            "instead, or try backend='eager' or 'aot_eager' to narrow the failure down."
        )


def _describe_failure(
    backend_name: str, graph_name: str, num_nodes: int, error: BaseException
) -> str:
    return (
        f"backend {backend_name!r} failed to compile graph {graph_name} ({num_nodes} nodes): "
        f"{type(error).__name__}: {error}"
    )


def _ensure_builtins_registered() -> None:
    global _builtins_registered
    if _builtins_registered:
        return
    _builtins_registered = True  # set first: registering calls back into register_backend
    from torch_plugin.backends import register_builtin_backends

    register_builtin_backends()


@overload
def register_backend(fn: F, name: str | None = None) -> F: ...
@overload
def register_backend(fn: None = None, name: str | None = None) -> Callable[[F], F]: ...
def register_backend(fn: F | None = None, name: str | None = None) -> F | Callable[[F], F]:
    """Register ``fn`` as a backend under ``name`` (default: ``fn.__name__``); return ``fn``.

    Usable as ``@register_backend``, ``@register_backend(name="mine")`` or
    ``register_backend(fn, "mine")``. Registering the same callable again under the same
    name does nothing; another callable under a taken name raises ValueError.
    """
    if fn is None:
        return lambda f: register_backend(f, name)
    if not callable(fn):
        raise TypeError(f"a backend must be callable, got {type(fn).__name__}")
    if name is None:
        name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"a backend needs a non-empty string name, got {name!r}")
    _ensure_builtins_registered()
    registered = _BACKENDS.get(name)
    if registered is not None and registered is not fn:
        raise ValueError(f"backend {name!r} is already registered (to {registered!r})")
    _BACKENDS[name] = fn
    return fn


def lookup_backend(backend: str | CompilerFn) -> CompilerFn:
    """The backend for a registered name, or ``backend`` itself if it is a callable.

    Raises ValueError for an unknown name (the message lists the known ones) and TypeError
    for anything that is neither a string nor callable.
    """
    if isinstance(backend, str):
        _ensure_builtins_registered()
        fn = _BACKENDS.get(backend)
        if fn is None:
            known = ", ".join(repr(n) for n in sorted(_BACKENDS))
            raise ValueError(f"unknown backend {backend!r}; known backends: {known}")
        return fn
    if callable(backend):
        return backend
    raise TypeError(
        "backend must be a registered name (str) or a callable (gm, example_inputs) -> "
        f"callable, got {type(backend).__name__}"
    )


MODES = ("default", "reduce-overhead")


def backend_with_mode(backend: str | CompilerFn, mode: str | None) -> CompilerFn:
    """The compiler of ``backend`` (see :func:`lookup_backend`) in ``mode``.

    ``mode``: None or "default" (the backend as it is), or "reduce-overhead": CUDA graphs —
    ``"plugin"`` keeps a CUDA graph wherever one can be captured
    (:func:`torch_plugin.backends.plugin.plugin_reduce_overhead`); ``"inductor"`` runs with
    Inductor's ``triton.cudagraphs`` on, as ``torch.compile(mode="reduce-overhead")`` does.

    Raises ValueError for an unknown mode, or for a mode other than the default with a backend
    that has no modes (the message names the backends that have).
    """
    fn = lookup_backend(backend)
    if mode is None or mode == "default":
        return fn
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; modes: {', '.join(MODES)}")
    if fn is _BACKENDS.get("plugin"):
        from torch_plugin.backends.plugin import plugin_reduce_overhead

        return plugin_reduce_overhead
    if fn is _BACKENDS.get("inductor"):
        from torch_plugin.backends.inductor import inductor_reduce_overhead

        return inductor_reduce_overhead
    raise ValueError(
        f"mode {mode!r} is not available for backend {backend!r}: only 'plugin' and "
        "'inductor' take a mode"
    )


def list_backends() -> list[str]:
    """Names of the registered backends, sorted."""
    _ensure_builtins_registered()
    return sorted(_BACKENDS)


def call_backend(
    backend: str | CompilerFn,
    gm: torch.fx.GraphModule,
    example_inputs: Sequence[Any],
    *,
    backend_name: str,
    graph_name: str,
) -> Callable[..., Any]:
    """Compile the captured graph ``gm`` with ``backend`` and return ``compiled``.

    ``graph_name`` describes the graph for messages, e.g.
    ``"graph 0 of Net.forward (model.py:12)"``. If the backend raises, raise
    :class:`BackendCompilerFailed` from its error, or, when ``config.suppress_errors`` is
    set, warn and return ``gm``'s forward as it was before the backend ran. A backend that
    returns something not callable is a broken backend: TypeError either way.
    """
    fn = lookup_backend(backend)
    num_nodes = len(gm.graph.nodes)
    # A backend may rewrite gm before it fails; keep the code gm has now for the fallback.
    fallback = _current_forward(gm) if config.suppress_errors else None
    start = time.perf_counter()
    try:
        compiled = fn(gm, list(example_inputs))
    except Exception as e:
        if fallback is None:
            raise BackendCompilerFailed(backend_name, graph_name, num_nodes, e) from e
        warnings.warn(
            f"{_describe_failure(backend_name, graph_name, num_nodes, e)}; running the graph "
            "eagerly instead (torch_plugin.config.suppress_errors is True)",
            stacklevel=2,
        )
        return fallback
    if not callable(compiled):
        raise TypeError(
            f"backend {backend_name!r} returned {type(compiled).__name__} for graph "
            f"{graph_name}; a backend must return a callable"
        )
    if config.verbose:
        log.info(
            "backend %r compiled graph %s (%d nodes) in %.3f s",
            backend_name,
            graph_name,
            num_nodes,
            time.perf_counter() - start,
        )
    return compiled


def _current_forward(gm: torch.fx.GraphModule) -> Callable[..., Any]:
    """``gm.forward`` bound to the code generated from gm's graph as it is now."""
    real_recompile = getattr(gm, "real_recompile", None)  # lazy GraphModules codegen on use
    if real_recompile is not None:
        real_recompile()
    return gm.forward
