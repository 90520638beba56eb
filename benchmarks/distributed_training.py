"""Training step time under DistributedDataParallel and FSDP2, side by side in one run.

Run with one process per GPU, e.g. on a 2-GPU machine:

    torchrun --nproc-per-node 2 benchmarks/distributed_training.py \\
        --wrap ddp --models resnet50,bert --backends eager,plugin,compile \\
        --out benchmarks/results/distributed-h100x2-ddp

Each row builds the model with the same seed, wraps it (``--wrap ddp``: DDP with
``bucket_cap_mb``; ``--wrap fsdp2``: ``fully_shard`` on each layer and the root), runs one
step (the cold step: capture and compile included), ``--warmup`` more, then ``--steps``
timed steps (CUDA events around forward, backward and an SGD step; the median is reported).
Backends:
- ``eager``: the wrapped model as it is;
- ``plugin``: ``torch_plugin.optimize("plugin")`` (on CUDA the plugin compiler compiles
  training graphs since issue #30; the SGD step runs outside the optimized module, as eager);
  ``plugin-whole``: the same with ``torch_plugin.config.optimize_ddp = False``;
- ``capture-eager``: ``torch_plugin.optimize("eager")``: capture only, graphs run as captured;
- ``plugin-inductor``: ``torch_plugin.optimize("inductor")``: torch_plugin's capture and DDP
  split with Inductor compiling each subgraph; ``plugin-inductor-whole``: the same with
  ``torch_plugin.config.optimize_ddp = False`` (one graph, every all-reduce after backward);
- ``compile``: ``torch.compile`` (Dynamo + Inductor, its DDPOptimizer on).
A ``-per-layer`` suffix (``plugin-per-layer``) runs that backend with
``torch_plugin.config.share_module_code = False``: each FSDP2 layer its own compiled entries.

``--profile`` also records two steps of each row with torch.profiler and reports how much of
the NCCL kernels' time overlaps compute kernels (the union of all other kernels' intervals):
the all-reduce/backward overlap the DDP split is for.

Outputs (rank 0): a table on stdout, ``<out>.md`` and ``<out>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist


def build(name: str) -> tuple[torch.nn.Module, tuple]:
    """The model (random weights) and one batch on the current GPU."""
    dev = torch.device("cuda", torch.cuda.current_device())
    g = torch.Generator(device=dev).manual_seed(1234 + dist.get_rank())
    if name == "resnet50":
        import torchvision

        model = torchvision.models.resnet50()
        batch = (torch.randn(32, 3, 224, 224, device=dev, generator=g),)
    elif name == "bert":
        from transformers import BertConfig, BertModel

        model = BertModel(BertConfig(), add_pooling_layer=False)  # BERT-base, dropout 0.1
        batch = (torch.randint(0, 30522, (32, 128), device=dev, generator=g),)
    else:
        raise SystemExit(f"unknown model {name!r}")
    return model.to(dev), batch


def layers_of(model: torch.nn.Module, name: str) -> list[torch.nn.Module]:
    if name == "bert":
        return list(model.encoder.layer)
    return [m for m in [model.layer1, model.layer2, model.layer3, model.layer4]]


def loss_of(out) -> torch.Tensor:
    t = out if isinstance(out, torch.Tensor) else out[0]
    return t.float().square().mean()


def make_runner(wrapped: torch.nn.Module, backend: str):
    import torch_plugin

    torch_plugin.config.optimize_ddp = not backend.endswith("-whole")
    # "-per-layer": each layer object its own compiled entries (no shared-module capture)
    torch_plugin.config.share_module_code = not backend.endswith("-per-layer")
    backend = backend.removesuffix("-per-layer")
    if backend == "eager":
        return wrapped
    if backend in ("plugin", "plugin-whole"):
        return torch_plugin.optimize("plugin")(wrapped)
    if backend == "capture-eager":
        return torch_plugin.optimize("eager")(wrapped)
    if backend in ("plugin-inductor", "plugin-inductor-whole"):
        return torch_plugin.optimize("inductor")(wrapped)
    if backend == "compile":
        return torch.compile(wrapped)
    raise SystemExit(f"unknown backend {backend!r}")


def overlap_of(trace_path: str) -> dict:
    """NCCL kernel time and the part of it that overlaps other kernels, from a Chrome trace."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    comm = [(e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" in e["name"].lower()]
    compute = sorted(
        (e["ts"], e["ts"] + e["dur"]) for e in kernels if "nccl" not in e["name"].lower()
    )
    merged: list[list[float]] = []
    for a, b in compute:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    total = sum(b - a for a, b in comm)
    covered = 0.0
    for a, b in comm:
        for c, d in merged:
            if d <= a:
                continue
            if c >= b:
                break
            covered += min(b, d) - max(a, c)
    return {
        "nccl_kernels": len(comm),
        "nccl_ms": total / 1e3,
        "overlapped_ms": covered / 1e3,
        "overlap_pct": 100.0 * covered / total if total else 0.0,
    }


def run_row(args, model_name: str, backend: str) -> dict:
    import torch_plugin
    from torch_plugin.capture import convert_frame

    torch_plugin.reset()
    torch._dynamo.reset()
    torch.manual_seed(0)
    model, batch = build(model_name)
    if args.wrap == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        wrapped = DDP(
            model, device_ids=[torch.cuda.current_device()], bucket_cap_mb=args.bucket_cap_mb
        )
    else:
        from torch.distributed.fsdp import fully_shard

        for layer in layers_of(model, model_name):
            fully_shard(layer)
        fully_shard(model)
        wrapped = model
    runner = make_runner(wrapped, backend)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)

    def step() -> float:
        loss = loss_of(runner(*batch))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    records: list = []
    convert_frame.listeners.append(records.append)
    try:
        dist.barrier()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        cold_s = time.perf_counter() - t0
        for _ in range(args.warmup):
            step()
        torch.cuda.synchronize()
        converted_after_warmup = len(records)
        times = []
        for _ in range(args.steps):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        recompiles = len(records) - converted_after_warmup
    finally:
        convert_frame.listeners.remove(records.append)
    splits = [r.ddp_split for r in records if r.ddp_split is not None]
    row = {
        "model": model_name,
        "wrap": args.wrap,
        "backend": backend,
        "step_ms": statistics.median(times),
        "step_ms_min": min(times),
        "cold_s": cold_s,
        "frames_converted": len(records),
        "recompiles_after_warmup": recompiles,
        # torch_plugin's counters: graphs compiled and recompiles of the whole row
        "graphs_compiled": torch_plugin.stats.graphs_compiled,
        "recompiles": torch_plugin.stats.recompiles,
        "ddp_subgraphs": [len(s.subgraphs) for s in splits],
    }
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(2):
                step()
            torch.cuda.synchronize()
        path = f"/tmp/trace-{dist.get_rank()}-{model_name}-{backend}.json"
        prof.export_chrome_trace(path)
        row["overlap"] = overlap_of(path)
        averages = prof.key_averages()
        top = sorted(averages, key=lambda e: e.device_time_total, reverse=True)[:12]
        row["top_device_ms"] = {e.key[:80]: e.device_time_total / 2e3 for e in top}  # per step
        top = sorted(averages, key=lambda e: e.self_device_time_total, reverse=True)[:40]
        row["top_self_device_ms"] = {
            e.key[:80]: (e.self_device_time_total / 2e3, e.count // 2) for e in top
        }
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--wrap", choices=("ddp", "fsdp2"), default="ddp")
    p.add_argument("--models", default="resnet50,bert")
    p.add_argument("--backends", default="eager,plugin,compile")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--out", default=None, help="write <out>.md and <out>.json (rank 0)")
    args = p.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rows = []
    for model_name in args.models.split(","):
        for backend in args.backends.split(","):
            row = run_row(args, model_name, backend)
            rows.append(row)
            torch.cuda.empty_cache()
            if dist.get_rank() == 0:
                print(json.dumps(row), flush=True)
    if dist.get_rank() == 0:
        eager = {r["model"]: r["step_ms"] for r in rows if r["backend"] == "eager"}
        comp = {r["model"]: r["step_ms"] for r in rows if r["backend"] == "compile"}
        setup = (
            f"world size {dist.get_world_size()}, {torch.cuda.get_device_name()}, torch "
            f"{torch.__version__}, wrap {args.wrap}, bucket_cap_mb {args.bucket_cap_mb}, "
            f"{args.steps} timed steps after {args.warmup} warm-up"
        )
        header = (
            "| model | backend | step ms (median) | x eager | x torch.compile | cold step s "
            "| DDP subgraphs | graphs compiled | recompiles (after warm-up) | NCCL overlap |"
        )
        lines = [setup, "", header, "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            xe = eager.get(r["model"], float("nan")) / r["step_ms"]
            xc = comp.get(r["model"], float("nan")) / r["step_ms"]
            ov = r.get("overlap")
            ov_text = (
                f"{ov['overlap_pct']:.0f}% of {ov['nccl_ms']:.1f} ms ({ov['nccl_kernels']} kernels)"
                if ov
                else "-"
            )
            lines.append(
                f"| {r['model']} | {r['backend']} | {r['step_ms']:.2f} | {xe:.2f} | {xc:.2f} | "
                f"{r['cold_s']:.1f} | {r['ddp_subgraphs'] or '-'} | "
                f"{r['graphs_compiled'] if r['backend'] not in ('eager', 'compile') else '-'} | "
                f"{r['recompiles']} ({r['recompiles_after_warmup']}) | {ov_text} |"
            )
        print("\n".join(lines))
        if args.out:
            with open(args.out + ".md", "w") as f:
                f.write("\n".join(lines) + "\n")
            with open(args.out + ".json", "w") as f:
                json.dump(rows, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
