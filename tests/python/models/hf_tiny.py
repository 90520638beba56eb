"""Tiny configs of the Hugging Face models the model tests build (random weights, nothing
downloaded), shared by test_hf_whole_graph.py (inference, one graph) and test_hf_layerdrop.py
(training with LayerDrop): one base config per model family, which a test overrides (more
layers, LayerDrop and dropouts on).

Each ``*_config(**overrides)`` returns the family's config class built from the base fields
with ``overrides`` on top. Requires ``transformers`` (the tests ``importorskip`` it first).
"""

from __future__ import annotations

from typing import Any

import transformers as T

# Token ids the decoders' configs name (inside the vocabulary, below the ids tests draw).
TOKENS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
VOCAB = 100


def opt_config(**overrides: Any) -> T.OPTConfig:
    """OPT: hidden 32, 2 layers of 4 heads, FFN 64."""
    base = dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        ffn_dim=64,
        vocab_size=VOCAB,
        word_embed_proj_dim=32,
        max_position_embeddings=64,
        **TOKENS,
    )
    return T.OPTConfig(**{**base, **overrides})


def bart_config(**overrides: Any) -> T.BartConfig:
    """BART: d_model 32, 2 encoder and 2 decoder layers of 4 heads, FFN 64."""
    base = dict(
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        vocab_size=VOCAB,
        max_position_embeddings=64,
        **TOKENS,
    )
    return T.BartConfig(**{**base, **overrides})


def whisper_config(**overrides: Any) -> T.WhisperConfig:
    """Whisper: d_model 32, 2 encoder and 2 decoder layers of 4 heads, FFN 64, 8 mel bins;
    its encoder takes input features [batch, 8, 32] (2 * max_source_positions frames)."""
    base = dict(
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        vocab_size=VOCAB,
        num_mel_bins=8,
        max_source_positions=16,
        decoder_start_token_id=3,
        **TOKENS,
    )
    return T.WhisperConfig(**{**base, **overrides})


def wav2vec2_config(**overrides: Any) -> T.Wav2Vec2Config:
    """wav2vec2: hidden 32, 2 layers of 4 heads, FFN 64, two feature convolutions; takes raw
    audio [batch, 400]."""
    base = {
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 64,
        "conv_dim": (16, 16),
        "conv_stride": (5, 2),
        "conv_kernel": (10, 3),
        "num_conv_pos_embeddings": 16,
        "num_conv_pos_embedding_groups": 4,
    }
    return T.Wav2Vec2Config(**{**base, **overrides})
