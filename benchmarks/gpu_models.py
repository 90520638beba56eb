"""Benchmark: eager vs torch.compile vs torch_plugin on CUDA, side by side, one process per row.

Rows (random weights, ``--rows``; default: all):

- models at each ``--batches`` size and ``--dtypes`` (``fp32``; ``bf16``: the call runs under
  ``torch.autocast("cuda", torch.bfloat16)``): ``bert`` (HF BERT-base, 128 tokens), ``gpt2``
  (HF GPT-2 small, 128 tokens, ``use_cache=False``), ``vit`` (torchvision ViT-B/16, 224x224),
  ``llama`` (HF Llama-style decoder from a config: 8 layers, hidden 1024, 16 heads, MLP 2816,
  128 tokens, ``use_cache=False``), ``resnet50`` (torchvision, 224x224);
- micro rows: ``pointwise`` (a 6-op pointwise chain over 2^26 fp32 elements; GB/s counting
  one read and one write, beside a device-to-device copy measured in the same process, both
  from the GPU time of ``--runs`` back-to-back calls between two CUDA events, so that the
  host's per-call work, which the ``tiny`` row measures, overlaps the kernels as it does in a
  program that queues work: a bandwidth, not a latency),
  ``ln_gelu_res`` (``gelu(layer_norm(x)) + r`` on [8192, 4096] fp32), ``tiny`` (``x + 1`` on a
  one-element tensor: microseconds per call, no CUDA graph for the plugin column).

Columns (``--backends``): ``eager``; ``compile`` (``torch.compile``, default mode); ``compile_ro``
(``torch.compile(mode="reduce-overhead")``); ``inductor`` (``torch_plugin.optimize("inductor")``);
``plugin`` (``torch_plugin.optimize("plugin")``, the default backend, default options);
``plugin_ro`` (``optimize("plugin", mode="reduce-overhead")``).

Every row runs in a child process (``--child``) that builds the model once and measures each
backend in turn in that process: the first call's time minus one steady-state call is the cold
compile time (the row's Inductor and plugin cache directories start empty); the median of
``--runs`` calls timed with CUDA events after warm-up is the latency; the peak of
``torch.cuda.max_memory_allocated`` over the timed calls (after compiling) is the peak memory;
the output is compared with eager's (max abs error over the max abs eager value). With
``--warm`` a second child per row reuses the first one's cache directories and reports the
warm compile time. The table is printed as markdown with the GPU's name and versions and the
command line, and written to ``--out`` (and JSON beside it).

    python3 benchmarks/gpu_models.py [--rows bert,resnet50,pointwise] [--batches 1,32]
        [--dtypes fp32,bf16] [--backends eager,compile,inductor,plugin] [--runs 50]
        [--warm] [--out results.md]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

MODEL_ROWS = ["bert", "gpt2", "vit", "llama", "resnet50"]
MICRO_ROWS = ["pointwise", "ln_gelu_res", "tiny"]
BACKENDS = ["eager", "compile", "compile_ro", "inductor", "plugin", "plugin_ro"]


# --- models and inputs -----------------------------------------------------------------------
def build(name: str, batch: int):
    """(callable taking *inputs, inputs) on CUDA for row ``name``."""
    import torch

    torch.manual_seed(0)
    dev = "cuda"
    if name in ("bert", "gpt2", "llama"):
        import transformers

        if name == "bert":
            model = transformers.BertModel(transformers.BertConfig())
        elif name == "gpt2":
            model = transformers.GPT2Model(transformers.GPT2Config(use_cache=False))
        else:
            cfg = transformers.LlamaConfig(
                hidden_size=1024, num_hidden_layers=8, num_attention_heads=16,
                num_key_value_heads=16, intermediate_size=2816, vocab_size=32000,
                use_cache=False,
            )  # fmt: skip
            model = transformers.LlamaModel(cfg)
        model = model.to(dev).eval()
        ids = torch.randint(0, 1000, (batch, 128), device=dev)

        def run(ids):
            return model(input_ids=ids).last_hidden_state

        return run, (ids,), model
    if name in ("vit", "resnet50"):
        import torchvision

        ctor = torchvision.models.vit_b_16 if name == "vit" else torchvision.models.resnet50
        model = ctor(weights=None).to(dev).eval()
        return model, (torch.randn(batch, 3, 224, 224, device=dev),), model
    if name == "pointwise":

        def chain(x):
            y = x * 1.5 + 0.25
            y = torch.relu(y) - x * 0.5
            return torch.sigmoid(y) * x + 1.0

        return chain, (torch.randn(1 << 26, device=dev),), None
    if name == "ln_gelu_res":
        w = torch.randn(4096, device=dev)
        b = torch.randn(4096, device=dev)

        def ln(x, r):
            return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (4096,), w, b)) + r

        return ln, (torch.randn(8192, 4096, device=dev), torch.randn(8192, 4096, device=dev)), None
    if name == "tiny":

        def tiny(x):
            return x + 1

        return tiny, (torch.randn(1, device=dev),), None
    raise SystemExit(f"unknown row {name}")


def compiled(backend: str, fn):
    import torch

    if backend == "eager":
        return fn
    if backend == "compile":
        return torch.compile(fn)
    if backend == "compile_ro":
        return torch.compile(fn, mode="reduce-overhead")
    import torch_plugin

    if backend == "inductor":
        return torch_plugin.optimize("inductor")(fn)
    if backend == "plugin":
        return torch_plugin.optimize("plugin")(fn)
    if backend == "plugin_ro":
        return torch_plugin.optimize("plugin", mode="reduce-overhead")(fn)
    raise SystemExit(f"unknown backend {backend}")


def _first_tensor(out):
    import torch

    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return _first_tensor(out[0])
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state
    if hasattr(out, "logits"):
        return out.logits
    raise TypeError(type(out))


def child(args: argparse.Namespace) -> None:
    """Measures one row, every backend in this process; prints one JSON line per backend."""
    import contextlib

    import torch

    fn, inputs, _ = build(args.row, args.batch)
    autocast = (
        torch.autocast("cuda", torch.bfloat16) if args.dtype == "bf16" else contextlib.nullcontext()
    )
    with torch.no_grad(), autocast:
        ref = _first_tensor(fn(*inputs)).float().clone()
    torch.cuda.synchronize()
    copy_gbps = None
    if args.row == "pointwise":
        x = inputs[0]
        y = torch.empty_like(x)
        ms = _time_burst(lambda: y.copy_(x), 50)
        copy_gbps = 2 * x.numel() * x.element_size() / (ms * 1e-3) / 1e9
    for backend in args.backends.split(","):
        rec = {"row": args.row, "batch": args.batch, "dtype": args.dtype, "backend": backend}
        try:
            f = compiled(backend, fn)
            with torch.no_grad(), autocast:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                out = f(*inputs)
                torch.cuda.synchronize()
                first = time.perf_counter() - t0
                for _ in range(3):
                    out = f(*inputs)
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
                if args.row == "tiny":
                    n = 2000
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(n):
                        f(*inputs)
                    torch.cuda.synchronize()
                    ms = (time.perf_counter() - t0) * 1e3 / n
                elif args.row == "pointwise":
                    ms = _time_burst(lambda f=f: f(*inputs), args.runs)
                else:
                    ms = _time(lambda f=f: f(*inputs), args.runs)
                peak = torch.cuda.max_memory_allocated() - base
                out = _first_tensor(f(*inputs)).float()
            err = ((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
            rec.update(ms=ms, compile_s=max(first - ms * 1e-3, 0.0), peak_mb=peak / 2**20, err=err)
            if args.row == "pointwise":
                x = inputs[0]
                rec["gbps"] = 2 * x.numel() * x.element_size() / (ms * 1e-3) / 1e9
                rec["copy_gbps"] = copy_gbps
        except Exception as e:  # noqa: BLE001 - a row's failure is reported, not fatal
            rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        print("ROW " + json.dumps(rec), flush=True)
        torch._dynamo.reset()
        try:
            import torch_plugin

            torch_plugin.reset()
        except ImportError:
            pass


def _time(call, runs: int) -> float:
    """Median milliseconds of ``call()`` over ``runs`` calls, CUDA events around each."""
    import torch

    for _ in range(3):
        call()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def _time_burst(call, runs: int) -> float:
    """Milliseconds per call of ``runs`` back-to-back calls between two CUDA events (the GPU
    time of a queue of calls: the host's per-call work overlaps the kernels)."""
    import torch

    for _ in range(3):
        call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(runs):
        call()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / runs


# --- driver ----------------------------------------------------------------------------------
def run_child(row, batch, dtype, backends, runs, env, timeout):
    cmd = [sys.executable, __file__, "--child", "--row", row, "--batch", str(batch),
           "--dtype", dtype, "--backends", backends, "--runs", str(runs)]  # fmt: skip
    try:
        p = subprocess.run(
            cmd, check=False, capture_output=True, text=True, env=env, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return [{"row": row, "batch": batch, "dtype": dtype, "backend": "*", "error": "timeout"}]
    recs = [json.loads(l[4:]) for l in p.stdout.splitlines() if l.startswith("ROW ")]
    if p.returncode != 0 and not recs:
        tail = (p.stderr or "").strip().splitlines()[-3:]
        recs = [
            {"row": row, "batch": batch, "dtype": dtype, "backend": "*", "error": " | ".join(tail)}
        ]
    return recs


def _cell(cells: dict, backend: str, key: str, fmt: str) -> str:
    c = cells.get(backend, {})
    if "error" in c:
        return "ERR"
    return fmt.format(c[key]) if key in c else "-"


def table(recs: list[dict], backends: list[str]) -> str:
    rows: dict[tuple, dict] = {}
    for r in recs:
        rows.setdefault((r["row"], r["batch"], r["dtype"]), {})[r["backend"]] = r
    head = (
        "| row | batch | dtype | "
        + " | ".join(f"{b} ms" for b in backends)
        + " | "
        + " | ".join(f"{b} x eager" for b in backends if b != "eager")
    )
    head += " | " + " | ".join(f"{b} cold s" for b in backends if b != "eager")
    head += " | " + " | ".join(f"{b} peak MB" for b in backends) + " | max rel err |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for (row, batch, dtype), cells in rows.items():
        eager = cells.get("eager", {}).get("ms")
        ms = [_cell(cells, b, "ms", "{:.3f}") for b in backends]
        speed = [
            f"{eager / cells[b]['ms']:.2f}" if eager and cells.get(b, {}).get("ms") else "-"
            for b in backends
            if b != "eager"
        ]
        cold = [_cell(cells, b, "compile_s", "{:.1f}") for b in backends if b != "eager"]
        peak = [_cell(cells, b, "peak_mb", "{:.0f}") for b in backends]
        errs = [f"{b}:{c['err']:.1e}" for b, c in cells.items() if "err" in c and b != "eager"]
        line = f"| {row} | {batch} | {dtype} | " + " | ".join(ms + speed + cold + peak)
        line += " | " + " ".join(errs) + " |"
        lines.append(line)
    extra = []
    for r in recs:
        if "gbps" in r:
            extra.append(
                f"- pointwise {r['backend']}: {r['gbps']:.0f} GB/s "
                f"({100 * r['gbps'] / r['copy_gbps']:.0f}% of the {r['copy_gbps']:.0f} GB/s copy)"
            )
        if "error" in r:
            extra.append(f"- {r['row']} b{r['batch']} {r['dtype']} {r['backend']}: {r['error']}")
    return "\n".join(lines + [""] + extra)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default=",".join(MODEL_ROWS + MICRO_ROWS))
    ap.add_argument("--batches", default="1,32")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warm", action="store_true")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", default="")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--row")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dtype", default="fp32")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    import torch

    recs: list[dict] = []
    for row in args.rows.split(","):
        micro = row in MICRO_ROWS
        for batch in [1] if micro else [int(b) for b in args.batches.split(",")]:
            for dtype in ["fp32"] if micro else args.dtypes.split(","):
                backends = args.backends
                if row == "tiny":  # per-call overhead without CUDA graphs
                    backends = ",".join(b for b in backends.split(",") if not b.endswith("_ro"))
                with tempfile.TemporaryDirectory() as tmp:
                    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor",
                               TORCH_PLUGIN_CACHE_DIR=f"{tmp}/plugin")  # fmt: skip
                    got = run_child(row, batch, dtype, backends, args.runs, env, args.timeout)
                    if args.warm:
                        warm = run_child(row, batch, dtype, backends, 5, env, args.timeout)
                        by = {r["backend"]: r for r in warm}
                        for r in got:
                            w = by.get(r["backend"], {})
                            if "compile_s" in w:
                                r["warm_compile_s"] = w["compile_s"]
                recs += got
                print(table(got, backends.split(",")).split("\n")[2], flush=True)
    import torch_plugin  # noqa: F401  (version line)

    head = (
        f"# gpu_models\n\nCommand: `python3 {' '.join(shlex.quote(a) for a in sys.argv)}`\n\n"
        f"- GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; "
        f"Python {sys.version.split()[0]}; TF32 matmul {torch.backends.cuda.matmul.allow_tf32}, "
        f"cudnn {torch.backends.cudnn.allow_tf32}\n"
        f"- latency: median of {args.runs} calls (CUDA events); cold s: first call minus one call\n\n"
    )
    text = head + table(recs, args.backends.split(","))
    if any("warm_compile_s" in r for r in recs):
        text += "\n\nwarm compile s: " + ", ".join(
            f"{r['row']}/b{r['batch']}/{r['dtype']}/{r['backend']}={r['warm_compile_s']:.2f}"
            for r in recs
            if "warm_compile_s" in r
        )
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
        with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
            json.dump(recs, f, indent=1)


if __name__ == "__main__":
    main()
