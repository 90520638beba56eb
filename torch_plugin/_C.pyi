"""Type stubs for the C++ extension ``torch_plugin._C`` (built from csrc/).

This file is the contract between the C++ capture layer (csrc/capture) and the Python
translator (torch_plugin/capture). Keep it in sync with csrc/python/module.cpp.

Eval-frame hook
---------------
While a thread's callback is set, a PEP 523 frame-evaluation function sees every Python
frame that thread starts. For each frame it:

1. runs it unmodified (default evaluator) if the thread's callback is None, if ``throwflag``
   is set, if the code object is a generator/coroutine/async generator, if the code object
   is marked skipped, or while the hook is already busy on this thread (translator or
   backend running, or inside a :func:`disable_wrapper` call);
2. otherwise walks the code object's cache entries (stored in ``co_extra``), most recently
   used first, and takes the first entry made by the *same callback object* whose guard
   tree passes on the frame's arguments, globals and closure;
3. on a miss calls ``callback(frame)`` with the hook disabled on this thread. ``frame`` is a
   :class:`FrameInfo`. The callback returns ``None`` (mark the code object skipped; run
   the frame unmodified), :data:`RUN_ONLY` (keep the code object's entries but never call
   the callback for it again: a miss runs the frame unmodified; used past
   ``config.cache_size_limit``), :data:`RUN_UNCAPTURED` (skip the code object, and run
   every frame its frames start with the thread's callback suspended: the entry points of
   torch.compile's regions) or ``(code, guard)`` (a new entry, put first, then run). If
   the callback raises, the exception propagates to the frame's caller and the frame is not
   run. One thread at a time runs a callback: a thread that misses while another compiles
   waits (GIL released), then looks the cache up again before calling its own.
   When the thread's callback is :data:`RUN_ONLY`, step 2 takes entries made by any
   callback and a miss runs the frame unmodified without calling Python.
4. runs an entry's transformed code: a function object is made from the transformed code
   with the frame's globals, closure, name and qualname, and called with the frame's
   argument slots ``localsplus[0:nargs]`` as positional arguments, where ``nargs`` counts
   positional, keyword-only, ``*args`` and ``**kwargs`` slots. The transformed code therefore
   takes exactly ``nargs`` positional parameters (no keyword-only, no varargs flags), with the
   same names and cell/free variable layout as the original. The original frame is cleaned up
   on every path; the transformed call's result or exception is returned to the caller.
"""

from collections.abc import Callable, Sequence
from types import CodeType, FunctionType
from typing import Any

class FrameInfo:
    """What the callback sees of a frame about to run (a snapshot; holds references)."""

    f_code: CodeType
    f_globals: dict[str, Any]
    f_builtins: dict[str, Any]
    f_func: FunctionType
    closure: tuple | None  # f_func.__closure__ (cells), or None
    f_locals: dict[str, Any]  # argument names -> values, then free-variable names -> cell contents
    arg_values: list[Any]  # localsplus[0:nargs], in slot order

def set_eval_frame_callback(callback: Callable[[FrameInfo], Any] | None) -> Callable | None:
    """Set this thread's callback (None turns capture off for this thread); return the
    previous one. The PEP 523 function is installed while at least one thread has a
    callback set and removed when none has."""

def get_eval_frame_callback() -> Callable | None: ...

RUN_ONLY: Callable[..., None]
"""Sentinel callback (a builtin returning None): as a thread's callback, run cached entries
made by any callback and never compile; returned by a callback, that code object keeps its
entries and never compiles again."""

RUN_UNCAPTURED: Callable[..., None]
"""Marker (a builtin returning None) a callback returns for a frame whose code object, and
every frame it starts, must run unmodified: the code is marked skipped and uncaptured, and
while its frames run the thread's callback is suspended (set to None without uninstalling
the hook; a callback set inside is the thread's until it is restored)."""

def is_hook_installed() -> bool: ...
def disable_wrapper(fn: Callable) -> Callable:
    """Return a callable that calls ``fn`` with this thread's hook inactive (frames started
    inside run unmodified), then restores the previous state, also when ``fn`` raises."""

def code_nargs(code: CodeType) -> int:
    """Argument slots of ``code``: positional (incl. positional-only), keyword-only, *args, **kwargs."""

def skip_code(code: CodeType) -> None:
    """Mark a code object so the hook always runs it unmodified."""

def reset_code(code: CodeType) -> None:
    """Drop a code object's cache entries and its skip, run-only and uncaptured marks."""

def cache_entries(code: CodeType) -> list[tuple[CodeType, RootGuardManager]]:
    """The (transformed code, guard) entries of a code object, most recently used first."""

def is_code_skipped(code: CodeType) -> bool: ...
def is_code_run_only(code: CodeType) -> bool:
    """Whether the callback returned RUN_ONLY for this code object."""

def is_code_uncaptured(code: CodeType) -> bool:
    """Whether the callback returned RUN_UNCAPTURED for this code object."""

class GuardManager:
    """A node of a guard tree: the value reached by a chain of accessors from the frame
    (its *source*, e.g. ``L['self'].layer1[0].weight``), the leaf checks on that value, and
    child accessors. Checks run in the order added; children after leaves."""

    source: str  # the source this node stands for, e.g. "L['x'].weight"

    def leaf_order(self) -> list[str]:
        """This node's leaf descriptions in evaluation order (most-failed first)."""
    def child_order(self) -> list[str]:
        """This node's children's sources in evaluation order (most-failed first)."""

    def attr(self, name: str) -> GuardManager:
        """Child for ``getattr(value, name)`` (created once; the same node is returned again)."""
    def item(self, key: Any) -> GuardManager:
        """Child for ``value[key]`` (tuple/list index or dict key; created once)."""
    def add_type_match(self, type: type, description: str) -> None: ...
    def add_id_match(self, obj: Any, description: str) -> None:
        """Passes when the value *is* obj. An obj that supports weak references is not kept
        alive: the root watches it, and when it dies every check fails and the hook drops
        the entry (``RootGuardManager.invalidated``). Other objects are held strongly."""
    def add_equals_match(self, value: Any, description: str) -> None:
        """Passes when ``type(v) is type(value) and v == value``."""
    def add_len_match(self, n: int, description: str) -> None: ...
    def add_dict_keys_match(self, keys: Sequence[Any], description: str) -> None:
        """Passes when the value is a dict whose keys equal ``keys`` in order."""
    def add_not_in_dict(self, key: Any, description: str) -> None:
        """Passes when the value is a dict without ``key``."""
    def add_tensor_match(self, example: Any, description: str, check_strides: bool = True) -> None:
        """Passes when the value is a torch.Tensor with the example's Python type, dispatch
        key set, dtype, device, requires_grad, sizes and (if check_strides) strides."""

class RootGuardManager(GuardManager):
    """Root of a guard tree. Children are the frame's argument slots, globals and closure cells."""

    def __init__(self) -> None: ...
    def local(self, slot: int, name: str) -> GuardManager:
        """Child for argument slot ``slot`` (``localsplus[slot]``, slot < nargs)."""
    def global_(self, name: str) -> GuardManager:
        """Child for global ``name`` (frame globals, then builtins)."""
    def object_(self, obj: Any, name: str) -> GuardManager:
        """Child for a fixed object (strong reference), e.g. an inlined function's module globals."""
    def closure(self, index: int, name: str) -> GuardManager:
        """Child for the contents of ``f_func.__closure__[index]``."""
    def add_global_state_match(self) -> None:
        """Record the current global state and pass only while it is the same: grad mode,
        autocast enabled/dtype (cpu, cuda), default dtype, deterministic algorithms (and
        warn-only), torch.backends.cudnn enabled/benchmark/deterministic/allow_tf32,
        torch.backends.cuda.matmul allow_tf32/fp16 and bf16 reduced-precision reduction/
        allow_fp16_accumulation, and the float32 matmul precision."""
    def last_failure(self) -> str | None:
        """Description of the check that failed in the last failed evaluation by the hook or
        :meth:`check` (None after a pass)."""
    def failures(self) -> int:
        """How many evaluations failed."""
    def check(
        self, arg_values: Sequence[Any], f_globals: dict, f_builtins: dict, closure: tuple | None
    ) -> bool:
        """Evaluate the tree (the same code the hook runs). A check that raises fails."""
    def failure_reason(
        self, arg_values: Sequence[Any], f_globals: dict, f_builtins: dict, closure: tuple | None
    ) -> str | None:
        """The first failing check in source terms and the value found, e.g.
        ``"L['x'].size()[0] == 8 failed: got 16 (expected size [8], got [16])"``, or None."""
    def num_checks(self) -> int: ...
    @property
    def invalidated(self) -> bool:
        """Whether an object an ID_MATCH of this tree compares (weakly) died; every check
        then fails and the hook has dropped the entry."""

# Submodule ``_cuda`` (csrc/python/bindings_cuda.cpp; present only when the extension
# was built with its CUDA parts, i.e. ``hasattr(torch_plugin._C, "_cuda")``):
#   nvrtc_compile_check(source: str, arch: str) -> str
#       PTX of CUDA C++ ``source`` compiled by NVRTC for ``arch`` ("sm_90"/"compute_90");
#       RuntimeError with NVRTC's log and the failing source lines. Needs no GPU.
#   nvrtc_version() -> tuple[int, int]
#   launch(source: str, entry: str, grid: int, block: int, shared_bytes: int,
#          tensors: list[torch.Tensor]) -> None
#       compile (or find cached) and launch ``entry`` 1-d on the tensors' device and
#       current stream, one pointer parameter per tensor.
#   cache_stats() -> dict[str, int]   (compiled, disk_hits, memory_hits, disk_rejected)
#   cache_dir() -> str                (<kernel cache dir>/cuda)

# Submodule ``_runtime`` (csrc/python/bindings_runtime.cpp): the C++ runtime's options
# (csrc/runtime/options.h); the C++ side reads no environment variable.
#   configure(options: dict[str, str]) -> None
#       keys: "cache_dir", "cxx", "onednn_library", "onednn_weights", "cublaslt_tuning",
#       "cublaslt_candidates", "cudnn_threads" ("" = the default; a key left out keeps its value; another key
#       is a ValueError). Called at import (torch_plugin/__init__.py) and when a graph is
#       compiled (torch_plugin/compiler/__init__.py, configure_runtime).
#   options() -> dict[str, str]   the options now in effect
# ``_compiler.has_onednn`` / ``_compiler.onednn_error`` are computed on first access (the
# oneDNN library's path is a runtime option).
