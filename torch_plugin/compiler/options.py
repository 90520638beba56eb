"""Options of the "plugin" compiler, read from the environment when a graph is compiled.

Key parts:
- :class:`Options`: one field per option, each with its default and its environment variable.
- :func:`current`: the options now in effect.

| field | environment variable | default | effect |
|---|---|---|---|
| ``freeze`` | ``TORCH_PLUGIN_FREEZE`` | ``1`` | inference graphs take parameters as constants (guarded by identity and version): conv+BN folding, constant folding (views of weights stay views), prepacked convolution weights |
| ``library_patterns`` | ``TORCH_PLUGIN_LIBRARY_PATTERNS`` | ``1`` | convolutions and matrix products (+epilogue) go to oneDNN |
| ``fusion`` | ``TORCH_PLUGIN_FUSION`` | ``1`` | pointwise/reduction/norm groups become generated C++ kernels |
| ``memory_planning`` | ``TORCH_PLUGIN_MEMORY_PLANNING`` | ``1`` | library outputs share one preplanned per-run arena (buffer reuse by liveness) |
| ``verify`` | ``TORCH_PLUGIN_VERIFY`` | ``0`` | run the IR verifier after every pass |
| ``dump_dir`` | ``TORCH_PLUGIN_DUMP_DIR`` | unset | write each graph before and after each pass there |
| ``log_kernels`` | ``TORCH_PLUGIN_LOGS`` contains ``kernels`` | off | print each generated kernel and its fusion group |
| ``log_patterns`` | ``TORCH_PLUGIN_LOGS`` contains ``patterns`` | off | print each library-pattern rule that fires or is rejected (rule name, source line, failed constraint) |
| ``cache_dir`` | ``TORCH_PLUGIN_CACHE_DIR`` | ``$XDG_CACHE_HOME/torch_plugin``, else ``~/.cache/torch_plugin`` (folders 0700, files 0600; an existing root owned by another user or writable by group/others is refused with a warning: disk caches off, kernels compile into a private temporary folder) | compiled kernels (``<sha256>.kernel``, ``cuda/``: verified entries keyed by the SHA-256 of source, compiler, flags, target and torch version), lowered inference graphs (``graphs/``, see ``graph_cache.py``); ``python -m torch_plugin.cache info|clear|evict`` (``torch_plugin/cache.py``) |
| (size limit) | ``TORCH_PLUGIN_CACHE_LIMIT_GB`` | ``4`` | least recently used entries are evicted after each new graph entry until the cache is under the limit |
| ``graph_cache`` | ``TORCH_PLUGIN_GRAPH_CACHE`` | ``1`` | a warm compile of an inference graph replays its cached lowering instead of tracing with AOTAutograd |
| ``cuda_graphs`` | ``TORCH_PLUGIN_CUDA_GRAPHS`` | ``1`` | CUDA inference graphs are captured into CUDA graphs where that is safe (``compiler/cuda_graphs.py``) |

Read by the C++ executor when it builds a step (not fields here):

| environment variable | default | effect |
|---|---|---|
| ``TORCH_PLUGIN_ONEDNN_WEIGHTS`` | ``borrowed`` | CPU linear steps read the frozen weight where it is (one copy of each weight: peak memory as eager's); ``packed`` reorders a copy into oneDNN's blocked layout (BERT-base batch 1 on 2 cores: about 5-10% faster, 300 MB more) |
| ``TORCH_PLUGIN_CUBLASLT_TUNING`` | ``1`` | CUDA products: time cuBLASLt's candidates and cuBLAS's gemm; ``0``: the heuristic's first; ``verbose``; ``gemm`` (tests) |
| ``TORCH_PLUGIN_CUBLASLT_CANDIDATES`` | ``8`` | how many candidates cuBLASLt's heuristic is asked for |
"""

from __future__ import annotations

import dataclasses
import os
import stat
import warnings


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() not in ("0", "false", "no", "off", "")


@dataclasses.dataclass(frozen=True)
class Options:
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
        }


def configured_cache_dir() -> str:
    """The cache root the environment names: ``TORCH_PLUGIN_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/torch_plugin``, else ``~/.cache/torch_plugin`` (not created, not checked;
    :func:`current` refuses an untrusted one)."""
    return os.environ.get("TORCH_PLUGIN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "torch_plugin",
    )


def current() -> Options:
    """The options in effect now, from the environment."""
    dump_dir = os.environ.get("TORCH_PLUGIN_DUMP_DIR", "")
    if dump_dir:
        os.makedirs(dump_dir, exist_ok=True)
    # Never a folder shared with other users: without HOME, expanduser reads the password
    # database (the C++ kernel cache's own default is the same).
    cache_dir = configured_cache_dir()
    graph_cache = _flag("TORCH_PLUGIN_GRAPH_CACHE", True)
    why = untrusted_cache_root(cache_dir)
    if why is not None:
        cache_dir = _private_cache_dir(cache_dir, why)
        graph_cache = False
    return Options(
        freeze=_flag("TORCH_PLUGIN_FREEZE", True),
        library_patterns=_flag("TORCH_PLUGIN_LIBRARY_PATTERNS", True),
        fusion=_flag("TORCH_PLUGIN_FUSION", True),
        memory_planning=_flag("TORCH_PLUGIN_MEMORY_PLANNING", True),
        verify=_flag("TORCH_PLUGIN_VERIFY", False),
        dump_dir=dump_dir,
        log_kernels="kernels" in os.environ.get("TORCH_PLUGIN_LOGS", "").split(","),
        log_patterns="patterns" in os.environ.get("TORCH_PLUGIN_LOGS", "").split(","),
        cache_dir=cache_dir,
        graph_cache=graph_cache,
        cuda_graphs=_flag("TORCH_PLUGIN_CUDA_GRAPHS", True),
    )


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
