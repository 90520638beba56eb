"""The eval-frame callback: decide, translate, compile, and hand back guarded code.

Key class: :class:`ConvertFrame`, one per (backend, nopython) pair, called by the C++
hook with a ``torch_plugin._C.FrameInfo`` for each frame without a matching cache entry.
It returns None (run the frame unmodified from now on) or ``(transformed_code, guard)``.
:data:`stats` counts what happened, for tests, benchmarks and the demo.

Capture meets the compilers only through :mod:`torch_plugin.contract`: a ConvertFrame holds
a compiler function (names and modes were resolved by the public API), and each captured
graph goes through :meth:`ConvertFrame._compile_graph` and ``contract.call_backend``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
import warnings
from typing import Any

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

from .. import config, trace
from ..contract import DDP_SPLIT, OPTIMIZER_STEP, BackendCompilerFailed, CompilerFn, call_backend
from ..decompiler import resume_codes
from . import (
    conditional_execution,
    dynamic_shapes,
    shared_modules,
    shutdown,
    torch_compile_interop,
)
from . import graph_break_types as gbt
from .bytecode_emission import (
    collect_installed_globals,
    make_transformed_code,
    release_with,
    uninstall_globals,
)
from .capture_record import (  # noqa: F401 (re-exported: convert_frame.stats, .listeners)
    CaptureRecord,
    CaptureStats,
    _listening,
    _notify,
    _snapshot,
    keep_guard_sets,
    listeners,
    stats,
)
from .code_marks import seen_code_objects
from .exc import Unsupported
from .graph_break import compile_graph_break
from .guards import build_guard_tree
from .optimizer_steps import substitute_step
from .output_graph import OutputGraph
from .output_structure import flatten_output, rebuild, spec_has
from .shape_guards import ShapeGuardUnsupported
from .skipfiles import skip_reason
from .symbolic_convert import InstructionTranslator

log = logging.getLogger("torch_plugin.capture")
# Log channels that torch_plugin.logs switches on (TORCH_PLUGIN_LOGS=graph_breaks,recompiles).
graph_breaks_log = logging.getLogger("torch_plugin.graph_breaks")
recompiles_log = logging.getLogger("torch_plugin.recompiles")


def _has_operations(output: OutputGraph) -> bool:
    return any(n.op in ("call_function", "call_method", "call_module") for n in output.graph.nodes)


@dataclasses.dataclass
class _CompiledGraph:
    """What :meth:`ConvertFrame._compile_graph` made of one captured graph."""

    gm: torch.fx.GraphModule
    compiled: Any
    snapshot: torch.fx.GraphModule | None  # for the CaptureRecord, when anyone listens
    translate_time_s: float
    compile_start: float  # time.perf_counter() when the backend started
    ddp_split: Any


_warned_cache_limit: set = set()


class CaptureError(RuntimeError):
    """Raised under ``fullgraph=True`` (``nopython=True``) when a frame cannot be captured as
    one graph."""


class RecompileError(RuntimeError):
    """Raised under ``config.error_on_recompile`` when a frame would be compiled again; the
    message names the code and the guard that failed."""


class InternalCaptureError(RuntimeError):
    """A bug of the translator, raised only under ``config.debug_raise_internal_errors``
    (otherwise the frame runs unmodified and a warning is logged); the original exception
    is its ``__cause__``."""


class _capture_isolation:
    """Capture and compile change no real state, and no hook sees their FakeTensors.

    Saved-tensor hooks active at the call (``torch.utils.checkpoint``, user
    ``saved_tensors_hooks``) are deferred while tracing, as under torch.compile: the
    translator's and AOTAutograd's fake operations must not reach them; the compiled code
    saves its real tensors through them at run time. The global state the guards read (grad
    mode, autocast, default dtype) is put back as it was at frame entry, whatever the
    translator or backend did to it (the translator models context managers by switching
    the state while tracing; ``OutputGraph.restore_global_state`` undoes that first)."""

    def __enter__(self):
        self.grad = torch.is_grad_enabled()
        self.autocast = [
            (d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")
        ]
        self.autocast_cache = torch.is_autocast_cache_enabled()
        # Autocast caches the low-precision copy of each parameter it casts, keyed by the
        # real parameter, until the outermost autocast region exits: a cast traced on a
        # FakeTensor would be cached there and handed to the program's own eager code in
        # the same region (a ViT under bf16 autocast computed FakeTensors after its first
        # compiled call). No tracing reads or fills that cache.
        torch.set_autocast_cache_enabled(False)
        self.default_dtype = torch.get_default_dtype()
        self.hooks_tracing = torch._C._autograd._saved_tensors_hooks_set_tracing(True)
        return self

    def __exit__(self, *exc):
        torch._C._autograd._saved_tensors_hooks_set_tracing(self.hooks_tracing)
        torch._C._set_grad_enabled(self.grad)
        for device, enabled, dtype in self.autocast:
            if torch.is_autocast_enabled(device) != enabled:
                torch.set_autocast_enabled(device, enabled)
            if torch.get_autocast_dtype(device) != dtype:
                torch.set_autocast_dtype(device, dtype)
        torch.set_autocast_cache_enabled(self.autocast_cache)
        if torch.get_default_dtype() != self.default_dtype:
            torch.set_default_dtype(self.default_dtype)
        return False


def _break_traceback_wanted() -> bool:
    """Whether a graph break's log line carries the translator's traceback of where capture
    stopped: with ``config.verbose``, or with the ``graph_breaks`` channel at DEBUG
    (``TORCH_PLUGIN_LOGS=+graph_breaks``)."""
    return config.verbose or graph_breaks_log.isEnabledFor(logging.DEBUG)


class ConvertFrame:
    """The callback installed by ``optimize(backend)``.

    Args:
        backend: the compiler function (``contract.CompilerFn``) of the backend in its mode.
        backend_name: its name, for messages.
        nopython: a frame that cannot be captured as one graph raises :class:`CaptureError`.
        dynamic: the dynamic-shapes policy (``optimize(dynamic=...)``).
        adapt_compiler: ``adapt_compiler(frame, backend) -> compiler``, called once per frame
            converted; the compiler it returns compiles that frame's graphs. The layers above
            capture adapt the backend to what runs the frame this way
            (``torch_plugin.distributed``: FSDP2, DDP); None: ``backend`` itself.
    """

    def __init__(
        self,
        backend: CompilerFn,
        backend_name: str,
        nopython: bool = False,
        dynamic: bool | None = None,
        adapt_compiler=None,
    ) -> None:
        self.backend = backend
        self.backend_name = backend_name
        self.nopython = nopython
        self.dynamic = dynamic
        self.adapt_compiler = adapt_compiler

    def __call__(self, frame):
        from torch_plugin import _C

        code = frame.f_code
        action = torch_compile_interop.frame_action(frame.f_func, code)
        if action is not None:
            seen_code_objects.add(code)
            log.debug("%s: %s frame of %s", action, "torch.compile", code.co_qualname)
            return _C.RUN_UNCAPTURED if action == torch_compile_interop.REGION else None
        reason = skip_reason(code)
        if (
            reason is None
            and code.co_filename.startswith("<")
            and str(frame.f_globals.get("__name__", "")).startswith(("torch.", "torch_plugin."))
        ):
            reason = "PyTorch internals (generated code, e.g. dataclass __init__)"
        if reason is not None:
            log.debug("skipping %s (%s): %s", code.co_qualname, code.co_filename, reason)
            seen_code_objects.add(code)
            return None
        seen_code_objects.add(code)
        entries = _C.cache_entries(code)
        if entries:
            if len(entries) >= config.cache_size_limit:
                if code not in _warned_cache_limit:
                    _warned_cache_limit.add(code)
                    warnings.warn(
                        f"torch_plugin: {code.co_qualname} ({code.co_filename}:{code.co_firstlineno}) reached "
                        f"config.cache_size_limit={config.cache_size_limit} compiled entries; from now on "
                        "a call that matches none of them runs without compiling. Last guard failure: "
                        f"{entries[0][1].failure_reason(frame.arg_values, frame.f_globals, frame.f_builtins, frame.closure)}",
                        stacklevel=2,
                    )
                return _C.RUN_ONLY  # keep using the entries; never compile this code again
            stats.recompiles += 1
            failed = entries[0][1].failure_reason(
                frame.arg_values, frame.f_globals, frame.f_builtins, frame.closure
            )
            trace.emit(
                "recompile",
                name=code.co_qualname,
                file=code.co_filename,
                line=code.co_firstlineno,
                failed_guard=failed,
                entries=len(entries),
            )
            recompiles_log.info(
                "recompiling %s: %s (%d compiled entries, config.cache_size_limit=%d)",
                code.co_qualname,
                failed,
                len(entries),
                config.cache_size_limit,
            )
            if len(entries) > 1 and recompiles_log.isEnabledFor(logging.DEBUG):
                # +recompiles (TORCH_LOGS=recompiles_verbose): every entry's failed guard
                for i, (_, guard) in enumerate(entries[1:], 2):
                    recompiles_log.debug(
                        "  entry %d of %s: %s",
                        i,
                        code.co_qualname,
                        guard.failure_reason(
                            frame.arg_values, frame.f_globals, frame.f_builtins, frame.closure
                        ),
                    )
            if config.error_on_recompile:
                raise RecompileError(
                    f"torch_plugin: recompiling {code.co_qualname} ({code.co_filename}:"
                    f"{code.co_firstlineno}): {failed} (config.error_on_recompile is set)"
                )
        with trace.frame(code):
            return self._convert_or_break(frame, code)

    def _convert_or_break(self, frame, code):
        """Convert ``frame``; where capture stops, break the graph there (or leave the frame
        unmodified: None)."""
        from torch_plugin import _C

        try:
            with shutdown.converting():  # an exit meanwhile waits for it (shutdown.py)
                return self._convert(frame)
        except (BackendCompilerFailed, CaptureError, InternalCaptureError):
            raise
        except Unsupported as e:
            if self.nopython and e.gb_type is gbt.NOTHING_TO_CAPTURE:
                # A frame with no tensor operation runs as plain Python, as under
                # torch.compile(fullgraph=True) (issue #31). Its callees were traced as
                # part of it (no graph either): they run uncaptured, not as frames of their
                # own that nopython would refuse (a namedtuple's generated __new__).
                stats.frames_failed += 1
                stats.failures.append(
                    (code.co_qualname, e.reason, str(e.location) if e.location else None)
                )
                return _C.RUN_UNCAPTURED
            if self.nopython:
                stats.frames_failed += 1
                stats.failures.append(
                    (code.co_qualname, e.reason, str(e.location) if e.location else None)
                )
                raise CaptureError(
                    f"torch_plugin cannot capture {code.co_qualname} as one graph: {e}"
                ) from None
            first = e
        if first.root_index is not None and config.graph_breaks:
            # A graph break inside a ``with`` block is not possible: break at its ``with``
            # statement instead (the block then runs in the resume function).
            break_at = first.root_index if first.with_index is None else first.with_index
            result = None
            while result is None:
                try:
                    result = self._convert(frame, break_at=break_at, break_reason=first)
                except Unsupported as e:
                    retry = getattr(e, "retry_index", None)  # try_blocks.retry_before
                    if retry is not None and retry < break_at:
                        break_at, first.resume_only = retry, True
                        continue
                    graph_breaks_log.info(
                        "no graph break possible in %s: %s", code.co_qualname, e.reason
                    )
                    break
            if result is not None:
                stats.graph_breaks.append(
                    (
                        code.co_qualname,
                        first.reason,
                        str(first.location) if first.location else None,
                    )
                )
                graph_breaks_log.info(
                    "graph break in %s: %s",
                    code.co_qualname,
                    first.describe(),
                    exc_info=first if _break_traceback_wanted() else None,
                )
                trace.set_result("graph break")
                trace.capture_stopped("graph_break", first)
                return result
        stats.frames_failed += 1
        stats.failures.append(
            (code.co_qualname, first.reason, str(first.location) if first.location else None)
        )
        graph_breaks_log.info(
            "not capturing %s: %s",
            code.co_qualname,
            first.describe(),
            exc_info=first if _break_traceback_wanted() else None,
        )
        trace.set_result("not captured")
        trace.capture_stopped("not_captured", first)
        return None

    def _convert(self, frame, break_at: int | None = None, break_reason: Unsupported | None = None):
        with _capture_isolation():
            return self._convert_isolated(frame, break_at, break_reason)

    def _convert_isolated(self, frame, break_at, break_reason):
        try:
            try:
                return self._convert_releasing_globals(frame, break_at, break_reason)
            except ShapeGuardUnsupported as e:
                log.info(
                    "dynamic shapes: %s needs a shape guard the guard tree cannot evaluate "
                    "(%s); capturing it with static shapes",
                    frame.f_code.co_qualname,
                    e,
                )
                dynamic_shapes.force_static(frame.f_code)
                return self._convert_releasing_globals(frame, break_at, break_reason)
        except (
            Unsupported,
            BackendCompilerFailed,
            CaptureError,
            InternalCaptureError,
            ConstraintViolationError,  # torch._dynamo.mark_dynamic's range: the user's error
        ):
            raise
        except Exception as e:  # a translator bug must not break the user's program
            if config.debug_raise_internal_errors:
                raise InternalCaptureError(
                    f"internal error while capturing {frame.f_code.co_qualname} "
                    f"({frame.f_code.co_filename}:{frame.f_code.co_firstlineno}): "
                    f"{type(e).__name__}: {e}"
                ) from e
            log.warning(
                "torch_plugin: internal error while capturing %s; it runs unmodified",
                frame.f_code.co_qualname,
                exc_info=True,
            )
            raise Unsupported(
                f"internal error in the translator: {type(e).__name__}: {e}",
                gb_type=gbt.INTERNAL_ERROR,
            ) from e

    def _convert_releasing_globals(self, frame, break_at, break_reason):
        """``_convert_impl``; the globals its code installs (compiled graphs, resume
        functions) are removed when the transformed code dies, or at once on failure."""
        with collect_installed_globals() as installed:
            try:
                transformed, guard = self._convert_impl(frame, break_at, break_reason)
            except BaseException:
                uninstall_globals(installed)
                raise
        release_with(transformed, installed)
        return transformed, guard

    def _convert_impl(self, frame, break_at, break_reason):
        from torch_plugin import _C

        code = frame.f_code
        t0 = time.perf_counter()
        output = OutputGraph(code.co_name, dynamic_shapes.DimPolicy(code, self.dynamic))
        compiler = (
            self.backend
            if self.adapt_compiler is None
            else self.adapt_compiler(frame, self.backend)
        )
        output.share_modules = shared_modules.decide(frame, bool(_C.cache_entries(code)))
        try:
            tx = InstructionTranslator(frame, output, stop_at=break_at)
            result = tx.run()
            output.check_requires_grad_assignments()
            if result is None:  # stopped before instruction break_at: a graph break
                output.check_global_state()
                step_fn = getattr(compiler, OPTIMIZER_STEP, None)
                if step_fn is not None and getattr(break_reason, "gb_type", None) is (
                    gbt.OPTIMIZER_STEP
                ):
                    substitute_step(tx, break_at, step_fn)
                partial: dict = {}
                transformed = compile_graph_break(
                    tx,
                    output,
                    break_at,
                    lambda tensors: self._compile_partial(
                        output, code, compiler, tensors, t0, partial
                    ),
                    resume_only=getattr(break_reason, "resume_only", False),
                )
                stats.frames_captured += 1
                output.add_distinct_guards()
                dynamic_shapes.check_ranges(
                    output.shape_env, output.ranged_dims, code, output.shape_guard_locations
                )
                guard = build_guard_tree(output.guards, output.shape_env, output.shape_bindings)
                if _listening():
                    _notify(
                        CaptureRecord(
                            code,
                            transformed,
                            partial.get("graph"),
                            output.guards.describe(),
                            (
                                break_reason.reason,
                                str(break_reason.location) if break_reason.location else None,
                            ),
                            partial.get("translate_time_s", time.perf_counter() - t0),
                            partial.get("compile_time_s", 0.0),
                            graph_break_location=break_reason.location,
                            ddp_split=partial.get("ddp_split"),
                            resume_codes=tuple(
                                c for _, c in resume_codes(transformed, frame.f_globals)
                            ),
                        )
                    )
                return transformed, guard
            output.check_global_state()
            tensors: list = []
            spec = flatten_output(result, tensors, output)
            replay = output.side_effects.make_replay(output, tensors)
            output.add_distinct_guards()
        finally:
            output.restore_global_state()
        if not _has_operations(output):
            raise Unsupported("no tensor operations to capture", gb_type=gbt.NOTHING_TO_CAPTURE)
        if not output.has_dynamic_shapes():
            guard = build_guard_tree(output.guards)  # fails early, before the backend runs
        graph = self._compile_graph(output, code, compiler, tensors, t0, part=False)
        t1 = graph.compile_start
        if output.has_dynamic_shapes():
            # After the backend: its decisions about symbolic sizes are guards too.
            dynamic_shapes.check_ranges(
                output.shape_env, output.ranged_dims, code, output.shape_guard_locations
            )
            guard = build_guard_tree(output.guards, output.shape_env, output.shape_bindings)

        n_inputs = len(output.input_sources)
        compiled = graph.compiled
        if replay is None and not output.runtime_sources:

            def run_graph(*inputs):
                return rebuild(spec, compiled(*inputs))

        else:

            def run_graph(*inputs):
                outs = compiled(*inputs[:n_inputs])
                args = inputs[n_inputs:]
                memo: dict = {}
                if replay is not None:
                    replay(outs, args, memo)
                return rebuild(spec, outs, memo, args)

        runner = _C.disable_wrapper(run_graph)
        transformed = make_transformed_code(
            code, frame.f_globals, runner, output.input_sources + output.runtime_sources
        )
        stats.frames_captured += 1
        stats.graphs_compiled += 1
        if _listening():
            _notify(
                CaptureRecord(
                    code,
                    transformed,
                    graph.snapshot,
                    output.guards.describe(),
                    None,
                    t1 - t0,
                    time.perf_counter() - t1,
                    spec,
                    replay is not None or bool(output.runtime_sources),
                    visible_side_effects=tuple(output.side_effects.caller_visible()),
                    returns_runtime_args=spec_has(spec, "arg"),
                    ddp_split=graph.ddp_split,
                    guard_set=output.guards if keep_guard_sets.depth else None,
                    shape_env=output.shape_env if keep_guard_sets.depth else None,
                    shape_bindings=tuple(output.shape_bindings) if keep_guard_sets.depth else (),
                    input_sources=tuple(output.input_sources),
                )
            )
        return transformed, guard

    def _compile_graph(
        self, output: OutputGraph, code, compiler: CompilerFn, tensors: list, t0: float, part: bool
    ) -> _CompiledGraph:
        """The one compile step of capture: end ``output``'s FX graph with ``tensors`` as its
        outputs, make the GraphModule and compile it with ``compiler`` through
        :func:`torch_plugin.contract.call_backend`. ``part``: the graph before a graph
        break. Adds the translate and backend times to :data:`stats`."""
        output.graph.output(tuple(t.node for t in tensors))
        gm = torch.fx.GraphModule(output.root, output.graph, class_name=f"Captured_{code.co_name}")
        t1 = time.perf_counter()
        stats.translate_time_s += t1 - t0
        trace.stage_time("capture", t1 - t0)
        snapshot = _snapshot(gm) if _listening() else None
        graph_name = f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})"
        if part:
            graph_name += ", part before a graph break"
        if self.backend_name != "eager" and conditional_execution.has_conditionals(gm):
            # eager ifs between compiled pieces (conditional_execution.py)
            compiler = functools.partial(conditional_execution.compile_with_conditionals, compiler)
        with output.backend_context(), trace.stage("backend", backend=self.backend_name):
            compiled = call_backend(
                compiler,
                gm,
                list(output.example_inputs),
                backend_name=self.backend_name,
                graph_name=graph_name,
            )
        stats.backend_compile_time_s += time.perf_counter() - t1
        log.debug(
            "captured %s%s:\n%s",
            code.co_qualname,
            " (before a graph break)" if part else "",
            gm.code,
        )
        return _CompiledGraph(gm, compiled, snapshot, t1 - t0, t1, gm.meta.get(DDP_SPLIT))

    def _compile_partial(self, output, code, compiler, tensors, t0: float, info: dict):
        """Compile the graph captured before a break, returning ``tensors`` as a tuple;
        None when the graph has no operation (nothing to run)."""
        from torch_plugin import _C

        if not _has_operations(output):
            return None
        graph = self._compile_graph(output, code, compiler, tensors, t0, part=True)
        info["translate_time_s"] = graph.translate_time_s
        if graph.snapshot is not None:
            info["graph"] = graph.snapshot
        if graph.ddp_split is not None:
            info["ddp_split"] = graph.ddp_split
        info["compile_time_s"] = time.perf_counter() - graph.compile_start
        stats.graphs_compiled += 1
        return _C.disable_wrapper(graph.compiled)
