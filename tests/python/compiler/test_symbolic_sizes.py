"""Graphs with symbolic sizes go through the "plugin" compiler (torch_plugin/compiler/
size_variants.py): compiled once per concrete size into a bounded LRU of static variants,
never run as the eager graph, matching eager over batch and sequence sweeps, with
automatic dynamic, ``dynamic=True`` and ``mark_dynamic``, for inference and training; the
bound evicts the least recently used variant (logged on the ``recompiles`` channel) and
evicted sizes compile again correctly; a graph the static pipeline rejects still falls
back, saying why.

Sweeps of small BERT-like, GPT-2-like (HF transformers' tiny configs) and conv models run
here on a few sizes; the full sweeps (batch 1..16, sequence 16..128 with odd lengths) are
marked slow. The CUDA variants skip without a GPU."""

from __future__ import annotations

import logging

import pytest
import torch

import torch_plugin
from torch_plugin import config
from torch_plugin.compiler import pipeline, size_variants

pytestmark = pytest.mark.usefixtures("fresh_capture")

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]


@pytest.fixture(name="counts")
def _counts():
    """The counters' values before the test; ``counts()`` gives what the test added."""
    before = {**size_variants.counters, **pipeline.counters}

    def added() -> dict[str, int]:
        now = {**size_variants.counters, **pipeline.counters}
        return {k: now[k] - before[k] for k in now}

    return added


def _mode(device: str) -> str | None:
    # On CUDA the default mode may choose the eager graph when it measures it faster (the
    # driver's "never slower than eager" rule); reduce-overhead always keeps the compiled one.
    return "reduce-overhead" if device == "cuda" else None


def _compile(fn, device: str, dynamic: bool | None = None):
    return torch_plugin.optimize("plugin", dynamic=dynamic, mode=_mode(device))(fn)


def _flat(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "last_hidden_state"):
        return [out.last_hidden_state]
    return [o for o in out if isinstance(o, torch.Tensor)]


def _check(got, want, tol: float = 1e-4) -> None:
    for g, w in zip(_flat(got), _flat(want), strict=True):
        torch.testing.assert_close(g, w, rtol=tol, atol=tol)


def _assert_compiled(added: dict[str, int], variants: int) -> None:
    """At most two captures, no graph as the eager graph, every variant lowered."""
    assert torch_plugin.stats.graphs_compiled <= 2
    assert added["eager_graphs"] == 0
    assert added["unlowered"] == 0
    assert added["graphs"] >= 1
    assert added["variants"] >= variants


# --- models ---------------------------------------------------------------------------------


class ConvNet(torch.nn.Module):
    """Conv + batch norm + ReLU, a strided conv, global pooling, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv1(x)))
        y = torch.relu(self.conv2(y))
        return self.fc(y.mean((2, 3)))


def _conv(device: str):
    torch.manual_seed(0)
    model = ConvNet().eval().to(device)
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    return model, lambda b, s: (torch.randn(b, 3, 12, 12, device=device),)


def _bert(device: str):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        vocab_size=100, max_position_embeddings=160,
    )  # fmt: skip
    model = transformers.BertModel(cfg).eval().to(device)
    return model, lambda b, s: (torch.randint(0, 100, (b, s), device=device),)


def _gpt2(device: str):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=160,
        bos_token_id=0, eos_token_id=0, use_cache=False,
    )  # fmt: skip
    model = transformers.GPT2Model(cfg).eval().to(device)
    return model, lambda b, s: (torch.randint(0, 100, (b, s), device=device),)


MODELS = {"conv": _conv, "bert": _bert, "gpt2": _gpt2}


def _sweep(name: str, device: str, sizes: list[tuple[int, int]], dynamic, counts) -> None:
    model, make = MODELS[name](device)
    compiled = _compile(model, device, dynamic)
    with torch.no_grad():
        for b, s in sizes:
            for _ in range(2):  # compiling, then cached (on CUDA: captured, then replayed)
                inputs = make(b, s)
                _check(compiled(*inputs), model(*inputs))
    _assert_compiled(counts(), 2)


# Sizes swept here; the full sweeps are the slow tests below.
BATCHES = [1, 2, 3, 5, 4, 2]
SEQS = [16, 17, 31, 24, 16]


# dynamic=True on the transformers is slow here (several seconds a size on 2 cores).
_BATCH_CASES = [
    pytest.param(name, dynamic, id=f"{name}-{'dynamic' if dynamic else 'automatic'}",
                 marks=pytest.mark.slow if dynamic and name != "conv" else ())
    for name in MODELS for dynamic in (None, True)
]  # fmt: skip


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("name", "dynamic"), _BATCH_CASES)
def test_batch_sweep_compiled_per_size(name, device, dynamic, counts):
    _sweep(name, device, [(b, 16) for b in BATCHES], dynamic, counts)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_sequence_sweep_compiled_per_size(name, device, counts):
    _sweep(name, device, [(2, s) for s in SEQS], None, counts)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(MODELS))
def test_full_batch_sweep(name, device, counts):
    _sweep(name, device, [(b, 16) for b in range(1, 17)], None, counts)


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_full_sequence_sweep(name, device, counts):
    seqs = [16, 17, 23, 32, 33, 47, 64, 65, 96, 101, 127, 128]
    _sweep(name, device, [(2, s) for s in seqs], None, counts)


# --- how sizes become symbolic --------------------------------------------------------------


def _small(x: torch.Tensor, n: int) -> torch.Tensor:
    y = torch.nn.functional.gelu(x @ x.transpose(-1, -2))
    return y.reshape(y.size(0), -1).softmax(-1) * n + x.sum()


@pytest.mark.parametrize("device", DEVICES)
def test_mark_dynamic(device, counts):
    compiled = _compile(_small, device, False)
    with torch.no_grad():
        for b in (4, 6, 9, 4):
            x = torch.randn(b, 5, 7, device=device)
            torch_plugin.mark_dynamic(x, 0)
            _check(compiled(x, 3), _small(x, 3))
    assert torch_plugin.stats.graphs_compiled == 1
    _assert_compiled(counts(), 3)


@pytest.mark.parametrize(
    ("device", "mode"),
    [("cpu", None), pytest.param("cuda", None, marks=CUDA),
     pytest.param("cuda", "reduce-overhead", marks=CUDA)],
)  # fmt: skip
def test_symbolic_int_input_is_part_of_the_size_key(device, mode, counts):
    """Number inputs (SymInt example inputs at compile time; on CUDA in the default mode the
    compiled graph is timed against eager on them) are in the key."""
    compiled = torch_plugin.optimize("plugin", dynamic=True, mode=mode)(_small)
    with torch.no_grad():
        for b, n in ((3, 2), (3, 5), (4, 5), (3, 2)):
            x = torch.randn(b, 5, 7, device=device)
            _check(compiled(x, n), _small(x, n))
    added = counts()
    assert added["unlowered"] == 0 and added["variants"] >= 1
    if mode is not None or device == "cpu":  # default mode on CUDA may pick the eager graph
        _assert_compiled(added, 3)


def test_strides_are_part_of_the_size_key(counts):
    """Two inputs of the same sizes but other strides run different variants (each kernel
    assumes its strides)."""
    compiled = _compile(lambda x: torch.relu(x) * 2 + x.sum(0), "cpu", True)
    with torch.no_grad():
        for x in (
            torch.randn(6, 5),
            torch.randn(5, 6).t(),
            torch.randn(6, 5),
            torch.randn(7, 5),
            torch.randn(5, 7).t(),
        ):
            _check(compiled(x), torch.relu(x) * 2 + x.sum(0))
    assert counts()["eager_graphs"] == 0


def test_torch_compile_dynamic(counts):
    """torch.compile's own Dynamo with the "plugin" backend and dynamic=True: symbolic int
    placeholders (s0) in the ATen graph."""
    torch._dynamo.reset()
    model, make = _conv("cpu")
    compiled = torch.compile(model, backend="plugin", dynamic=True)
    with torch.no_grad():
        for b in (2, 3, 7, 2):
            x = make(b, 0)
            _check(compiled(*x), model(*x))
    added = counts()
    assert added["eager_graphs"] == 0 and added["unlowered"] == 0
    assert added["variants"] >= 3
    torch._dynamo.reset()


# --- the bounded cache ----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_bounded_cache_evicts_least_recently_used(device, counts, monkeypatch, caplog):
    monkeypatch.setattr(config, "size_variant_limit", 2)
    model, make = _conv(device)
    compiled = _compile(model, device, True)
    caplog.set_level(logging.INFO, logger="torch_plugin.recompiles")
    with torch.no_grad():
        # 2, 3 compiled; 2 used again (3 is now the least recently used); 4 evicts 3;
        # 3 compiles again and evicts 2; 4 is still there.
        for b in (2, 3, 2, 4, 3, 4, 5, 2):
            x = make(b, 0)
            _check(compiled(*x), model(*x))
    added = counts()
    assert added["variants"] == 6  # 2, 3, 4, 3, 5, 2
    assert added["evictions"] == 4
    evicted = [r.getMessage() for r in caplog.records if "evicted" in r.getMessage()]
    assert len(evicted) == 4
    assert "(3, 3, 12, 12)" in evicted[0] and "size_variant_limit=2" in evicted[0]
    assert "(2, 3, 12, 12)" in evicted[1]
    assert added["eager_graphs"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_sweep_longer_than_the_bound_matches_eager(device, counts, monkeypatch):
    monkeypatch.setattr(config, "size_variant_limit", 3)
    model, make = _bert(device)
    compiled = _compile(model, device, None)
    with torch.no_grad():
        for b in [*range(1, 9), *range(8, 0, -1)]:
            inputs = make(b, 16)
            _check(compiled(*inputs), model(*inputs))
    added = counts()
    assert added["evictions"] >= 8
    _assert_compiled(added, 8)


# --- training, fallback ---------------------------------------------------------------------


def test_training_forward_and_backward_compiled_per_size(counts):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4)
    )
    compiled = _compile(model, "cpu", True)
    for b in (2, 3, 5, 3):
        x = torch.randn(b, 8, requires_grad=True)
        compiled(x).square().sum().backward()
        got = [x.grad, *(p.grad for p in model.parameters())]
        x.grad = None
        model.zero_grad()
        model(x).square().sum().backward()
        want = [x.grad, *(p.grad for p in model.parameters())]
        model.zero_grad()
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    added = counts()
    assert added["graphs"] == 2  # the forward and the backward graph
    assert added["variants"] == 6 and added["unlowered"] == 0 and added["eager_graphs"] == 0


def test_graph_the_static_pipeline_rejects_falls_back_and_says_why(counts, monkeypatch, caplog):
    from torch_plugin.compiler import lowering

    real = lowering._lower_call

    def reject_gelu(g, node, env, device):
        if "gelu" in str(node.target):
            raise lowering.Unsupported("test: gelu is not lowered")
        return real(g, node, env, device)

    monkeypatch.setattr(lowering, "_lower_call", reject_gelu)
    caplog.set_level(logging.INFO)
    compiled = _compile(_small, "cpu", True)
    with torch.no_grad():
        for b in (3, 4):
            x = torch.randn(b, 5, 7)
            _check(compiled(x, 2), _small(x, 2))
    added = counts()
    assert added["eager_graphs"] == 1 and added["unlowered"] == 1
    messages = [r.getMessage() for r in caplog.records]
    assert any("run as the ATen graph" in m and "gelu is not lowered" in m for m in messages)
    assert any("runs as the eager graph" in m and "gelu" in m for m in messages)


# --- specialisation -------------------------------------------------------------------------


def test_specialize_makes_sizes_constants():
    """The specialised graph has no size computation left and static placeholders."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    def f(x, n):
        return x.reshape(x.size(0) * x.size(1), -1) * n, x.size(0) + 1

    mode = FakeTensorMode(shape_env=ShapeEnv())
    gm = make_fx(f, tracing_mode="symbolic")(torch.randn(4, 3, 2), 5)
    assert size_variants.has_symbolic_sizes(gm)
    static, layout = size_variants.specialize(gm, [((6, 3, 2), (6, 2, 1)), 7])
    del mode
    assert not size_variants.has_symbolic_sizes(static)
    assert not any("sym_size" in str(n.target) for n in static.graph.nodes)
    assert layout == [("t", 0), ("c", 7)]
    x = torch.randn(6, 3, 2)
    torch.testing.assert_close(static(x)[0], f(x, 7)[0])
