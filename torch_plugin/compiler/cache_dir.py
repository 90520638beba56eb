"""The disk cache folder of the "plugin" compiler: where it is, what it holds, its size limit.

This module is the one Python owner of the folder: the graph cache
(:mod:`torch_plugin.compiler.graph_cache`) writes through it, and the command line
(``python -m torch_plugin.cache``, :mod:`torch_plugin.cache`) reads and clears it through it.
The root is ``TORCH_PLUGIN_CACHE_DIR``, else ``$XDG_CACHE_HOME/torch_plugin``, else
``~/.cache/torch_plugin`` (:func:`torch_plugin.config.cache_root` reads
the environment; :func:`torch_plugin.compiler.options.current` refuses an untrusted root). The
C++ kernel cache receives the resolved root from Python (``PassOptions.cache_dir``). It holds:

- ``<sha256>.kernel``: generated CPU kernels (verified entries, csrc/runtime/cache_file.h);
- ``cuda/<sha256>.cubin`` / ``.ptx``: generated CUDA kernels (same format);
- ``cudnn/<sha256>.plan``: cuDNN convolution plans (same format; csrc/libs/cudnn_conv.h,
  PlanStore; the payload names its key, checked on load);
- ``graphs/<sha256>.json``: lowered inference graphs (:mod:`torch_plugin.compiler.graph_format`);
- ``<16 hex>.so``: CPU kernels of the format before 2026-11-25 (never loaded now; removed by
  ``clear`` and ``evict``).

Folders are created 0700 and files written 0600, atomically (:func:`write_private`).

Size limit: ``TORCH_PLUGIN_CACHE_LIMIT_GB`` (default 4). Each use of an entry sets its
modification time, so the oldest modification time is the least recently used; after each
new graph entry the compiler evicts the least recently used entries until the cache is under
the limit (:func:`enforce_limit`). Temporary files older than an hour (left by a killed
process) are removed too.

Key parts: :func:`cache_root`, :func:`info`, :func:`clear`, :func:`enforce_limit`,
:func:`touch`, :func:`write_private`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import tempfile
import time
from pathlib import Path

from torch_plugin import config

DEFAULT_LIMIT_GB = config.DEFAULT_CACHE_LIMIT_GB
_KINDS = {
    "cpu kernels": ("", re.compile(r"[0-9a-f]{64}\.kernel")),
    "cuda kernels": ("cuda", re.compile(r"[0-9a-f]{40,64}\.(cubin|ptx)")),
    "cudnn plans": ("cudnn", re.compile(r"[0-9a-f]{64}\.plan")),
    "graphs": ("graphs", re.compile(r"[0-9a-f]{64}\.json")),
    "old-format kernels": ("", re.compile(r"[0-9a-f]{16}\.so")),
}
_STALE_TEMP_S = 3600.0


def cache_root() -> Path:
    """The cache root as the environment sets it (not created); see
    :func:`torch_plugin.config.cache_root`."""
    return Path(config.cache_root())


def limit_bytes() -> int:
    """The size limit in bytes from ``TORCH_PLUGIN_CACHE_LIMIT_GB`` (default 4 GiB).
    Raises ValueError for a value that is not a non-negative number."""
    raw = config.cache_limit_gb()
    try:
        gb = float(raw)
    except ValueError:
        raise ValueError(
            f"TORCH_PLUGIN_CACHE_LIMIT_GB must be a number of GiB, got {raw!r}"
        ) from None
    if not gb >= 0:
        raise ValueError(f"TORCH_PLUGIN_CACHE_LIMIT_GB must be >= 0, got {raw!r}")
    return int(gb * 2**30)


@dataclasses.dataclass
class Entry:
    path: Path
    kind: str
    size: int
    mtime: float


def entries(root: Path | None = None) -> list[Entry]:
    """Every cache entry under ``root`` (default :func:`cache_root`), of the kinds listed in
    the module docstring; files of other names are not the cache's and are never touched."""
    root = cache_root() if root is None else root
    out = []
    for kind, (sub, pattern) in _KINDS.items():
        folder = root / sub if sub else root
        try:
            with os.scandir(folder) as it:
                for e in it:
                    if pattern.fullmatch(e.name) and e.is_file(follow_symlinks=False):
                        st = e.stat(follow_symlinks=False)
                        out.append(Entry(Path(e.path), kind, st.st_size, st.st_mtime))
        except FileNotFoundError:
            continue
    return out


def _stale_temporaries(root: Path) -> list[Path]:
    now = time.time()
    out = []
    for folder in (root, root / "cuda", root / "cudnn", root / "graphs"):
        try:
            with os.scandir(folder) as it:
                for e in it:
                    if (
                        e.name.startswith(".tmp-")
                        and e.is_file(follow_symlinks=False)
                        and now - e.stat(follow_symlinks=False).st_mtime > _STALE_TEMP_S
                    ):
                        out.append(Path(e.path))
        except FileNotFoundError:
            continue
    return out


@dataclasses.dataclass
class CacheInfo:
    """What :func:`info` reports: the root, entries and bytes per kind, the limit."""

    root: Path
    counts: dict[str, int]
    sizes: dict[str, int]
    limit: int

    def __str__(self) -> str:
        lines = [f"torch_plugin cache: {self.root}"]
        for kind in _KINDS:
            lines.append(f"  {kind}: {self.counts[kind]} entries, {human(self.sizes[kind])}")
        total = sum(self.sizes.values())
        lines.append(f"  total: {human(total)} of a {human(self.limit)} limit")
        return "\n".join(lines)


def human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def info(root: Path | None = None) -> CacheInfo:
    """Entries and bytes per kind under ``root`` (default :func:`cache_root`)."""
    root = cache_root() if root is None else root
    found = entries(root)
    counts = {k: sum(1 for e in found if e.kind == k) for k in _KINDS}
    sizes = {k: sum(e.size for e in found if e.kind == k) for k in _KINDS}
    return CacheInfo(root, counts, sizes, limit_bytes())


def clear(root: Path | None = None) -> int:
    """Remove every entry (and stale temporary file) under ``root``; return how many. Files
    that are not cache entries stay. Entries loaded by a running process stay valid in it."""
    root = cache_root() if root is None else root
    removed = 0
    for path in [e.path for e in entries(root)] + _stale_temporaries(root):
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:
            pass
    return removed


def enforce_limit(root: Path | None = None, limit: int | None = None) -> int:
    """Remove the least recently used entries (oldest modification time) until the entries
    under ``root`` take at most ``limit`` bytes (default :func:`limit_bytes`); old-format
    kernels and stale temporary files go first. Returns the bytes removed."""
    root = cache_root() if root is None else root
    limit = limit_bytes() if limit is None else limit
    found = entries(root)
    total = sum(e.size for e in found)
    freed = 0
    for path in _stale_temporaries(root):
        try:
            path.unlink()
        except FileNotFoundError:
            pass
    order = sorted(found, key=lambda e: (e.kind != "old-format kernels", e.mtime))
    for e in order:
        if total - freed <= limit and e.kind != "old-format kernels":
            break
        try:
            e.path.unlink()
            freed += e.size
        except FileNotFoundError:
            pass
    return freed


def touch(path: str | os.PathLike) -> None:
    """Mark an entry as used now (its modification time), for least-recently-used eviction."""
    try:
        os.utime(path)
    except OSError:
        pass


def make_private_dirs(folder: Path) -> None:
    """``mkdir -p`` with every folder it creates 0700 (``Path.mkdir(parents=True)`` gives the
    parents the default mode)."""
    missing = []
    while not folder.exists():
        missing.append(folder)
        folder = folder.parent
    for f in reversed(missing):
        with contextlib.suppress(FileExistsError):
            f.mkdir(mode=0o700)


def write_private(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` atomically (a temporary file with an unpredictable name in
    the same folder, flushed to disk, then renamed: a concurrent reader sees all or nothing),
    folders created 0700 and the file 0600. Raises OSError."""
    make_private_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
