"""The cache root must be private (issue #13): an existing root owned by another user or
writable by group or others is not used; a warning names it, the disk caches are off for
the process, and kernels compile into a private folder instead."""

from __future__ import annotations

import os
import random
import warnings

import pytest
import torch

from torch_plugin.compiler import options

pytestmark = pytest.mark.usefixtures("fresh_capture")


def _compile_and_check():
    import torch_plugin

    scale = random.random()  # a kernel no earlier test compiled

    def fn(x):
        return torch.tanh(x * scale - 0.25) + x

    fast = torch_plugin.optimize("plugin")(fn)
    for _ in range(2):
        x = torch.randn(33)
        torch.testing.assert_close(fast(x), fn(x))


def test_world_writable_root_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "shared"
    root.mkdir()
    root.chmod(0o777)
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(root))
    with pytest.warns(UserWarning, match="writable by group or others"):
        opts = options.current()
    assert opts.cache_dir != str(root) and not opts.graph_cache
    assert os.stat(opts.cache_dir).st_mode & 0o777 == 0o700
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _compile_and_check()
    assert os.listdir(root) == []


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give a folder to another user")
def test_root_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    root = tmp_path / "theirs"
    root.mkdir(mode=0o700)
    os.chown(root, 12345, 12345)
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(root))
    with pytest.warns(UserWarning, match="owned by uid 12345"):
        opts = options.current()
    assert opts.cache_dir != str(root) and not opts.graph_cache


def test_private_root_is_used(tmp_path, monkeypatch):
    root = tmp_path / "mine"
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(root))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opts = options.current()
        assert opts.cache_dir == str(root) and opts.graph_cache
        _compile_and_check()
    assert any(p.suffix == ".kernel" for p in root.iterdir())
