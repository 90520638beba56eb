"""Real models through ``optimize("plugin")`` match eager on CPU (fp32, max abs error
relative to the output scale <= 1e-4), and a second call with new inputs reuses the compiled
frames. Models come from configs with random weights. The training steps use torch.compile
(Dynamo) as the capture front, which also covers ``torch.compile(backend=plugin)``."""

import pytest
import torch

import torch_plugin

torchvision = pytest.importorskip("torchvision")
transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _no_graph_cache(monkeypatch):
    """Trace every graph with AOTAutograd here (a graph cache filled by an earlier run
    would skip it); the cache's own path is tested in test_graph_cache.py."""
    monkeypatch.setenv("TORCH_PLUGIN_GRAPH_CACHE", "0")


def _vision(name, size=64, **kw):
    def make():
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)(weights=None, **kw).eval()
        return model, lambda: (torch.randn(2, 3, size, size),)

    return make


def _hf(kind):
    def make():
        torch.manual_seed(0)
        if kind == "bert":
            cfg = transformers.BertConfig(
                hidden_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                intermediate_size=128,
                vocab_size=500,
            )
            model = transformers.BertModel(cfg).eval()
        else:
            cfg = transformers.GPT2Config(
                n_embd=64, n_layer=2, n_head=4, vocab_size=500, n_positions=64
            )
            model = transformers.GPT2Model(cfg).eval()
        return model, lambda: (torch.randint(0, 500, (2, 16)),)

    return make


def _last_hidden(out):
    return out if isinstance(out, torch.Tensor) else out[0]


@pytest.mark.parametrize(
    "make",
    [
        _vision("resnet18"),
        pytest.param(_vision("resnet50"), marks=pytest.mark.slow),
        pytest.param(_vision("mobilenet_v3_large"), marks=pytest.mark.slow),
        pytest.param(_vision("vit_b_16", size=224), marks=pytest.mark.slow),
        _hf("bert"),
        _hf("gpt2"),
    ],
    ids=["resnet18", "resnet50", "mobilenet_v3_large", "vit_b_16", "bert", "gpt2"],
)
@pytest.mark.usefixtures("fresh_capture")
def test_inference_matches_eager(make):
    model, inputs = make()
    compiled = torch_plugin.optimize("plugin")(model)
    with torch.no_grad():
        for call in range(2):
            args = inputs()
            got, want = _last_hidden(compiled(*args)), _last_hidden(model(*args))
            err = (got - want).abs().max().item()
            assert err <= 1e-4 * max(1.0, want.abs().max().item()), err
            if call == 0:
                graphs = torch_plugin.stats.graphs_compiled
                assert graphs >= 1
    assert torch_plugin.stats.recompiles == 0
    assert torch_plugin.stats.graphs_compiled == graphs


@pytest.mark.parametrize("make", [_vision("resnet18"), _hf("bert")], ids=["resnet18", "bert"])
def test_training_step_gradients_match(make):
    from torch_plugin.backends.plugin import plugin

    torch._dynamo.reset()
    model, inputs = make()
    model.train()
    if hasattr(model.config if hasattr(model, "config") else None, "hidden_dropout_prob"):
        model.config.hidden_dropout_prob = 0.0
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    args = inputs()
    compiled = torch.compile(model, backend=plugin)
    _last_hidden(compiled(*args)).float().pow(2).mean().backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    _last_hidden(model(*args)).float().pow(2).mean().backward()
    for n, p in model.named_parameters():
        if p.grad is None:
            continue
        scale = max(1.0, p.grad.abs().max().item())
        assert (got[n] - p.grad).abs().max().item() <= 1e-3 * scale, n
