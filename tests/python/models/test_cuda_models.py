"""The issue #11 models on CUDA through optimize("plugin") against eager (GPU only).

Small configs of the benchmark models (HF BERT, GPT-2 with use_cache=False, a Llama-style
decoder; torchvision ViT and ResNet-18), random weights, inference: fp32 with TF32 off within
1e-4 of the output's scale, and bf16 autocast within 1e-2, over three calls (compile, cached
call with fresh inputs, one more for the CUDA graph replay), in the default mode and in
"reduce-overhead". Each model is compiled twice in a fresh graph cache: traced with
AOTAutograd (the lowering recipe is stored), then, after ``torch_plugin.reset()``, from the
stored recipe (a warm start's path, which runs without AOTAutograd's runtime wrapper). Each
test also checks that an output kept from the first call is not changed by later calls.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

import torch_plugin

transformers = pytest.importorskip("transformers")
torchvision = pytest.importorskip("torchvision")

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.usefixtures("fresh_capture"),
]


def _bert():
    cfg = transformers.BertConfig(
        hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=512
    )
    m = transformers.BertModel(cfg)
    return m, lambda b: {"input_ids": torch.randint(0, 1000, (b, 32), device="cuda")}


def _gpt2():
    m = transformers.GPT2Model(
        transformers.GPT2Config(n_embd=128, n_layer=2, n_head=4, use_cache=False)
    )
    return m, lambda b: {"input_ids": torch.randint(0, 1000, (b, 32), device="cuda")}


def _llama():
    cfg = transformers.LlamaConfig(
        hidden_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        intermediate_size=352, vocab_size=1000, use_cache=False,
    )  # fmt: skip
    return transformers.LlamaModel(cfg), lambda b: {
        "input_ids": torch.randint(0, 1000, (b, 32), device="cuda")
    }


def _vit():
    m = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=128, mlp_dim=256
    )
    return m, lambda b: {"x": torch.randn(b, 3, 32, 32, device="cuda")}


def _resnet18():
    return torchvision.models.resnet18(weights=None, num_classes=10), lambda b: {
        "x": torch.randn(b, 3, 64, 64, device="cuda")
    }


MODELS = {"bert": _bert, "gpt2": _gpt2, "llama": _llama, "vit": _vit, "resnet18": _resnet18}


def _first(out):
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    return out[0]


@pytest.fixture(autouse=True)
def _no_tf32(no_tf32):
    """TF32 off for every test here (conftest.no_tf32)."""


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_matches_eager(name, dtype, mode, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    model, inputs = MODELS[name]()
    model = model.cuda().eval()
    tol = 1e-4 if dtype == "fp32" else 1e-2
    ctx = (
        (lambda: torch.autocast("cuda", torch.bfloat16))
        if dtype == "bf16"
        else contextlib.nullcontext
    )
    for path in ("traced", "replayed"):
        torch_plugin.reset()
        fast = torch_plugin.optimize("plugin", mode=mode)(model)
        kept = []
        with torch.no_grad():
            for _ in range(3):
                kw = inputs(2)
                with ctx():
                    out = _first(fast(**kw)).float()
                    ref = _first(model(**kw)).float()
                scale = ref.abs().max().item()
                err = (out - ref).abs().max().item()
                assert err <= tol * scale, (
                    f"{name} {dtype} ({path}): max error {err} vs scale {scale}"
                )
                kept.append((kw, out.clone(), out))
            for _, copy, out in kept:
                torch.testing.assert_close(out, copy, rtol=0, atol=0)
