"""Options of the "plugin" compiler: a typed, checked view of what ``torch_plugin.config``
reads from the environment when a graph is compiled.

Every option and its environment variable is declared and read in :mod:`torch_plugin.config`
(see the table there: ``TORCH_PLUGIN_FREEZE``, ``TORCH_PLUGIN_LIBRARY_PATTERNS``,
``TORCH_PLUGIN_FUSION``, ``TORCH_PLUGIN_MEMORY_PLANNING``, ``TORCH_PLUGIN_VERIFY``,
``TORCH_PLUGIN_DUMP_DIR``, ``TORCH_PLUGIN_LOGS`` (``kernels``), ``TORCH_PLUGIN_CACHE_DIR``,
``TORCH_PLUGIN_GRAPH_CACHE``, ``TORCH_PLUGIN_CUDA_GRAPHS``, ``TORCH_PLUGIN_FALLBACK_RANDOM``); this module adds what the
compiler does with them: the dump folder is created, and a cache root that is not private is
refused (folders 0700, files 0600; an existing root owned by another user or writable by
group/others is refused with a warning: disk caches off, kernels compile into a private
temporary folder).

Options given to one ``torch_plugin.optimize(options=...)`` call (or
``torch.compile(backend="plugin", options=...)``) override the environment for the graphs that
call compiles: :func:`check` validates them, :func:`overridden` applies them while a graph is
compiled (:func:`current` and the runtime options read them), and :func:`bound` carries them to
the work done later, outside the backend's call (a new size of a graph with symbolic sizes,
the backward graph compiled at the first ``backward()``, a graph lowered again for new
parameters). The graph cache's key holds every :class:`Options` field, so an override that
changes the lowered graph changes the key; the runtime options apply after the cache.

Key parts:
- :class:`Options`: one field per option.
- :func:`current`: the options now in effect.
- :data:`USER_OPTIONS`, :func:`check`, :func:`overridden`, :func:`bound`: per-call options.
- :func:`untrusted_cache_root`: why a cache root must not be used.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import os
import stat
import types
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from torch_plugin import config


@dataclasses.dataclass(frozen=True)
class Options:
    """The "plugin" compiler's options (defaults: those of :mod:`torch_plugin.config`)."""

    freeze: bool = True
    library_patterns: bool = True
    fusion: bool = True
    memory_planning: bool = True
    verify: bool = False
    dump_dir: str = ""
    log_kernels: bool = False
    log_patterns: bool = False
    cache_dir: str = ""
    graph_cache: bool = True
    cuda_graphs: bool = True
    # Random ops stay ATen calls (eager's numbers) instead of kernels' Philox streams.
    fallback_random: bool = False
    # CUDA convolutions through cuDNN in channels-last (off for training graphs:
    # csrc/compiler/passes/pass.h, PassOptions::cuda_conv_channels_last).
    cuda_conv_channels_last: bool = True

    def pass_options(self) -> dict[str, object]:
        """The subset the C++ pipeline reads (csrc/compiler/passes/pass.h, PassOptions)."""
        return {
            "library_patterns": self.library_patterns,
            "fusion": self.fusion,
            "memory_planning": self.memory_planning,
            "verify": self.verify,
            "dump_dir": self.dump_dir,
            "log_kernels": self.log_kernels,
            "log_patterns": self.log_patterns,
            "cache_dir": self.cache_dir,
            "fallback_random": self.fallback_random,
            "cuda_conv_channels_last": self.cuda_conv_channels_last,
        }


# The options a user may give ``optimize(options=...)``: name -> (type, what it does). The
# first group are :class:`Options` fields (their environment variables in torch_plugin.config),
# the second runtime options handed to C++ as each executor is built (config.runtime_options).
USER_OPTIONS: dict[str, tuple[type, str]] = {
    "freeze": (bool, "inference graphs take parameters as constants (TORCH_PLUGIN_FREEZE)"),
    "library_patterns": (bool, "oneDNN / cuBLASLt library calls (TORCH_PLUGIN_LIBRARY_PATTERNS)"),
    "fusion": (bool, "generated kernels for pointwise/reduction groups (TORCH_PLUGIN_FUSION)"),
    "memory_planning": (bool, "one preplanned arena per run (TORCH_PLUGIN_MEMORY_PLANNING)"),
    "verify": (bool, "the IR verifier after every pass (TORCH_PLUGIN_VERIFY)"),
    "dump_dir": (str, "write each graph before and after each pass there (TORCH_PLUGIN_DUMP_DIR)"),
    "graph_cache": (bool, "the disk cache of lowered graphs (TORCH_PLUGIN_GRAPH_CACHE)"),
    "cuda_graphs": (bool, "CUDA graphs for CUDA inference graphs (TORCH_PLUGIN_CUDA_GRAPHS)"),
    "fallback_random": (bool, "random ops stay ATen calls (TORCH_PLUGIN_FALLBACK_RANDOM)"),
    "log_kernels": (bool, "print each generated kernel (TORCH_PLUGIN_LOGS=kernels)"),
    "log_patterns": (
        bool,
        "print each library-pattern rule's outcome (TORCH_PLUGIN_LOGS=patterns)",
    ),
    "cublaslt_tuning": (str, "'1' time cuBLASLt's candidates, '0', 'verbose', 'gemm'"),
    "cublaslt_candidates": (int, "candidates asked of cuBLASLt's heuristic, 1 to 64"),
    "onednn_weights": (str, "'borrowed' or 'packed' CPU linear weights"),
}
RUNTIME_OPTIONS = ("cublaslt_tuning", "cublaslt_candidates", "onednn_weights")
_CHOICES = {
    "cublaslt_tuning": ("0", "1", "verbose", "gemm"),
    "onednn_weights": ("borrowed", "packed"),
}

_overrides: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "torch_plugin_compiler_options", default=types.MappingProxyType({})
)


def check(options: Mapping[str, Any] | None, who: str = "plugin") -> dict[str, Any]:
    """``options`` (``optimize(options=...)``) checked against :data:`USER_OPTIONS`, as a new
    dict. Raises TypeError when ``options`` is not a mapping or a value has the wrong type
    (bool for a bool option, str for a str option, an int that is not a bool for an int
    option) and ValueError for an unknown name (listing the valid ones) or a value out of
    range (``cublaslt_candidates`` 1 to 64; the listed choices of ``cublaslt_tuning`` and
    ``onednn_weights``). ``who`` names the backend in messages."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise TypeError(f"{who}: options must be a dict, got {type(options).__name__}")
    checked: dict[str, Any] = {}
    for name, value in options.items():
        if name not in USER_OPTIONS:
            import difflib

            close = difflib.get_close_matches(str(name), USER_OPTIONS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(
                f"{who}: unknown option {name!r}{hint}; options: {', '.join(USER_OPTIONS)}"
            )
        kind = USER_OPTIONS[name][0]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"{who}: option {name!r} takes an int, not {value!r}")
        if kind is not int and not isinstance(value, kind):
            raise TypeError(f"{who}: option {name!r} takes a {kind.__name__}, not {value!r}")
        if name == "cublaslt_candidates" and not 1 <= value <= 64:
            raise ValueError(f"{who}: option 'cublaslt_candidates' is 1 to 64, not {value}")
        if name in _CHOICES and value not in _CHOICES[name]:
            raise ValueError(
                f"{who}: option {name!r} is one of {', '.join(map(repr, _CHOICES[name]))}, "
                f"not {value!r}"
            )
        checked[name] = value
    return checked


@contextlib.contextmanager
def overridden(values: Mapping[str, Any]) -> Iterator[None]:
    """Within the block, :func:`current` and :func:`runtime_overrides` take ``values``
    (checked options, see :func:`check`) over the environment, in this thread or task only
    (a context variable); nested blocks add to the outer ones."""
    token = _overrides.set({**_overrides.get(), **values})
    try:
        yield
    finally:
        _overrides.reset(token)


def bound(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` wrapped so each call runs with the overrides in effect now (``fn`` itself when
    there are none): for work that happens after the backend's call returns (a new size of a
    graph with symbolic sizes, the lazily compiled backward graph)."""
    values = dict(_overrides.get())
    if not values:
        return fn

    @functools.wraps(fn)
    def with_options(*args: Any, **kwargs: Any) -> Any:
        token = _overrides.set(values)
        try:
            return fn(*args, **kwargs)
        finally:
            _overrides.reset(token)

    return with_options


def runtime_overrides() -> dict[str, str]:
    """The runtime options (:data:`RUNTIME_OPTIONS`) overridden now, as the strings the C++
    runtime reads (``torch_plugin.compiler.configure_runtime`` merges them)."""
    values = _overrides.get()
    return {k: str(values[k]) for k in RUNTIME_OPTIONS if k in values}


def current() -> Options:
    """The options in effect now, from the environment (:func:`torch_plugin.config.
    compiler_environment`) and the overrides of :func:`overridden`: the dump folder is
    created; an untrusted cache root is replaced by a private temporary folder and the graph
    cache turned off."""
    env = config.compiler_environment()
    env.update({k: v for k, v in _overrides.get().items() if k not in RUNTIME_OPTIONS})
    if env["dump_dir"]:
        os.makedirs(env["dump_dir"], exist_ok=True)
    why = untrusted_cache_root(env["cache_dir"])
    if why is not None:
        env["cache_dir"] = _private_cache_dir(env["cache_dir"], why)
        env["graph_cache"] = False
    return Options(**env)


def untrusted_cache_root(path: str) -> str | None:
    """Why the cache root ``path`` must not be used, or None: an existing root must be a
    folder owned by this user and writable by no one else (another user could plant kernels
    that are loaded into this process). A missing root is fine: it is created 0700."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"cannot stat it ({e})"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder"
    if st.st_uid != os.getuid():
        return f"it is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"it is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


_private_dirs: dict[str, str] = {}


def _private_cache_dir(refused: str, why: str) -> str:
    """A private folder of this process (0700, removed at exit) used instead of the refused
    root, so kernels still compile; the disk cache is off for the process. Warned once."""
    if refused not in _private_dirs:
        import atexit
        import shutil
        import tempfile

        private = tempfile.mkdtemp(prefix="torch_plugin-")
        atexit.register(shutil.rmtree, private, True)
        _private_dirs[refused] = private
        warnings.warn(
            f"torch_plugin: not using the cache folder {refused}: {why}. The disk cache is off "
            f"for this process (kernels compile into {private}); fix the folder's owner or mode "
            "(chmod 700) or set TORCH_PLUGIN_CACHE_DIR to a private folder.",
            stacklevel=3,
        )
    return _private_dirs[refused]
