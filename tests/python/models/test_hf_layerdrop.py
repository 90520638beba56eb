"""Issue #31: HF models with LayerDrop on train as one graph, equal to eager with the seed.

LayerDrop (``if self.training and torch.rand([]) < self.layerdrop: skip the layer``, as OPT,
BART, Whisper's encoder and wav2vec2 write it) is a data-dependent branch in every layer: a
graph break per layer under torch.compile and, before, here. Capture now records each as a
conditional (capture/conditionals.py). Each model is built from a tiny config with random
weights (no download; hf_tiny.py, shared with test_hf_whole_graph.py), LayerDrop 0.5 and the models' dropouts on (random ops inside the
skipped layers), in train mode; three steps of forward + backward, each from the same seed
in eager and compiled: the loss, every parameter's gradient (None where eager's is None: a
skipped layer's parameters), and the generator's state after the step must equal eager's,
and the forward must be one graph with no break.
"""

from __future__ import annotations

import pytest
import torch

import torch_plugin

T = pytest.importorskip("transformers")
import hf_tiny  # after the importorskip: it imports transformers

pytestmark = pytest.mark.usefixtures("fresh_capture", "tensor_branches_capture")

_DROP = 0.1
_IDS = (0, hf_tiny.VOCAB)  # token ids drawn


def _opt():
    cfg = hf_tiny.opt_config(
        num_hidden_layers=3, layerdrop=0.5, dropout=_DROP, attention_dropout=_DROP
    )
    return T.OPTForCausalLM(cfg), lambda: {"input_ids": torch.randint(*_IDS, (2, 8))}


def _bart():
    cfg = hf_tiny.bart_config(
        encoder_layerdrop=0.5,
        decoder_layerdrop=0.5,
        dropout=_DROP,
        attention_dropout=_DROP,
        activation_dropout=_DROP,
    )

    def inputs():
        ids = torch.randint(*_IDS, (2, 8))
        return {"input_ids": ids, "decoder_input_ids": ids}

    return T.BartForConditionalGeneration(cfg), inputs


def _wav2vec2():
    cfg = hf_tiny.wav2vec2_config(
        vocab_size=32,
        num_hidden_layers=3,
        layerdrop=0.5,
        hidden_dropout=_DROP,
        attention_dropout=_DROP,
        activation_dropout=_DROP,
        feat_proj_dropout=_DROP,
        final_dropout=_DROP,
        mask_time_prob=0.0,  # SpecAugment's masks come from NumPy's generator
    )
    return T.Wav2Vec2ForCTC(cfg), lambda: {"input_values": torch.randn(2, 400)}


def _whisper_encoder():
    cfg = hf_tiny.whisper_config(
        encoder_layers=3,
        decoder_layers=1,
        max_target_positions=16,
        encoder_layerdrop=0.5,
        dropout=_DROP,
        attention_dropout=_DROP,
        activation_dropout=_DROP,
    )
    model = T.WhisperForConditionalGeneration(cfg).model.encoder
    return model, lambda: {"input_features": torch.randn(2, 8, 32)}


MODELS = {"opt": _opt, "bart": _bart, "wav2vec2": _wav2vec2, "whisper_encoder": _whisper_encoder}


def _first_output(out) -> torch.Tensor:
    return out if isinstance(out, torch.Tensor) else out[0]  # logits / last hidden state


def _loss(model, inputs):
    return _first_output(model(**inputs)).float().square().mean()


@pytest.mark.parametrize(
    "backend",
    ["eager", "aot_eager", pytest.param("plugin", marks=pytest.mark.slow)],
)
@pytest.mark.parametrize("name", sorted(MODELS))
def test_layerdrop_trains_as_one_graph_matching_eager(name, backend):
    torch.manual_seed(0)
    model, inputs = MODELS[name]()
    model.train()
    if hasattr(model.config, "use_cache"):
        model.config.use_cache = False
    fallback_random = torch_plugin.config.fallback_random
    torch_plugin.config.fallback_random = True  # eager's numbers (the plugin's own differ)
    try:
        loss_of = torch_plugin.optimize(backend)(_loss)
        for step in range(3):
            batch = inputs()
            results = []
            for fn in (_loss, loss_of):
                model.zero_grad(set_to_none=True)
                torch.manual_seed(100 + step)
                loss = fn(model, batch)
                loss.backward()
                grads = {k: p.grad for k, p in model.named_parameters()}
                results.append((loss.detach(), grads, torch.get_rng_state()))
            (want_loss, want, want_rng), (got_loss, got, got_rng) = results
            torch.testing.assert_close(got_loss, want_loss, rtol=1e-4, atol=1e-5)
            assert torch.equal(got_rng, want_rng), "the generator is not where eager left it"
            for k, g in want.items():
                assert (got[k] is None) == (g is None), f"{k}: .grad None-ness differs"
                if g is not None:
                    torch.testing.assert_close(got[k], g, rtol=1e-3, atol=1e-5, msg=k)
        assert torch_plugin.stats.failures == [], torch_plugin.stats.failures
    finally:
        torch_plugin.config.fallback_random = fallback_random
    report = torch_plugin.explain(_loss, model, inputs())
    assert report.graph_count == 1 and report.graph_break_count == 0, report.break_reasons
