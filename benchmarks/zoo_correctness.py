"""Correctness over a zoo of real models: each model through each backend against eager, in
inference and for one training step (issue #10: "no silent wrong results").

    OMP_NUM_THREADS=2 python benchmarks/zoo_correctness.py                   # all models
    python benchmarks/zoo_correctness.py --models resnet18,bert --backends plugin
    python benchmarks/zoo_correctness.py --json out.json
    python benchmarks/zoo_correctness.py --modes export       # torch_plugin.export per model

Models are torchvision and HF transformers models with random weights and small configs (no
downloads), inputs small enough for a 2-core CPU. For each (model, backend, mode) it prints

- ``ok``: outputs (and, in training, every gradient and every buffer, num_batches_tracked
  included) match eager within the backend's tolerance, over two calls with fresh inputs;
- ``WRONG``: something differs (the worst relative difference and where): a silent wrong
  result, the class of bug issue #10 is about;
- ``ERROR``: the compiled call raised where eager did not (loud, not silent);

plus the number of graphs and graph breaks. Dropout is off (p = 0) so training is
deterministic; BatchNorm stays in train mode in training.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
import traceback

import torch

import torch_plugin

TOL = {"eager": 1e-5, "aot_eager": 1e-4, "plugin": 2e-3, "inductor": 2e-3}


def _no_dropout(model: torch.nn.Module) -> torch.nn.Module:
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout) or type(m).__name__ == "StochasticDepth":
            m.p = 0.0
    return model


def _vision(name: str, size: int = 64, **kw):
    def build():
        import torchvision

        torch.manual_seed(0)
        model = _no_dropout(getattr(torchvision.models, name)(weights=None, num_classes=10, **kw))
        return model, lambda: ((torch.randn(2, 3, size, size),), {}), lambda out: [out]

    return build


def _timm(name: str, size: int = 64):
    def build():
        import timm

        torch.manual_seed(0)
        model = _no_dropout(timm.create_model(name, pretrained=False, num_classes=10))
        return model, lambda: ((torch.randn(2, 3, size, size),), {}), lambda out: [out]

    return build


def _hf(model_cls: str, config_cls: str, vocab: int = 200, seq: int = 10, extra=None, **cfg):
    def build():
        import transformers

        torch.manual_seed(0)
        config = getattr(transformers, config_cls)(**cfg)
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob", "dropout",
                    "attention_dropout", "resid_pdrop", "embd_pdrop", "attn_pdrop",
                    "dropout_rate", "activation_dropout", "hidden_dropout", "attention_dropout"):
            if hasattr(config, key):
                setattr(config, key, 0.0)
        model = _no_dropout(getattr(transformers, model_cls)(config))

        def inputs():
            ids = torch.randint(0, vocab, (2, seq))
            kwargs = {"input_ids": ids}
            if extra:
                kwargs.update(extra())
            return (), kwargs

        def outputs(out):
            if isinstance(out, torch.Tensor):
                return [out]
            vals = out.to_tuple() if hasattr(out, "to_tuple") else tuple(out)
            flat = []
            for v in vals:
                if isinstance(v, torch.Tensor):
                    flat.append(v)
            return flat

        return model, inputs, outputs

    return build


SMALL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 64, "vocab_size": 200}

MODELS = {
    "resnet18": _vision("resnet18"),
    "resnet50": _vision("resnet50"),
    "mobilenet_v2": _vision("mobilenet_v2"),
    "mobilenet_v3_large": _vision("mobilenet_v3_large"),
    "efficientnet_b0": _vision("efficientnet_b0"),
    "squeezenet1_1": _vision("squeezenet1_1"),
    "shufflenet_v2_x0_5": _vision("shufflenet_v2_x0_5"),
    "mnasnet0_5": _vision("mnasnet0_5"),
    "regnet_y_400mf": _vision("regnet_y_400mf"),
    "convnext_tiny": _vision("convnext_tiny"),
    "swin_t": _vision("swin_t"),
    "googlenet": _vision("googlenet", aux_logits=False, init_weights=True),
    "densenet121": _vision("densenet121"),
    "bert": _hf("BertModel", "BertConfig", **SMALL),
    "distilbert": _hf("DistilBertModel", "DistilBertConfig", dim=32, n_layers=2, n_heads=4,
                      hidden_dim=64, vocab_size=200),
    "roberta": _hf("RobertaModel", "RobertaConfig", **SMALL),
    "albert": _hf("AlbertModel", "AlbertConfig", embedding_size=16, **SMALL),
    "electra": _hf("ElectraModel", "ElectraConfig", embedding_size=16, **SMALL),
    "deberta_v2": _hf("DebertaV2Model", "DebertaV2Config", relative_attention=True,
                      position_buckets=16, max_position_embeddings=64,
                      pos_att_type=["p2c", "c2p"], **SMALL),
    "gpt2": _hf("GPT2Model", "GPT2Config", n_embd=32, n_layer=2, n_head=4, vocab_size=200,
                n_positions=64),
    "gpt_neo": _hf("GPTNeoModel", "GPTNeoConfig", hidden_size=32, num_layers=2, num_heads=4,
                   vocab_size=200, attention_types=[[["global", "local"], 1]],
                   max_position_embeddings=64),
    "opt": _hf("OPTModel", "OPTConfig", hidden_size=32, num_hidden_layers=2,
               num_attention_heads=4, ffn_dim=64, vocab_size=200, word_embed_proj_dim=32,
               max_position_embeddings=64),
    "bloom": _hf("BloomModel", "BloomConfig", hidden_size=32, n_layer=2, n_head=4,
                 vocab_size=200),
    "llama": _hf("LlamaModel", "LlamaConfig", num_key_value_heads=2, **SMALL),
    "qwen2": _hf("Qwen2Model", "Qwen2Config", num_key_value_heads=2, **SMALL),
    "mistral": _hf("MistralModel", "MistralConfig", num_key_value_heads=2, **SMALL),
    "t5": _hf("T5Model", "T5Config", d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
              vocab_size=200, extra=lambda: {"decoder_input_ids": torch.randint(0, 200, (2, 7))}),
    "bart": _hf("BartModel", "BartConfig", d_model=32, encoder_layers=2, decoder_layers=2,
                encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                decoder_ffn_dim=64, vocab_size=200, max_position_embeddings=64),
    "timm_regnety_002": _timm("regnety_002"),
    "timm_crossvit_tiny_240": _timm("crossvit_tiny_240", size=240),
    "timm_resnet18d": _timm("resnet18d"),
    "timm_efficientnet_b0": _timm("efficientnet_b0"),
    "timm_vit_tiny": _timm("vit_tiny_patch16_224", size=224),
    "timm_convnext_atto": _timm("convnext_atto"),
}


def _flat_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {f"buffer {k}": v for k, v in model.named_buffers()}
    for k, p in model.named_parameters():
        out[f"param {k}"] = p.detach()
        if p.grad is not None:
            out[f"grad {k}"] = p.grad
    return out


def _worst(want: list, got: list, what: str) -> tuple[float, str]:
    worst, where = 0.0, ""
    if len(want) != len(got):
        return float("inf"), f"{what}: {len(want)} vs {len(got)} values"
    for i, (w, g) in enumerate(zip(want, got)):
        if w.shape != g.shape or w.dtype != g.dtype:
            return float("inf"), f"{what}[{i}]: {tuple(w.shape)}/{w.dtype} vs {tuple(g.shape)}/{g.dtype}"
        if not w.is_floating_point():
            if not torch.equal(w, g):
                return float("inf"), f"{what}[{i}] (integer) differs"
            continue
        scale = max(w.abs().max().item(), 1.0) if w.numel() else 1.0
        err = ((w - g).abs().max().item() / scale) if w.numel() else 0.0
        if err != err:  # NaN
            err = float("inf")
        if err > worst:
            worst, where = err, f"{what}[{i}]"
    return worst, where


def check_export(name: str) -> dict:
    """``torch_plugin.export`` of the eval-mode model with one input, then the exported module,
    the same module after ``torch.save`` / ``torch.load`` (torch.load's defaults), and eager
    on two fresh inputs of the same shapes; and a call with one more row in every tensor
    input's first dim, which the exported graph must refuse (ExportGuardError)."""
    import io

    from torch_plugin.exported.guards import ExportGuardError

    model, inputs, outputs = MODELS[name]()
    model.eval()
    torch_plugin.reset()
    t0 = time.perf_counter()
    worst, where = 0.0, ""
    try:
        args, kwargs = inputs()
        gm, _ = torch_plugin.export(model, *args, **kwargs)
        buf = io.BytesIO()
        torch.save(gm, buf)
        buf.seek(0)
        loaded = torch.load(buf)
        for step in range(2):
            torch.manual_seed(2000 + step)
            args, kwargs = inputs()
            with torch.no_grad():
                want = outputs(model(*args, **kwargs))
                for label, g in (("output", gm), ("loaded output", loaded)):
                    e, loc = _worst(want, outputs(g(*args, **kwargs)), label)
                    if e > worst:
                        worst, where = e, loc
        grow = lambda t: torch.cat([t, t[:1]]) if isinstance(t, torch.Tensor) and t.dim() else t
        for g in (gm, loaded):
            try:
                with torch.no_grad():
                    g(*[grow(a) for a in args], **{k: grow(v) for k, v in kwargs.items()})
            except ExportGuardError:
                pass
            else:
                worst, where = float("inf"), "a call with another batch size was not refused"
    except Exception as e:  # noqa: BLE001 - reported as a loud failure
        return {"status": "ERROR", "error": f"{type(e).__name__}: {str(e)[:200]}",
                "trace": traceback.format_exc(limit=3)[-600:], "graphs": 0, "breaks": 0,
                "err": float("nan")}
    return {"status": "ok" if worst <= TOL["eager"] else "WRONG", "err": worst, "where": where,
            "graphs": 1, "breaks": 0, "seconds": round(time.perf_counter() - t0, 2)}


def check(name: str, backend: str, mode: str) -> dict:
    if mode == "export":
        return check_export(name)
    model, inputs, outputs = MODELS[name]()
    model.train(mode == "train")
    compiled = copy.deepcopy(model)
    torch_plugin.reset()
    opt = torch_plugin.optimize(backend)(compiled)
    worst, where = 0.0, ""
    t0 = time.perf_counter()
    try:
        for step in range(2):
            torch.manual_seed(1000 + step)
            args, kwargs = inputs()
            if mode == "train":
                for m in (model, compiled):
                    m.zero_grad(set_to_none=True)
                want_out = outputs(model(*args, **kwargs))
                sum(o.float().sum() for o in want_out if o.is_floating_point()).backward()
                got_out = outputs(opt(*args, **kwargs))
                sum(o.float().sum() for o in got_out if o.is_floating_point()).backward()
                checks = [
                    (want_out, got_out, "output"),
                ]
                ws, gs = _flat_state(model), _flat_state(compiled)
                if ws.keys() != gs.keys():
                    return {"status": "WRONG", "err": float("inf"),
                            "where": f"state keys differ: {sorted(ws.keys() ^ gs.keys())[:3]}"}
                keys = sorted(ws)
                checks.append(([ws[k] for k in keys], [gs[k] for k in keys], "state"))
                for w, g, what in checks:
                    e, loc = _worst(w, g, what)
                    if what == "state" and e > 0:
                        i = int(loc[loc.index("[") + 1 : -1]) if "[" in loc else 0
                        loc = keys[i] if keys else loc
                    if e > worst:
                        worst, where = e, loc
                with torch.no_grad():  # one SGD step on both, from eager's weights
                    for p, q in zip(model.parameters(), compiled.parameters()):
                        if p.grad is not None:
                            p -= 0.01 * p.grad
                            q.copy_(p)
            else:
                with torch.no_grad():
                    want_out = outputs(model(*args, **kwargs))
                    got_out = outputs(opt(*args, **kwargs))
                e, loc = _worst(want_out, got_out, "output")
                if e > worst:
                    worst, where = e, loc
    except Exception as e:  # noqa: BLE001 - reported as a loud failure
        return {"status": "ERROR", "error": f"{type(e).__name__}: {str(e)[:200]}",
                "trace": traceback.format_exc(limit=3)[-600:]}
    stats = torch_plugin.stats
    return {
        "status": "ok" if worst <= TOL[backend] else "WRONG",
        "err": worst,
        "where": where,
        "graphs": stats.graphs_compiled,
        "breaks": len(stats.graph_breaks),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--backends", default="eager,aot_eager,plugin")
    parser.add_argument("--modes", default="eval,train")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows, wrong = [], 0
    for name in args.models.split(","):
        for mode in args.modes.split(","):
            for backend in args.backends.split(",") if mode != "export" else ["-"]:
                r = check(name, backend, mode)
                r.update(model=name, mode=mode, backend=backend)
                rows.append(r)
                wrong += r["status"] == "WRONG"
                detail = (
                    f"err={r['err']:.1e} {r.get('where', '')} graphs={r['graphs']} "
                    f"breaks={r['breaks']} {r['seconds']}s"
                    if r["status"] != "ERROR"
                    else r["error"]
                )
                print(f"{name:20s} {mode:5s} {backend:10s} {r['status']:6s} {detail}", flush=True)
    errors = sum(r["status"] == "ERROR" for r in rows)
    print(f"\n{len(rows)} rows: {wrong} WRONG, {errors} ERROR, {len(rows) - wrong - errors} ok")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
