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

Key parts:
- :class:`Options`: one field per option.
- :func:`current`: the options now in effect.
- :func:`untrusted_cache_root`: why a cache root must not be used.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import warnings

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
        }


def current() -> Options:
    """The options in effect now, from the environment (:func:`torch_plugin.config.
    compiler_environment`): the dump folder is created; an untrusted cache root is replaced
    by a private temporary folder and the graph cache turned off."""
    env = config.compiler_environment()
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
