"""The rows of ``benchmarks/gpu_models.py``: model builders, issue #29's row plan and the
per-row time estimates that the runner schedules with.

Model rows (random weights, seed 0, eval mode):

- torchvision at 224x224: ``resnet18``, ``resnet50``, ``mobilenet_v3_large``,
  ``efficientnet_b0``, ``vit`` (ViT-B/16);
- Hugging Face transformers at 128 tokens: ``bert`` (BertModel, BERT-base, returns
  ``last_hidden_state``), ``gpt2`` (GPT2LMHeadModel, GPT-2 small WITH its LM head,
  ``use_cache=False``, returns the logits [batch, 128, 50257]: issue #29's row), ``gpt2_body``
  (GPT2Model without the head, returns ``last_hidden_state``: the row issue #11's tables
  called ``gpt2``), ``llama`` (LlamaModel from a config: 8 layers, hidden 1024, 16 heads,
  MLP 2816, vocabulary 32000, ``use_cache=False``, returns ``last_hidden_state``).

Micro rows (batch 1, fp32 only): ``pointwise`` (a 6-op pointwise chain over 2^26 fp32
elements), ``ln_gelu_res`` (``gelu(layer_norm(x)) + r`` on [8192, 4096]), ``tiny`` (``x + 1``
on one element: the per-call cost; no CUDA graphs).

This module imports torch only inside :func:`build`, so that the planning and report code
runs without it.
"""

from __future__ import annotations

VISION_ROWS = ["resnet18", "resnet50", "mobilenet_v3_large", "efficientnet_b0", "vit"]
TEXT_ROWS = ["bert", "gpt2", "gpt2_body", "llama"]
MODEL_ROWS = VISION_ROWS + TEXT_ROWS
MICRO_ROWS = ["pointwise", "ln_gelu_res", "tiny"]

# Issue #29's table: the dtypes of each row (fp32 only where the issue's table has only fp32;
# EfficientNet-B0, which the issue adds without a dtype, as the other small convolutional
# nets; the Llama-style decoder as the other transformers). Batches 1 and 32 for every row.
ISSUE_PLAN: dict[str, tuple[str, ...]] = {
    "resnet18": ("fp32",),
    "resnet50": ("fp32", "bf16"),
    "mobilenet_v3_large": ("fp32",),
    "efficientnet_b0": ("fp32",),
    "vit": ("fp32", "bf16"),
    "bert": ("fp32", "bf16"),
    "gpt2": ("fp32", "bf16"),
    "llama": ("fp32", "bf16"),
}
ISSUE_BATCHES = (1, 32)

# Display names of issue #29's table.
TITLES = {
    "resnet18": "ResNet-18",
    "resnet50": "ResNet-50",
    "mobilenet_v3_large": "MobileNetV3-Large",
    "efficientnet_b0": "EfficientNet-B0",
    "vit": "ViT-B/16",
    "bert": "BERT-base, seq 128",
    "gpt2": "GPT-2 with its LM head, seq 128",
    "gpt2_body": "GPT-2 without its LM head, seq 128",
    "llama": "Llama-style decoder (8 x 1024), seq 128",
}

# --- time estimates (seconds, H100 host with 16 cores), for scheduling only ----------------
# Cold torch.compile (default mode, fp32) of each row, from
# results/gpu_models-h100x2-2026-11-25-full.md (bert 11.9-13.5 s, gpt2 10.5-11.4, vit 10.9-11.0,
# llama 10.5-10.6 at fp32; bf16 x1.2); the convolutional rows were not measured on the GPU:
# scaled from the CPU table's Inductor cold compiles relative to BERT's (ResNet-50 1.4x,
# MobileNetV3 1.6x, ResNet-18 1.1x; EfficientNet-B0 guessed at 1.8x), rounded up.
COMPILE_EST_S = {
    "resnet18": 14.0,
    "resnet50": 20.0,
    "mobilenet_v3_large": 22.0,
    "efficientnet_b0": 25.0,
    "vit": 12.0,
    "bert": 14.0,
    "gpt2": 13.0,
    "gpt2_body": 12.0,
    "llama": 12.0,
    "pointwise": 3.0,
    "ln_gelu_res": 3.0,
    "tiny": 2.0,
}
# A child's fixed cost: interpreter, torch/transformers/torchvision imports, CUDA context, the
# model's construction (random init) and the eager reference call.
STARTUP_EST_S = 15.0
# Per backend beyond torch.compile's default mode: reduce-overhead reuses the row's Triton
# kernels (its cold compiles were 0.55-0.85 of the default's), the plugin 1.6-3.4 s.
BACKEND_EST = {"compile": 1.0, "compile_ro": 0.8, "compile_ma": 6.0, "inductor": 0.6}
PLUGIN_EST_S = {"plugin": 3.5, "plugin_ro": 3.5, "eager": 0.0}
# Eager milliseconds per call, for the timing loops' share (fp32; bf16 about a third at b32).
EAGER_MS_EST = {1: 6.0, 32: 30.0}


def estimate_s(
    row: str, batch: int, dtype: str, backends: list[str], runs: int, ma_cap_s: float = 0.0
) -> float:
    """Estimated wall seconds of one child process measuring ``backends`` on one row (the
    runner's longest-first order, ``--shard`` and the deadline's fit test use it).
    ``compile_ma`` is bounded by ``ma_cap_s`` when that is positive."""
    base = COMPILE_EST_S.get(row, 15.0) * (1.2 if dtype == "bf16" else 1.0)
    total = STARTUP_EST_S
    ms = EAGER_MS_EST.get(batch, 30.0 * batch / 32 + 5.0)
    if dtype == "bf16":
        ms /= 2
    for b in backends:
        if b in PLUGIN_EST_S:
            total += PLUGIN_EST_S[b]
        elif b == "compile_ma" and ma_cap_s > 0:
            total += min(base * BACKEND_EST[b], ma_cap_s)
        else:
            total += base * BACKEND_EST.get(b, 1.0)
        total += (runs + 10) * ms / 1e3
    return total


def build_model(name: str, batch: int, device: str = "cuda", dropout: bool = True):
    """``(model, call, inputs)`` for model row ``name`` (a row of ``MODEL_ROWS``) on
    ``device``: the ``nn.Module`` as constructed (training mode, random weights of seed 0),
    ``call(module, *inputs)`` running the row on ``module`` (the model or a compiled wrapper
    of it) and returning one tensor (the vision rows' logits [batch, 1000]; ``gpt2``'s logits
    [batch, 128, 50257]; the other text rows' ``last_hidden_state``), and the inputs (images
    [batch, 3, 224, 224] fp32 or token ids [batch, 128] int64). ``dropout=False`` builds the
    text rows with every dropout probability 0 (the vision rows have none in training but
    ViT's, 0 by default); the weights are the same either way. Raises SystemExit for a row
    that is not a model row."""
    import torch

    torch.manual_seed(0)
    if name in TEXT_ROWS:
        import transformers

        if name == "bert":
            cfg = transformers.BertConfig()
            if not dropout:
                cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0.0
            model = transformers.BertModel(cfg)
        elif name in ("gpt2", "gpt2_body"):
            cfg = transformers.GPT2Config(use_cache=False)
            if not dropout:
                cfg.resid_pdrop = cfg.embd_pdrop = cfg.attn_pdrop = 0.0
            ctor = transformers.GPT2LMHeadModel if name == "gpt2" else transformers.GPT2Model
            model = ctor(cfg)
        else:
            cfg = transformers.LlamaConfig(
                hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
                num_key_value_heads=16, intermediate_size=2816, vocab_size=32000,
                use_cache=False,
            )  # fmt: skip
            model = transformers.LlamaModel(cfg)  # attention_dropout 0 by default
        model = model.to(device)
        ids = torch.randint(0, 1000, (batch, 128), device=device)
        call = _lm_call if name == "gpt2" else _body_call
        return model, call, (ids,)
    if name in VISION_ROWS:
        import torchvision

        ctor = {
            "resnet18": torchvision.models.resnet18,
            "resnet50": torchvision.models.resnet50,
            "mobilenet_v3_large": torchvision.models.mobilenet_v3_large,
            "efficientnet_b0": torchvision.models.efficientnet_b0,
            "vit": torchvision.models.vit_b_16,
        }[name]
        model = ctor(weights=None).to(device)
        return model, _module_call, (torch.randn(batch, 3, 224, 224, device=device),)
    raise SystemExit(f"unknown model row {name}; model rows: {', '.join(MODEL_ROWS)}")


def _module_call(module, x):
    return module(x)


def _lm_call(module, ids):
    return module(input_ids=ids).logits


def _body_call(module, ids):
    return module(input_ids=ids).last_hidden_state


def build(name: str, batch: int, device: str = "cuda"):
    """``(fn, inputs)`` for row ``name`` on ``device``: ``fn(*inputs)`` runs the row (a model
    in eval mode, or a function around an HF model returning one tensor). Raises SystemExit
    for an unknown row."""
    import torch

    if name in TEXT_ROWS:
        model, _, inputs = build_model(name, batch, device)
        model = model.eval()
        if name == "gpt2":

            def lm(ids):
                return model(input_ids=ids).logits

            return lm, inputs

        def body(ids):
            return model(input_ids=ids).last_hidden_state

        return body, inputs
    if name in VISION_ROWS:
        model, _, inputs = build_model(name, batch, device)
        return model.eval(), inputs
    torch.manual_seed(0)
    if name == "pointwise":

        def chain(x):
            y = x * 1.5 + 0.25
            y = torch.relu(y) - x * 0.5
            return torch.sigmoid(y) * x + 1.0

        return chain, (torch.randn(1 << 26, device=device),)
    if name == "ln_gelu_res":
        w = torch.randn(4096, device=device)
        b = torch.randn(4096, device=device)

        def ln(x, r):
            return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (4096,), w, b)) + r

        return ln, (torch.randn(8192, 4096, device=device), torch.randn(8192, 4096, device=device))
    if name == "tiny":

        def tiny(x):
            return x + 1

        return tiny, (torch.randn(1, device=device),)
    raise SystemExit(f"unknown row {name}")


def plan(rows: str, batches: str | None, dtypes: str | None) -> list[tuple[str, int, str]]:
    """The (row, batch, dtype) list of ``--rows`` (comma-separated names, or ``name:batch:dtype``
    triples), ``--batches`` and ``--dtypes``. Without ``dtypes``, a model row takes issue
    #29's dtypes (fp32 and bf16 for the rows not in the issue's plan); micro rows are batch 1
    fp32 only. Raises SystemExit for an unknown row or dtype."""
    out: list[tuple[str, int, str]] = []
    for item in [r for r in rows.split(",") if r]:
        parts = item.split(":")
        name = parts[0]
        if name not in MODEL_ROWS + MICRO_ROWS:
            raise SystemExit(f"unknown row {name}; rows: {', '.join(MODEL_ROWS + MICRO_ROWS)}")
        if len(parts) == 3:
            out.append((name, int(parts[1]), parts[2]))
            continue
        if name in MICRO_ROWS:
            out.append((name, 1, "fp32"))
            continue
        bs = [int(b) for b in batches.split(",")] if batches else list(ISSUE_BATCHES)
        ds = dtypes.split(",") if dtypes else list(ISSUE_PLAN.get(name, ("fp32", "bf16")))
        out += [(name, b, d) for d in ds for b in bs]
    for _, _, d in out:
        if d not in ("fp32", "bf16"):
            raise SystemExit(f"unknown dtype {d}; dtypes: fp32, bf16")
    return out
