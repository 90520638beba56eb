"""The vision models of issue #12 (timm regnety_002 and crossvit_tiny_240; torchvision
deeplabv3_mobilenet_v3_large, googlenet and inception_v3 with their auxiliary heads), random
weights, small inputs: one graph and no break in inference and in a training step (train
mode: BatchNorm statistics, dropout, the auxiliary outputs as torchvision namedtuples),
equal to eager over calls (outputs, gradients, buffers), the second call compiling nothing,
and ``export`` matching eager. At the start of this work RegNet made 43 graphs (a graph
break at each ``self.children()``, then a recompile per stage), CrossViT 9 (``List[Tensor]``
in ``torch.jit.annotate``), googlenet/inception_v3 in train mode broke at their output
namedtuples (taken for torch classes: their module name starts with "torch")."""

from __future__ import annotations

import pytest
import torch

import torch_plugin

torchvision = pytest.importorskip("torchvision")
timm = pytest.importorskip("timm")

pytestmark = pytest.mark.usefixtures("fresh_capture")

# name -> (model factory, input height/width)
MODELS = {
    "regnety_002": (lambda: timm.create_model("regnety_002", pretrained=False), 64),
    "crossvit_tiny_240": (lambda: timm.create_model("crossvit_tiny_240", pretrained=False), 240),
    "deeplabv3_mobilenet_v3_large": (
        lambda: torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=5
        ),
        64,
    ),
    "googlenet": (
        lambda: torchvision.models.googlenet(weights=None, aux_logits=True, init_weights=False),
        64,
    ),
    "inception_v3": (
        lambda: torchvision.models.inception_v3(weights=None, aux_logits=True, init_weights=False),
        299,
    ),
}


def _tensors(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [t for v in out.values() for t in _tensors(v)]
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in _tensors(v)]
    return []


def _assert_same(got, want, **tol):
    assert type(got) is type(want), (type(got), type(want))
    g, w = _tensors(got), _tensors(want)
    assert len(g) == len(w) and w
    for a, b in zip(g, w):
        torch.testing.assert_close(a, b, **tol)


def _input(name):
    size = MODELS[name][1]
    return torch.randn(2, 3, size, size)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_one_graph_in_inference_matching_eager(name):
    torch.manual_seed(0)
    model = MODELS[name][0]().eval()
    opt = torch_plugin.optimize("eager")(model)
    with torch.no_grad():
        for call in range(2):
            x = _input(name)
            _assert_same(opt(x), model(x))
            if call == 0:
                compiled = torch_plugin.stats.graphs_compiled
    assert torch_plugin.stats.graph_breaks == [], torch_plugin.stats.graph_breaks
    assert torch_plugin.stats.failures == [], torch_plugin.stats.failures
    assert compiled == 1 and torch_plugin.stats.graphs_compiled == 1


@pytest.mark.parametrize("name", sorted(MODELS))
def test_one_graph_in_a_training_step_matching_eager(name):
    """Two train-mode steps (the generator reseeded before each call, so dropout draws the
    same masks): loss, every gradient and every buffer (BatchNorm statistics and
    ``num_batches_tracked``) equal eager's on a copy of the model."""
    import copy

    torch.manual_seed(0)
    model = MODELS[name][0]().train()
    twin = copy.deepcopy(model)
    opt = torch_plugin.optimize("aot_eager")(model)
    for step in range(2):
        x = _input(name)
        results = []
        for fn, m in ((opt, model), (twin, twin)):
            torch.manual_seed(100 + step)
            m.zero_grad(set_to_none=True)
            out = fn(x)
            loss = sum(t.float().pow(2).mean() for t in _tensors(out))
            loss.backward()
            grads = {k: p.grad for k, p in m.named_parameters() if p.grad is not None}
            results.append((out, loss.detach(), grads, dict(m.named_buffers())))
        (out, loss, grads, bufs), (want_out, want_loss, want_grads, want_bufs) = results
        assert type(out) is type(want_out)
        torch.testing.assert_close(loss, want_loss, rtol=1e-4, atol=1e-5)
        assert grads.keys() == want_grads.keys() and grads
        for k in grads:
            torch.testing.assert_close(grads[k], want_grads[k], rtol=1e-3, atol=1e-4, msg=k)
        assert bufs.keys() == want_bufs.keys()
        for k in bufs:
            torch.testing.assert_close(bufs[k], want_bufs[k], rtol=1e-4, atol=1e-5, msg=k)
        if step == 0:
            compiled = torch_plugin.stats.graphs_compiled
    assert torch_plugin.stats.graph_breaks == [], torch_plugin.stats.graph_breaks
    assert torch_plugin.stats.failures == [], torch_plugin.stats.failures
    assert compiled == 1 and torch_plugin.stats.graphs_compiled == 1


@pytest.mark.parametrize("name", sorted(MODELS))
def test_export_matches_eager(name):
    torch.manual_seed(0)
    model = MODELS[name][0]().eval()
    gm, _ = torch_plugin.export(model, _input(name))
    with torch.no_grad():
        for _ in range(2):
            x = _input(name)
            _assert_same(gm(x), model(x))
