"""Log channels: human-readable logs of what capture does, printed to stderr.

Channels (each is the logger ``torch_plugin.<channel>``):

- ``graph_breaks``: each graph break, and each frame that could not be captured at all,
  with the reason and the user's file, line and source text (emitted by
  ``torch_plugin.capture.convert_frame``);
- ``recompiles``: each recompile of a frame, with the guard that failed (emitted by
  ``convert_frame``);
- ``guards``: the guards of each new cache entry;
- ``bytecode``: the original and the transformed bytecode (``dis``) of each converted frame,
  and the transformed code and each resume function made at a graph break as Python source
  (decompiled with the optional ``depyf`` package; its ``dis`` listing where depyf is
  missing or fails, with the reason: :mod:`torch_plugin.decompiler`);
- ``graph``: the code of each captured FX graph, with shapes and the user's source lines;
- ``ddp``: how each graph captured inside DistributedDataParallel's forward was split at
  gradient buckets, or why it was compiled whole (emitted by
  ``torch_plugin.distributed.ddp``);
- ``passes`` ("plugin" backend): the IR of each graph before and after the pass pipeline
  (generated kernels' sources cut out), with node counts and the time (emitted by
  ``torch_plugin.compiler.stages``);
- ``cache`` ("plugin" backend): each graph-cache look-up (hit, miss, not looked up), entry
  stored and entry refused (emitted by ``torch_plugin.compiler.graph_cache``);
- ``perf``: the progress of long compiles: once a frame's compile has taken about 2 s, one
  line per stage with its time (emitted by ``torch_plugin.trace``; without this channel the
  lines go to stderr when another channel is on or stderr is a terminal).

The last three are written by :func:`log_record`, which capture calls with each
``CaptureRecord`` while one of them is on (:func:`records_wanted`).

This module imports nothing of the project but ``config`` and ``decompiler`` (leaves below
capture): capture
asks it whether records are wanted, and it installs :func:`set_logs` as the setter of
``config.logs`` (:func:`torch_plugin.config.install_logs_setter`).

Switch channels with the ``TORCH_PLUGIN_LOGS`` environment variable, read at import
(``TORCH_PLUGIN_LOGS=graph_breaks,recompiles``; ``all`` for every channel), with
:func:`set_logs`, or by assigning ``torch_plugin.config.logs``. As in torch.compile's
``TORCH_LOGS`` (``torch._logging``), a prefix sets a channel's verbosity: ``name`` logs at
``logging.INFO`` (what each channel prints), ``+name`` at ``logging.DEBUG`` (also the
channel's debug records: ``graph_breaks`` adds the translator's traceback of each break,
``recompiles`` the failed guard of every compiled entry, not only the first), ``-name`` at
``logging.ERROR`` (only the channel's errors: none of the channels' records are errors, so
``all,-bytecode`` is every channel but ``bytecode``); a later item overrides an earlier one
(``+all,bytecode``). A channel that is named has its own stderr handler and does not
propagate to the root logger (so nothing is printed twice); a channel not named is left to
the ``logging`` configuration of the program.

Key names: :data:`CHANNELS`, :func:`set_logs`, :func:`parse_spec`, :func:`parse_levels`,
:func:`is_on`, :data:`ENV_VAR`, :func:`records_wanted`, :func:`log_record`.
"""

from __future__ import annotations

import dis
import logging
import sys
import warnings
from collections.abc import Iterable
from typing import Any

from . import config
from .decompiler import source_of

ENV_VAR = config.LOGS_ENV_VAR
CHANNELS: tuple[str, ...] = (
    "graph_breaks",
    "recompiles",
    "guards",
    "bytecode",
    "graph",
    "ddp",
    "perf",
    "passes",
    "cache",
)
# Read by the "plugin" compiler from TORCH_PLUGIN_LOGS when it compiles a graph
# (config.compiler_environment): generated kernels, library-pattern rules. Not Python loggers.
COMPILER_CHANNELS: tuple[str, ...] = ("kernels", "patterns")
# Channels written from CaptureRecords (the others are logged by convert_frame directly).
_RECORD_CHANNELS = ("guards", "bytecode", "graph")

# The verbosity prefixes of TORCH_LOGS (torch._logging's INCR_VERBOSITY_CHAR and
# DECR_VERBOSITY_CHAR) and the level each gives; no prefix is INFO.
_PREFIX_LEVEL = {"+": logging.DEBUG, "": logging.INFO, "-": logging.ERROR}
_LEVEL_PREFIX = {level: prefix for prefix, level in _PREFIX_LEVEL.items()}

_handlers: dict[str, logging.Handler] = {}
_levels: dict[str, int] = {}
_records_wanted = False


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of each record (so redirection and
    pytest's capture see the output)."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def logger_for(channel: str) -> logging.Logger:
    """The logger of one channel (``torch_plugin.<channel>``)."""
    return logging.getLogger(f"torch_plugin.{channel}")


def parse_levels(spec: str | Iterable[str] | None) -> dict[str, int]:
    """The channels named by ``spec`` and the ``logging`` level of each, in
    :data:`CHANNELS` order (the compiler's own, :data:`COMPILER_CHANNELS`, are accepted and
    left out).

    ``spec`` is a comma-separated string or an iterable of items, each a channel name or
    ``all`` (every channel) with an optional prefix, as in ``TORCH_LOGS``: none is
    ``logging.INFO``, ``+`` is ``logging.DEBUG``, ``-`` is ``logging.ERROR``; a later item
    overrides an earlier one for the channels it names; spaces are ignored. None or ``""``
    names no channel.

    Raises:
        ValueError: an unknown channel name (the message lists the known ones).
    """
    if spec is None:
        return {}
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    levels: dict[str, int] = {}
    for item in items:
        name = str(item).strip()
        if not name:
            continue
        prefix = name[0] if name[0] in "+-" else ""
        name = name[len(prefix) :].strip()
        if name in COMPILER_CHANNELS:
            continue  # the compiler's (COMPILER_CHANNELS), not a Python logger
        if name != "all" and name not in CHANNELS:
            raise ValueError(
                f"unknown torch_plugin log channel {name!r}; "
                f"known: {', '.join(CHANNELS)}, all (each with an optional + or - prefix)"
            )
        for channel in CHANNELS if name == "all" else (name,):
            levels[channel] = _PREFIX_LEVEL[prefix]
    return {c: levels[c] for c in CHANNELS if c in levels}


def parse_spec(spec: str | Iterable[str] | None) -> tuple[str, ...]:
    """``spec`` normalized (as :func:`parse_levels` reads it): one item per channel it
    names, in :data:`CHANNELS` order, ``name`` for INFO, ``+name`` for DEBUG and ``-name``
    for ERROR (``"guards,+all,-bytecode"`` gives ``("+graph_breaks", ..., "-bytecode",
    ...)``). This is the form ``torch_plugin.config.logs`` holds.

    Raises:
        ValueError: an unknown channel name (the message lists the known ones).
    """
    return tuple(_LEVEL_PREFIX[level] + c for c, level in parse_levels(spec).items())


def set_logs(channels: str | Iterable[str] | None = None, **flags: bool) -> None:
    """Switch log channels on and off; the channels not named are switched off.

    Examples::

        torch_plugin.set_logs("graph_breaks,recompiles")
        torch_plugin.set_logs("+recompiles")              # with its debug records
        torch_plugin.set_logs(graph_breaks=True, graph=True)
        torch_plugin.set_logs("all", bytecode=False)
        torch_plugin.set_logs()                           # all off

    Args:
        channels: a spec as :func:`parse_levels` reads it (``+name``: DEBUG, ``-name``:
            ERROR).
        flags: ``channel=True`` adds a channel (at INFO, or at the level ``channels`` gave
            it), ``channel=False`` removes one.

    The result is stored in ``torch_plugin.config.logs`` in :func:`parse_spec`'s form (a
    tuple of names, each with its prefix).

    Raises:
        ValueError: an unknown channel name.
    """
    levels = parse_levels(channels)
    for name, value in flags.items():
        if name not in CHANNELS:
            raise ValueError(
                f"unknown torch_plugin log channel {name!r}; known: {', '.join(CHANNELS)}"
            )
        if value:
            levels.setdefault(name, logging.INFO)
        else:
            levels.pop(name, None)
    levels = {c: levels[c] for c in CHANNELS if c in levels}
    for channel in CHANNELS:
        logger = logger_for(channel)
        handler = _handlers.get(channel)
        if channel in levels:
            if handler is None:
                handler = _StderrHandler()
                handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
                _handlers[channel] = handler
                logger.addHandler(handler)
            logger.setLevel(levels[channel])
            logger.propagate = False
        elif handler is not None:
            logger.removeHandler(handler)
            del _handlers[channel]
            logger.setLevel(logging.NOTSET)
            logger.propagate = True
    _levels.clear()
    _levels.update(levels)
    global _records_wanted
    _records_wanted = any(is_on(c) for c in _RECORD_CHANNELS)
    # not config.logs = ...: that would call set_logs again
    vars(config)["logs"] = tuple(_LEVEL_PREFIX[level] + c for c, level in levels.items())


def is_on(channel: str | None = None) -> bool:
    """Whether ``channel`` prints its records (it was named without ``-``: INFO or DEBUG);
    with no channel, whether any channel does."""
    if channel is None:
        return any(level <= logging.INFO for level in _levels.values())
    return _levels.get(channel, logging.CRITICAL) <= logging.INFO


def records_wanted() -> bool:
    """Whether a channel written from capture records (``guards``, ``bytecode``, ``graph``)
    is on: capture then calls :func:`log_record` with each record."""
    return _records_wanted


def _where(code) -> str:
    return f"{code.co_qualname} ({code.co_filename}:{code.co_firstlineno})"


def log_record(record: Any) -> None:
    """Write one converted frame (a ``torch_plugin.capture.convert_frame.CaptureRecord``) to
    the ``guards``, ``bytecode`` and ``graph`` channels; capture calls it while
    :func:`records_wanted`."""
    where = _where(record.code)
    if is_on("guards"):
        lines = [f"  {g}" for g in record.guards] or ["  (none)"]
        logger_for("guards").info("guards of a new entry for %s:\n%s", where, "\n".join(lines))
    if is_on("bytecode"):
        bytecode_log = logger_for("bytecode")
        bytecode_log.info("original bytecode of %s:\n%s", where, dis.Bytecode(record.code).dis())
        if record.transformed_code is not None:
            bytecode_log.info(
                "transformed bytecode of %s:\n%s",
                where,
                dis.Bytecode(record.transformed_code).dis(),
            )
            _log_readable(bytecode_log, "transformed code", where, record.transformed_code)
        for code in getattr(record, "resume_codes", ()):
            _log_readable(bytecode_log, "resume function", _where(code), code)
    if is_on("graph") and record.graph is not None:
        part = ", part before a graph break" if record.graph_break is not None else ""
        logger_for("graph").info(
            "FX graph of %s%s:\n%s",
            where,
            part,
            record.graph.print_readable(print_output=False).rstrip(),
        )


def _log_readable(log: logging.Logger, what: str, where: str, code) -> None:
    """``code`` as Python source (depyf) on the ``bytecode`` channel, or, without depyf or
    where it fails, its ``dis`` listing with the reason."""
    readable = source_of(code)
    if readable.is_source:
        log.info("%s of %s, decompiled by depyf:\n%s", what, where, readable.text.rstrip())
    elif what == "resume function":  # a transformed code's dis listing is logged above
        log.info("%s of %s (%s):\n%s", what, where, readable.note, readable.text.rstrip())
    else:
        log.info("%s of %s: no Python source (%s)", what, where, readable.note)


def _set_logs_from_env() -> None:
    """Switch on the channels the environment names (``config.logs_spec``); an unknown name
    is warned about, with the known ones, and the others are kept."""
    spec = config.logs_spec()
    if not spec.strip():
        return
    known, unknown = [], []
    for item in spec.split(","):
        try:
            parse_spec(item)
            known.append(item)
        except ValueError:
            unknown.append(item.strip())
    if unknown:
        warnings.warn(
            f"{ENV_VAR}: unknown log channel(s) {', '.join(map(repr, unknown))} ignored; "
            f"known: {', '.join((*CHANNELS, *COMPILER_CHANNELS))}, all "
            "(each with an optional + or - prefix)",
            stacklevel=2,
        )
    set_logs(",".join(known))


config.install_logs_setter(set_logs)
_set_logs_from_env()
