"""The structured compile trace (``TORCH_PLUGIN_TRACE=DIR``) and the progress lines of long
compiles.

Trace: while ``TORCH_PLUGIN_TRACE`` names a folder (read once, at import, by
:func:`torch_plugin.config.trace_dir`), every event of capture and compilation is written as
one JSON object per line to ``DIR/trace-<pid>.jsonl`` (one file per process; a forked child
opens its own). Each line has ``event`` (its kind), ``t`` (seconds since the trace began),
``pid`` and ``frame`` (the id of the frame conversion it belongs to, or None), and fields of
its kind:

- ``frame``: a frame conversion begins: ``name`` (qualified name), ``file``, ``line``;
  ``frame_done``: it ended, ``seconds``, ``result`` (``"compiled"``, ``"graph break"``,
  ``"not captured"``, ``"error"``);
- ``recompile``: ``name``, ``file``, ``line``, ``failed_guard`` (the guard that failed),
  ``entries`` (compiled entries already held) — written before the frame's ``frame`` event;
- ``graph``: ``code`` (the FX graph's Python code), ``nodes``, ``ops``, ``part`` (True for the
  graph before a graph break), ``translate_s``, ``compile_s``;
- ``guards``: ``guards`` (a list, in source terms);
- ``bytecode``: the code that replaced the frame, ``transformed``, and each resume function
  it calls at a graph break, ``resume`` (a list), each as ``name``, ``file``, ``line``,
  ``text`` (Python source decompiled by the optional ``depyf``, else the ``dis`` listing),
  ``tool`` (``"depyf"`` or ``"dis"``) and ``note`` (why not depyf, or None);
- ``graph_break``/``not_captured``: ``reason``, ``gb_id``, ``gb_name``, ``file``, ``line``,
  ``function``, ``source`` (the user's source line);
- ``stage``: ``name`` (``capture``, ``backend``; for the "plugin" backend also
  ``graph_cache``, ``aot_autograd``, ``lower``, ``passes``, ``executor``), ``seconds``,
  ``depth`` (nesting: the plugin's stages run inside ``backend``); stages outside a frame
  conversion (a backward graph compiled at the first ``backward()``, a new size of a graph
  with symbolic sizes) have ``frame`` None;
- ``graph_cache`` ("plugin" backend): ``hit`` (whether the graph cache had the graph);
- ``kernels`` ("plugin" backend): ``steps`` (``[kind, op, device]`` of each executor step:
  ``kernel`` for a generated kernel, the library kinds for a library pattern that fired),
  ``describe`` (the executor's steps as text), ``ir`` (the graph after the pass pipeline,
  each kernel's source replaced by ``<source of NAME>``: its fusion group's ops stay) and
  ``kernels`` (``name``, ``target`` (``cpp``, ``cuda``), ``group`` (the source's first
  comment: what the fusion group computes) and ``source``, the whole generated source);
- ``patterns`` ("plugin" backend, written after the pass pipeline of each lowered graph that
  has a node a library-pattern rule starts from): ``decisions``, one per rule and candidate,
  each with ``pass`` (``library_patterns``), ``rule`` (the rule's name), ``source`` (its row
  in csrc, ``file:line``), ``outcome`` (``fired``, ``rejected``: a constraint failed, or
  ``off``: the rule has no library kernel for the device in this build), ``node`` (the root
  node in the IR, ``aten::relu (%7)``), ``device`` and ``reason`` (for ``rejected``, the
  constraint that failed, ``not a constant weight``; for ``off``, why);
- ``autotune`` ("plugin" backend, ``mode="max-autotune"``): ``library_ms``, ``kernels_ms``
  (the graph's time with its library plan and with generated kernels instead) and
  ``chosen`` (``"library plan"`` or ``"generated kernels"``): :mod:`torch_plugin.compiler.
  autotune`.

Writing never fails the program: an unwritable folder is warned about once and tracing is
turned off. When ``TORCH_PLUGIN_TRACE`` is unset, :func:`enabled` is False and nothing is
written or computed. ``python -m torch_plugin.report DIR`` turns the files into one HTML page
(:mod:`torch_plugin.report`).

Progress: a frame conversion whose compile passes :data:`_PROGRESS_THRESHOLD_S` (about 2 s)
prints one line per stage with its time (the stages before the threshold at once, the later
ones as they end), on the ``perf`` log channel when it is on, else to stderr when another
channel is on or stderr is a terminal. While one stage runs long (:data:`_STILL_AFTER_S`, 5 s), a watcher thread
(:class:`_Watcher`, started by the outermost conversion only while lines are wanted, joined
when it ends) prints ``f: still in backend > lower (graph 2), 12.0 s`` every
:data:`_STILL_EVERY_S` (10 s).

This module imports only ``config``, ``logs`` and ``decompiler`` (leaves): capture and the
compiler call it.

Key names: :func:`enabled`, :func:`emit`, :func:`frame`, :func:`stage`, :func:`stage_time`,
:func:`split_kernels`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from typing import Any

from . import config, logs
from .decompiler import source_of

# Seconds after which a compile prints its stages (a private hook: tests lower it).
_PROGRESS_THRESHOLD_S = 2.0
# A stage running this long (seconds) prints a "still in" line, and again at this interval,
# once the conversion has passed _PROGRESS_THRESHOLD_S (private hooks: tests lower them).
_STILL_AFTER_S = 5.0
_STILL_EVERY_S = 10.0
# Largest string field written (a kernel-heavy IR text is cut there).
_MAX_FIELD_CHARS = 400_000

_dir: str = config.trace_dir()
_enabled: bool = bool(_dir)
_file: Any = None
_file_pid: int | None = None
_start = time.perf_counter()
_frame_ids = itertools.count(1)


class _Scope:
    """One frame conversion in progress: its id, name, start time and progress lines."""

    def __init__(self, frame_id: int, name: str) -> None:
        self.frame_id = frame_id
        self.name = name
        self.start = time.perf_counter()
        self.pending: list[str] = []
        self.printed = False
        self.result = "compiled"
        # The stages running now, outermost first: (name, start); read by _Watcher.
        self.running: list[tuple[str, float]] = []
        self.graphs = 0  # graphs handed to the backend so far
        self.still_printed = False


class _Watcher:
    """While the outermost frame conversion of a thread runs with progress lines wanted, a
    daemon thread that prints ``f: still in backend > lower (graph 2), 12.0 s`` once a single
    stage has run :data:`_STILL_AFTER_S` (and again every :data:`_STILL_EVERY_S`), for stages
    that end nothing to print meanwhile (a long lowering, a C++ compiler run).

    It only reads the scopes and writes lines: it takes no lock of the project, and its
    frames are not captured (the eval-frame hook's callback is per thread, and this thread
    has none), so it cannot wait on the compile lock the converting thread holds. It is
    stopped and joined when the conversion ends (:meth:`close`), so it never outlives it.
    """

    def __init__(self, scopes: list[_Scope]) -> None:
        self.scopes = scopes  # the converting thread's list (the same object)
        self.stop = threading.Event()
        self.last: dict[tuple, float] = {}
        self.thread = threading.Thread(target=self._run, name="torch_plugin-progress", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(max(0.01, min(1.0, _STILL_AFTER_S, _STILL_EVERY_S))):
            try:
                self._check()
            except Exception:  # noqa: BLE001, S110 - a progress line never fails a compile
                pass

    def _check(self) -> None:
        scopes = list(self.scopes)
        if not scopes:
            return
        scope = scopes[-1]
        running = list(scope.running)
        if not running:
            return
        now = time.perf_counter()
        name, t0 = running[-1]
        if now - scope.start < _PROGRESS_THRESHOLD_S or now - t0 < _STILL_AFTER_S:
            return
        key = (id(scope), len(running), name, t0)
        if now - self.last.get(key, float("-inf")) < _STILL_EVERY_S:
            return
        self.last[key] = now
        path = " > ".join(n for n, _ in running)
        graph = f" (graph {scope.graphs})" if scope.graphs else ""
        scope.still_printed = True
        _progress_line(
            f"{scope.name}: still in {path}{graph}, {now - t0:.1f} s "
            f"(compiling for {now - scope.start:.1f} s)"
        )

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5.0)


class _ThreadState(threading.local):
    """Per thread (threads compile their own frames): the conversions in progress, innermost
    last, and the nesting depth of the stage being timed."""

    def __init__(self) -> None:
        self.scopes: list[_Scope] = []
        self.depth = 0


_state = _ThreadState()


def enabled() -> bool:
    """Whether a trace is being written (``TORCH_PLUGIN_TRACE`` set and writable so far)."""
    return _enabled


def _disable(why: str) -> None:
    global _enabled
    _enabled = False
    warnings.warn(
        f"torch_plugin: cannot write the compile trace to {config.TRACE_ENV_VAR}={_dir!r} "
        f"({why}); tracing is off",
        RuntimeWarning,
        stacklevel=3,
    )


def _open() -> Any:
    global _file, _file_pid
    pid = os.getpid()
    if _file is not None and _file_pid == pid:
        return _file
    os.makedirs(_dir, exist_ok=True)
    _file = open(os.path.join(_dir, f"trace-{pid}.jsonl"), "a", encoding="utf-8")  # noqa: SIM115
    _file_pid = pid
    return _file


def _jsonable(value: Any) -> Any:
    if isinstance(value, str):
        return value if len(value) <= _MAX_FIELD_CHARS else value[:_MAX_FIELD_CHARS] + "\n..."
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


def emit(event: str, **fields: Any) -> None:
    """Write one event (see the module docstring) when tracing is on; never raises."""
    if not _enabled:
        return
    record = {
        "event": event,
        "t": round(time.perf_counter() - _start, 6),
        "pid": os.getpid(),
        "frame": current_frame(),
    }
    record.update({k: _jsonable(v) for k, v in fields.items()})
    try:
        f = _open()
        f.write(json.dumps(record) + "\n")
        f.flush()
    except (OSError, ValueError, TypeError) as e:
        _disable(f"{type(e).__name__}: {e}")


def current_frame() -> int | None:
    """The id of the frame conversion in progress, or None."""
    scopes = _state.scopes
    return scopes[-1].frame_id if scopes else None


def set_result(result: str) -> None:
    """How the frame conversion in progress ends (``frame_done``'s ``result``)."""
    if _state.scopes:
        _state.scopes[-1].result = result


@contextlib.contextmanager
def frame(code: Any) -> Iterator[None]:
    """The conversion of one frame (``code``: its code object): events inside carry its id;
    its stages print progress lines once it has taken :data:`_PROGRESS_THRESHOLD_S`."""
    scope = _Scope(next(_frame_ids), code.co_qualname)
    where = {"name": code.co_qualname, "file": code.co_filename, "line": code.co_firstlineno}
    watcher = _Watcher(_state.scopes) if not _state.scopes and _progress_wanted() else None
    _state.scopes.append(scope)
    try:
        emit("frame", **where)
        yield
    except BaseException:
        scope.result = "error"
        raise
    finally:
        seconds = time.perf_counter() - scope.start
        emit("frame_done", seconds=seconds, result=scope.result, **where)
        _state.scopes.remove(scope)
        if watcher is not None:
            watcher.close()
        if scope.printed or scope.still_printed:
            _progress_line(f"{scope.name}: compiled in {seconds:.2f} s ({scope.result})")


def _progress_wanted() -> bool:
    """Progress lines are printed while any log channel is on (issue #32: "when logging is
    on"; a channel named with ``-`` is not), or while stderr is a terminal."""
    if logs.is_on():
        return True
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def _progress_line(text: str) -> None:
    try:
        if any(c.lstrip("+-") == "perf" for c in config.logs):
            logs.logger_for("perf").info("%s", text)  # "-perf": dropped there
        else:
            sys.stderr.write(f"[torch_plugin] {text}\n")
    except (OSError, ValueError, AttributeError):
        pass


def stage_time(name: str, seconds: float, depth: int | None = None, **fields: Any) -> None:
    """A stage of the conversion in progress took ``seconds``: traced, and printed as a
    progress line once the conversion has run past the threshold."""
    depth = _state.depth if depth is None else depth
    emit("stage", name=name, seconds=seconds, depth=depth, **fields)
    if not _state.scopes:
        return
    scope = _state.scopes[-1]
    elapsed = time.perf_counter() - scope.start
    line = f"{scope.name}: {'  ' * depth}{name} {seconds:.2f} s (at {elapsed:.2f} s)"
    scope.pending.append(line)
    if elapsed >= _PROGRESS_THRESHOLD_S and _progress_wanted():
        if not scope.printed:
            scope.pending.insert(0, f"{scope.name}: compiling for more than {elapsed:.1f} s")
        for pending in scope.pending:
            _progress_line(pending)
        scope.pending.clear()
        scope.printed = True


@contextlib.contextmanager
def stage(name: str, **fields: Any) -> Iterator[None]:
    """Time the enclosed stage (see :func:`stage_time`); nested stages get a larger depth."""
    depth = _state.depth
    _state.depth = depth + 1
    t0 = time.perf_counter()
    scope = _state.scopes[-1] if _state.scopes else None
    if scope is not None:
        scope.graphs += name == "backend"
        scope.running.append((name, t0))
    try:
        yield
    finally:
        _state.depth = depth
        if scope is not None:
            scope.running.pop()
        stage_time(name, time.perf_counter() - t0, depth, **fields)


def record(rec: Any) -> None:
    """Write a ``torch_plugin.capture.convert_frame.CaptureRecord``'s graph and guards
    (capture calls it with each record while :func:`enabled`)."""
    gm = rec.graph
    if gm is not None:
        ops = [
            str(getattr(n.target, "__name__", n.target))
            for n in gm.graph.nodes
            if n.op in ("call_function", "call_method", "call_module")
        ]
        emit(
            "graph",
            code=gm.code,
            nodes=len(gm.graph.nodes),
            ops=ops,
            part=rec.graph_break is not None,
            translate_s=rec.translate_time_s,
            compile_s=rec.compile_time_s,
        )
    emit("guards", guards=[str(g) for g in rec.guards])
    if rec.transformed_code is not None:
        emit(
            "bytecode",
            transformed=_readable(rec.transformed_code),
            resume=[_readable(c) for c in getattr(rec, "resume_codes", ())],
        )


def _readable(code: Any) -> dict[str, Any]:
    """``code`` as the ``bytecode`` event holds it (:func:`decompiler.source_of`)."""
    r = source_of(code)
    return {
        "name": code.co_qualname,
        "file": code.co_filename,
        "line": code.co_firstlineno,
        "text": r.text,
        "tool": r.tool,
        "note": r.note,
    }


def capture_stopped(event: str, e: Any) -> None:
    """A graph break (``event="graph_break"``) or a frame not captured (``"not_captured"``):
    ``e`` is capture's ``Unsupported``, with its reason, type and user location."""
    if not _enabled:
        return
    loc = e.location
    gb = e.gb_type
    emit(
        event,
        reason=str(e.reason),
        gb_id=getattr(gb, "id", None),
        gb_name=getattr(gb, "name", None),
        file=loc.filename if loc else None,
        line=loc.lineno if loc else None,
        function=loc.function if loc else None,
        source=loc.source_line if loc else None,
    )


# A generated kernel in the IR text: torch_plugin::fused(..., name='fused_0', ...,
# source='...', target='cpp') (csrc/ir's printer writes the attributes in name order; the
# source is written as it is, apostrophes included).
_KERNEL = re.compile(r"name='([^']*)'([^\n]*?)source='(.*?)', target='(\w+)'", re.DOTALL)


def split_kernels(ir_text: str) -> tuple[str, list[dict[str, str]]]:
    """``ir_text`` (an IR graph after the pass pipeline, as ``str(graph)`` prints it) with
    each generated kernel's source replaced by ``<source of NAME>``, and the kernels:
    ``name``, ``target``, ``group`` (the source's first line when it is a comment) and
    ``source``."""
    kernels: list[dict[str, str]] = []

    def cut(m: re.Match) -> str:
        name, rest, source, target = m.group(1), m.group(2), m.group(3), m.group(4)
        first = source.split("\n", 1)[0]
        group = first[2:].strip() if first.startswith("//") else ""
        kernels.append({"name": name, "target": target, "group": group, "source": source})
        return f"name='{name}'{rest}source=<source of {name}>, target='{target}'"

    return _KERNEL.sub(cut, ir_text), kernels
