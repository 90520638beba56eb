"""HF DeBERTa-v2 (small config, random weights) through optimize() against eager, on the CPU
and on a CUDA GPU when one is present. Issue #10 item 6: its first compiled call on CUDA
failed with "an illegal memory access"; its relative-position code builds index tensors
with in-place ops, which capture used to drop."""

import copy

import pytest
import torch

import torch_plugin

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("fresh_capture")

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _deberta(device: str):
    torch.manual_seed(0)
    cfg = transformers.DebertaV2Config(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=500,
        max_position_embeddings=64,
        relative_attention=True,
        position_buckets=16,
        pos_att_type=["p2c", "c2p"],
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return transformers.DebertaV2Model(cfg).eval().to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "plugin"])
def test_deberta_v2_matches_eager(device, backend):
    model = _deberta(device)
    om = torch_plugin.optimize(backend)(copy.deepcopy(model))
    with torch.no_grad():
        for n in (12, 12, 9):  # compile, cached, recompile
            ids = torch.randint(0, 500, (2, n), device=device)
            mask = torch.ones(2, n, dtype=torch.long, device=device)
            mask[1, n - 3 :] = 0
            want = model(ids, attention_mask=mask).last_hidden_state
            got = om(ids, attention_mask=mask).last_hidden_state
            if device == "cuda":
                torch.cuda.synchronize()
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
