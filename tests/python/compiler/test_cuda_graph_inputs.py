"""CUDA graph inputs (torch_plugin/compiler/cuda_graphs.py): inputs whose address stays put
are read in place, the others copied with one batched launch; an in-place input that moves
re-records the graph, at most RERECORD_LIMIT times, then is demoted to a copy. Against eager
over several calls whose inputs keep or move their address, checking the counters and that
the caller's tensors are never written. GPU tests; they skip without a GPU."""

from __future__ import annotations

import pytest
import torch

from torch_plugin.compiler import cuda_graphs

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _run(args):
    """A boxed graph: two outputs from three inputs (a matrix product, a reduction)."""
    p, x, b = args
    y = torch.tanh(x @ p + b)
    return [y, y.sum(dim=0)]


def _check(got, args):
    want = _run(args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def _delta(before):
    return {k: cuda_graphs.counters[k] - before[k] for k in before}


def _call_checked(runner, args):
    """Calls the runner and checks its outputs and that it wrote none of ``args``."""
    snapshots = [a.clone() for a in args]
    got = runner(args)
    torch.cuda.synchronize()
    for a, s in zip(args, snapshots):
        assert torch.equal(a, s), "the runner wrote a caller's tensor"
    _check(got, args)
    return got


@requires_cuda
def test_persistent_inputs_read_in_place_fresh_ones_copied():
    torch.manual_seed(0)
    runner = cuda_graphs.CudaGraphRunner(_run, "test graph", keep="always")
    p = torch.randn(32, 16, device="cuda")  # persistent: same tensor, updated in place
    b = torch.randn(16, device="cuda")
    before = dict(cuda_graphs.counters)
    kept = []
    for call in range(6):
        p.copy_(torch.randn_like(p))  # a parameter changed in place between calls
        x = torch.randn(8, 32, device="cuda") + call  # fresh, the old ones kept alive
        kept.append(x)
        _call_checked(runner, [p, x, b])
    d = _delta(before)
    assert d["captured"] == 1 and d["replays"] == 5, d
    # p and b kept their address from the first call to the second; x did not.
    assert d["inplace_inputs"] == 2 and d["copied_inputs"] == 1, d
    assert d["rerecords"] == 0 and d["demoted"] == 0, d


@requires_cuda
def test_moving_input_rerecords_then_is_demoted():
    torch.manual_seed(1)
    runner = cuda_graphs.CudaGraphRunner(_run, "test graph", keep="always")
    p = torch.randn(32, 16, device="cuda")
    x = torch.randn(8, 32, device="cuda")
    b = torch.randn(16, device="cuda")
    before = dict(cuda_graphs.counters)
    alive = []
    for call in range(3 + 2 * cuda_graphs.RERECORD_LIMIT):
        if call >= 2:  # from the third call on, p moves on every call (old ones alive)
            alive.append(p)
            p = torch.randn(32, 16, device="cuda")
        _call_checked(runner, [p, x, b])
    d = _delta(before)
    limit = cuda_graphs.RERECORD_LIMIT
    assert d["rerecords"] == limit + 1, d  # limit moves in place, then the demoting one
    assert d["demoted"] == 1, d
    assert d["captured"] == limit + 2, d
    assert runner.static_inputs[0] is not None  # p is copied now
    assert runner.static_inputs[1] is None and runner.static_inputs[2] is None


@requires_cuda
def test_freed_input_and_reused_address():
    """An in-place input freed by the caller, its address reused by another tensor: the
    replay reads the current tensor (the address is all the graph holds)."""
    torch.manual_seed(2)
    runner = cuda_graphs.CudaGraphRunner(_run, "test graph", keep="always")
    b = torch.randn(16, device="cuda")
    x = torch.randn(8, 32, device="cuda")
    for call in range(6):
        p = torch.randn(32, 16, device="cuda")  # the previous p is freed: same block, often
        _call_checked(runner, [p, x, b])
        del p
    assert runner.graph is not None


@requires_cuda
def test_other_sizes_strides_or_dtype_run_uncaptured():
    torch.manual_seed(3)
    runner = cuda_graphs.CudaGraphRunner(_run, "test graph", keep="always")
    p = torch.randn(32, 16, device="cuda")
    b = torch.randn(16, device="cuda")
    x = torch.randn(8, 32, device="cuda")
    for _ in range(3):
        _call_checked(runner, [p, x, b])
    before = dict(cuda_graphs.counters)
    _call_checked(runner, [p, torch.randn(5, 32, device="cuda"), b])
    _call_checked(runner, [p.t().contiguous().t(), x, b])  # other strides at p's sizes
    _call_checked(runner, [p.double(), x.double(), b.double()])
    d = _delta(before)
    assert d["replays"] == 0 and d["rerecords"] == 0, d
    _call_checked(runner, [p, x, b])
    assert _delta(before)["replays"] == 1


@requires_cuda
@pytest.mark.parametrize("keep_output", [True, False])
def test_output_of_an_earlier_compiled_graph(keep_output):
    """Two compiled graphs in reduce-overhead mode, the first one's output fed to the
    second: outputs match eager over calls that keep or drop the intermediate."""
    import torch_plugin

    torch_plugin.reset()
    torch.manual_seed(4)
    first = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU()).cuda().eval()
    second = torch.nn.Sequential(torch.nn.LayerNorm(64), torch.nn.Linear(64, 8)).cuda().eval()
    fa = torch_plugin.optimize("plugin", mode="reduce-overhead")(first)
    fb = torch_plugin.optimize("plugin", mode="reduce-overhead")(second)
    kept = []
    before = dict(cuda_graphs.counters)
    with torch.no_grad():
        for _ in range(6):
            x = torch.randn(4, 32, device="cuda")
            h = fa(x)
            snapshot = h.clone()
            out = fb(h)
            assert torch.equal(h, snapshot)
            torch.testing.assert_close(out, second(first(x)), rtol=1e-4, atol=1e-4)
            if keep_output:
                kept.append(h)
    d = _delta(before)
    assert d["captured"] >= 2 and d["replays"] >= 6, d
