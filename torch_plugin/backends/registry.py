"""The backend registry: backend names (and their modes) to compiler functions.

A backend is a compiler function (:data:`torch_plugin.contract.CompilerFn`) registered under
a name, optionally with *modes*: other compiler functions the same backend runs as under
``optimize(name, mode=...)``, and an *options checker*: the backend (and its mode functions)
then take ``options=`` (``optimize(name, options={...})``, as ``torch.compile`` passes them),
checked when ``optimize`` is called. The public API resolves a name, a mode and options to
one compiler function here (:func:`backend_with_mode`) before capture starts; capture and
:func:`torch_plugin.contract.call_backend` only ever see the function.

Each built-in backend module (``torch_plugin.backends.<name>``) registers itself from its
``register()`` function; ``torch_plugin.backends`` calls them on the registry's first use
(:func:`on_first_use`), never as a side effect of an import. This module names no backend.

Key parts:
- :func:`register_backend`, :func:`lookup_backend`, :func:`list_backends`: names to backends.
- :func:`backend_with_mode`: a name (or function), a mode and options to the function to run.
- :func:`is_registered`: whether a callable is a registered backend (or one of its modes).
- :func:`on_first_use`: how the built-in registrations are deferred.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

from torch_plugin.contract import OPTIMIZER_STEP, CompilerFn

F = TypeVar("F", bound=Callable[..., Any])

_BACKENDS: dict[str, CompilerFn] = {}
# Backend name -> {mode: the compiler function of that mode}; "default" is the backend itself.
_MODES: dict[str, dict[str, CompilerFn]] = {}
# Backend name -> its options checker (options -> checked options; raises on a bad one).
_OPTIONS: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {}
# (id of a backend or mode function, options) -> (that function, it with the options).
_WITH_OPTIONS: dict[tuple, tuple[CompilerFn, CompilerFn]] = {}
_first_use: list[Callable[[], None]] = []

DEFAULT_MODE = "default"


def on_first_use(register: Callable[[], None]) -> None:
    """Call ``register()`` once, on the registry's first use (the first lookup, listing or
    registration), to register backends then instead of at import. ``torch_plugin.backends``
    defers the built-in backends this way."""
    _first_use.append(register)


def _run_first_use() -> None:
    while _first_use:  # popped first: the registrations call back into register_backend
        _first_use.pop(0)()


_Checker = Callable[[Mapping[str, Any]], dict[str, Any]]


@overload
def register_backend(
    fn: F,
    name: str | None = None,
    *,
    modes: Mapping[str, CompilerFn] | None = None,
    options: _Checker | None = None,
) -> F: ...
@overload
def register_backend(
    fn: None = None,
    name: str | None = None,
    *,
    modes: Mapping[str, CompilerFn] | None = None,
    options: _Checker | None = None,
) -> Callable[[F], F]: ...
def register_backend(
    fn: F | None = None,
    name: str | None = None,
    *,
    modes: Mapping[str, CompilerFn] | None = None,
    options: _Checker | None = None,
) -> F | Callable[[F], F]:
    """Register ``fn`` as a backend under ``name`` (default: ``fn.__name__``); return ``fn``.

    Usable as ``@register_backend``, ``@register_backend(name="mine")`` or
    ``register_backend(fn, "mine")``. Registering the same callable again under the same
    name does nothing; another callable under a taken name raises ValueError.

    ``modes``: the compiler function for each mode the backend takes besides "default"
    (``{"reduce-overhead": fn_with_cuda_graphs}``), as ``optimize(name, mode=...)`` picks it.

    ``options``: the backend's options checker, ``check(options) -> checked options``, which
    raises (ValueError, TypeError) for options the backend does not take; with it, ``fn`` and
    its mode functions are called with ``options=checked`` when ``optimize(name,
    options={...})`` gives some.
    """
    if fn is None:
        return lambda f: register_backend(f, name, modes=modes, options=options)
    if not callable(fn):
        raise TypeError(f"a backend must be callable, got {type(fn).__name__}")
    if name is None:
        name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"a backend needs a non-empty string name, got {name!r}")
    for mode, moded in (modes or {}).items():
        if not isinstance(mode, str) or not mode or mode == DEFAULT_MODE or not callable(moded):
            raise ValueError(
                f"backend {name!r}: modes must map names other than {DEFAULT_MODE!r} to "
                f"callables, got {mode!r}: {moded!r}"
            )
    _run_first_use()
    registered = _BACKENDS.get(name)
    if registered is not None and registered is not fn:
        raise ValueError(f"backend {name!r} is already registered (to {registered!r})")
    _BACKENDS[name] = fn
    if options is not None and not callable(options):
        raise TypeError(f"backend {name!r}: options must be a checker function, got {options!r}")
    if modes:
        _MODES[name] = dict(modes)
    if options is not None:
        _OPTIONS[name] = options
    return fn


def lookup_backend(backend: str | CompilerFn) -> CompilerFn:
    """The backend for a registered name, or ``backend`` itself if it is a callable.

    Raises ValueError for an unknown name (the message lists the known ones) and TypeError
    for anything that is neither a string nor callable.
    """
    if isinstance(backend, str):
        _run_first_use()
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


def backend_with_mode(
    backend: str | CompilerFn, mode: str | None, options: Mapping[str, Any] | None = None
) -> CompilerFn:
    """The compiler function of ``backend`` (see :func:`lookup_backend`) in ``mode``, with
    ``options``.

    ``mode``: None or "default" (the backend as it is), or a mode a registered backend
    declared (:func:`register_backend`'s ``modes``; the built-ins "plugin" and "inductor":
    "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"). A callable that is a
    registered backend takes that backend's modes and options.

    ``options``: None or empty (none), or a dict the backend's registered checker accepts;
    the function returned passes the checked dict as ``options=``. An unregistered callable
    takes options only if it has an ``options`` parameter (they go to it unchecked, as
    ``torch.compile`` passes them).

    Raises ValueError for an unknown mode, or for a mode the backend does not take (the
    message names the backends that take it); what the checker raises for bad options
    (ValueError for an unknown name, TypeError for a wrong type); TypeError for options
    given to a backend that takes none.
    """
    fn = lookup_backend(backend)
    moded = _with_mode(fn, backend, mode)
    if not options:
        return moded
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(f"options must be a dict, got {type(options).__name__}")
    name = _registered_name(fn)
    if name is not None and name in _OPTIONS:
        checked = _OPTIONS[name](options)
    elif name is None and _takes_options(fn):
        checked = dict(options)
    else:
        shown = backend if isinstance(backend, str) else getattr(fn, "__name__", repr(fn))
        takers = sorted(repr(n) for n in _OPTIONS)
        raise TypeError(
            f"backend {shown!r} takes no options (backends with options: "
            f"{', '.join(takers) or 'none'}; an unregistered callable takes them through an "
            "'options' parameter)"
        )
    # The same function for equal options, so optimize() calls with equal arguments share
    # their capture callback and compiled entries (torch_plugin.capture.eval_frame).
    memo_key = (id(moded), tuple(sorted((str(k), repr(v)) for k, v in checked.items())))
    memo = _WITH_OPTIONS.get(memo_key)
    if memo is None or memo[0] is not moded:
        with_options = functools.partial(moded, options=checked)
        step_fn = getattr(moded, OPTIMIZER_STEP, None)  # the backend's optimizer step, kept
        if step_fn is not None:
            setattr(with_options, OPTIMIZER_STEP, step_fn)
        memo = _WITH_OPTIONS[memo_key] = (moded, with_options)
    return memo[1]


def _with_mode(fn: CompilerFn, backend: str | CompilerFn, mode: str | None) -> CompilerFn:
    if mode is None or mode == DEFAULT_MODE:
        return fn
    if not isinstance(mode, str):
        raise TypeError(f"mode must be a string or None, got {type(mode).__name__}")
    known = [DEFAULT_MODE]
    for name in _BACKENDS:
        known += [m for m in _MODES.get(name, {}) if m not in known]
    if mode not in known:
        raise ValueError(f"unknown mode {mode!r}; modes: {', '.join(known)}")
    for name, registered in _BACKENDS.items():
        if registered is fn and mode in _MODES.get(name, {}):
            return _MODES[name][mode]
    takers = [repr(name) for name in _BACKENDS if mode in _MODES.get(name, {})]
    listed = (
        " and ".join(takers) if len(takers) <= 2 else ", ".join(takers[:-1]) + " and " + takers[-1]
    )
    verb = "takes" if len(takers) == 1 else "take"
    raise ValueError(
        f"mode {mode!r} is not available for backend {backend!r}: only {listed} {verb} a mode"
    )


def _registered_name(fn: Any) -> str | None:
    """The name ``fn`` is registered under, as a backend or one of its modes, or None."""
    _run_first_use()
    for name, registered in _BACKENDS.items():
        if registered is fn or any(m is fn for m in _MODES.get(name, {}).values()):
            return name
    return None


def is_registered(fn: Any) -> bool:
    """Whether ``fn`` is a registered backend or one of a registered backend's modes
    (``optimize(fn)`` then takes it as the backend, never as the function to compile)."""
    return _registered_name(fn) is not None


def _takes_options(fn: Any) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "options" in params and params["options"].kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )


def list_backends() -> list[str]:
    """Names of the registered backends, sorted."""
    _run_first_use()
    return sorted(_BACKENDS)
