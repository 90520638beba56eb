"""Graph breaks: compile the graph so far, run one instruction natively, resume after it.

:func:`compile_graph_break` is called with a translator stopped *before* instruction ``i``
(the instruction capture could not handle, or the root-frame CALL whose callee could not be
inlined). It emits the frame's transformed code:

1. call the compiled graph (when it has any operation) and keep its outputs;
2. replay recorded side effects (attribute writes on real objects);
3. rebuild the Python values on the stack from graph outputs, sources and constants;
4. run instruction ``i`` itself (a call, an operator, a data-dependent jump, ...);
5. store the stack in temporaries and call the resume function for the next instruction
   (both targets for a conditional jump) with the stack values and the live locals, and
   return its result.

:class:`~torch_plugin.capture.reconstruct.Reconstructor` (reconstruct.py) is the bytecode
side of step 3: it rebuilds any variable the translator can model as a real value, each
mutable container exactly once (aliasing kept).
"""

from __future__ import annotations

import dis
import types

import bytecode as bc

from . import graph_break_types as gbt
from . import try_blocks
from .bytecode_compat import FOR_ITER_SKIPS, PY312, PY313, compare_arg
from .bytecode_emission import CodeGen, assemble
from .exc import Unsupported, unimplemented
from .loop_iterators import loop_iterators
from .reconstruct import (
    Reconstructor,
    check_rebuildable,
    preload_sourced_values,
    symbolic_outputs,
    tensors_in,
)
from .resume_execution import (
    ResumeSpec,
    live_locals,
    push_function,
    resume_code,
    user_first_argument,
)
from .variables.base import VariableTracker
from .variables.container_iterators import (
    hand_iterator,
)
from .variables.tensor import TensorVariable

_COND_JUMPS = {
    "POP_JUMP_IF_TRUE": "IF_TRUE",
    "POP_JUMP_IF_FALSE": "IF_FALSE",
    "POP_JUMP_IF_NONE": "IF_NONE",
    "POP_JUMP_IF_NOT_NONE": "IF_NOT_NONE",
    "POP_JUMP_FORWARD_IF_TRUE": "IF_TRUE",
    "POP_JUMP_FORWARD_IF_FALSE": "IF_FALSE",
    "POP_JUMP_FORWARD_IF_NONE": "IF_NONE",
    "POP_JUMP_FORWARD_IF_NOT_NONE": "IF_NOT_NONE",
    "POP_JUMP_BACKWARD_IF_TRUE": "IF_TRUE",
    "POP_JUMP_BACKWARD_IF_FALSE": "IF_FALSE",
    "POP_JUMP_BACKWARD_IF_NONE": "IF_NONE",
    "POP_JUMP_BACKWARD_IF_NOT_NONE": "IF_NOT_NONE",
}
# Instructions whose native run may push NULL or that end/enter frames: never break there.
_NOT_BREAKABLE = {
    "LOAD_ATTR",
    "LOAD_METHOD",
    "LOAD_GLOBAL",
    "LOAD_SUPER_ATTR",
    "RETURN_VALUE",
    "RETURN_CONST",
    "YIELD_VALUE",
    "RETURN_GENERATOR",
    "GET_ITER",
    "JUMP_IF_TRUE_OR_POP",
    "JUMP_IF_FALSE_OR_POP",
    "SEND",
    "RAISE_VARARGS",
    "RERAISE",
    "PUSH_EXC_INFO",
    "POP_EXCEPT",
    "WITH_EXCEPT_START",
    "CHECK_EXC_MATCH",
    "LOAD_FAST",
    "STORE_FAST",
    "DELETE_FAST",
    "MAKE_CELL",
    "COPY_FREE_VARS",
    "RESUME",
    "KW_NAMES",
    "PRECALL",
    "LOAD_ASSERTION_ERROR",
    "LOAD_FAST_AND_CLEAR",
    "LOAD_FAST_LOAD_FAST",
    "STORE_FAST_LOAD_FAST",
    "STORE_FAST_STORE_FAST",
    "END_FOR",
}


def check_breakable(code: types.CodeType, inst: dis.Instruction) -> None:
    """Raise Unsupported when a graph break at ``inst`` cannot keep Python semantics. (One
    inside a try/with block keeps its handler: try_blocks.py.)"""
    if inst.opname in _NOT_BREAKABLE:
        unimplemented(gbt.NO_BREAK_HERE, f"cannot graph-break at {inst.opname}")


class _ReplayCall:
    """Calls a side-effect replay with a fresh memo: ``(graph_outputs, runtime_args)``."""

    def __init__(self, replay) -> None:
        self.replay = replay

    def __call__(self, graph_outputs, args) -> dict:
        memo: dict = {}
        self.replay(graph_outputs, args, memo)
        return memo


def compile_graph_break(
    tx, output, inst_index: int, compile_graph, resume_only: bool = False
) -> types.CodeType:
    """The transformed code for a frame that breaks before instruction ``inst_index``.

    ``compile_graph(tensors) -> callable | None`` compiles the graph with those outputs
    (None when the graph has no operation). ``resume_only``: run no instruction natively,
    resume *at* ``inst_index`` (a break moved to the start of a try block). Raises
    Unsupported when the break cannot keep Python semantics; the caller then runs the frame
    unmodified (or, when the error has a ``retry_index``, breaks there instead).
    """
    code = tx.code
    inst = tx.instructions[inst_index]
    if not resume_only:
        check_breakable(code, inst)
    entry = try_blocks.entry_at_break(tx, inst_index, resume_only)
    stack = list(tx.stack)
    from .optimizer_steps import OptimizerStepCall
    from .variables.base import NullVariable

    for v in stack:
        if not isinstance(v, NullVariable):
            check_rebuildable(v)
    jump_kind = None if resume_only else _COND_JUMPS.get(inst.opname)
    # FOR_ITER (the iterator's next step cannot be captured: a map function that breaks, a
    # dict changed size): it runs natively on the real iterator; the loop body, or the code
    # after the loop once the iterator is exhausted, resumes
    for_iter = not resume_only and inst.opname == "FOR_ITER"
    if resume_only:
        targets = [inst.offset]
        n_after = len(stack)
    elif for_iter:
        targets = [tx.instructions[inst_index + 1].offset, _loop_exit(tx, inst)]
        n_after = len(stack) + 1
    elif jump_kind is not None:
        targets = [tx.instructions[inst_index + 1].offset, inst.argval]
        n_after = len(stack) - 1
    else:
        effect = (
            dis.stack_effect(inst.opcode, inst.arg)
            if inst.opcode >= dis.HAVE_ARGUMENT
            else dis.stack_effect(inst.opcode)
        )
        if inst.opname == "CALL" and not PY312:
            effect += dis.stack_effect(dis.opmap["PRECALL"], inst.arg)
        targets = [tx.instructions[inst_index + 1].offset]
        n_after = len(stack) + effect
    if n_after < 0:
        unimplemented(
            gbt.NO_BREAK_HERE, f"stack underflow computing a graph break at {inst.opname}"
        )
    live: set[str] = set()
    for t in targets:
        live |= live_locals(code, t)
    if entry is not None and not resume_only:
        live |= live_locals(code, entry.target)  # the handler resume function's
    local_values: dict[str, VariableTracker] = {}
    first_arg = user_first_argument(code)
    for name in list(code.co_varnames) + [n for n in code.co_cellvars if n not in code.co_varnames]:
        if name not in live and name != first_arg:  # the first argument: for super()
            continue
        if name in tx.symbolic_locals:
            local_values[name] = tx.symbolic_locals[name]
        elif name in tx.cells and tx.cells[name].contents is not None and name in code.co_cellvars:
            local_values[name] = tx.cells[name].contents
    for v in local_values.values():
        check_rebuildable(v)
    # Graph outputs: every tensor the rebuilt stack, locals and side effects need.
    tensors: list[TensorVariable] = []
    seen: set[int] = set()
    for v in stack:
        tensors_in(v, tensors, seen)
    for v in local_values.values():
        tensors_in(v, tensors, seen)
    replay_tensors: list[TensorVariable] = []
    replay = output.side_effects.make_replay(output, replay_tensors)
    needed = [t for t in tensors if not (t.node.op == "placeholder" and t.source is not None)]
    unique: list[TensorVariable] = list(replay_tensors)  # the replay indexes this prefix
    index: dict[int, int] = {}
    for pos, t in enumerate(replay_tensors):
        index.setdefault(id(t.node), pos)
    for t in needed:
        if id(t.node) not in index:
            index[id(t.node)] = len(unique)
            unique.append(t)
    if output.has_dynamic_shapes():
        from .variables.base import NullVariable

        values = [v for v in [*stack, *local_values.values()] if not isinstance(v, NullVariable)]
        for key, sym_out in symbolic_outputs(output, values):
            index[key] = len(unique)
            unique.append(sym_out)
    if resume_only and not output.side_effects and not _has_ops(output):
        unimplemented(  # resuming where the frame is: the same code again, forever
            gbt.NOTHING_TO_CAPTURE, "nothing to run before the try block (runs unmodified)"
        )
    # A break whose call runs the backend's optimizer step (optimizer_steps.py) is worth
    # its transformed code even with nothing before it.
    substituted = any(isinstance(v, OptimizerStepCall) for v in stack)
    if (
        not output.input_sources
        and not output.side_effects
        and not _has_ops(output)
        and not substituted
    ):
        unimplemented(
            gbt.NOTHING_TO_CAPTURE,
            "no tensor operation or tensor input before the break (runs unmodified)",
        )
    if entry is not None and _has_ops(output):
        why = try_blocks.rerun_blocker(output.graph)
        if why is not None:
            raise try_blocks.retry_before(
                tx, entry, f"graph break inside a try block: the graph before it {why}"
            )
    compiled = compile_graph(unique)
    if compiled is None and replay_tensors:
        unimplemented(
            gbt.NO_BREAK_HERE, "side effects store tensors, but the graph has no operation"
        )

    gen = CodeGen(code, tx.f_globals, tx.lineno)
    preloaded = preload_sourced_values(gen, [*stack, *local_values.values()], replay)
    graph_out = None
    graph_handler = None
    if compiled is not None:
        graph_out = "__tp_graph_out"
        if entry is not None:  # the graph raised: run the frame again in plain Python
            graph_handler = bc.Label()
            begin = bc.TryBegin(graph_handler, push_lasti=False)
            gen.instrs.append(begin)
        gen.load_global(gen.install_global(compiled, "compiled_fn"), push_null=True)
        for source in output.input_sources:
            source.reconstruct(gen)
        gen.call(len(output.input_sources))
        gen.store_fast(graph_out)
        if entry is not None:
            gen.instrs.append(bc.TryEnd(begin))
    rebuild = Reconstructor(gen, graph_out, index if compiled is not None else {})
    rebuild.temps.update(preloaded)
    if replay is not None:
        gen.load_global(gen.install_global(_ReplayCall(replay), "replay"), push_null=True)
        if graph_out is not None:
            gen.load_fast(graph_out)
        else:
            gen.load_const(())
        for source in output.runtime_sources:
            source.reconstruct(gen)
        gen._emit("BUILD_TUPLE", len(output.runtime_sources))
        gen.call(2)
        gen.store_fast("__tp_memo")
        rebuild.replayed = ("__tp_memo", replay.container_ids)
    handed = loop_iterators(stack, local_values, tx.f_globals)
    if for_iter:
        handed.pop(id(stack[-1]), None)  # FOR_ITER runs on the real iterator
    for v in [*stack, *local_values.values()]:
        if isinstance(v, NullVariable):
            continue
        if id(v) in handed:  # its list or items only: the resume function makes it
            for child in handed[id(v)][1]:
                rebuild.prepare(child)
        else:
            rebuild.prepare(v)
    inst_handler = None
    if entry is not None and not resume_only:  # the instruction raised: into its handler
        inst_handler = bc.Label()
        inst_begin = bc.TryBegin(inst_handler, push_lasti=False)
        gen.instrs.append(inst_begin)

    def push_stack_value(v) -> str:
        """Emit the stack value ``v`` as the resume function receives it; its kind."""
        if isinstance(v, NullVariable):
            gen.push_null()
            return "null"
        if id(v) not in handed:
            rebuild(v)
            return "value"
        kind, parts, *extra = handed[id(v)]
        if kind == "iter":  # a snapshot: its remaining items
            for item in parts:
                rebuild(item)
            gen._emit("BUILD_LIST", len(parts))
        elif kind == "lazy_iter":  # nested tuples of constants and rebuilt variables

            def emit(part) -> None:
                if isinstance(part, VariableTracker):
                    rebuild(part)
                elif isinstance(part, tuple):
                    for p in part:
                        emit(p)
                    gen._emit("BUILD_TUPLE", len(part))
                else:
                    gen.load_const(part)

            emit(extra[0])
        elif kind == "live_iter":  # (real iterator, container, kind, reverse, pos)
            for part in parts:
                rebuild(part)
            for value in extra:
                gen.load_const(value)
            gen._emit("BUILD_TUPLE", len(parts) + len(extra))
        else:  # "list_iter": (lst, index); "enum_list_iter": (lst, index, count)
            rebuild(parts[0])
            for value in extra:
                gen.load_const(value)
            gen._emit("BUILD_TUPLE", 1 + len(extra))
        return kind

    stack_kinds = [push_stack_value(v) for v in stack]
    # the instruction itself
    if resume_only:
        _call_resume(gen, code, rebuild, targets[0], stack_kinds, local_values)
    elif for_iter:
        exhausted = bc.Label()
        gen._emit("FOR_ITER", exhausted)
        if inst_handler is not None:
            gen.instrs.append(bc.TryEnd(inst_begin))
        _call_resume(gen, code, rebuild, targets[0], [*stack_kinds, "value"], local_values)
        gen.instrs.append(exhausted)
        for skipped in FOR_ITER_SKIPS:  # an exhausted FOR_ITER jumps past these (3.12+)
            gen._emit(skipped)
        _call_resume(gen, code, rebuild, targets[1], stack_kinds[:-1], local_values)
    elif jump_kind is not None:
        other = bc.Label()
        name = f"POP_JUMP_{jump_kind}" if PY312 else f"POP_JUMP_FORWARD_{jump_kind}"
        if PY313 and jump_kind in ("IF_TRUE", "IF_FALSE"):
            gen._emit("TO_BOOL")  # 3.13's jump takes an exact bool (a no-op on one)
        gen._emit(name, other)
        if inst_handler is not None:
            gen.instrs.append(bc.TryEnd(inst_begin))
        post_kinds = stack_kinds[:-1]
        _call_resume(gen, code, rebuild, targets[0], post_kinds, local_values)
        gen.instrs.append(other)
        _call_resume(gen, code, rebuild, targets[1], post_kinds, local_values)
    else:
        if inst.opname in ("CALL",) and tx.kw_names:
            gen._emit("KW_NAMES", tuple(tx.kw_names))
        if inst.opname == "CALL":
            gen.call(inst.arg)
        elif inst.opname == "CALL_KW":  # 3.13: the names tuple is on the rebuilt stack
            gen._emit("CALL_KW", inst.arg)
        elif inst.opname == "CALL_FUNCTION_EX":
            gen._emit("CALL_FUNCTION_EX", inst.arg)
        else:
            gen.instrs.append(_native_instr(inst, tx.lineno))
        if inst_handler is not None:
            gen.instrs.append(bc.TryEnd(inst_begin))
        consumed = _popped(inst)
        post_kinds = stack_kinds[: len(stack) - consumed] + ["value"] * (
            n_after - (len(stack) - consumed)
        )
        _call_resume(gen, code, rebuild, targets[0], post_kinds, local_values)
    if graph_handler is not None:
        gen.instrs.append(graph_handler)
        try_blocks.emit_rerun(gen, code)
    if inst_handler is not None:
        gen.instrs.append(inst_handler)
        gen.store_fast("__tp_exc")
        for v in stack[: entry.depth]:
            push_stack_value(v)
        gen.load_fast("__tp_exc")
        kinds = [*stack_kinds[: entry.depth], "value"]
        raise_into = (entry.target, entry.lasti)
        _call_resume(gen, code, rebuild, inst.offset, kinds, local_values, raise_into)
    return _assemble(code, gen)


def _loop_exit(tx, inst) -> int:
    """The offset an exhausted FOR_ITER continues at (past 3.12+'s END_FOR/POP_TOP)."""
    pos = next(i for i, ins in enumerate(tx.instructions) if ins.offset == inst.argval)
    for skipped in FOR_ITER_SKIPS:
        if tx.instructions[pos].opname != skipped:
            break
        pos += 1
    return tx.instructions[pos].offset


def _popped(inst: dis.Instruction) -> int:
    name = inst.opname
    arg = inst.arg or 0
    if name == "CALL":
        return arg + 2
    if name == "CALL_KW":
        return arg + 3
    if name == "CALL_FUNCTION_EX":
        return 3 + (arg & 1)  # NULL, callable, args, (kwargs)
    if name in ("BINARY_OP", "COMPARE_OP", "IS_OP", "CONTAINS_OP", "BINARY_SUBSCR"):
        return 2
    if name in (
        "UNARY_NEGATIVE",
        "UNARY_NOT",
        "UNARY_INVERT",
        "UNARY_POSITIVE",
        "CALL_INTRINSIC_1",
        "BEFORE_WITH",
        "POP_TOP",
        "TO_BOOL",
        "CONVERT_VALUE",
        "FORMAT_SIMPLE",
    ):
        return 1
    if name in ("FORMAT_WITH_SPEC", "CALL_INTRINSIC_2"):
        return 2
    if name in ("STORE_ATTR",):
        return 2
    if name in ("STORE_SUBSCR",):
        return 3
    if name in ("DELETE_SUBSCR",):
        return 2
    if name in ("UNPACK_SEQUENCE", "UNPACK_EX"):
        return 1
    if name in ("BUILD_TUPLE", "BUILD_LIST", "BUILD_STRING", "BUILD_SET"):
        return arg
    if name == "BUILD_MAP":
        return 2 * arg
    if name == "FORMAT_VALUE":
        return 2 if arg & 0x04 else 1
    if name in ("STORE_GLOBAL", "STORE_DEREF"):
        return 1
    if name in ("BINARY_SLICE",):
        return 3
    if name in ("STORE_SLICE",):
        return 4
    if name in ("IMPORT_NAME",):
        return 2
    if name in ("LIST_APPEND", "LIST_EXTEND", "SET_ADD", "DICT_UPDATE", "DICT_MERGE"):
        return 1
    if name == "MAP_ADD":
        return 2
    unimplemented(gbt.NO_BREAK_HERE, f"graph break at {name} is not supported yet")


def _native_instr(inst: dis.Instruction, lineno: int) -> bc.Instr:
    arg = inst.argval if inst.opcode >= dis.HAVE_ARGUMENT else bc.UNSET
    if inst.opname in (
        "BINARY_OP",
        "UNPACK_SEQUENCE",
        "BUILD_TUPLE",
        "BUILD_LIST",
        "BUILD_MAP",
        "BUILD_STRING",
        "BUILD_SET",
        "FORMAT_VALUE",
        "IS_OP",
        "CONTAINS_OP",
        "LIST_APPEND",
        "LIST_EXTEND",
        "SET_ADD",
        "MAP_ADD",
        "DICT_UPDATE",
        "DICT_MERGE",
        "UNPACK_EX",
        "CALL_INTRINSIC_1",
    ):
        arg = inst.arg
    if inst.opname == "COMPARE_OP":
        arg = compare_arg(inst.arg)
    if inst.opname == "CONVERT_VALUE":
        arg = bc.FormatValue(inst.arg)
    if inst.opname in ("CALL_INTRINSIC_1", "CALL_INTRINSIC_2") and PY313:
        arg = (bc.Intrinsic1Op if inst.opname.endswith("1") else bc.Intrinsic2Op)(inst.arg)
    if inst.opname == "STORE_ATTR":
        arg = inst.argval
    if inst.opname in ("STORE_DEREF",):
        arg = bc.CellVar(inst.argval)
    return bc.Instr(inst.opname, arg, lineno=lineno)


def _call_resume(
    gen: CodeGen,
    code,
    rebuild: Reconstructor,
    target: int,
    kinds: list[str],
    local_values: dict,
    raise_into: tuple[int, bool] | None = None,
) -> None:
    names = tuple(local_values)
    first_arg = user_first_argument(code)
    lead = bool(names) and first_arg is not None and names[0] == first_arg
    spec = ResumeSpec(target, tuple(kinds), names, lead, raise_into)
    rcode = resume_code(code, spec)
    temps = [f"__tp_s{k}" for k in range(len(kinds))]
    for name in reversed(temps):
        gen.store_fast(name)
    push_function(gen, rcode)
    nargs = 0
    values = list(local_values.values())
    if lead:
        rebuild(values.pop(0))
        nargs += 1
    for name, kind in zip(temps, kinds):
        if kind == "null":
            continue
        if kind == "live_iter":  # the container and position, or the real iterator
            gen.load_global(gen.install_global(hand_iterator, "hand_iterator"), push_null=True)
            gen.load_fast(name)
            gen.call(1)
        else:
            gen.load_fast(name)
        nargs += 1
    for v in values:
        rebuild(v)
        nargs += 1
    gen.call(nargs)
    gen._emit("RETURN_VALUE")


def _has_ops(output) -> bool:
    return any(n.op in ("call_function", "call_method", "call_module") for n in output.graph.nodes)


def _assemble(code: types.CodeType, gen: CodeGen) -> types.CodeType:
    try:
        return assemble(code, gen)
    except Exception as e:  # a bytecode-assembly failure is a capture failure, not the user's
        raise Unsupported(
            f"cannot assemble graph-break code: {e}", gb_type=gbt.INTERNAL_ERROR
        ) from e
