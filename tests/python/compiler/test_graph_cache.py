"""The graph cache (torch_plugin/compiler/graph_cache.py): a second compile of the same
inference graph replays the cached lowering instead of tracing with AOTAutograd, gives
eager's results with the live module's weights, and graphs it must not take are traced."""

import pytest
import torch

import torch_plugin.backends.plugin as plugin_mod
from torch_plugin.compiler import graph_cache


class ConvBnRelu(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean((2, 3))), y.sum()


def _model():
    m = ConvBnRelu().eval()
    with torch.no_grad():  # non-trivial batch-norm statistics
        m.bn.running_mean.uniform_(-1, 1)
        m.bn.running_var.uniform_(0.5, 2)
    return m


@pytest.fixture(name="cache_dir")
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(tmp_path))
    return tmp_path


def _entries(cache_dir):
    return sorted((cache_dir / "graphs").glob("*.json")) if (cache_dir / "graphs").exists() else []


def _compile(fn, *inputs):
    return plugin_mod.plugin(torch.fx.symbolic_trace(fn), list(inputs))


def _no_aot(monkeypatch):
    import torch._functorch.aot_autograd as aot

    def fail(*args, **kwargs):
        raise AssertionError("AOTAutograd traced a graph that should come from the cache")

    monkeypatch.setattr(aot, "aot_module_simplified", fail)


def _check(compiled, model, *inputs):
    with torch.no_grad():
        got, want = compiled(*inputs), model(*inputs)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)


def test_warm_compile_replays_the_cache_with_live_weights(cache_dir, monkeypatch):
    model = _model()
    x = torch.randn(2, 3, 9, 9)
    with torch.no_grad():
        _check(_compile(model, x), model, torch.randn(2, 3, 9, 9))
    assert len(_entries(cache_dir)) == 1

    # Same architecture and metadata, other weights: the cache is hit (no tracing) and
    # the results are those of the new weights (weights are never cached).
    other = _model()
    _no_aot(monkeypatch)
    with torch.no_grad():
        compiled = _compile(other, x)
    _check(compiled, other, torch.randn(2, 3, 9, 9))
    assert len(_entries(cache_dir)) == 1

    # A weight changed in place after compiling: the frozen-argument guard recompiles
    # (from the recipe) and the new weight is used.
    with torch.no_grad():
        other.fc.weight.mul_(2)
    _check(compiled, other, torch.randn(2, 3, 9, 9))


def test_other_input_shapes_and_options_miss(cache_dir, monkeypatch):
    model = _model()
    with torch.no_grad():
        _compile(model, torch.randn(2, 3, 9, 9))
        _compile(model, torch.randn(1, 3, 9, 9))
        monkeypatch.setenv("TORCH_PLUGIN_FUSION", "0")
        compiled = _compile(model, torch.randn(1, 3, 9, 9))
    assert len(_entries(cache_dir)) == 3
    _check(compiled, model, torch.randn(1, 3, 9, 9))


def test_training_graphs_are_not_cached(cache_dir):
    model = _model().train()
    x = torch.randn(2, 3, 9, 9)
    compiled = _compile(model, x)  # grad mode on, parameters require grad
    out = compiled(x)
    out[0].sum().backward()
    assert _entries(cache_dir) == []


def test_outputs_aliasing_inputs_are_not_cached(cache_dir):
    def fn(x):
        return x.view(-1), torch.relu(x) + 1

    x = torch.randn(4, 5)
    with torch.no_grad():
        compiled = _compile(fn, x)
        got = compiled(x)
    assert _entries(cache_dir) == []
    torch.testing.assert_close(got[0], x.view(-1))
    torch.testing.assert_close(got[1], torch.relu(x) + 1)


def test_unreadable_entry_is_ignored_and_rewritten(cache_dir):
    model = _model()
    x = torch.randn(2, 3, 9, 9)
    with torch.no_grad():
        _compile(model, x)
    (entry,) = _entries(cache_dir)
    entry.write_bytes(b"not JSON")
    with torch.no_grad():
        compiled = _compile(model, x)
    _check(compiled, model, torch.randn(2, 3, 9, 9))
    assert graph_cache.load(str(cache_dir), entry.stem) is not None


def test_cache_can_be_turned_off(cache_dir, monkeypatch):
    monkeypatch.setenv("TORCH_PLUGIN_GRAPH_CACHE", "0")
    model = _model()
    with torch.no_grad():
        compiled = _compile(model, torch.randn(2, 3, 9, 9))
    assert _entries(cache_dir) == []
    _check(compiled, model, torch.randn(2, 3, 9, 9))


@pytest.mark.parametrize("first_autocast", [True, False])
def test_autocast_is_part_of_the_key(cache_dir, first_autocast):
    """A graph compiled under ambient autocast (entered outside the captured code, so not in
    the graph's code) and the same graph compiled without it are two entries: the bf16 recipe
    replayed for fp32 gave bf16-precision results (and, on CUDA, kernels whose baked dtypes
    read past their buffers)."""
    model = _model()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        want = model(x)
        with torch.autocast("cpu", torch.bfloat16):
            want_bf16 = model(x)
    for use_autocast in (first_autocast, not first_autocast):
        with torch.no_grad():
            if use_autocast:
                with torch.autocast("cpu", torch.bfloat16):
                    got = _compile(model, x)(x)
                expected = want_bf16
            else:
                got = _compile(model, x)(x)
                expected = want
        for g, w in zip(got, expected):
            assert g.dtype == w.dtype
            tol = 1e-4 if w.dtype == torch.float32 else 5e-2
            torch.testing.assert_close(g, w, rtol=tol, atol=tol)
    assert len(_entries(cache_dir)) == 2


class Fp32Region(torch.nn.Module):
    """HF Llama's rotary-embedding idiom: a product computed in fp32 inside
    ``autocast(enabled=False)`` while the caller runs under bf16 autocast."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 16))

    def forward(self, x):
        with torch.autocast("cpu", enabled=False):
            angles = torch.bmm(x.float(), self.w.expand(x.shape[0], 16, 16))
        return torch.cos(angles), torch.relu(x @ self.w)


@pytest.mark.usefixtures("fresh_capture")
def test_replayed_graph_runs_with_autocast_off(cache_dir, monkeypatch):
    """A replayed recipe runs as AOTAutograd's wrapper runs a traced graph: with autocast
    off (the traced graph has autocast's casts written out). Run under the caller's
    autocast, an fp32 product that the graph keeps as an ATen call was recomputed in bf16
    (HF Llama's rotary angles on an H100: max error 4.0 for an output scale of 3.6)."""
    import torch_plugin

    # Products stay ATen calls on the CPU too (on CUDA, the rotary product is one anyway).
    monkeypatch.setenv("TORCH_PLUGIN_LIBRARY_PATTERNS", "0")
    for attempt in range(2):  # records the recipe, then replays it (no tracing)
        torch_plugin.reset()
        if attempt:
            _no_aot(monkeypatch)
        model = Fp32Region()
        fast = torch_plugin.optimize("plugin")(model)
        for _ in range(2):
            x = torch.randn(3, 8, 16) * 30  # angles of ~100: bf16 rounds them by ~0.5
            with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
                got, want = fast(x), model(x)
            for g, w in zip(got, want):
                assert g.dtype == w.dtype
                tol = 1e-4 if w.dtype == torch.float32 else 5e-2
                torch.testing.assert_close(g, w, rtol=tol, atol=tol * w.abs().max().item())
    assert len(_entries(cache_dir)) == 1


def _tampered(data: bytes, edit) -> bytes:
    """The entry ``data`` with ``edit`` applied to its graph and the content hash recomputed
    (what an attacker who can write the cache can do)."""
    import hashlib
    import json

    top = json.loads(data)
    edit(top["graph"])
    hashed = {"key": top["key"], "graph": top["graph"]}
    body = json.dumps(hashed, sort_keys=True, separators=(",", ":")).encode()
    top["sha256"] = hashlib.sha256(body).hexdigest()
    return json.dumps(top).encode()


def _set_dtype(graph):
    graph["values"][0][1] = 99


def _unknown_op(graph):
    graph["nodes"][0][0] = "aten::no_such_op"


def _dangling_id(graph):
    graph["nodes"][0][2][0] = ["t", 10_000]


def _code_in_constant(graph):
    graph["nodes"][0][2].append(["c", {"__reduce__": "os.system"}])


def _frozen_out_of_range(graph):
    graph["constants"][0][1] = 10_000


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda data: data[: len(data) // 2],  # truncated
        lambda data: data.replace(b'"inputs"', b'"inputt"', 1),  # a flipped byte
        lambda data: _tampered(data, _set_dtype),
        lambda data: _tampered(data, _unknown_op),
        lambda data: _tampered(data, _dangling_id),
        lambda data: _tampered(data, _code_in_constant),
        lambda data: _tampered(data, _frozen_out_of_range),
        lambda data: data.replace(b'"format": 6', b'"format": 5', 1),
        lambda data: data.replace(b'"key": "', b'"key": "0', 1),
    ],
    ids=["truncated", "flipped", "dtype", "op", "dangling_id", "object", "frozen", "format", "key"],
)
def test_bad_entries_are_recompiled_never_trusted(cache_dir, corrupt, caplog):
    """A corrupted or tampered entry is logged and recompiled (then overwritten); the
    result is eager's."""
    model = _model()
    x = torch.randn(2, 3, 9, 9)
    with torch.no_grad():
        _compile(model, x)
    (entry,) = _entries(cache_dir)
    entry.write_bytes(corrupt(entry.read_bytes()))
    with torch.no_grad():
        compiled = _compile(model, x)
    _check(compiled, model, torch.randn(2, 3, 9, 9))
    assert "ignoring graph cache entry" in caplog.text
    assert graph_cache.load(str(cache_dir), entry.stem) is not None  # rewritten


class _Payload:
    def __reduce__(self):
        import pathlib

        return (pathlib.Path.touch, (pathlib.Path(_Payload.marker),))


def test_a_planted_pickle_is_never_loaded(cache_dir, tmp_path):
    """Entries are JSON: a pickle planted under an entry's name (the format before this one)
    is never unpickled."""
    import pickle

    _Payload.marker = str(tmp_path / "pwned")
    model = _model()
    x = torch.randn(2, 3, 9, 9)
    with torch.no_grad():
        _compile(model, x)
    (entry,) = _entries(cache_dir)
    for path in (entry, entry.with_suffix(".pkl")):
        path.write_bytes(pickle.dumps((3, _Payload())))
    with torch.no_grad():
        _compile(model, x)
    assert not (tmp_path / "pwned").exists()


def test_entries_are_private(cache_dir):
    model = _model()
    with torch.no_grad():
        _compile(model, torch.randn(2, 3, 9, 9))
    (entry,) = _entries(cache_dir)
    assert entry.stat().st_mode & 0o777 == 0o600
    assert entry.parent.stat().st_mode & 0o777 == 0o700
