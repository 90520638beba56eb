"""Issue #10 regressions: what a graph may assume about its inputs. Int arguments (0, 1 and
others) are guarded, static and dynamic graphs do not share the plugin graph cache, TorchScript
never runs on FakeTensors, inference tensors (no version counter) are captured.

Each case runs eager and each backend on deep copies of fresh random inputs, over several
calls (the compiling call, cached calls, calls that recompile), and compares the result and
every argument after the call (in-place mutations included): eager_comparison.py.
"""

import pytest
import torch
from eager_comparison import BACKENDS, run_against_eager

import torch_plugin


# --- 4. specialisation without a guard ---------------------------------------------------
def _times_int(x, k):
    return torch.sin(x) * k


@pytest.mark.parametrize("backend", BACKENDS)
def test_int_argument_zero_one_and_others(backend):
    x = torch.randn(4)
    run_against_eager(backend, _times_int, [(x, k) for k in (0, 1, 2, 3, 1, 0, 5)])


@pytest.mark.parametrize("backend", BACKENDS)
def test_int_argument_other_order(backend):
    run_against_eager(backend, _times_int, [(torch.randn(4), k) for k in (2, 3, 1, 0, 7)])


def test_plugin_graph_cache_not_shared_between_static_and_dynamic():
    """A graph recompiled with symbolic sizes has the code of its static twin; the plugin
    graph cache must not replay the static recipe for it (outputs of the old size)."""

    def f(x):
        return torch.relu(x) * 2 + 1

    run_against_eager("plugin", f, [(torch.randn(n, 8),) for n in (4, 5, 6, 4, 7)])
    # and in a fresh capture state (the disk cache is filled now)
    run_against_eager("plugin", f, [(torch.randn(n, 8),) for n in (5, 4, 9)])


# --- 6. TorchScript never runs on FakeTensors ---------------------------------------------
@torch.jit.script
def _scripted_bucket(rel: torch.Tensor, n: int) -> torch.Tensor:
    mid = n // 2
    return torch.where(rel.abs() < mid, rel, torch.sign(rel) * mid)


class _ScriptedScale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 3


_SCRIPTED_MODULE = torch.jit.script(_ScriptedScale())


def _calls_scripted_function(x):
    # HF DeBERTa-v2's make_log_bucket_position is a torch.jit.script function: run on
    # FakeTensors at capture it read data pointers (an illegal memory access on CUDA), and
    # the graph called the class torch.jit.ScriptFunction by name
    rel = torch.arange(x.shape[0])[:, None] - torch.arange(x.shape[1])[None, :]
    return x + _scripted_bucket(rel, 6)


def _calls_scripted_module(x):
    return _SCRIPTED_MODULE(x + 1) - 1


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn", [_calls_scripted_function, _calls_scripted_module], ids=["function", "module"]
)
def test_torchscript_is_inlined_or_breaks(backend, fn):
    run_against_eager(backend, fn, [(torch.randn(n, n),) for n in (8, 8, 10)])


# --- inference tensors as inputs: no version counter, captured all the same ----------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_inference_tensor_inputs(backend):
    """Tensors made under torch.inference_mode() keep no version counter; capture read it and
    failed internally (the frame ran unmodified, with a traceback on stderr)."""

    def g(a, b):
        return a * b + 1

    opt = torch_plugin.optimize(backend)(g)
    for _ in range(3):
        with torch.inference_mode():
            a, b = torch.randn(3), torch.randn(3)
        torch.testing.assert_close(opt(a, b), g(a, b))
        torch.testing.assert_close(opt(a, a), g(a, a))
    assert torch_plugin.stats.failures == []
