"""``with`` blocks on Python context managers (not torch's grad-mode and autocast contexts,
which ``variables/torch.py`` models as graph nodes).

Key function: :func:`enter`, called by the BEFORE_WITH opcode. A context manager whose class
defines ``__enter__`` and ``__exit__`` in Python (a user class, ``contextlib.nullcontext``) has
both inlined: ``__enter__`` now, ``__exit__(None, None, None)`` where the block ends normally,
so what they do (attribute writes, tensor operations) is traced like any other code. A
``@contextlib.contextmanager`` function's context runs its generator up to the ``yield`` on
entry and to its end on exit. Only the normal exit is modelled: exceptions are not traced,
and a graph break inside the block is handled by the frame converter (it breaks at the
``with`` statement instead, see ``convert_frame``).
"""

from __future__ import annotations

import contextlib
import types

from .. import graph_break_types as gbt
from ..exc import unimplemented
from .base import VariableTracker
from .constant import ConstantVariable
from .iterators import GeneratorVariable
from .new_object import NewObjectVariable
from .user_defined import UserDefinedObjectVariable, class_lookup


class InlinedExitVariable(VariableTracker):
    """The ``__exit__`` BEFORE_WITH leaves on the stack for an inlined context manager;
    called with ``(None, None, None)`` when the block ends normally."""

    def __init__(self, ctx: VariableTracker, method: types.FunctionType) -> None:
        super().__init__()
        self.ctx = ctx
        self.method = method

    def call_function(self, tx, args, kwargs):
        if not all(a.is_python_constant() and a.as_python_constant() is None for a in args):
            unimplemented(gbt.CONTEXT_MANAGER, "__exit__ of a context manager with an exception")
        return tx.inline_user_function_obj(self.method, [self.ctx, *args], {})


class GeneratorExitVariable(VariableTracker):
    """The ``__exit__`` of a ``@contextlib.contextmanager`` context: runs the generator on
    from its ``yield``; a second ``yield`` is the error contextlib raises."""

    def __init__(self, gen: GeneratorVariable) -> None:
        super().__init__()
        self.gen = gen

    def call_function(self, tx, args, kwargs):
        if not all(a.is_python_constant() and a.as_python_constant() is None for a in args):
            unimplemented(gbt.CONTEXT_MANAGER, "__exit__ of a context manager with an exception")
        if self.gen.next_item() is not None:
            unimplemented(
                gbt.CONTEXT_MANAGER,
                "@contextmanager generator yielded twice (RuntimeError in eager)",
            )
        return ConstantVariable(False)


def enter(tx, ctx: VariableTracker) -> tuple[VariableTracker, VariableTracker]:
    """``with ctx:``: (the variable standing for ``ctx.__exit__``, what ``__enter__``
    returned). Raises Unsupported for context managers it cannot inline."""
    if not isinstance(ctx, (NewObjectVariable, UserDefinedObjectVariable)):
        unimplemented(gbt.CONTEXT_MANAGER, f"`with` block on {ctx}")
    cls = ctx.python_type()
    if cls is contextlib._GeneratorContextManager and isinstance(ctx, NewObjectVariable):
        gen = ctx.var_getattr(tx, "gen")
        if not isinstance(gen, GeneratorVariable):
            unimplemented(
                gbt.CONTEXT_MANAGER, f"`with` block on a @contextmanager context over {gen}"
            )
        value = gen.next_item()
        if value is None:
            unimplemented(
                gbt.CONTEXT_MANAGER,
                "@contextmanager generator did not yield (RuntimeError in eager)",
            )
        return GeneratorExitVariable(gen), value
    enter_fn = class_lookup(cls, "__enter__")
    exit_fn = class_lookup(cls, "__exit__")
    if not isinstance(enter_fn, types.FunctionType) or not isinstance(exit_fn, types.FunctionType):
        unimplemented(
            gbt.CONTEXT_MANAGER,
            f"`with` block on a {cls.__name__} object (its __enter__/__exit__ are not Python "
            "functions)",
        )
    value = tx.inline_user_function_obj(enter_fn, [ctx], {})
    return InlinedExitVariable(ctx, exit_fn), value
