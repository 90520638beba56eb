"""The bytecode layer's per-version facts: what differs between the CPython versions capture
supports, in one place (the frame layer's counterpart is csrc/capture/frame_compat.h).

Supported: CPython 3.11, 3.12 and 3.13 (``SUPPORTED_VERSIONS`` in torch_plugin/python_versions.py,
which refuses any other at import). A new version is added
here (its flag, the stack layout of calls, how COMPARE_OP and MAKE_FUNCTION are encoded) and in
frame_compat.h; opcodes it introduces get handlers named after them in the translator's
mixins, and graph_break.py / resume_execution.py list how a break at them is replayed.

Differences handled (from CPython's Python/bytecodes.c and the ``dis`` documentation):

- **The NULL of a call.** 3.11/3.12 lay a call out as ``NULL, callable, args`` (or ``method,
  self, args``); 3.13 as ``callable, NULL, args`` (or ``method, self, args``): LOAD_GLOBAL,
  LOAD_ATTR and LOAD_SUPER_ATTR with their low bit set push the NULL *after* the value, the
  compiler emits PUSH_NULL after the callable, and CALL_FUNCTION_EX expects it there
  (:data:`NULL_AFTER_CALLABLE`, :func:`callable_and_self`).
- **Keyword names.** 3.12 sets them with KW_NAMES before CALL; 3.13 pushes a tuple and calls
  CALL_KW.
- **COMPARE_OP's argument.** 3.11: the comparison; 3.12: ``op << 4`` (plus a mask); 3.13:
  ``op << 5``, with bit 16 meaning "convert the result to bool" (:func:`compare_arg`).
- **Conditional jumps.** 3.13's POP_JUMP_IF_TRUE/FALSE take an exact bool: the compiler
  emits TO_BOOL before them (the translator's TO_BOOL decides a value's truth, so a tensor
  breaks the graph there).
- **Loops.** FOR_ITER's exhaustion pops the iterator and jumps past END_FOR (3.12) or past
  END_FOR and the POP_TOP after it (3.13), where END_FOR pops one value, not two
  (:data:`FOR_ITER_SKIPS`).
- **Functions.** 3.13's MAKE_FUNCTION takes only the code object; SET_FUNCTION_ATTRIBUTE sets
  each of closure, annotations, keyword defaults and defaults.
- **f-strings.** 3.13 splits FORMAT_VALUE into CONVERT_VALUE, FORMAT_SIMPLE and
  FORMAT_WITH_SPEC.
- **Superinstructions.** 3.13's LOAD_FAST_LOAD_FAST, STORE_FAST_LOAD_FAST and
  STORE_FAST_STORE_FAST carry two local names (``argval`` is a pair); :func:`local_accesses`
  gives the reads and writes of any instruction in order, for the live-locals analysis.
"""

from __future__ import annotations

import dis
import sys

import bytecode as bc

__all__ = [
    "FOR_ITER_SKIPS",
    "NULL_AFTER_CALLABLE",
    "PY312",
    "PY313",
    "callable_and_self",
    "compare_arg",
    "local_accesses",
]

PY312 = sys.version_info >= (3, 12)
PY313 = sys.version_info >= (3, 13)
NULL_AFTER_CALLABLE = PY313
# Instructions after FOR_ITER's jump target that its exhaustion skips.
FOR_ITER_SKIPS = ("END_FOR", "POP_TOP") if PY313 else ("END_FOR",) if PY312 else ()

_LOCAL_READS = {"LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR", "LOAD_DEREF"}
_LOCAL_READS |= {"LOAD_CLOSURE", "DELETE_FAST"}
_LOCAL_WRITES = {"STORE_FAST", "STORE_DEREF"}


def callable_and_self(lower, upper, is_null) -> tuple:
    """The two stack slots below a call's arguments (``lower`` deeper) as ``(callable,
    self_or_None)``: ``NULL, f`` (3.11/3.12), ``f, NULL`` (3.13) or ``method, self``."""
    if is_null(lower):
        return upper, None
    if is_null(upper):
        return lower, None
    return lower, upper


def compare_arg(arg: int) -> bc.Compare:
    """COMPARE_OP's raw ``arg`` as the ``bytecode`` package's argument for this version."""
    if PY313:
        return bc.Compare((arg >> 5) + (16 if arg & 16 else 0))
    if PY312:
        return bc.Compare(arg >> 4)
    return bc.Compare(arg)


def local_accesses(inst: dis.Instruction) -> list[tuple[str, str]]:
    """The locals (and cells) ``inst`` reads and writes, in execution order, as
    ``("read" | "write", name)`` pairs; superinstructions give two."""
    name = inst.opname
    if name == "LOAD_FAST_LOAD_FAST":
        return [("read", inst.argval[0]), ("read", inst.argval[1])]
    if name == "STORE_FAST_LOAD_FAST":
        return [("write", inst.argval[0]), ("read", inst.argval[1])]
    if name == "STORE_FAST_STORE_FAST":
        return [("write", inst.argval[0]), ("write", inst.argval[1])]
    if not isinstance(inst.argval, str):
        return []
    if name in _LOCAL_READS:
        return [("read", inst.argval)]
    if name in _LOCAL_WRITES:
        return [("write", inst.argval)]
    return []
