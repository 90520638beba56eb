"""Layers of one class run as separate frames (each layer has a hook, so the model's frame
breaks at each call, as FSDP2's sharded layers do) share one compiled entry after the first
recompile (capture/shared_modules.py): the layer's module is guarded on its type and what the
graph read, its parameters and buffers are graph inputs. Before, each layer failed the
identity guard and recompiled until ``config.cache_size_limit`` sent the rest to eager.
Every test compares with an eager twin over calls (outputs, gradients, buffers, attributes
the forward writes) while parameters change between calls."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import torch_plugin
from torch_plugin.capture import convert_frame

pytestmark = pytest.mark.usefixtures("fresh_capture")


class Layer(nn.Module):
    def __init__(self, scale: int = 2, bias: bool = True) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8, bias=bias)
        self.norm = nn.LayerNorm(8)
        self.bn = nn.BatchNorm1d(8)
        self.drop = nn.Dropout(0.1)
        self.scale = scale

    def forward(self, x):
        y = self.drop(self.bn(self.norm(self.lin(x))).relu())
        self.last = y.detach()  # a write the caller sees, on each layer
        return y * self.scale + x


class Stack(nn.Module):
    def __init__(self, layers) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


def _hooked(model):
    """A no-op forward pre-hook on each layer: each layer call is a graph break, so each
    layer's forward is captured as its own frame."""
    for layer in model.layers:
        layer.register_forward_pre_hook(lambda m, args: None)
    return model


def _train_and_compare(model, backend, steps=3, rtol=1e-4, atol=1e-5):
    twin = copy.deepcopy(model)
    opt = torch_plugin.optimize(backend)(_hooked(model))
    for step in range(steps):
        x = torch.randn(4, 8)
        outs = []
        for fn, m in ((opt, model), (twin, twin)):
            torch.manual_seed(step)
            out = fn(x)
            out.pow(2).sum().backward()
            outs.append(out)
        torch.testing.assert_close(outs[0], outs[1], rtol=rtol, atol=atol)
        for (name, p), q in zip(model.named_parameters(), twin.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=rtol * 10, atol=atol * 10, msg=name)
        for (name, b), c in zip(model.named_buffers(), twin.buffers()):
            torch.testing.assert_close(b, c, rtol=rtol, atol=atol, msg=name)
        for i, (a, b) in enumerate(zip(model.layers, twin.layers)):
            torch.testing.assert_close(a.last, b.last, rtol=rtol, atol=atol, msg=f"layer {i}")
        with torch.no_grad():  # an optimizer step on both: the shared graph reads new values
            for p in [*model.parameters(), *twin.parameters()]:
                p -= 0.05 * p.grad
                p.grad = None


def test_twelve_layers_compile_twice_and_train_like_eager():
    torch.manual_seed(0)
    model = Stack([Layer() for _ in range(12)]).train()
    _train_and_compare(model, "aot_eager")
    # the first layer's specialized entry, then one shared entry for the other eleven
    assert torch_plugin.stats.graphs_compiled == 2
    assert torch_plugin.stats.recompiles == 1


def test_shared_entry_with_the_plugin_backend_in_inference():
    torch.manual_seed(0)
    model = Stack([Layer() for _ in range(6)]).eval()
    twin = copy.deepcopy(model)
    opt = torch_plugin.optimize("plugin")(_hooked(model))
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(4, 8)
            torch.testing.assert_close(opt(x), twin(x), rtol=1e-4, atol=1e-5)
            for p in [*model.parameters(), *twin.parameters()]:
                p.mul_(0.9)
    assert torch_plugin.stats.graphs_compiled == 2


def test_layers_that_differ_get_their_own_entries():
    """An int attribute the graph reads (``scale``), a missing bias, another training flag:
    each is guarded, so such a layer recompiles instead of running another layer's graph."""
    torch.manual_seed(0)
    layers = [Layer(), Layer(), Layer(scale=3), Layer(bias=False), Layer(), Layer()]
    model = Stack(layers).train()
    model.layers[5].eval()
    _train_and_compare(model, "aot_eager", steps=2)
    # layer 0 specialized; shared: one for layers 1 and 4, one each for 2, 3 and 5
    assert torch_plugin.stats.graphs_compiled == 5


def test_returning_the_module_guards_its_identity():
    class Returns(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x):
            return self.lin(x), self

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([Returns() for _ in range(4)])

        def forward(self, x):
            seen = []
            for layer in self.layers:
                x, m = layer(x)
                seen.append(m)
            return x, seen

    torch.manual_seed(0)
    model = _hooked(Outer())
    opt = torch_plugin.optimize("eager")(model)
    for _ in range(2):
        x = torch.randn(2, 4)
        got, want = opt(x), model(x)
        torch.testing.assert_close(got[0], want[0])
        assert all(a is b for a, b in zip(got[1], want[1]))
        assert [id(m) for m in got[1]] == [id(m) for m in model.layers]


def test_switched_off_each_layer_compiles(monkeypatch):
    monkeypatch.setattr(torch_plugin.config, "share_module_code", False)
    torch.manual_seed(0)
    model = Stack([Layer() for _ in range(4)]).eval()
    twin = copy.deepcopy(model)
    opt = torch_plugin.optimize("eager")(_hooked(model))
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(4, 8)
            torch.testing.assert_close(opt(x), twin(x))
    assert torch_plugin.stats.graphs_compiled == 4


def test_hf_bert_layers_as_frames_share_one_entry():
    """HF BertLayer's forward reads ``hasattr(self, ...)`` and passes ``self.feed_forward_chunk``
    to ``inspect.signature`` (apply_chunking_to_forward): neither may pin the layer object."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=64,
        vocab_size=100,
    )
    model = transformers.BertModel(config).eval()
    twin = copy.deepcopy(model)
    for layer in model.encoder.layer:
        layer.register_forward_pre_hook(lambda m, args, kwargs: None, with_kwargs=True)
    records: list = []
    convert_frame.listeners.append(records.append)
    try:
        opt = torch_plugin.optimize("eager")(model)
        with torch.no_grad():
            for _ in range(2):
                ids = torch.randint(3, 100, (2, 8))
                torch.testing.assert_close(opt(ids)[0], twin(ids)[0])
    finally:
        convert_frame.listeners.remove(records.append)
    # The layers' frame: BertLayer.forward (transformers 5.17) or the forward_with_checkpointing
    # wrapper that GradientCheckpointingLayer installs as the class's forward (5.24).
    layer_code = type(model.encoder.layer[0]).forward.__code__
    entries = sum(r.code is layer_code for r in records)
    # Four layers, one code object: its specialized entry, then at most one shared entry,
    # never one entry per layer.
    assert 1 <= entries <= 2, (layer_code.co_name, entries)


def _apply(fn, x):
    print(end="")  # a graph break: this function's resume function gets ``fn`` as argument
    return fn(x) * 2


class WithChunk(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def chunk(self, x):
        return self.lin(x).relu()

    def forward(self, x):
        return _apply(self.chunk, x)


def test_method_bound_to_a_layer_as_argument():
    """A frame whose argument is a method bound to a layer (HF's
    ``apply_chunking_to_forward(self.feed_forward_chunk, ...)``) shares its entry too."""
    torch.manual_seed(0)
    model = nn.Sequential(*[WithChunk() for _ in range(6)])
    twin = copy.deepcopy(model)
    opt = torch_plugin.optimize("eager")(model)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(2, 4)
            torch.testing.assert_close(opt(x), twin(x))
            for p in [*model.parameters(), *twin.parameters()]:
                p.mul_(1.1)
    assert torch_plugin.stats.recompiles <= 3
