"""``explain()``: run a function once under capture and report what capture made of it.

Key classes:
- :class:`ExplainOutput`: what :func:`explain` returns (graphs, graph breaks and why,
  frames not captured, ops, guards, compile times); ``str()`` of it is a readable report.
- :class:`BreakReason`: one place where capture stopped, with the user's file, line and
  source text.
- :class:`FrameReport`: one converted frame (a function, or a resume function after a
  graph break): its graph, its guards and how it ended.
- :class:`CompileTimes`: seconds spent in the translator and in the backend.

:func:`explain` works from the capture layer's records
(:data:`torch_plugin.capture.convert_frame.listeners`) and from
:data:`torch_plugin.stats` ``.failures`` for frames that ran without being captured.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from .api import optimize
from .capture import convert_frame
from .capture.eval_frame import OptimizedModule, reset
from .capture.exc import UserSourceLocation
from .capture.graph_break_types import GraphBreakType

# The reason capture gives for a frame with nothing to capture: such frames are harmless
# (plain Python), so the report lists them in one line instead of as problems.
NO_TENSOR_OPS = "no tensor operations to capture"
_LOCATION = re.compile(
    r'File "(?P<file>.*)", line (?P<line>\d+), in (?P<fn>[^\n]*)(?:\n(?P<src>.*))?'
)


@dataclasses.dataclass(frozen=True)
class BreakReason:
    """Where and why capture stopped.

    Attributes:
        reason: what the translator could not capture (``"call to builtin print()"``).
        frame: qualified name of the frame being captured (``bar`` or a resume function
            such as ``bar.<resume at line 8>``).
        filename, lineno, function, source_line: the user's code at that point (the
            innermost user function when the break happened inside an inlined call); None
            or ``""`` when unknown.
        gb_type: the graph-break type (:mod:`torch_plugin.capture.graph_break_types`: id,
            explanation, hint for the user), or None when unknown.
    """

    reason: str
    frame: str
    filename: str | None = None
    lineno: int | None = None
    function: str | None = None
    source_line: str = ""
    gb_type: GraphBreakType | None = None

    @classmethod
    def from_capture(cls, reason: str, frame: str, location: Any) -> BreakReason:
        """Build from a reason and a location, given as a :class:`UserSourceLocation` or as
        its ``str()`` (``File "f.py", line 6, in bar\\n    source``), or None. The type is
        the one ``reason`` names (a :class:`~torch_plugin.capture.exc.GraphBreakReason`)."""
        gb_type = getattr(reason, "gb_type", None)
        if isinstance(location, UserSourceLocation):
            return cls(
                reason,
                frame,
                location.filename,
                location.lineno,
                location.function,
                location.source_line,
                gb_type,
            )
        if isinstance(location, str):
            m = _LOCATION.match(location.strip())
            if m is not None:
                return cls(
                    reason,
                    frame,
                    m["file"],
                    int(m["line"]),
                    m["fn"],
                    (m["src"] or "").strip(),
                    gb_type,
                )
        return cls(reason, frame, gb_type=gb_type)

    @property
    def location(self) -> str:
        """``file:line`` (or ``"unknown location"``)."""
        if self.filename is None:
            return "unknown location"
        return f"{self.filename}:{self.lineno}"

    def __str__(self) -> str:
        if self.filename is None:
            return f"{self.reason} (in {self.frame}, location unknown)"
        text = f'{self.reason}\n  File "{self.filename}", line {self.lineno}, in {self.function}'
        return f"{text}\n    {self.source_line}" if self.source_line else text


@dataclasses.dataclass
class FrameReport:
    """One converted frame: the original function or a resume function.

    Attributes:
        name: the code object's qualified name; ``filename``/``firstlineno`` where it is.
        graph: the captured FX graph (before the backend ran), or None when the frame broke
            before any tensor operation.
        guards: the guards of its cache entry, in source terms (``L['x']: tensor ...``).
        graph_break: why the frame's capture stopped early, or None if it was captured whole.
        translate_time_s, compile_time_s: seconds in the translator and in the backend.
        ddp_split: for a graph captured inside DistributedDataParallel's forward, how it was
            split at gradient buckets (:class:`torch_plugin.distributed.ddp.DDPSplit`), else
            None.
    """

    name: str
    filename: str
    firstlineno: int
    graph: torch.fx.GraphModule | None
    guards: list[str]
    graph_break: BreakReason | None
    translate_time_s: float
    compile_time_s: float
    ddp_split: Any = None


@dataclasses.dataclass
class CompileTimes:
    """Seconds spent converting frames: in the symbolic translator (``translate_s``) and
    in the backend (``backend_s``), summed over every converted frame."""

    translate_s: float = 0.0
    backend_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.translate_s + self.backend_s

    def __str__(self) -> str:
        return (
            f"translate {self.translate_s * 1e3:.1f} ms + backend {self.backend_s * 1e3:.1f} ms"
            f" = {self.total_s * 1e3:.1f} ms"
        )


@dataclasses.dataclass
class ExplainOutput:
    """What :func:`explain` found; ``str()`` gives a readable report.

    Attributes:
        graphs: the captured FX graphs, in the order they were captured.
        graph_count: ``len(graphs)``.
        graph_break_count: number of graph breaks (``len(break_reasons)``).
        break_reasons: each graph break, with the reason and the user's file, line and source.
        not_captured: frames that ran without being captured at all (no graph break was
            possible there), with the reason; they are not counted as graph breaks. Frames
            with no tensor operation at all (reason :data:`NO_TENSOR_OPS`) are among them.
        op_count: total number of operations over all graphs.
        ops_per_graph: for each graph, the targets of its operation nodes (functions such
            as ``torch.abs`` or ``operator.add``, method names such as ``"sum"``, submodule
            paths).
        out_guards: the guards of every new cache entry, in source terms, frame by frame.
        compile_times: translator and backend seconds.
        frames: one :class:`FrameReport` per converted frame, in order.
    """

    graphs: list[torch.fx.GraphModule]
    graph_count: int
    graph_break_count: int
    break_reasons: list[BreakReason]
    not_captured: list[BreakReason]
    op_count: int
    ops_per_graph: list[list[Any]]
    out_guards: list[str]
    compile_times: CompileTimes
    frames: list[FrameReport]

    def __str__(self) -> str:
        return format_report(self)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def op_name(node: torch.fx.Node) -> str:
    """A short readable name for an operation node: ``torch.abs``, ``add`` (for
    ``operator.add``), ``Tensor.sum``, ``layer1 (Linear)``."""
    target = node.target
    if node.op == "call_method":
        return f"Tensor.{target}"
    if node.op == "call_module":
        try:
            sub = node.graph.owning_module.get_submodule(target)
            return f"{target} ({type(sub).__name__})"
        except (AttributeError, TypeError):
            return str(target)
    try:
        name = torch.fx.node._get_qualified_name(target)
    except Exception:  # noqa: BLE001 - any target fx cannot name
        name = getattr(target, "__name__", repr(target))
    return name.removeprefix("_operator.").removeprefix("builtins.")


def _op_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]


def _location_lines(br: BreakReason) -> list[str]:
    """The user's file, line and source of a break, then its type's id, name and hint."""
    lines = []
    if br.filename is not None:
        lines.append(f'     File "{br.filename}", line {br.lineno}, in {br.function}')
        if br.source_line:
            lines.append(f"       {br.source_line}")
    if br.gb_type is not None:
        lines.append(f"     [{br.gb_type.id} {br.gb_type.name}] hint: {br.gb_type.hint}")
    return lines


def format_report(out: ExplainOutput) -> str:
    """The readable report that ``str(explain_output)`` returns."""
    problems = [br for br in out.not_captured if br.reason != NO_TENSOR_OPS]
    plain = [br.frame for br in out.not_captured if br.reason == NO_TENSOR_OPS]
    counts = [
        _plural(out.graph_count, "graph"),
        _plural(out.graph_break_count, "graph break"),
        _plural(out.op_count, "op"),
        f"{_plural(len(problems), 'frame')} not captured",
    ]
    lines = [f"torch_plugin.explain: {', '.join(counts)}", f"Compile time: {out.compile_times}"]
    if out.break_reasons:
        lines += ["", "Graph breaks:"]
        for i, br in enumerate(out.break_reasons, 1):
            lines.append(f"  {i}. {br.reason}   [in {br.frame}]")
            lines += _location_lines(br)
    if problems:
        lines += ["", "Frames not captured (they ran without compiling):"]
        for i, br in enumerate(problems, 1):
            lines.append(f"  {i}. {br.frame}: not captured: {br.reason}")
            lines += _location_lines(br)
    if plain:
        lines += ["", f"Frames with no tensor operations (ran as plain Python): {', '.join(plain)}"]
    lines += ["", "Frames converted:"]
    if not out.frames:
        lines.append("  (none: no frame with tensor operations was captured)")
    graph_index = 0
    for frame in out.frames:
        br = frame.graph_break
        if br is None:
            end = "captured whole"
        elif br.lineno is None:
            end = "graph break"
        else:
            end = f"graph break at line {br.lineno} in {br.function}"
        lines.append(f"  {frame.name} ({frame.filename}:{frame.firstlineno}): {end}")
        if frame.graph is None:
            lines.append("    no graph (no tensor operation before the break)")
        else:
            graph_index += 1
            names = [op_name(n) for n in _op_nodes(frame.graph)]
            lines.append(
                f"    graph {graph_index}: {_plural(len(names), 'op')}: {', '.join(names)}"
            )
        if frame.ddp_split is not None:
            lines += [f"    {line}" for line in frame.ddp_split.describe()]
        lines.append(f"    guards ({len(frame.guards)}):")
        lines += [f"      {g}" for g in frame.guards]
    return "\n".join(lines)


def explain_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable:
    """The backend :func:`explain` compiles with: run the captured graph as it is."""
    return gm.forward


def _frame_report(record: convert_frame.CaptureRecord) -> FrameReport:
    code = record.code
    brk = None
    if record.graph_break is not None:
        reason, location_text = record.graph_break
        location = getattr(record, "graph_break_location", None) or location_text
        brk = BreakReason.from_capture(reason, code.co_qualname, location)
    return FrameReport(
        code.co_qualname,
        code.co_filename,
        code.co_firstlineno,
        record.graph,
        list(record.guards),
        brk,
        record.translate_time_s,
        record.compile_time_s,
        getattr(record, "ddp_split", None),
    )


def _unwrap(fn: Any) -> Any:
    """The user's function or module behind an ``optimize(...)`` wrapper."""
    if isinstance(fn, OptimizedModule):
        return fn._orig_mod
    return getattr(fn, "_torchplugin_original", fn)


def explain(fn: Callable | torch.nn.Module, *args: Any, **kwargs: Any) -> ExplainOutput:
    """Run ``fn(*args, **kwargs)`` once under capture and report what was captured.

    ``fn`` is a function or an ``nn.Module`` (a function or module already wrapped by
    :func:`torch_plugin.optimize` is unwrapped first). Capture starts from a clean state:
    :func:`torch_plugin.reset` runs before and after, so frames compiled earlier compile
    again on their next call, and :data:`torch_plugin.stats` is restored to its previous
    counts afterwards. Graphs run eagerly (a backend that returns ``gm.forward``).

    Returns:
        An :class:`ExplainOutput`; ``print()`` it for a readable report.

    Raises:
        TypeError: ``fn`` is not callable.
        Any exception ``fn`` itself raises (after the state is restored).
    """
    stats = convert_frame.stats
    if not callable(fn):
        raise TypeError(
            f"torch_plugin.explain expects a function or nn.Module, got {type(fn).__name__}"
        )
    fn = _unwrap(fn)
    saved = {f.name: getattr(stats, f.name) for f in dataclasses.fields(stats)}
    saved["failures"] = list(saved["failures"])
    saved["graph_breaks"] = list(saved["graph_breaks"])
    records: list = []
    listener = records.append
    reset()
    convert_frame.listeners.append(listener)
    try:
        optimize(explain_backend)(fn)(*args, **kwargs)
        failures = list(stats.failures)
    finally:
        convert_frame.listeners.remove(listener)
        reset()
        for name, value in saved.items():
            setattr(stats, name, value)

    frames = [_frame_report(r) for r in records]
    graphs = [f.graph for f in frames if f.graph is not None]
    ops_per_graph = [[n.target for n in _op_nodes(g)] for g in graphs]
    break_reasons = [f.graph_break for f in frames if f.graph_break is not None]
    not_captured = [BreakReason.from_capture(reason, name, loc) for name, reason, loc in failures]
    return ExplainOutput(
        graphs=graphs,
        graph_count=len(graphs),
        graph_break_count=len(break_reasons),
        break_reasons=break_reasons,
        not_captured=not_captured,
        op_count=sum(len(ops) for ops in ops_per_graph),
        ops_per_graph=ops_per_graph,
        out_guards=[g for f in frames for g in f.guards],
        compile_times=CompileTimes(
            sum(f.translate_time_s for f in frames), sum(f.compile_time_s for f in frames)
        ),
        frames=frames,
    )
