"""The optimizer step alone: eager (foreach), eager ``fused=True``, ``torch.compile`` on the
step (PyTorch's recipe), and the plugin compiler's step (``torch_plugin.optimize`` around
``opt.step()``: the multi-tensor kernels), issue #30.

    python benchmarks/optimizer_step.py --device cuda --optimizers adam,adamw,sgd \\
        --shapes mixed100,bert_base,ten1024 --out benchmarks/results/optimizer-step-h100

Shapes: ``mixed100`` (100 tensors of mixed sizes, 1e3 to 4e6 elements, seeded), ``bert_base``
(BERT-base's 199 parameters, 110M elements), ``ten1024`` (ten 1024x1024 layers, the PyTorch
recipe's example). Variants: ``eager`` (foreach=True), ``eager-fused`` (fused=True),
``torch-compile`` (``torch.compile`` on a function calling ``opt.step()``), ``plugin``. Gradients are fixed random tensors kept
between steps (``zero_grad`` is not timed). Each row runs ``--warmup`` steps (the first
compiles), then ``--steps`` timed steps (CUDA events around each step; the median is
reported). Before timing, the compiled rows are checked against eager's foreach step on the
same start (max relative difference of the parameters after three steps).
Outputs: a table on stdout, and ``<out>.md`` / ``<out>.json`` with ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import torch_plugin
from torch_plugin.compiler import optimizer_step


def _bert_base() -> list[tuple[int, ...]]:
    h, ff = 768, 3072
    out = [(30522, h), (512, h), (2, h), (h,), (h,)]  # embeddings and their LayerNorm
    for _ in range(12):
        out += [(h, h), (h,)] * 4  # query, key, value, attention output
        out += [(h,), (h,), (ff, h), (ff,), (h, ff), (h,), (h,), (h,)]
    return out + [(h, h), (h,)]  # pooler


def _shapes(name: str) -> list[tuple[int, ...]]:
    if name == "ten1024":
        return [(1024, 1024)] * 10
    if name == "bert_base":
        return _bert_base()
    g = torch.Generator().manual_seed(0)
    sizes = torch.logspace(3, 6.6, 100).long().tolist()
    out = []
    for n in sizes:
        cols = int(2 ** torch.randint(4, 11, (1,), generator=g).item())
        out.append((max(1, n // cols), cols))
    return out


def _make(kind: str, params, **extra):
    if kind == "adam":
        return torch.optim.Adam(params, lr=1e-3, **extra)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, **extra)
    return torch.optim.SGD(params, lr=0.01, momentum=0.9, **extra)


def _setup(shapes, device, kind, variant):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, device=device)) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-2
    extra = {"fused": True} if variant == "eager-fused" else {"foreach": True}
    opt = _make(kind, params, **extra)

    def eager():
        opt.step()

    if variant == "plugin":
        step = torch_plugin.optimize(lambda: opt.step())
    elif variant == "torch-compile":
        step = torch.compile(eager)
    else:
        step = eager
    return params, opt, step


def _time(step, device, warmup, steps) -> float:
    for _ in range(warmup):
        step()
    if device == "cuda":
        torch.cuda.synchronize()
        times = []
        for _ in range(steps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b))
        return statistics.median(times)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def _check(shapes, device, kind) -> float:
    ref, _, ref_step = _setup(shapes, device, kind, "eager")
    got, _, got_step = _setup(shapes, device, kind, "plugin")
    for _ in range(3):
        ref_step()
        got_step()
    return max(((a - b).abs().max() / a.abs().max().clamp_min(1e-12)).item()
               for a, b in zip(ref, got))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--optimizers", default="adam,adamw,sgd")
    ap.add_argument("--shapes", default="mixed100,ten1024")
    ap.add_argument("--variants", default="eager,eager-fused,torch-compile,plugin")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for shape_name in args.shapes.split(","):
        shapes = _shapes(shape_name)
        for kind in args.optimizers.split(","):
            diff = _check(shapes, args.device, kind)
            base = None
            for variant in args.variants.split(","):
                torch_plugin.reset()
                before = optimizer_step.counters["compiled_steps"]
                _, _, step = _setup(shapes, args.device, kind, variant)
                t0 = time.perf_counter()
                step()
                cold = (time.perf_counter() - t0) * 1e3
                ms = _time(step, args.device, args.warmup, args.steps)
                base = ms if variant == "eager" else base
                compiled = optimizer_step.counters["compiled_steps"] - before
                rows.append({
                    "shapes": shape_name, "optimizer": kind, "variant": variant, "ms": ms,
                    "cold_ms": cold, "speedup_vs_foreach": (base / ms) if base else None,
                    "compiled_steps": compiled, "max_rel_diff": diff if variant == "plugin" else None,
                })  # fmt: skip
                r = rows[-1]
                print(
                    f"{shape_name:9} {kind:6} {variant:12} {ms:8.3f} ms  cold {cold:8.1f} ms  "
                    f"x{r['speedup_vs_foreach'] or 0:.2f}  compiled {compiled}"
                    + (f"  diff {diff:.1e}" if variant == "plugin" else "")
                )
    if args.out:
        name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
        with open(args.out + ".json", "w") as f:
            json.dump({"device": name, "rows": rows}, f, indent=1)
        with open(args.out + ".md", "w") as f:
            f.write(f"Optimizer step on {name}\n\n| shapes | optimizer | variant | ms | cold ms | "
                    "x foreach |\n|---|---|---|---|---|---|\n")  # fmt: skip
            for r in rows:
                f.write(
                    f"| {r['shapes']} | {r['optimizer']} | {r['variant']} | {r['ms']:.3f} | "
                    f"{r['cold_ms']:.1f} | {r['speedup_vs_foreach'] or 0:.2f} |\n"
                )


if __name__ == "__main__":
    main()
