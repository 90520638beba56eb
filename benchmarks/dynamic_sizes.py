"""Symbolic sizes: eager, ``torch.compile(dynamic=True)`` and the "plugin" backend side by side,
over batch and sequence sweeps, in one process.

Models (random weights, eval, no_grad): HF BERT-base and GPT-2 (``use_cache=False``) over a
batch sweep (sequence 128) and a sequence sweep (batch 4), torchvision ResNet-50 over a batch
sweep (224x224). For each size in sweep order, each backend's *first call* at that size
(compile or recompile included, seconds), then, after the sweep, the *steady* time per size
(median milliseconds of ``--calls`` calls after warm-up, synchronized); and the compile
counts: captures (graphs compiled by the capture layer, or Dynamo's calls of the backend) and,
for the plugin, the static variants compiled per concrete size
(``torch_plugin.compiler.size_variants``) and graphs run as the eager graph. The plugin runs
with its default automatic dynamic (the size that changes becomes symbolic at its second
compile); ``--plugin-dynamic`` uses ``dynamic=True``.

``--overhead`` instead times the per-call overhead of a graph with symbolic sizes against the
static graph on a small CPU graph (one thread): the whole compiled call (capture's guards
included) and the backend's artifact alone (``SizeVariants.flat``, a Python dispatch on the
size key, against the static graph's ``GraphCall.flat``, C++).

Usage::

    python3 benchmarks/dynamic_sizes.py [--device cuda] [--models bert,gpt2,resnet50]
        [--batches 1,2,3,...] [--seqs 16,17,...] [--calls 20] [--dtype fp32|bf16]
        [--plugin-dynamic] [--quick]
    python3 benchmarks/dynamic_sizes.py --overhead [--calls 20000]

Prints markdown tables.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

BATCHES = [1, 2, 3, 4, 5, 7, 8, 12, 16, 24, 31, 32, 48, 64]
SEQS = [16, 17, 32, 63, 64, 100, 128, 200, 256, 383, 512]
QUICK_BATCHES = [1, 2, 3, 8, 13]
QUICK_SEQS = [16, 33, 128, 200]


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _models(names: list[str], device: str, dtype: torch.dtype):
    """(name, model, make(batch, seq) -> args, sweeps) for each model asked for."""
    out = []
    for name in names:
        torch.manual_seed(0)
        if name in ("bert", "gpt2"):
            import transformers

            if name == "bert":
                model = transformers.BertModel(transformers.BertConfig())
            else:
                model = transformers.GPT2Model(transformers.GPT2Config(use_cache=False))
            vocab = model.config.vocab_size

            def make(b, s, vocab=vocab):
                return (torch.randint(0, vocab, (b, s), device=device),)

            sweeps = ("batch", "seq")
        else:
            import torchvision

            model = torchvision.models.resnet50()

            def make(b, s):
                return (torch.randn(b, 3, 224, 224, device=device, dtype=dtype),)

            sweeps = ("batch",)
        out.append((name, model.eval().to(device=device, dtype=dtype), make, sweeps))
    return out


def _first(out: Any) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    return out[0]


def _steady_ms(fn: Callable, args: tuple, device: str, calls: int) -> float:
    for _ in range(3):
        fn(*args)
    times = []
    for _ in range(calls):
        _sync(device)
        t0 = time.perf_counter()
        fn(*args)
        _sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


class _Counting:
    """A Dynamo backend that counts its calls and compiles with Inductor."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, gm, example_inputs):
        from torch._inductor.compile_fx import compile_fx

        self.calls += 1
        return compile_fx(gm, example_inputs)


def _backends(model, plugin_dynamic: bool):
    import torch_plugin

    torch._dynamo.reset()
    torch_plugin.reset()
    counting = _Counting()
    return {
        "eager": (model, lambda: ""),
        "torch.compile": (
            torch.compile(model, backend=counting, dynamic=True),
            lambda: f"{counting.calls} graphs",
        ),
        "plugin": (
            torch_plugin.optimize("plugin", dynamic=True if plugin_dynamic else None)(model),
            _plugin_counts,
        ),
    }


_plugin_start: dict[str, int] = {}


def _plugin_counts() -> str:
    import torch_plugin
    from torch_plugin.compiler import pipeline, size_variants

    variants = size_variants.counters["variants"] - _plugin_start.get("variants", 0)
    evicted = size_variants.counters["evictions"] - _plugin_start.get("evictions", 0)
    eager = pipeline.counters["eager_graphs"] - _plugin_start.get("eager_graphs", 0)
    return (
        f"{torch_plugin.stats.graphs_compiled} graphs, {variants} size variants, "
        f"{evicted} evicted, {eager} as the eager graph"
    )


def _sweep(name, model, make, kind, sizes, device, args) -> None:
    from torch_plugin.compiler import pipeline, size_variants

    _plugin_start.update({**size_variants.counters, **pipeline.counters})
    backends = _backends(model, args.plugin_dynamic)
    first: dict[str, dict[int, float]] = {b: {} for b in backends}
    steady: dict[str, dict[int, float]] = {b: {} for b in backends}
    err: dict[int, float] = {}

    def inputs(n):
        return make(n, 128) if kind == "batch" else make(4, n)

    with torch.no_grad():
        for n in sizes:
            x = inputs(n)
            want = None
            for bname, (fn, _) in backends.items():
                _sync(device)
                t0 = time.perf_counter()
                out = fn(*x)
                _sync(device)
                first[bname][n] = time.perf_counter() - t0
                if want is None:
                    want = _first(out).float()
                elif bname == "plugin":
                    err[n] = (_first(out).float() - want).abs().max().item()
        for n in sizes:
            x = inputs(n)
            for bname, (fn, _) in backends.items():
                steady[bname][n] = _steady_ms(fn, x, device, args.calls)
    what = "batch (seq 128)" if kind == "batch" else "seq (batch 4)"
    print(f"\n### {name}, {what} sweep, {device}, {args.dtype}\n")
    print(
        "| size | eager ms | torch.compile first s | torch.compile ms | plugin first s "
        "| plugin ms | plugin / torch.compile | plugin max abs err |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n in sizes:
        tc, pl = steady["torch.compile"][n], steady["plugin"][n]
        print(
            f"| {n} | {steady['eager'][n]:.3f} | {first['torch.compile'][n]:.2f} | {tc:.3f} "
            f"| {first['plugin'][n]:.2f} | {pl:.3f} | {pl / tc:.2f} | {err.get(n, 0):.2e} |"
        )
    for bname, (_, counts) in backends.items():
        if bname != "eager":
            print(f"\n{bname}: {counts()}; first calls {sum(first[bname].values()):.1f} s in all")


def _overhead(calls: int) -> None:
    """Per-call time of a small CPU graph: static against symbolic sizes (see the module
    docstring)."""
    import torch_plugin
    from torch_plugin.backends.plugin import plugin

    torch.set_num_threads(1)

    def f(x):
        return torch.relu(x * 2.0) + 1.0

    def per_call_us(fn, x) -> float:
        for _ in range(200):
            fn(x)
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn(x)
            best = min(best, (time.perf_counter() - t0) / calls * 1e6)
        return best

    x = torch.randn(4, 8)
    rows = [("eager", per_call_us(f, x), per_call_us(f, x))]
    for label, dynamic in (("static (dynamic=False)", False), ("symbolic (dynamic=True)", True)):
        torch_plugin.reset()
        artifacts: list[Callable] = []

        def recording(gm, example_inputs, artifacts=artifacts):
            fn = plugin(gm, example_inputs)
            artifacts.append(fn)
            return fn

        compiled = torch_plugin.optimize(recording, dynamic=dynamic)(f)
        with torch.no_grad():
            compiled(x)
            whole = per_call_us(compiled, x)
            art = artifacts[-1]
            alone = per_call_us(art, x)
        rows.append(
            (f"plugin, {label}: {type(getattr(art, '__self__', art)).__name__}", whole, alone)
        )
    print(f"\n### Per-call time, CPU, one thread, x: {tuple(x.shape)} fp32, f(x) = relu(2x) + 1\n")
    print("| path | compiled call us (capture's guards included) | backend artifact alone us |")
    print("|---|---|---|")
    for label, whole, alone in rows:
        print(f"| {label} | {whole:.2f} | {alone:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--models", default="bert,gpt2,resnet50")
    ap.add_argument("--batches", default=None)
    ap.add_argument("--seqs", default=None)
    ap.add_argument("--calls", type=int, default=None)
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"))
    ap.add_argument("--plugin-dynamic", action="store_true")
    ap.add_argument("--quick", action="store_true", help="a few sizes per sweep")
    ap.add_argument("--overhead", action="store_true")
    args = ap.parse_args()
    if args.overhead:
        _overhead(args.calls or 20000)
        return
    args.calls = args.calls or 20
    batches = BATCHES if not args.quick else QUICK_BATCHES
    seqs = SEQS if not args.quick else QUICK_SEQS
    if args.batches:
        batches = [int(b) for b in args.batches.split(",")]
    if args.seqs:
        seqs = [int(s) for s in args.seqs.split(",")]
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    if args.device == "cuda":
        print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    for name, model, make, sweeps in _models(args.models.split(","), args.device, dtype):
        for kind in sweeps:
            _sweep(name, model, make, kind, batches if kind == "batch" else seqs, args.device, args)


if __name__ == "__main__":
    main()
