"""Living beside torch.compile (Dynamo), whose PEP 523 hook may be installed at the same time.

The rule: on a thread, at most one of the two hooks has an active callback; each runs the
other's frames unmodified.

- A torch.compile region inside ours: the frames of Dynamo's entry points (the wrapper
  ``torch.compile``/``torch._dynamo.run`` return, and the wrapper of
  ``torch.compiler.disable``) make our callback return ``_C.RUN_UNCAPTURED``: they and every
  frame they start run with our callback suspended, so Dynamo's hook alone decides.
- Ours inside a torch.compile region: ``optimize``'s wrapper and context clear Dynamo's
  callback while ours is set (what ``torch.compiler.disable`` does), and restore it after.
  Dynamo, tracing a function that calls our wrapper, sees ``_torchdynamo_disable`` on it and
  calls it as an opaque function (a graph break in its graph).
- Functions PyTorch marks as not to be compiled (``torch.compiler.disable``,
  ``torch._dynamo.disable``/``skip``, non-recursive disable) are never captured or inlined:
  calling one from captured code is a graph break, and the call runs in CPython.
- Functions marked with ``torch._dynamo.assume_constant_result`` (the attribute
  ``_dynamo_marked_constant``; HF marks its install and hardware probes so) run at capture
  time when their arguments are constants, and their result is a constant of the capture,
  unguarded, as their authors declare and as torch.compile treats them
  (:func:`assumes_constant_result`).
"""

from __future__ import annotations

import inspect
import os

import torch

_DYNAMO_DIR = os.path.join(os.path.dirname(torch.__file__), "_dynamo") + os.sep


def _dynamo_setter():
    eval_frame = getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None)
    return getattr(eval_frame, "set_eval_frame", None)


_set_dynamo_eval_frame = _dynamo_setter()


def suspend_dynamo():
    """Clear this thread's torch.compile callback; returns what :func:`resume_dynamo` needs.

    Call it before setting our callback, and resume after restoring ours (LIFO, so each hook
    installs and removes itself while it is the outermost evaluator)."""
    if _set_dynamo_eval_frame is None:
        return None
    return _set_dynamo_eval_frame(None)


def resume_dynamo(prior) -> None:
    if prior is not None and _set_dynamo_eval_frame is not None:
        _set_dynamo_eval_frame(prior)


_dynamo_skipped: set = set()


def skip_in_dynamo(code) -> None:
    """Make torch.compile's hook run frames of ``code`` (one of our wrappers) unmodified:
    it would otherwise try to compile the wrapper frame itself, which only switches hooks."""
    if code in _dynamo_skipped:
        return
    _dynamo_skipped.add(code)
    eval_frame = getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None)
    try:
        strategy = eval_frame._FrameExecStrategy(
            eval_frame._FrameAction.SKIP, eval_frame._FrameAction.DEFAULT
        )
        eval_frame.set_code_exec_strategy(code, strategy)
    except (AttributeError, TypeError, RuntimeError):  # another PyTorch version
        pass


# What the hook does with a frame of a function PyTorch marked (see frame_action).
REGION = "region"  # run it and everything it starts uncaptured (RUN_UNCAPTURED)
SKIP = "skip"  # run its own frames unmodified (skip mark); the frames it starts are captured


def frame_action(fn, code) -> str | None:
    """For the frame of function ``fn`` (code ``code``): :data:`REGION`, :data:`SKIP`, or
    None when PyTorch did not mark it.

    Entry points of a Dynamo region are recognised by their attributes *and* by living in
    ``torch/_dynamo``: ``functools.wraps`` copies the attributes onto a user's wrapper of a
    compiled or disabled function, whose code object must not be marked for every use."""
    d = getattr(fn, "__dict__", None)
    if not d:
        return None
    if "_torchplugin_original" in d or "_torchplugin_disabled" in d:
        return None  # ours (optimize sets _torchdynamo_disable on its wrapper for Dynamo)
    disabled = d.get("_torchdynamo_disable", False)
    if not disabled and "_torchdynamo_orig_callable" not in d:
        return None
    if code.co_filename.startswith(_DYNAMO_DIR):
        if not disabled or d.get("_torchdynamo_disable_recursive", True):
            return REGION  # torch.compile / torch._dynamo.run wrapper, recursive disable
        # torch.compiler.disable(recursive=False): neither the wrapper nor the function
        # is captured; what the function calls is.
        inner = d.get("_torchdynamo_orig_callable")
        inner_code = getattr(inner, "__code__", None)
        if inner_code is not None:
            from torch_plugin import _C

            from .code_marks import seen_code_objects

            _C.skip_code(inner_code)
            seen_code_objects.add(inner_code)
        return SKIP
    if disabled and "__wrapped__" not in d:
        return SKIP  # torch._dynamo.skip(fn): fn itself, with Dynamo's skip mark on its code
    return None


def call_reason(value) -> str | None:
    """Why the translator must not inline or trace a call to ``value`` (a graph break
    instead), or None."""
    if inspect.getattr_static(value, "_torchplugin_original", None) is not None:
        return None  # optimize's wrapper: the translator inlines the original
    if inspect.getattr_static(value, "_torchdynamo_disable", False):
        return f"call to {_name(value)}, marked by torch.compiler.disable (never captured)"
    if inspect.getattr_static(value, "_torchdynamo_orig_callable", None) is not None:
        return (
            f"call to {_name(value)}, compiled by torch.compile "
            "(it runs under torch.compile's own hook)"
        )
    return None


def module_call_reason(module: torch.nn.Module) -> str | None:
    """Why a call of ``module`` must run outside the graph (torch.compile'd or disabled)."""
    import sys

    dynamo_eval_frame = sys.modules.get("torch._dynamo.eval_frame")
    if dynamo_eval_frame is not None and isinstance(module, dynamo_eval_frame.OptimizedModule):
        return (
            f"call of {type(module._orig_mod).__name__} wrapped by torch.compile or "
            "torch.compiler.disable (it runs under torch.compile's own hook)"
        )
    if module.__dict__.get("_compiled_call_impl") is not None:
        return (
            f"call of {type(module).__name__}, compiled with nn.Module.compile() "
            "(it runs under torch.compile's own hook)"
        )
    return None


def _name(value) -> str:
    return str(getattr(value, "__qualname__", None) or value)


def assumes_constant_result(fn) -> bool:
    """Whether ``fn`` is marked with ``torch._dynamo.assume_constant_result`` (its result is
    fixed for the process: run it once at capture time, treat the result as a constant)."""
    return getattr(fn, "_dynamo_marked_constant", False) is True
