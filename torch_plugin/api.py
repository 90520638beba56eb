"""``optimize``: the public entry point that joins capture, the backends and torch.distributed.

Capture (``torch_plugin.capture``) knows only compiler functions
(:mod:`torch_plugin.contract`); this module, above it, resolves what the user asked for
(a backend name or callable, a mode and options) through the registry
(:func:`torch_plugin.backends.registry.backend_with_mode`) and hands capture the compiler
function together with :func:`torch_plugin.distributed.adapt.adapt_compiler` (FSDP2 and DDP
adapt the compiler per frame). ``export()`` and ``explain()`` capture through
:func:`optimize` too.

``optimize`` takes torch.compile's arguments (``optimize(model=None, *, backend, mode,
options, fullgraph, dynamic, disable)``) and, as before, a backend as its positional
argument; :func:`optimize`'s docstring gives the rule that tells the two apart, and
:class:`BackendOrFunction` is what it returns when only the first use can tell.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any

import torch

from torch_plugin import config
from torch_plugin.backends.registry import backend_with_mode, is_registered
from torch_plugin.capture.eval_frame import OptimizeContext, callback_for
from torch_plugin.capture.torch_compile_interop import skip_in_dynamo
from torch_plugin.distributed.adapt import adapt_compiler

DEFAULT_BACKEND = "plugin"


def optimize(
    model: Any = None,
    *,
    backend: str | Callable | None = None,
    mode: str | None = None,
    options: Mapping[str, Any] | None = None,
    fullgraph: bool = False,
    dynamic: bool | None = None,
    disable: bool = False,
    nopython: bool | None = None,
) -> Any:
    """Capture the frames of ``model`` (or of a ``with`` block) into FX graphs compiled by
    ``backend``, with torch.compile's arguments.

    Forms::

        @optimize                      # a function; torch.compile's habits
        def f(x): ...
        @optimize(mode="max-autotune")
        def g(x): ...
        fast = optimize(model)         # nn.Module -> OptimizedModule (state_dict keys kept)
        fast = optimize(model, backend="inductor", options={"max_autotune": True})
        fast = optimize(backend="eager")(model)
        with optimize(backend="eager"):
            f(x)
        optimize("inductor")(model)    # as before: a positional name is the backend
        optimize(my_backend)(fn)       # and so is a positional backend applied to fn

    Which a positional argument is: an ``nn.Module`` is always the model; a ``str`` is a
    backend name; a callable registered as a backend (:func:`register_backend`, or one of
    its modes) is the backend; any other callable is the function to compile when
    ``backend=`` is also given or when it cannot take two positional arguments (a backend is
    ``backend(gm, example_inputs)``). Otherwise (a function of two arguments, not registered)
    the first use decides: the returned :class:`BackendOrFunction` applied to one function or
    ``nn.Module`` (``optimize(my_backend)(fn)``, ``@optimize(my_backend)``) or used as a
    ``with`` block takes it as the backend; called in any other way (``f(x, y)`` after
    ``@optimize``) it is the function to compile, compiled by ``"plugin"`` (a ``mode`` or
    ``options`` that "plugin" refuses but the callable as a backend takes decide for the
    backend at once). Write
    ``optimize(fn, backend=...)`` or ``optimize(backend=fn)`` where a use would read wrongly
    (a function whose only argument is a function).

    Args:
        model: the function or nn.Module to compile (see above), a backend, or None.
        backend: a registered backend name (None: ``"plugin"``, the project's compiler;
            ``"eager"``, ``"aot_eager"``, ``"inductor"``, see :func:`list_backends`) or a
            callable ``(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) ->
            Callable``.
        mode: None or "default"; for "plugin" and "inductor" also "reduce-overhead",
            "max-autotune" and "max-autotune-no-cudagraphs". "plugin": "reduce-overhead"
            keeps CUDA graphs wherever a graph can be captured (by default they are used
            where safe and measured faster); "max-autotune" builds each inference graph
            with a convolution or matrix product with its library plan and with generated
            kernels instead, times both and runs the faster (CPU and CUDA:
            ``torch_plugin.compiler.autotune``), and times 64 of cuBLASLt's candidates for
            each CUDA matrix product instead of 8; "max-autotune-no-cudagraphs" is that
            without CUDA graphs. "inductor": Inductor's own modes (``torch._inductor.list_mode_options``).
        options: the backend's options, checked now. "plugin": the compiler's options
            (``torch_plugin.compiler.options.USER_OPTIONS``: ``freeze``, ``fusion``,
            ``library_patterns``, ``memory_planning``, ``cuda_graphs``, ``graph_cache``,
            ``fallback_random``, ``verify``, ``dump_dir``, ``cublaslt_candidates``, ...),
            overriding their environment variables for the graphs this call compiles;
            "inductor": ``torch._inductor.config`` entries, as ``torch.compile`` takes them.
        fullgraph: if True, a frame that cannot be captured as one graph raises
            :class:`CaptureError` instead of running partly or wholly unmodified.
        dynamic: symbolic sizes (dynamic shapes). None (default): *automatic dynamic*: a
            dimension whose size changes between two compiles of the same code is captured
            with a symbolic size from then on, so one entry serves all its sizes (>= 2).
            True: every dimension of every input tensor is symbolic from the first compile.
            False: always static (each new size compiles again). Dims marked with
            :func:`mark_dynamic` (or ``torch._dynamo.mark_dynamic`` / ``maybe_mark_dynamic``)
            are symbolic in every mode; dims marked with ``torch._dynamo.mark_static`` are
            static. See docs/dynamic_shapes.md.
        disable: if True, nothing is optimized: the model or function comes back unchanged
            (a ``with`` block captures nothing). ``TORCH_PLUGIN_DISABLE=1`` does the same for
            every call.
        nopython: the former name of ``fullgraph`` (its alias).

    Returns:
        For a function: the optimized function (or a :class:`BackendOrFunction`, see
        above); for an ``nn.Module``: an :class:`OptimizedModule` that keeps ``state_dict``,
        parameters and attributes of the original; with no model: an
        :class:`OptimizeContext`, used as a decorator, called on a function or module, or as
        a context manager.

    Raises:
        ValueError: unknown backend name (the message lists the known ones), unknown mode
            (listing the modes), a mode for a backend that takes none, an unknown option
            (listing the valid ones).
        TypeError: ``backend`` is neither a string nor a callable; ``model`` is none of the
            above; an option of the wrong type, or options for a backend that takes none;
            ``dynamic`` is not None, True or False; ``fullgraph``, ``nopython`` or
            ``disable`` is not a bool; ``fullgraph=True`` with ``nopython=False``; a backend
            given both positionally and as ``backend=``.
    """
    fullgraph = _strict(fullgraph, nopython)
    if dynamic not in (None, True, False):
        raise TypeError(f"optimize(dynamic=...) must be None, True or False, got {dynamic!r}")
    if not isinstance(disable, bool):
        raise TypeError(f"optimize(disable=...) must be True or False, got {disable!r}")
    disabled = disable or config.optimization_disabled()

    target, deferred = None, False
    if model is None:
        pass
    elif isinstance(model, torch.nn.Module):
        target = model
    elif isinstance(model, str) or (callable(model) and is_registered(model)):
        if backend is not None:
            raise TypeError(
                f"optimize() got two backends: {model!r} (positional) and backend={backend!r}"
            )
        backend = model
    elif callable(model):
        if backend is not None or not _could_be_backend(model):
            target = model
        else:
            deferred = True
    else:
        raise TypeError(
            "optimize() takes a function or nn.Module to compile, or a backend (a name or a "
            f"callable), as its positional argument, got {type(model).__name__}"
        )

    def context_for(chosen: str | Callable) -> OptimizeContext:
        compiler = backend_with_mode(chosen, mode, options)  # checks mode and options
        if disabled:
            return OptimizeContext(None)
        if isinstance(chosen, str):
            name, spelled = chosen, chosen
        else:
            name, spelled = getattr(chosen, "__name__", type(chosen).__name__), id(chosen)
        callback = callback_for(
            compiler,
            name,
            fullgraph,
            dynamic,
            key=(spelled, mode, _options_key(options)),
            adapt_compiler=adapt_compiler,
        )
        return OptimizeContext(callback)

    if deferred:
        try:
            as_function = context_for(DEFAULT_BACKEND)  # mode and options checked for "plugin"
        except (TypeError, ValueError):
            try:  # a mode or options that only the backend reading takes decide for it
                return context_for(model)
            except (TypeError, ValueError):
                pass
            raise
        return BackendOrFunction(model, lambda: context_for(model), lambda: as_function(model))
    ctx = context_for(DEFAULT_BACKEND if backend is None else backend)
    return ctx if target is None else ctx(target)


def _strict(fullgraph: Any, nopython: Any) -> bool:
    """``fullgraph``, with ``nopython`` (its alias) folded in."""
    if not isinstance(fullgraph, bool):
        raise TypeError(f"optimize(fullgraph=...) must be True or False, got {fullgraph!r}")
    if nopython is None:
        return fullgraph
    if not isinstance(nopython, bool):
        raise TypeError(f"optimize(nopython=...) must be True or False, got {nopython!r}")
    if fullgraph and not nopython:
        raise TypeError(
            "optimize(fullgraph=True, nopython=False): nopython is the alias of fullgraph; "
            "give one of them"
        )
    return nopython


def _could_be_backend(fn: Callable) -> bool:
    """Whether ``fn`` could be called as a backend, ``fn(gm, example_inputs)``."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # no signature (a builtin): it could be either
        return True
    try:
        signature.bind(None, None)
    except TypeError:
        return False
    return True


def _options_key(options: Mapping[str, Any] | None) -> Any:
    """A hashable form of ``options`` for the callback memo (equal options share entries)."""
    if not options:
        return None
    return tuple(sorted((str(k), repr(v)) for k, v in dict(options).items()))


def _applies_to_target(args: tuple, kwargs: dict) -> bool:
    """Whether a call with ``args``/``kwargs`` applies a backend to one function or module."""
    if kwargs or len(args) != 1:
        return False
    (arg,) = args
    return isinstance(arg, torch.nn.Module) or (callable(arg) and not isinstance(arg, type))


class BackendOrFunction(OptimizeContext):
    """What ``optimize(f)`` returns for a plain function ``f`` of two arguments, which may be a
    backend (``optimize(my_backend)(fn)``) or the function to compile (``@optimize`` on
    ``def f(x, y)``). The first use decides, once (see :func:`optimize`):

    - applied to one function or ``nn.Module``, or entered as a ``with`` block: ``f`` is the
      backend, and this object acts as an :class:`OptimizeContext` from then on;
    - called in any other way, or read as a method of an instance: ``f`` is the function,
      compiled by ``"plugin"`` (with the mode and options given), and this object calls the
      optimized function from then on.

    It carries ``f``'s name, docstring and signature (``functools.update_wrapper``).
    Captured code that calls it has a graph break at the call (the translator inlines only
    the plain function ``optimize`` returns otherwise), where it runs as above.
    """

    def __init__(
        self,
        candidate: Callable,
        as_backend: Callable[[], OptimizeContext],
        as_function: Callable[[], Callable],
    ) -> None:
        functools.update_wrapper(self, candidate, updated=())
        self._candidate = candidate
        self._as_backend = as_backend
        self._as_function = as_function
        self._reading: str | None = None  # "backend" or "function" once decided
        self._resolved: Any = None
        skip_in_dynamo(BackendOrFunction.__call__.__code__)

    def _resolve(self, reading: str) -> Any:
        if self._reading is None:
            make = self._as_backend if reading == "backend" else self._as_function
            self._resolved = make()
            self._reading = reading
        elif self._reading != reading:
            raise TypeError(
                f"torch_plugin.optimize({_name(self._candidate)}) was taken as the "
                f"{self._reading} at its first use and is now used as the {reading}; write "
                f"optimize(backend={_name(self._candidate)}) or "
                f"optimize({_name(self._candidate)}, backend=...) to say which"
            )
        return self._resolved

    @property
    def callback(self):  # type: ignore[override]
        return self._resolve("backend").callback

    @property
    def _torchplugin_original(self) -> Callable:
        """``f``, the user's function behind this object (``explain()`` unwraps it), unless
        ``f`` was taken as a backend (AttributeError then)."""
        if self._reading == "backend":
            raise AttributeError("_torchplugin_original")
        return self._candidate

    def __enter__(self):
        self._resolve("backend").__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._resolve("backend").__exit__(*exc)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        reading = self._reading
        if reading is None:
            reading = "backend" if _applies_to_target(args, kwargs) else "function"
        return self._resolve(reading)(*args, **kwargs)

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            return self
        return types.MethodType(self._resolve("function"), obj)

    def __repr__(self) -> str:
        reading = self._reading or "backend or function, undecided"
        return f"<torch_plugin.optimize({_name(self._candidate)}): {reading}>"


# torch.compile, tracing a caller of this object, calls it instead of tracing into it.
BackendOrFunction.__call__._torchdynamo_disable = True  # type: ignore[attr-defined]


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
