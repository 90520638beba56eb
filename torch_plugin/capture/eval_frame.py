"""Turning capture on and off: the ``optimize`` context, ``disable``, ``run``, ``reset``.

Key classes: :class:`OptimizeContext` (what ``optimize(...)`` returns: a decorator, a
wrapper for functions and nn.Modules, and a context manager) and :class:`OptimizedModule`
(the nn.Module wrapper). Each enables the C++ hook with a
:class:`~torch_plugin.capture.convert_frame.ConvertFrame` callback for the calling thread.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ..contract import CompilerFn
from . import dynamic_shapes, shared_modules
from .convert_frame import ConvertFrame, seen_code_objects, stats
from .torch_compile_interop import resume_dynamo, skip_in_dynamo, suspend_dynamo

_callbacks: dict = {}

# PyTorch 2.11: FakeTensorMode calls torch._C._ensureCUDADeviceGuardSet() when CUDA is not
# available; if the first such call happens on a thread that then exits, the next call
# (any thread) crashes on a dangling device-guard object. Calling it here, on the importing
# thread, makes the first call one that outlives the translator's threads.
if not torch.cuda.is_available():
    torch._C._ensureCUDADeviceGuardSet()


def callback_for(
    compiler: CompilerFn,
    backend_name: str,
    nopython: bool,
    dynamic: bool | None = None,
    *,
    key: Any = None,
    adapt_compiler: Callable | None = None,
) -> ConvertFrame:
    """The ConvertFrame that compiles with ``compiler`` (a compiler function: backend names
    and modes are resolved above capture, by ``torch_plugin.api.optimize``), memoized so
    cache entries are shared: two calls with the same ``key`` (what the caller's request was,
    default the compiler's identity), ``nopython`` and ``dynamic`` get the same callback
    while the key still resolves to the same compiler. ``adapt_compiler``: see
    :class:`~torch_plugin.capture.convert_frame.ConvertFrame`."""
    memo_key = (id(compiler) if key is None else key, nopython, dynamic)
    cb = _callbacks.get(memo_key)
    if cb is None or cb.backend is not compiler:
        cb = ConvertFrame(compiler, backend_name, nopython, dynamic, adapt_compiler)
        _callbacks[memo_key] = cb
    return cb


class OptimizeContext:
    """Returned by :func:`torch_plugin.optimize`. Use it as ``@decorator``, ``ctx(fn)``,
    ``ctx(module)`` or ``with ctx:``.

    ``callback`` None makes a context that captures nothing (``optimize(disable=True)``,
    ``TORCH_PLUGIN_DISABLE=1``): entering it changes nothing, and ``ctx(fn)`` returns ``fn``
    itself."""

    def __init__(self, callback: ConvertFrame | None) -> None:
        self.callback = callback
        self._prev: list = []

    def __enter__(self):
        from torch_plugin import _C

        if self.callback is None:
            return self
        dynamo_prior = suspend_dynamo()  # torch.compile's callback is off inside ours
        self._prev.append((_C.set_eval_frame_callback(self.callback), dynamo_prior))
        return self

    def __exit__(self, *exc) -> None:
        from torch_plugin import _C

        if self.callback is None:
            return
        prev, dynamo_prior = self._prev.pop()
        _C.set_eval_frame_callback(prev)
        resume_dynamo(dynamo_prior)

    def __call__(self, fn: Any) -> Any:
        from torch_plugin import _C

        if not isinstance(fn, torch.nn.Module) and not callable(fn):
            raise TypeError(
                f"torch_plugin.optimize(...) expects a function or nn.Module, got {type(fn).__name__}"
            )
        if self.callback is None:
            return fn  # optimization disabled: the function or module itself
        if isinstance(fn, torch.nn.Module):
            return OptimizedModule(fn, self)
        callback = self.callback

        @functools.wraps(fn)
        def optimized(*args, **kwargs):
            dynamo_prior = suspend_dynamo()  # torch.compile's callback is off inside ours
            prev = _C.set_eval_frame_callback(callback)
            try:
                return fn(*args, **kwargs)
            finally:
                _C.set_eval_frame_callback(prev)
                resume_dynamo(dynamo_prior)

        optimized._torchplugin_original = fn  # the translator inlines fn when it meets this wrapper
        # torch.compile, tracing a caller of this wrapper, calls it instead of tracing it.
        optimized._torchdynamo_disable = True
        skip_in_dynamo(optimized.__code__)
        return optimized


class OptimizedModule(torch.nn.Module):
    """Wraps an nn.Module so calls run with capture on. Attribute reads, ``state_dict``,
    ``load_state_dict``, ``parameters`` and friends go to the wrapped module, so its keys are
    unchanged (no ``_orig_mod.`` prefix)."""

    def __init__(self, module: torch.nn.Module, ctx: OptimizeContext) -> None:
        super().__init__()
        object.__setattr__(self, "_orig_mod", module)
        object.__setattr__(self, "_ctx", ctx)
        object.__setattr__(self, "_call", ctx(module.__call__))

    def forward(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        return self._call(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(object.__getattribute__(self, "_orig_mod"), name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self._orig_mod, name, value)

    def state_dict(self, *args, **kwargs):
        return self._orig_mod.state_dict(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):
        return self._orig_mod.load_state_dict(*args, **kwargs)

    def named_parameters(self, *args, **kwargs):
        return self._orig_mod.named_parameters(*args, **kwargs)

    def parameters(self, *args, **kwargs):
        return self._orig_mod.parameters(*args, **kwargs)

    def named_buffers(self, *args, **kwargs):
        return self._orig_mod.named_buffers(*args, **kwargs)

    def buffers(self, *args, **kwargs):
        return self._orig_mod.buffers(*args, **kwargs)

    def named_modules(self, *args, **kwargs):
        return self._orig_mod.named_modules(*args, **kwargs)

    def modules(self):
        return self._orig_mod.modules()

    def train(self, mode: bool = True):
        self._orig_mod.train(mode)
        return self

    def to(self, *args, **kwargs):
        self._orig_mod.to(*args, **kwargs)
        return self

    def __repr__(self) -> str:
        return f"OptimizedModule({self._orig_mod!r})"


def disable(fn: Callable) -> Callable:
    """Return ``fn`` wrapped so that it always runs without capture (also when called
    inside an optimized region; frames it starts are not captured either)."""
    from torch_plugin import _C

    if not callable(fn):
        raise TypeError(f"torch_plugin.disable expects a callable, got {type(fn).__name__}")
    inner = _C.disable_wrapper(fn)

    @functools.wraps(fn)
    def disabled(*args, **kwargs):
        return inner(*args, **kwargs)

    disabled._torchplugin_disabled = True
    return disabled


def run(fn: Any = None) -> Any:
    """Run ``fn`` (a function or nn.Module) with the compiled entries made so far, never
    compiling: a frame whose guards pass runs its compiled code; any other frame runs
    unmodified, without calling into the translator (for serving after warm-up).

    With no argument, returns a context (decorator or ``with`` block) that does the same.
    Entries made by any backend are used.
    """
    from torch_plugin import _C

    ctx = OptimizeContext(_C.RUN_ONLY)
    return ctx if fn is None else ctx(fn)


def reset() -> None:
    """Drop every compiled entry and skip mark, the backend callbacks, and the counters."""
    from torch_plugin import _C

    for code in list(seen_code_objects):
        _C.reset_code(code)
    seen_code_objects.clear()
    _callbacks.clear()
    stats.reset()
    dynamic_shapes.reset()
    shared_modules.reset()
