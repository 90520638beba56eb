"""Calls of ``optimizer.step()`` in captured code (issue #30).

A call of an optimizer's ``step`` (``opt.step()``, the class's step or an LR scheduler's
counting wrapper of it) is never inlined: it is a graph break of type "optimizer step", and
the call runs after the graph. When the compiler function carries
``contract.OPTIMIZER_STEP`` (the "plugin" backend's compiled update), the rebuilt call at the
break runs ``step_fn(opt.step, *args)`` instead of ``opt.step(*args)``: the callable on the
rebuilt stack becomes ``functools.partial(step_fn, opt.step)``, built at run time from the
program's own ``opt.step``, so nothing about the optimizer is a constant of the capture and
``step_fn`` decides at each call (its result is the call's result). Without it the call is
the program's own.

Key parts: :func:`is_optimizer_step` (the translator's test, before inlining a call),
:func:`substitute_step` (the break's stack rewrite).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from .variables.base import VariableTracker
from .variables.functions import UserFunctionVariable, UserMethodVariable


def _real(var: VariableTracker) -> Any:
    return getattr(var, "value", None)


def is_optimizer_step(fn_var: VariableTracker) -> bool:
    """Whether calling ``fn_var`` calls an optimizer's step: a method ``step`` bound to a
    ``torch.optim.Optimizer`` that is its class's ``step``, or an LR scheduler's wrapper of
    it (a function marked ``_wrapped_by_lr_sched`` stored on the optimizer)."""
    if isinstance(fn_var, UserMethodVariable):
        opt = _real(fn_var.obj)
        return isinstance(opt, torch.optim.Optimizer) and fn_var.fn is getattr(
            type(opt), "step", None
        )
    if isinstance(fn_var, UserFunctionVariable):
        return bool(getattr(fn_var.fn, "_wrapped_by_lr_sched", False))
    return False


class OptimizerStepCall(VariableTracker):
    """``functools.partial(step_fn, step)`` rebuilt at the break (``step``: the program's
    ``opt.step``, rebuilt from its own variable)."""

    def __init__(self, step_fn: Any, step: VariableTracker) -> None:
        super().__init__(None)
        self.step_fn = step_fn
        self.step = step
        self.items = [step]  # what the reconstructor visits (reconstruct._children)

    def rebuild_call(self) -> tuple[Any, list[VariableTracker]]:
        return functools.partial(functools.partial, self.step_fn), [self.step]

    def __repr__(self) -> str:
        return f"OptimizerStepCall({self.step!r})"


def substitute_step(tx: Any, inst_index: int, step_fn: Any) -> bool:
    """Rewrite the stack of a break before the CALL at ``inst_index`` so that it calls
    ``step_fn(opt.step, ...)`` when the callee is an optimizer's step (True); else leave it."""
    inst = tx.instructions[inst_index]
    if inst.opname not in ("CALL", "CALL_KW"):
        return False
    n = inst.arg + (1 if inst.opname == "CALL_KW" else 0)
    if len(tx.stack) < n + 2:
        return False
    for pos in (len(tx.stack) - n - 2, len(tx.stack) - n - 1):
        var = tx.stack[pos]
        if is_optimizer_step(var):
            tx.stack[pos] = OptimizerStepCall(step_fn, var)
            return True
    return False
