"""``python -m torch_plugin.cache info|clear|evict`` and the least-recently-used size limit
(torch_plugin/cache.py, issue #13)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

import torch_plugin
from torch_plugin import _C, cache

pytestmark = pytest.mark.usefixtures("fresh_capture")


@pytest.fixture
def root(tmp_path, monkeypatch):
    r = tmp_path / "cache"
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(r))
    monkeypatch.delenv("TORCH_PLUGIN_CACHE_LIMIT_GB", raising=False)
    return r


def _fill(root, n_kernels: int = 3, n_graphs: int = 2, size: int = 1000):
    """Entries named as the caches name them, with distinct ages (oldest first)."""
    (root / "graphs").mkdir(parents=True)
    (root / "cuda").mkdir()
    (root / "cudnn").mkdir()
    paths = []
    for i in range(n_kernels):
        paths.append(root / f"{i:064x}.kernel")
    for i in range(n_graphs):
        paths.append(root / "graphs" / f"{i + 100:064x}.json")
    paths.append(root / "cuda" / f"{7:040x}.cubin")
    paths.append(root / "cudnn" / f"{9:064x}.plan")
    now = time.time()
    for age, p in enumerate(reversed(paths)):
        p.write_bytes(b"x" * size)
        os.utime(p, (now - 100 * age, now - 100 * age))
    (root / "notes.txt").write_text("not the cache's")
    return paths  # oldest first


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "torch_plugin.cache", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_info_and_clear_from_the_command_line(root):
    _fill(root)
    out = _cli("info")
    assert out.returncode == 0, out.stderr
    assert str(root) in out.stdout
    assert "cpu kernels: 3 entries" in out.stdout and "graphs: 2 entries" in out.stdout
    assert "cuda kernels: 1 entries" in out.stdout and "limit" in out.stdout
    assert "cudnn plans: 1 entries" in out.stdout
    out = _cli("clear")
    assert out.returncode == 0 and "removed 7 entries" in out.stdout, out
    assert cache.entries(root) == []
    assert (root / "notes.txt").exists(), "files that are not entries stay"


def test_bad_limit_is_a_clear_error(root, monkeypatch):
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_LIMIT_GB", "lots")
    out = _cli("evict")
    assert out.returncode == 2 and "TORCH_PLUGIN_CACHE_LIMIT_GB" in out.stderr


def test_evict_removes_least_recently_used_first(root):
    paths = _fill(root, size=1000)  # 7 entries, 7000 bytes
    freed = cache.enforce_limit(root, limit=3500)
    assert freed == 4000
    assert [p.exists() for p in paths] == [False] * 4 + [True] * 3
    assert cache.enforce_limit(root, limit=3500) == 0


def test_using_an_entry_keeps_it(root):
    """A warm compile marks its graph and kernel entries as used; eviction under pressure
    then removes the entries of the graph not used since."""

    def first(x):
        return torch.sigmoid(x * 0.3125 + 1.5) * x

    def second(x):
        return torch.tanh(x * 0.4375 - 1.0) + x

    x = torch.randn(33)
    with torch.no_grad():
        for fn in (first, second):
            torch_plugin.optimize("plugin")(fn)(x)
    old = time.time() - 10_000
    for e in cache.entries(root):
        os.utime(e.path, (old, old))
    torch_plugin.reset()
    if hasattr(_C, "_compiler"):
        _C._compiler.forget_loaded_kernels()
    with torch.no_grad():
        torch.testing.assert_close(torch_plugin.optimize("plugin")(second)(x), second(x))
    used = {e.path for e in cache.entries(root) if e.mtime > old + 1}
    assert any(p.suffix == ".json" for p in used) and any(p.suffix == ".kernel" for p in used)
    total_used = sum(e.size for e in cache.entries(root) if e.path in used)
    cache.enforce_limit(root, limit=total_used)
    assert {e.path for e in cache.entries(root)} == used


def test_a_new_graph_entry_enforces_the_limit(root, monkeypatch):
    paths = _fill(root, size=4000)
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_LIMIT_GB", str(10_000 / 2**30))

    def fn(x):
        # No generated kernel (flip is not fused, the subtraction is a lone op): only the
        # graph entry is new, smaller than the limit (a kernel's shared object is not).
        return torch.flip(x, [0]) - x

    x = torch.randn(35)
    with torch.no_grad():
        torch.testing.assert_close(torch_plugin.optimize("plugin")(fn)(x), fn(x))
    assert sum(e.size for e in cache.entries(root)) <= 10_000
    assert not paths[0].exists()  # the oldest went first
