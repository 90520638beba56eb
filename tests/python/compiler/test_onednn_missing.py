"""Without oneDNN's library the package still imports and the "plugin" compiler runs
convolutions and matrix products through ATen (issue #13): the extension does not link
libdnnl; torch_plugin/_onednn.so, which does, is loaded on first use
(csrc/libs/onednn_loader.h). Simulated in a fresh process by pointing
``TORCH_PLUGIN_ONEDNN_LIBRARY`` at a library that cannot load."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from torch_plugin import _C

pytestmark = pytest.mark.skipif(
    not getattr(getattr(_C, "_compiler", None), "has_onednn", False),
    reason="built without oneDNN: nothing to lose",
)

SCRIPT = r"""
import warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch, torch_plugin
from torch_plugin import _C
assert not _C._compiler.has_onednn, "the missing library loaded?"
assert "libdnnl-missing" in _C._compiler.onednn_error, _C._compiler.onednn_error
assert any("oneDNN is not available" in str(w.message) for w in caught), [str(w.message) for w in caught]
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 36, 5)
).eval()
x = torch.randn(2, 3, 6, 6)
with torch.no_grad():
    fast = torch_plugin.optimize("plugin")(model)
    for _ in range(2):
        torch.testing.assert_close(fast(x), model(x), rtol=1e-4, atol=1e-5)
print("ok")
"""


def test_import_and_compile_without_onednn(tmp_path):
    env = dict(
        os.environ,
        TORCH_PLUGIN_ONEDNN_LIBRARY=str(tmp_path / "libdnnl-missing.so"),
        TORCH_PLUGIN_CACHE_DIR=str(tmp_path / "cache"),
    )
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout
