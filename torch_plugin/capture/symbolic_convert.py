"""The symbolic bytecode interpreter.

Key classes:
- :class:`InstructionTranslatorBase`: runs a code object's instructions (from ``dis``,
  CPython 3.11, 3.12 and 3.13) on :class:`~torch_plugin.capture.variables.base.VariableTracker`
  values. One handler method per opcode, named after it.
- :class:`InstructionTranslator`: the captured frame itself; its inputs are the frame's
  arguments, globals and closure, wrapped with sources (and so guarded).
- :class:`InliningInstructionTranslator`: a called user function, interpreted in place so its
  operations join the same graph.

Python-version differences handled here: LOAD_GLOBAL/LOAD_ATTR's NULL/method bit, PRECALL
(3.11), POP_JUMP_FORWARD/BACKWARD_* (3.11) vs POP_JUMP_IF_* (3.12), RETURN_CONST,
BINARY_SLICE/STORE_SLICE, LOAD_FAST_CHECK/LOAD_FAST_AND_CLEAR, END_FOR, LOAD_SUPER_ATTR and
CALL_INTRINSIC_1 (3.12), FOR_ITER's exhaustion jump (3.12 skips END_FOR, 3.13 END_FOR and
POP_TOP), and 3.13's NULL after the callable, TO_BOOL and the two-local superinstructions.
The facts themselves are in bytecode_compat.py.
"""

from __future__ import annotations

import dis
import inspect
import types

from .. import config
from . import (
    activation_checkpoint,  # noqa: F401  (registers CheckpointVariable)
    conditionals,
)
from . import graph_break_types as gbt
from .attribute_instructions import AttributeInstructions
from .bytecode_compat import FOR_ITER_SKIPS, NULL_AFTER_CALLABLE, PY312
from .call_instructions import CallInstructions
from .container_instructions import ContainerInstructions
from .exc import Unsupported, UserSourceLocation, unimplemented
from .name_instructions import NameInstructions
from .operator_instructions import OperatorInstructions
from .output_graph import OutputGraph
from .sources import ClosureSource, GlobalSource, ItemSource, LocalSource
from .variables.base import NullVariable, VariableTracker
from .variables.builder import wrap_value
from .variables.constant import ConstantVariable
from .variables.container_iterators import make_iterator
from .variables.functions import CellVariable
from .variables.iterators import IteratorVariable
from .variables.polyfills import polyfill_codes
from .variables.tensor import TensorVariable
from .variables.torch import AutocastVariable, GradModeVariable, InferenceModeVariable
from .variables.user_defined import SuperVariable

__all__ = [
    "InliningInstructionTranslator",
    "InstructionTranslator",
    "InstructionTranslatorBase",
    "NullVariable",
]

MAX_INSTRUCTIONS = 2_000_000


class WithExitVariable(VariableTracker):
    """The ``__exit__`` that BEFORE_WITH leaves on the stack."""

    def __init__(self, ctx: VariableTracker) -> None:
        super().__init__()
        self.ctx = ctx

    def call_function(self, tx, args, kwargs):
        return self.ctx.exit(tx)


def _closes_with_block(tx, fn: VariableTracker) -> None:
    """Calling ``fn`` (an ``__exit__`` BEFORE_WITH pushed) ends the innermost open ``with``
    block of the captured frame."""
    from .variables.context_managers import GeneratorExitVariable, InlinedExitVariable

    if (
        tx.parent is None
        and tx.open_withs
        and isinstance(fn, (WithExitVariable, InlinedExitVariable, GeneratorExitVariable))
    ):
        tx.open_withs.pop()


class _Return(Exception):
    def __init__(self, value: VariableTracker) -> None:
        self.value = value


class GeneratorYield(Exception):
    """Raised by YIELD_VALUE in an inlined generator's body: ``run()`` stops there with its
    state kept, and :class:`~.variables.iterators.GeneratorVariable` returns ``value``."""

    def __init__(self, value: VariableTracker) -> None:
        self.value = value


class InstructionTranslatorBase(
    NameInstructions,
    ContainerInstructions,
    OperatorInstructions,
    AttributeInstructions,
    CallInstructions,
):
    """Interprets one code object. See the module docstring. The opcode handlers of each
    family live in a mixin of their own: locals, globals, cells and imports
    (name_instructions.py), containers (container_instructions.py), operators
    (operator_instructions.py), attributes (attribute_instructions.py), calls and inlining
    (call_instructions.py); the loop, the stack, control flow, ``with`` blocks and generators
    are here."""

    def __init__(
        self,
        code: types.CodeType,
        f_globals: dict,
        f_builtins: dict,
        symbolic_locals: dict[str, VariableTracker],
        cells: dict[str, CellVariable],
        output: OutputGraph,
        depth: int = 0,
    ) -> None:
        self.code = code
        self.f_globals = f_globals
        self.f_builtins = f_builtins
        self.symbolic_locals = symbolic_locals
        self.cells = cells
        self.output = output
        self.depth = depth
        self.instructions = list(dis.get_instructions(code))
        self.offset_to_index = {inst.offset: i for i, inst in enumerate(self.instructions)}
        self.stack: list[VariableTracker] = []
        self.ip = 0
        self.kw_names: tuple | None = None
        self.current_inst: dis.Instruction | None = None
        self.lineno = code.co_firstlineno
        self.is_generator = False  # an inlined generator function's body (YIELD_VALUE)
        self.globals_source = None
        self.parent: InstructionTranslatorBase | None = None
        self.stop_at: int | frozenset[int] | None = None
        # Indices of the BEFORE_WITH instructions of this frame's open ``with`` blocks
        # (captured frame only): a graph break inside one moves to its ``with`` statement.
        self.open_withs: list[int] = []

    # --- locations ------------------------------------------------------------------------
    def location(self) -> UserSourceLocation:
        name = self.code.co_name.removeprefix("torch_plugin_resume_in_")
        return UserSourceLocation(self.code.co_filename, self.lineno, name)

    def current_location_text(self) -> str:
        return str(self.location())

    # --- the loop -------------------------------------------------------------------------
    def run(self) -> VariableTracker | None:
        """Interpret until RETURN_VALUE (its value is returned) or, for the captured frame,
        until instruction ``stop_at`` is reached (None is returned; the state is kept)."""
        count = 0
        try:
            stop = self.stop_at  # an instruction index, or a set of them (conditionals.py)
            while True:
                if self.ip == stop or (type(stop) is frozenset and self.ip in stop):
                    return None
                inst = self.instructions[self.ip]
                self.ip += 1
                self.current_inst = inst
                if inst.positions is not None and inst.positions.lineno is not None:
                    self.lineno = inst.positions.lineno
                elif inst.starts_line:
                    self.lineno = inst.starts_line
                count += 1
                if count > MAX_INSTRUCTIONS:
                    unimplemented(
                        gbt.CAPTURE_LIMIT, "too many instructions interpreted (unbounded loop?)"
                    )
                handler = getattr(self, inst.opname, None)
                try:
                    if handler is None:
                        unimplemented(
                            gbt.UNSUPPORTED_BYTECODE, f"bytecode {inst.opname} is not supported yet"
                        )
                    handler(inst)
                    if self.output.ranged_dims:  # where each shape guard came from
                        self.output.locate_new_shape_guards(self.location)
                except Unsupported as e:
                    if e.location is None:
                        e.location = self.location()
                    if self.parent is None and e.root_index is None:
                        e.root_index = self.ip - 1
                        e.with_index = self.open_withs[0] if self.open_withs else None
                    raise
                except (_Return, GeneratorYield):
                    raise
                except RecursionError:
                    raise Unsupported(
                        "recursion too deep while capturing",
                        self.location(),
                        gb_type=gbt.CAPTURE_LIMIT,
                    ) from None
                except (TypeError, ValueError, AttributeError, KeyError, IndexError) as e:
                    err = Unsupported(
                        f"{type(e).__name__} while capturing {inst.opname}: {e}",
                        self.location(),
                        gb_type=gbt.EXCEPTION,
                    )
                    if self.parent is None:
                        err.root_index = self.ip - 1
                        err.with_index = self.open_withs[0] if self.open_withs else None
                    raise err from e
        except _Return as r:
            return r.value

    def run_to_yield(self) -> VariableTracker | None:
        """Run an inlined generator's body up to its next ``yield``: the yielded value, or
        None once the body returned (StopIteration). Its state is kept between calls."""
        try:
            value = self.run()
        except GeneratorYield as y:
            return y.value
        # the body returned: StopIteration(value), what ``yield from`` evaluates to
        self.generator_return = value if value is not None else ConstantVariable(None)
        return None

    def inlining_translator(
        self,
        code: types.CodeType,
        f_globals: dict,
        symbolic_locals: dict[str, VariableTracker],
        cells: dict[str, CellVariable],
    ) -> InliningInstructionTranslator:
        """A translator for a user function (``code``) called from this one, one level
        deeper, recording into the same graph (see ``CallInstructions.inline_user_function``)."""
        return InliningInstructionTranslator(
            code,
            f_globals,
            _builtins_of(f_globals),
            symbolic_locals,
            cells,
            self.output,
            self.depth + 1,
        )

    def push(self, v: VariableTracker) -> None:
        assert isinstance(v, VariableTracker), v
        self.stack.append(v)

    def push_callable(self, v: VariableTracker) -> None:
        """Push ``v`` with the NULL a following CALL expects beside a plain callable
        (below it on 3.11/3.12, above it on 3.13: bytecode_compat.NULL_AFTER_CALLABLE)."""
        if NULL_AFTER_CALLABLE:
            self.push(v)
            self.push(NullVariable())
        else:
            self.push(NullVariable())
            self.push(v)

    def pop(self) -> VariableTracker:
        return self.stack.pop()

    def popn(self, n: int) -> list[VariableTracker]:
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    def jump(self, inst: dis.Instruction) -> None:
        self.ip = self.offset_to_index[inst.argval]

    def call(self, fn: VariableTracker, args: list, kwargs: dict) -> VariableTracker:
        result = fn.call_function(self, args, kwargs)
        _closes_with_block(self, fn)
        return result

    def load_global_var(self, name: str) -> VariableTracker:
        if self.output.side_effects:
            pending = self.output.side_effects.pending_global(self.f_globals, name)
            if pending is not None:
                return pending
        if name in self.f_globals:
            if self.globals_source is None:
                source = GlobalSource(name)
            else:
                source = ItemSource(self.globals_source, name)
            return wrap_value(self, self.f_globals[name], source)
        if name in self.f_builtins:
            return wrap_value(self, self.f_builtins[name], None)
        unimplemented(gbt.EXCEPTION, f"name {name!r} is not defined")

    def root_tx(self) -> InstructionTranslatorBase:
        tx = self
        while getattr(tx, "parent", None) is not None:
            tx = tx.parent
        return tx

    def root_globals(self) -> dict:
        return self.root_tx().f_globals

    def zero_arg_super(self) -> VariableTracker:
        cell = self.cells.get("__class__")
        if cell is None or cell.contents is None or self.code.co_argcount == 0:
            unimplemented(gbt.UNMODELLED_VALUE, "super() without __class__ cell")
        first = self.code.co_varnames[0]
        obj = self.symbolic_locals.get(first)
        if obj is None and first in self.cells:
            obj = self.cells[first].contents
        if obj is None:
            unimplemented(gbt.UNMODELLED_VALUE, "super() without a first argument")
        return SuperVariable(cell.contents.as_python_constant(), obj)

    # --- opcodes: no-ops ------------------------------------------------------------------
    def NOP(self, inst):
        pass

    RESUME = NOP
    PRECALL = NOP
    EXTENDED_ARG = NOP
    CACHE = NOP
    COPY_FREE_VARS = NOP

    # --- stack ----------------------------------------------------------------------------
    def POP_TOP(self, inst):
        self.pop()

    def PUSH_NULL(self, inst):
        self.push(NullVariable())

    def SWAP(self, inst):
        i = inst.arg
        self.stack[-1], self.stack[-i] = self.stack[-i], self.stack[-1]

    def COPY(self, inst):
        self.push(self.stack[-inst.arg])

    def END_FOR(self, inst):
        self.popn(1 if "POP_TOP" in FOR_ITER_SKIPS else 2)  # 3.13: END_FOR, POP_TOP

    # --- control flow ---------------------------------------------------------------------
    def _jump_if(self, inst, want: bool, pop: bool = True):
        value = self.pop() if pop else self.stack[-1]
        if pop and isinstance(value, conditionals.TensorBoolVariable):
            value = value.tensor  # a flag set in an earlier captured branch
        if pop and isinstance(value, TensorVariable) and self.captures_tensor_branches():
            # both ways traced into a conditional node, or Unsupported: a break here
            conditionals.capture_branch(self, inst, value, want)
            return
        if value.truthiness(self) == want:
            if not pop:
                pass
            self.jump(inst)
        elif not pop:
            self.pop()

    def TO_BOOL(self, inst):  # 3.13: a tensor's truth is data-dependent (a graph break here)
        value = self.pop()
        if (
            isinstance(value, (TensorVariable, conditionals.TensorBoolVariable))
            and self.next_is_conditional_jump()
        ):
            self.push(value)  # the jump captures it as a conditional (conditionals.py)
            return
        self.push(ConstantVariable(bool(value.truthiness(self))))

    def captures_tensor_branches(self) -> bool:
        """Whether a jump on a one-element tensor here becomes a conditional
        (conditionals.py): with ``config.capture_tensor_branches``, and always in the
        builtins' polyfills (variables/polyfills.py), whose ways only rebind locals to
        values that exist before the branch (no graph op, no effect, no random draw)."""
        return config.capture_tensor_branches or self.code in polyfill_codes()

    def next_is_conditional_jump(self) -> bool:
        """The next instruction is POP_JUMP_IF_TRUE/FALSE (3.13's TO_BOOL and COMPARE_OP
        bool bit leave a tensor for it to capture as a conditional)."""
        return self.captures_tensor_branches() and self.instructions[self.ip].opname in (
            "POP_JUMP_IF_TRUE",
            "POP_JUMP_IF_FALSE",
        )

    def POP_JUMP_IF_TRUE(self, inst):
        self._jump_if(inst, True)

    def POP_JUMP_IF_FALSE(self, inst):
        self._jump_if(inst, False)

    POP_JUMP_FORWARD_IF_TRUE = POP_JUMP_BACKWARD_IF_TRUE = POP_JUMP_IF_TRUE
    POP_JUMP_FORWARD_IF_FALSE = POP_JUMP_BACKWARD_IF_FALSE = POP_JUMP_IF_FALSE

    def _is_none(self, value) -> bool:
        if isinstance(value, ConstantVariable):
            return value.value is None
        if isinstance(value, (TensorVariable, NullVariable)):
            return False
        return self.is_(value, ConstantVariable(None))

    def POP_JUMP_IF_NONE(self, inst):
        if self._is_none(self.pop()):
            self.jump(inst)

    def POP_JUMP_IF_NOT_NONE(self, inst):
        if not self._is_none(self.pop()):
            self.jump(inst)

    POP_JUMP_FORWARD_IF_NONE = POP_JUMP_BACKWARD_IF_NONE = POP_JUMP_IF_NONE
    POP_JUMP_FORWARD_IF_NOT_NONE = POP_JUMP_BACKWARD_IF_NOT_NONE = POP_JUMP_IF_NOT_NONE

    def JUMP_IF_TRUE_OR_POP(self, inst):  # 3.11
        if self.stack[-1].truthiness(self):
            self.jump(inst)
        else:
            self.pop()

    def JUMP_IF_FALSE_OR_POP(self, inst):  # 3.11
        if not self.stack[-1].truthiness(self):
            self.jump(inst)
        else:
            self.pop()

    def JUMP_FORWARD(self, inst):
        self.jump(inst)

    JUMP_BACKWARD = JUMP_BACKWARD_NO_INTERRUPT = JUMP_ABSOLUTE = JUMP = JUMP_FORWARD

    def GET_ITER(self, inst):
        # CPython's iterator: live over a list, dict, set or deque (container_iterators.py)
        self.push(make_iterator(self, self.pop()))

    def FOR_ITER(self, inst):
        it = self.stack[-1]
        if not isinstance(it, IteratorVariable):
            unimplemented(gbt.UNMODELLED_VALUE, f"for loop over {it}")
        item = it.next_item()
        if item is not None:
            self.push(item)
            return
        self.pop()
        self.jump(inst)
        for skipped in FOR_ITER_SKIPS:
            if self.instructions[self.ip].opname != skipped:
                break
            self.ip += 1

    # --- with blocks ----------------------------------------------------------------------
    def BEFORE_WITH(self, inst):
        from .variables import context_managers

        ctx = self.pop()
        if isinstance(ctx, (GradModeVariable, AutocastVariable, InferenceModeVariable)):
            exit_var, entered = WithExitVariable(ctx), ctx.enter(self)
        else:
            exit_var, entered = context_managers.enter(self, ctx)
        if self.parent is None:
            self.open_withs.append(self.ip - 1)
        self.push(exit_var)
        self.push(entered)

    # --- generators (an inlined generator's body runs up to each yield) --------------------
    def RETURN_GENERATOR(self, inst):
        self.push(ConstantVariable(None))

    def YIELD_VALUE(self, inst):
        if not self.is_generator:
            unimplemented(gbt.GENERATOR, "yield in the captured frame")
        value = self.pop()
        self.push(ConstantVariable(None))  # what `yield` evaluates to on resume (no send())
        raise GeneratorYield(value)

    def GET_YIELD_FROM_ITER(self, inst):
        # a generator stays itself; anything else is iter()'d (no coroutines are modelled)
        self.push(make_iterator(self, self.pop()))

    def SEND(self, inst):
        """``STACK[-1] = STACK[-2].send(STACK[-1])`` (``yield from``): on StopIteration the
        sent value is replaced by the return value (3.11: the receiver too) and it jumps."""
        from .variables.iterators import GeneratorVariable

        value = self.pop()
        receiver = self.stack[-1]
        if isinstance(receiver, GeneratorVariable):
            item = receiver.send_item(value)
        elif isinstance(receiver, IteratorVariable) and self._is_none(value):
            item = receiver.next_item()
        else:
            unimplemented(gbt.GENERATOR, f"yield from {receiver} with a sent value")
        if item is not None:
            self.push(item)
            return
        ret = receiver.return_value() if isinstance(receiver, GeneratorVariable) else None
        if not PY312:
            self.pop()  # 3.11 pops the receiver here; 3.12+ at END_SEND
        self.push(ret if ret is not None else ConstantVariable(None))
        self.jump(inst)

    def END_SEND(self, inst):  # 3.12+: drop the receiver below the value
        value = self.pop()
        self.pop()
        self.push(value)

    # --- exits ----------------------------------------------------------------------------
    def RETURN_VALUE(self, inst):
        raise _Return(self.pop())

    def RAISE_VARARGS(self, inst):
        unimplemented(gbt.EXCEPTION, "raise statement reached while capturing")

    def LOAD_ASSERTION_ERROR(self, inst):
        unimplemented(gbt.EXCEPTION, "assertion failed while capturing")


def _builtins_of(f_globals: dict) -> dict:
    b = f_globals.get("__builtins__", __builtins__)
    return b if isinstance(b, dict) else b.__dict__


class InliningInstructionTranslator(InstructionTranslatorBase):
    """A user function called from traced code, interpreted into the same graph."""

    parent: InstructionTranslatorBase | None = None


class InstructionTranslator(InstructionTranslatorBase):
    """The captured frame. Its arguments, globals and closure are the graph's inputs."""

    def __init__(self, frame, output: OutputGraph, stop_at: int | None = None) -> None:
        code = frame.f_code
        super().__init__(code, frame.f_globals, frame.f_builtins, {}, {}, output)
        self.stop_at = stop_at
        nargs = code.co_argcount + code.co_kwonlyargcount
        nargs += bool(code.co_flags & inspect.CO_VARARGS) + bool(
            code.co_flags & inspect.CO_VARKEYWORDS
        )
        self.nargs = nargs
        for slot, name in enumerate(code.co_varnames[:nargs]):
            value = frame.arg_values[slot]
            var = wrap_value(self, value, LocalSource(name, slot))
            if slot >= code.co_argcount + code.co_kwonlyargcount and hasattr(var, "mutable_local"):
                # *args / **kwargs are fresh containers made for this call: local to the frame
                var.mutable_local = True
                var.source = None
                var.__dict__.pop("real", None)
            self.symbolic_locals[name] = var
        closure = frame.closure or ()
        for index, name in enumerate(code.co_freevars):
            try:
                contents = closure[index].cell_contents
            except ValueError:
                self.cells[name] = CellVariable(None, source_bound=True)
                continue
            cell = CellVariable(
                wrap_value(self, contents, ClosureSource(name, index)), source_bound=True
            )
            cell.real_cell = closure[index]
            self.cells[name] = cell
        for name in code.co_cellvars:
            if name not in self.cells:
                self.cells[name] = CellVariable(None)
