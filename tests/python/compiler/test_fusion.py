"""fusion + codegen: pointwise chains become one generated C++ kernel that matches eager
(odd sizes, broadcasting, non-contiguous inputs, scalars), cached on disk."""

import pytest
import torch

from torch_plugin import _C


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))


def chain(x, y, b):
    return torch.nn.functional.gelu(x * y + b).sigmoid() - 1.5 * torch.relu(x).sqrt()


def silu_chain(x, y, b):
    return torch.nn.functional.silu(x - y) * torch.tanh(b) / (1.0 + torch.exp(-x))


@pytest.mark.parametrize("fn", [chain, silu_chain])
@pytest.mark.parametrize(
    "make",
    [
        lambda: (torch.randn(33, 65), torch.randn(33, 65), torch.randn(65)),
        lambda: (torch.randn(65, 33).t(), torch.randn(33, 65), torch.randn(33, 1)),
        lambda: (
            torch.randn(2, 7, 9, 3).permute(0, 3, 1, 2),
            torch.randn(2, 3, 7, 9),
            torch.randn(3, 1, 1),
        ),
        lambda: (torch.randn(300, 257), torch.randn(257), torch.randn(())),
    ],
)
def test_pointwise_chain_matches_eager(fn, make, compile_plugin, assert_close):
    c = compile_plugin(fn, *make())
    for _ in range(2):
        args = make()
        assert_close(c(*args), fn(*args))


def test_kernels_cached_on_disk(compile_plugin, assert_close):
    def g(x):
        return torch.sigmoid(x * 3.25) + 0.125

    x = torch.randn(17, 5)
    before = _C._compiler.kernel_cache_stats()
    compile_plugin(g, x)
    mid = _C._compiler.kernel_cache_stats()
    assert mid["compiled"] + mid["disk_hits"] > before["compiled"] + before["disk_hits"]
    c = compile_plugin(g, x)  # same source: found in memory, no compiler run
    after = _C._compiler.kernel_cache_stats()
    assert after["compiled"] == mid["compiled"]
    assert_close(c(x), g(x))
