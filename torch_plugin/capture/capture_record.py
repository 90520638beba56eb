"""What one conversion of a frame reports: counters (:data:`stats`), the
:class:`CaptureRecord` handed to :data:`listeners` (explain(), export(), the log channels and
the trace), and :class:`keep_guard_sets`. Split from :mod:`convert_frame`, which makes the
records and re-exports these names.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any

import torch
import torch.fx

from .. import logs, trace
from .exc import UserSourceLocation


@dataclasses.dataclass
class CaptureStats:
    """Counters since the last :func:`torch_plugin.reset` (times in seconds)."""

    frames_captured: int = 0
    graphs_compiled: int = 0
    recompiles: int = 0
    frames_failed: int = 0
    translate_time_s: float = 0.0
    backend_compile_time_s: float = 0.0
    failures: list = dataclasses.field(default_factory=list)  # (qualname, reason, location)
    graph_breaks: list = dataclasses.field(default_factory=list)  # (qualname, reason, location)

    def reset(self) -> None:
        fresh = CaptureStats()
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(fresh, f.name))


stats = CaptureStats()


@dataclasses.dataclass
class CaptureRecord:
    """What one conversion of a frame produced; passed to every function in :data:`listeners`.

    Attributes:
        code: the frame's original code object; ``transformed_code`` the code that replaced it.
        graph: a copy of the captured FX graph module (before the backend ran), or None when
            the frame broke before any tensor operation.
        guards: the guards of the new cache entry, in source terms (``L['x'] == 3``).
        graph_break: (reason, user location) when the frame ended in a graph break, else None.
        translate_time_s / compile_time_s: seconds in the translator / in the backend.
        graph_break_location: the user location of the graph break (structured), or None.
    """

    code: types.CodeType
    transformed_code: types.CodeType | None
    graph: torch.fx.GraphModule | None
    guards: list
    graph_break: tuple | None
    translate_time_s: float
    compile_time_s: float
    # How the graph's outputs become the return value (output_structure spec; None at a
    # graph break), and whether the entry replays side effects or loads runtime arguments.
    output_spec: tuple | None = None
    has_side_effects: bool = False
    graph_break_location: UserSourceLocation | None = None
    # What export() must refuse: side effects a caller could observe (SideEffects.
    # caller_visible) and whether the return value holds objects loaded from the inputs.
    visible_side_effects: tuple = ()
    returns_runtime_args: bool = False
    # How the graph was split at DDP's gradient buckets (torch_plugin.distributed.ddp.DDPSplit),
    # or None when it was not compiled inside DDP's forward.
    ddp_split: Any = None
    # The guards themselves (capture.guards.GuardSet) with the ShapeEnv and shape bindings of
    # a capture with symbolic sizes, for export(), which checks them on each call. Set only
    # while keep_guard_sets is on (export): the guards hold the objects they compare, so a
    # record kept by another listener would keep the user's model alive.
    guard_set: Any = None
    shape_env: Any = None
    shape_bindings: tuple = ()
    # Where each graph input (placeholder, in order) was read from.
    input_sources: tuple = ()
    # The code objects of the resume functions transformed_code calls (a graph break), for
    # the bytecode log channel and the trace (decompiler.resume_codes).
    resume_codes: tuple = ()


# Functions called with each CaptureRecord (explain() and export() use this; the log
# channels are written through torch_plugin.logs.log_record while logs.records_wanted()).
listeners: list = []


def _listening() -> bool:
    """Whether anyone wants CaptureRecords (a listener, or a log channel)."""
    return bool(listeners) or logs.records_wanted() or trace.enabled()


class keep_guard_sets:
    """While active (nestable), records carry their GuardSet, ShapeEnv and shape bindings
    (``CaptureRecord.guard_set`` ...): ``torch_plugin.export`` turns them into the checks of
    the exported graph."""

    depth = 0

    def __enter__(self):
        keep_guard_sets.depth += 1

    def __exit__(self, *exc):
        keep_guard_sets.depth -= 1


def _snapshot(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm``'s graph over the same attributes (backends may rewrite ``gm``)."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return torch.fx.GraphModule(gm, graph, class_name=type(gm).__name__)


def _notify(record: CaptureRecord) -> None:
    for listener in list(listeners):  # noqa: PERF101 (a listener may remove itself)
        listener(record)
    if logs.records_wanted():
        logs.log_record(record)
    if trace.enabled():
        trace.record(record)
