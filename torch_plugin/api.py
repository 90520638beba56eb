"""``optimize``: the public entry point that joins capture, the backends and torch.distributed.

Capture (``torch_plugin.capture``) knows only compiler functions
(:mod:`torch_plugin.contract`); this module, above it, resolves what the user asked for
(a backend name or callable, and a mode) through the registry
(:func:`torch_plugin.backends.registry.backend_with_mode`) and hands capture the compiler
function together with :func:`torch_plugin.distributed.adapt.adapt_compiler` (FSDP2 and DDP
adapt the compiler per frame). ``export()`` and ``explain()`` capture through
:func:`optimize` too.
"""

from __future__ import annotations

from collections.abc import Callable

from torch_plugin.backends.registry import backend_with_mode
from torch_plugin.capture.eval_frame import OptimizeContext, callback_for
from torch_plugin.distributed.adapt import adapt_compiler


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
    compiler = backend_with_mode(backend, mode)
    if isinstance(backend, str):
        name, spelled = backend, backend
    else:
        name, spelled = getattr(backend, "__name__", type(backend).__name__), id(backend)
    callback = callback_for(
        compiler,
        name,
        nopython,
        dynamic,
        key=(spelled, mode),
        adapt_compiler=adapt_compiler,
    )
    return OptimizeContext(callback)
