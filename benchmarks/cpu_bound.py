"""Benchmark: issue #27's CPU bound analysis: where plugin's and Inductor's time goes, by kind.

For one model of benchmarks/plugin_models.py at one batch size, compiles the backends of
``--backends`` (default inductor and plugin; eager too if named), warms them up, then profiles
``--rounds`` rounds of ``--calls`` calls with torch.profiler (the backends alternate
round by round), each call inside its own ``record_function``, and as many calls unprofiled
(process CPU time and wall time per call). Every profiled
op's self time is put into one category:

- **products**: matrix products and convolutions, named with their library (``aten::addmm`` /
  ``aten::mm`` / ``aten::bmm``: MKL sgemm through ATen; ``aten::mkldnn_convolution``: oneDNN
  through ideep; ``aten::_slow_conv2d_forward``: ATen's im2col and MKL sgemm, which ATen
  picks for some convolutions; ``aten::convolution``'s own dispatch counted with them; ``torch_plugin: onednn ...``: the plugin's oneDNN primitives). An op inside a
  product (ATen's bias ``copy_`` inside ``addmm``) counts as the product's.
- **attention**: ``scaled_dot_product`` ops (ATen's CPU flash attention) and what runs inside.
- **kernels**: pointwise and normalisation work: the plugin's generated kernels
  (``torch_plugin: kernel``), Inductor's compiled graph's own time (its generated C++ kernels
  run inside ``## Call CompiledFxGraph`` and are not profiled one by one; the Python wrapper's
  time is in it too), eager's pointwise and norm ops.
- **copies**: ``copy_``, ``cat``, ``clone``, ``contiguous`` outside products (the plugin's
  one-input ``cat`` step, ``torch_plugin: view aten::cat``, is a copy too).
- **rest**: views, allocations, dispatch, fallbacks' wrappers, the call's own Python time
  (the ``record_function``'s self time).

Per backend it prints the median over calls of each category's ms per call, the call total,
and each category's smallest ms over the calls ("floor": the least noisy estimate on a
loaded machine; its total is the floors' sum), and the unprofiled per-call CPU and wall time; then the bound: Inductor's total against the plugin's
products alone (``plugin products / inductor total``: the ratio if every other plugin
microsecond went to zero) and against Inductor's products (the same with products exactly as
fast as Inductor's MKL/oneDNN ones). Times are the profiler's (wall time of the calling
thread): run with ``OMP_WAIT_POLICY=PASSIVE`` on a loaded machine and compare ratios, not
absolute times.

    OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=2 python3 benchmarks/cpu_bound.py --model bert
        --batch 1 [--backends inductor,plugin] [--calls 10] [--rounds 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from plugin_models import MODELS, build

CATEGORIES = ("products", "attention", "kernels", "copies", "rest")

PRODUCT_OPS = {
    "aten::addmm": "MKL (ATen addmm)",
    "aten::mm": "MKL (ATen mm)",
    "aten::bmm": "MKL (ATen bmm)",
    "aten::baddbmm": "MKL (ATen baddbmm)",
    "aten::mkldnn_convolution": "oneDNN (ATen/ideep conv)",
    "aten::_slow_conv2d_forward": "MKL (ATen im2col + sgemm conv)",
    "aten::convolution": "ATen conv dispatch",
    "aten::_convolution": "ATen conv dispatch",
    "aten::_mkl_linear": "MKL (packed linear)",
    "mkldnn::_linear_pointwise": "oneDNN (ideep linear)",
    "mkldnn::_convolution_pointwise": "oneDNN (ideep conv)",
    "mkl::_mkl_linear": "MKL (packed linear)",
}
COPY_OPS = ("aten::copy_", "aten::cat", "aten::clone", "aten::contiguous", "aten::_to_copy")
KERNEL_OPS = (
    "aten::layer_norm",
    "aten::native_layer_norm",
    "aten::gelu",
    "aten::add",
    "aten::add_",
    "aten::mul",
    "aten::div",
    "aten::relu",
    "aten::relu_",
    "aten::tanh",
    "aten::pow",
    "aten::softmax",
    "aten::_softmax",
    "aten::native_batch_norm",
    "aten::_native_batch_norm_legit_no_training",
    "aten::max_pool2d_with_indices",
    "aten::adaptive_avg_pool2d",
    "aten::mean",
    "aten::where",
    "aten::embedding",
    "aten::index_select",
)


def classify(name: str) -> tuple[str, str] | None:
    """(category, library) of an op that owns its children's time; None for the others."""
    if name in PRODUCT_OPS:
        return "products", PRODUCT_OPS[name]
    if name.startswith("torch_plugin: onednn"):
        return "products", "oneDNN (plugin " + name.split()[2] + ")"
    if "scaled_dot_product" in name or "flash_attention" in name:
        return "attention", "ATen"
    if name.startswith("torch_plugin: kernel"):
        return "kernels", "generated"
    return None


def own_category(name: str) -> str:
    """Category of an op's self time when no ancestor owns it."""
    if name.startswith(("## Call CompiledFxGraph", "kernel_cpp")):
        return "kernels"
    if name in COPY_OPS or name.startswith(("torch_plugin: copy", "torch_plugin: view aten::cat")):
        return "copies"
    if name in KERNEL_OPS:
        return "kernels"
    return "rest"


def profile_backend(fn, x, calls: int) -> tuple[list[dict], dict]:
    """Per call {category: ms}; and {library: ms per call} of the products."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(calls):
            with record_function(f"bound_call_{i}"):
                fn(x)
    per_call = [{c: 0.0 for c in CATEGORIES} | {"total": 0.0} for _ in range(calls)]
    libs: dict[str, float] = {}
    for e in prof.events():
        # The call this op belongs to, and the nearest ancestor that owns its time.
        owner, node, call = None, e, None
        while node is not None:
            if node.name.startswith("bound_call_"):
                call = int(node.name.rsplit("_", 1)[1])
            elif owner is None:
                owner = classify(node.name)
            node = node.cpu_parent
        if call is None:
            continue
        us = e.self_cpu_time_total
        if e.name.startswith("bound_call_"):
            per_call[call]["total"] += e.cpu_time_total / 1e3
            per_call[call]["rest"] += us / 1e3
            continue
        cat = owner[0] if owner else own_category(e.name)
        per_call[call][cat] += us / 1e3
        if owner and owner[0] == "products":
            libs[owner[1]] = libs.get(owner[1], 0.0) + us / 1e3 / calls
    del torch
    return per_call, libs


def summarize(paths: list[str]) -> None:
    """One markdown table of the rows in ``paths`` (this script's --json files).

    Each category's time is its share of the profiled call (medians over calls, so a call
    stretched by another process weighs no more than its neighbours) times the backend's
    smallest unprofiled process CPU time per call: on a loaded machine the profiler's times
    are wall times stretched by preemption, the CPU time is not, and preemption stretches
    every category in proportion to its length. ``bound`` is plugin-at-best over Inductor:
    products as fast as Inductor's (MKL / oneDNN through ATen), attention as ATen's, every
    other plugin microsecond gone; ``bound (own products)`` the same with the plugin's
    products as measured.
    """
    print(
        "| model | batch | threads | backend | products ms (library) | attention | kernels "
        "| copies | rest | CPU ms/call | plugin/inductor CPU | bound | bound (own products) |"
    )
    print("|---" * 13 + "|")
    for path in paths:
        with open(path) as fh:
            row = json.load(fh)
        est = {}
        for b in ("inductor", "plugin"):
            med = row[b]["median"]
            parts = sum(med[c] for c in CATEGORIES)
            est[b] = {c: med[c] / parts * row[b]["cpu_ms"]["min"] for c in CATEGORIES}
        ind_total = row["inductor"]["cpu_ms"]["min"]
        for b in ("inductor", "plugin"):
            e, libs = est[b], row[b]["libs"]
            total = sum(libs.values()) or 1.0
            lib = (
                ", ".join(
                    k for k, v in sorted(libs.items(), key=lambda kv: -kv[1]) if v > total / 10
                )
                or "-"
            )
            cells = [f"{e['products']:.2f} ({lib})"] + [f"{e[c]:.2f}" for c in CATEGORIES[1:]]
            extra = ["", "", ""]
            if b == "plugin":
                best = est["inductor"]["products"] + est["inductor"]["attention"]
                own = e["products"] + est["inductor"]["attention"]
                extra = [
                    f"{row[b]['cpu_ms']['min'] / ind_total:.2f}",
                    f"{best / ind_total:.2f}",
                    f"{own / ind_total:.2f}",
                ]
            print(
                f"| {row['model']} | {row['batch']} | {row['threads']} | {b} | "
                + " | ".join(cells)
                + f" | {row[b]['cpu_ms']['min']:.2f} | "
                + " | ".join(extra)
                + " |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=MODELS)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--backends", default="inductor,plugin")
    ap.add_argument("--calls", type=int, default=10, help="profiled calls per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    ap.add_argument("--summarize", nargs="+", metavar="JSON", help="tabulate earlier --json files")
    args = ap.parse_args()
    if args.summarize:
        summarize(args.summarize)
        return
    import torch

    import torch_plugin

    print(
        f"{args.model} batch {args.batch}: torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    model, x = build(args.model, args.batch)
    result = {}
    print("| backend | " + " | ".join(CATEGORIES) + " | total |")
    print("|---" * (len(CATEGORIES) + 2) + "|")
    backends = args.backends.split(",")
    per_call = {b: [] for b in backends}
    libs = {b: {} for b in backends}
    cpu = {b: [] for b in backends}
    wall = {b: [] for b in backends}
    with torch.no_grad():
        fns = {b: model if b == "eager" else torch_plugin.optimize(b)(model) for b in backends}
        for fn in fns.values():
            for _ in range(3):
                fn(x)
        # Rounds, backends alternating, so that both share what else the machine does.
        for _ in range(args.rounds):
            for b, fn in fns.items():
                gc.collect()
                calls, lib = profile_backend(fn, x, args.calls)
                gc.collect()  # the profiler's objects, not in the calls below
                per_call[b] += calls
                for k, v in lib.items():
                    libs[b][k] = libs[b].get(k, 0.0) + v / args.rounds
                for _ in range(args.calls):
                    c0, w0 = time.process_time(), time.perf_counter()
                    fn(x)
                    cpu[b].append((time.process_time() - c0) * 1e3)
                    wall[b].append((time.perf_counter() - w0) * 1e3)
    for b in backends:
        med = {k: statistics.median(c[k] for c in per_call[b]) for k in per_call[b][0]}
        floor = {k: min(c[k] for c in per_call[b]) for k in CATEGORIES}
        floor["total"] = sum(floor.values())
        result[b] = {
            "median": med,
            "floor": floor,
            "libs": libs[b],
            "cpu_ms": {"min": min(cpu[b]), "median": statistics.median(cpu[b])},
            "wall_ms": {"min": min(wall[b]), "median": statistics.median(wall[b])},
        }
        for which, d in (("median", med), ("floor", floor)):
            cells = " | ".join(f"{d[c]:.2f}" for c in (*CATEGORIES, "total"))
            print(f"| {b} {which} | {cells} |")
        print(
            f"  unprofiled ms/call: CPU min {min(cpu[b]):.2f} median "
            f"{statistics.median(cpu[b]):.2f}; wall min {min(wall[b]):.2f} median "
            f"{statistics.median(wall[b]):.2f}"
        )
        print(
            "  products by library (ms/call, mean): "
            + ", ".join(f"{k} {v:.2f}" for k, v in libs[b].items())
        )
    if "inductor" in result and "plugin" in result:
        for which in ("median", "floor"):
            ind, pl = result["inductor"][which], result["plugin"][which]
            cm = "min" if which == "floor" else "median"
            cpu_ratio = result["plugin"]["cpu_ms"][cm] / result["inductor"]["cpu_ms"][cm]
            print(
                f"{which}: unprofiled CPU-time plugin/inductor {cpu_ratio:.2f}; "
                f"profiled plugin/inductor {pl['total'] / ind['total']:.2f}; "
                f"bound (plugin products only) {pl['products'] / ind['total']:.2f}; "
                f"bound (inductor's products only) {ind['products'] / ind['total']:.2f}; "
                f"+ATen attention {(ind['products'] + ind['attention']) / ind['total']:.2f}"
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                {
                    "model": args.model,
                    "batch": args.batch,
                    "threads": torch.get_num_threads(),
                    **result,
                },
                fh,
                indent=1,
            )


if __name__ == "__main__":
    main()
