"""The generated-kernel cache (csrc/runtime/cpu/kernel_cache.cpp) with hostile paths: the C++
compiler runs without a shell on an argument vector, so a cache folder whose name holds
spaces, quotes or ``$(...)`` compiles and runs nothing else; folders the caches create are
0700 and compiled kernels 0600 (issue #13)."""

from __future__ import annotations

import os
import random
import stat

import pytest
import torch

from torch_plugin import _C

pytestmark = [
    pytest.mark.usefixtures("fresh_capture"),
    pytest.mark.skipif(not hasattr(_C, "_compiler"), reason="built without the compiler"),
]


def test_cache_path_with_shell_syntax_runs_nothing(tmp_path, monkeypatch):
    import torch_plugin

    root = tmp_path / "a b $(touch pwned) 'q\" `touch pwned2`" / "cache"
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(root))
    monkeypatch.chdir(tmp_path)
    scale = random.random()  # a kernel source no earlier test compiled

    def fn(x):
        return torch.sigmoid(x * scale + 1.5) * x

    before = _C._compiler.kernel_cache_stats()["compiled"]
    fast = torch_plugin.optimize("plugin")(fn)
    for _ in range(2):
        x = torch.randn(67)
        torch.testing.assert_close(fast(x), fn(x))
    assert _C._compiler.kernel_cache_stats()["compiled"] > before
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    kernels = [p for p in root.iterdir() if p.suffix == ".kernel"]
    assert kernels, sorted(os.listdir(root))
    for p in kernels:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    for folder in (root, root.parent, root / "graphs"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert not [p for p in root.iterdir() if p.name.startswith(".tmp-")]
