"""Inference of models that gave silent wrong results (issue #10): torchvision swin_t (its
shifted-window mask is built with tensor setitem, which capture dropped) and HF CLIP (a
ModelOutput attribute written after a graph break landed on a copy). Each backend's
outputs are compared with eager over three calls: the compile, a cached call with fresh
inputs, and a recompile with another batch size."""

import copy

import pytest
import torch

import torch_plugin

torchvision = pytest.importorskip("torchvision")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("fresh_capture")
TOL = {"eager": 1e-5, "aot_eager": 1e-4, "plugin": 2e-3}


def _swin_t():
    torch.manual_seed(0)
    model = torchvision.models.swin_t(weights=None, num_classes=10).eval()

    def inputs(batch):
        return (torch.randn(batch, 3, 64, 64),), {}

    return model, inputs, lambda out: [out]


def _clip():
    torch.manual_seed(0)
    cfg = transformers.CLIPConfig(
        text_config={
            "vocab_size": 200,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "max_position_embeddings": 32,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "image_size": 32,
            "patch_size": 8,
        },
        projection_dim=16,
    )
    model = transformers.CLIPModel(cfg).eval()

    def inputs(batch):
        ids = torch.randint(0, 200, (batch, 8))
        return (), {"input_ids": ids, "pixel_values": torch.randn(batch, 3, 32, 32)}

    def outputs(out):
        return [out.logits_per_image, out.text_embeds, out.image_embeds]

    return model, inputs, outputs


@pytest.mark.parametrize("backend", ["eager", "aot_eager", "plugin"])
@pytest.mark.parametrize("make", [_swin_t, _clip], ids=["swin_t", "clip"])
def test_inference_matches_eager(make, backend):
    model, inputs, outputs = make()
    om = torch_plugin.optimize(backend)(copy.deepcopy(model))
    with torch.no_grad():
        for batch in (2, 2, 3):
            args, kwargs = inputs(batch)
            want = outputs(model(*args, **kwargs))
            got = outputs(om(*args, **kwargs))
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert g.shape == w.shape
                scale = max(w.abs().max().item(), 1.0)
                assert (g - w).abs().max().item() <= TOL[backend] * scale
