"""Benchmark: peak memory of eager vs optimize("plugin") vs torch.compile, compile included.

Rows (random weights, ``--rows``; default: all): ``resnet50`` (torchvision, 224x224), ``vit``
(torchvision ViT-B/16, 224x224), ``bert`` (HF BERT-base, 128 tokens), ``gpt2`` (HF GPT-2 small
with its LM head, 128 tokens, ``use_cache=False``), built as ``benchmarks/gpu_models.py``
builds them (the full-size configs), at ``--batch`` on ``--device``. ``--dtype bf16`` runs the
calls under ``torch.autocast(device, torch.bfloat16)``, as ``gpu_models.py`` does.

Columns (``--impls``): ``eager``; ``plugin`` (``torch_plugin.optimize("plugin")``, default
options); ``compile`` (``torch.compile``, default mode).

Every (row, implementation) runs in a fresh child process (``--child``), with empty Inductor
and plugin cache directories, that builds the model and its inputs, imports torch_plugin (in
every column, so that the extension's own pages count for none), then measures from just
before the first call (capture, compile and tuning included) through ``--runs`` steady calls,
all under ``torch.no_grad()``:

- CUDA: ``torch.cuda.reset_peak_memory_stats()`` before the first call, then
  ``torch.cuda.max_memory_allocated()`` (bytes of live tensors at their peak, the weights
  included, as the issue's figures are) and ``max_memory_reserved()`` (what the caching
  allocator held from the driver) after the calls; also the peak above the bytes allocated
  before the first call.
- CPU: the process's resident set. Before the first call the high-water mark is reset by
  writing "5" to ``/proc/self/clear_refs`` (Linux >= 4.0: VmHWM becomes the current VmRSS);
  after the calls ``VmHWM`` of ``/proc/self/status`` is the peak. Where the reset is refused
  (an old kernel, a sandbox), a thread samples ``VmRSS`` every millisecond instead (the column
  ``method`` says which). Reported: the peak resident set and the peak above the resident set
  before the first call. Tensors freed by glibc's malloc may stay resident (arenas, the top of
  the heap), so RSS counts what the process asked the OS for at its peak, which is what a
  machine must hold.

The table prints the peak and its ratio to eager's peak per column, the device's name, the
torch version and the command line. Ratios <= 1.00 mean at most eager's memory.

A row may carry its own batch and dtype, ``name:batch:dtype`` (``vit:32:bf16``); on CUDA the
default rows are issue #27's (``resnet50:32:fp32,vit:32:bf16,bert:1:fp32,gpt2:32:fp32``).
``--jobs`` children run at once (default: 1 on the CPU, where RSS and time are shared; 4 on
CUDA, where each process's allocator statistics are its own), each bounded by ``--timeout``.

    python3 benchmarks/peak_memory.py --device cpu --rows resnet50,bert --batch 1 --runs 3
    python3 benchmarks/peak_memory.py --device cuda            # issue #27's four GPU rows
    python3 benchmarks/peak_memory.py --device cuda --rows vit:32:bf16 --impls eager,plugin --why
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from typing import Self

ROWS = ["resnet50", "vit", "bert", "gpt2"]
# The rows of issue #27's GPU figures, each with its batch and dtype (--device cuda default).
ISSUE_GPU_ROWS = "resnet50:32:fp32,vit:32:bf16,bert:1:fp32,gpt2:32:fp32"
IMPLS = ["eager", "plugin", "compile"]


def build(name: str, batch: int, device: str):
    """(model, inputs) for row ``name`` on ``device``, eval mode, seed 0 (the constructors of
    ``benchmarks/gpu_models.py``; GPT-2 with its LM head)."""
    import torch

    torch.manual_seed(0)
    if name in ("bert", "gpt2"):
        import transformers

        if name == "bert":
            model = transformers.BertModel(transformers.BertConfig())
        else:
            model = transformers.GPT2LMHeadModel(transformers.GPT2Config(use_cache=False))
        ids = torch.randint(0, 1000, (batch, 128), device=device)
        return model.to(device).eval(), (ids,)
    if name in ("vit", "resnet50"):
        import torchvision

        ctor = torchvision.models.vit_b_16 if name == "vit" else torchvision.models.resnet50
        model = ctor(weights=None).to(device).eval()
        return model, (torch.randn(batch, 3, 224, 224, device=device),)
    raise SystemExit(f"unknown row {name}")


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        m = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.MULTILINE)
    return int(m.group(1)) if m else 0


class RssPeak:
    """Peak resident set (bytes) over a ``with`` block: VmHWM after resetting it through
    ``/proc/self/clear_refs``, else the maximum of VmRSS sampled every millisecond."""

    def __enter__(self) -> Self:
        self.start = _status_kb("VmRSS") * 1024
        self.method = "VmHWM"
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            if _status_kb("VmHWM") * 1024 > self.start + (1 << 20):
                raise OSError("VmHWM was not reset")
        except OSError:
            self.method = "sampled 1 ms"
            self.sampled = self.start
            self.stop = threading.Event()
            self.thread = threading.Thread(target=self._sample, daemon=True)
            self.thread.start()
        return self

    def _sample(self) -> None:
        while not self.stop.is_set():
            self.sampled = max(self.sampled, _status_kb("VmRSS") * 1024)
            time.sleep(0.001)

    def __exit__(self, *exc: object) -> None:
        if self.method == "VmHWM":
            self.peak = _status_kb("VmHWM") * 1024
        else:
            self.stop.set()
            self.thread.join()
            self.peak = max(self.sampled, _status_kb("VmRSS") * 1024)


def _implementation(impl: str, model):
    import torch

    if impl == "eager":
        return model
    if impl == "compile":
        return torch.compile(model)
    import torch_plugin

    if impl == "plugin":
        return torch_plugin.optimize("plugin")(model)
    raise SystemExit(f"unknown implementation {impl}")


def child(args: argparse.Namespace) -> None:
    """One (row, implementation) in this process; prints one JSON line."""
    import contextlib

    import torch

    import torch_plugin  # noqa: F401  (every column pays for the extension's pages)

    if args.threads:
        torch.set_num_threads(args.threads)
    model, inputs = build(args.row, args.batch, args.device)
    fn = _implementation(args.impl, model)
    autocast = (
        torch.autocast(args.device, torch.bfloat16)
        if args.dtype == "bf16"
        else contextlib.nullcontext()
    )
    rec = {"row": args.row, "impl": args.impl}
    cuda = args.device == "cuda"
    with torch.no_grad(), autocast:
        if cuda:
            torch.cuda.synchronize()
            if args.why:
                torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            t0 = time.perf_counter()
            out = fn(*inputs)
            del out
            torch.cuda.synchronize()
            first = torch.cuda.max_memory_allocated()
            for _ in range(args.runs):
                out = fn(*inputs)
                del out
            torch.cuda.synchronize()
            peak = torch.cuda.max_memory_allocated()
            rec.update(
                peak_mb=peak / 2**20,
                first_call_mb=first / 2**20,
                above_mb=(peak - base) / 2**20,
                reserved_mb=torch.cuda.max_memory_reserved() / 2**20,
                base_mb=base / 2**20,
                after_mb=torch.cuda.memory_allocated() / 2**20,
                method="max_memory_allocated",
            )
            if args.why:
                rec["why"] = _live_at_peak(torch.cuda.memory._snapshot())
                torch.cuda.memory._record_memory_history(enabled=None)
        else:
            t0 = time.perf_counter()
            with RssPeak() as rss:
                for _ in range(1 + args.runs):
                    out = fn(*inputs)
                    del out
            rec.update(
                peak_mb=rss.peak / 2**20,
                above_mb=(rss.peak - rss.start) / 2**20,
                base_mb=rss.start / 2**20,
                method=rss.method,
            )
        rec["seconds"] = time.perf_counter() - t0
    print("ROW " + json.dumps(rec), flush=True)


def _frame_key(frames: list[dict]) -> str:
    """Where an allocation was made, in a few frames: the innermost frames of this project
    (Python files under torch_plugin/ or benchmarks/, C++ functions of torch_plugin::) and the
    innermost torch frame."""
    mine, theirs = [], []
    for f in frames:
        name, file = f.get("name", ""), f.get("filename", "")
        if "torch_plugin" in name or "/torch_plugin/" in file or "/benchmarks/" in file:
            where = f"{os.path.basename(file)}:{f.get('line')}" if file.endswith(".py") else ""
            mine.append(f"{name[:80]} {where}".strip())
        elif not theirs and ("/torch/" in file or "at::" in name or "c10::" in name):
            theirs.append(name[:60])
        if len(mine) >= 3:
            break
    return " < ".join(mine + theirs[:1]) or "?"


def _live_at_peak(snapshot: dict, top: int = 12) -> list[str]:
    """The allocations live at the peak of allocated bytes in a memory-history snapshot
    (``torch.cuda.memory._snapshot()``), grouped by where they were made, largest first."""
    lines = []
    for trace in snapshot.get("device_traces", []):
        live: dict[int, dict] = {}
        total = peak = 0
        at_peak: list[dict] = []
        for e in trace:
            if e["action"] == "alloc":
                live[e["addr"]] = e
                total += e["size"]
                if total > peak:
                    peak, at_peak = total, list(live.values())
            elif e["action"] == "free_requested" and e["addr"] in live:
                total -= live.pop(e["addr"])["size"]
        groups: dict[str, list[int]] = {}
        for e in at_peak:
            g = groups.setdefault(_frame_key(e.get("frames", [])), [0, 0])
            g[0] += e["size"]
            g[1] += 1
        lines.append(f"traced peak {peak / 2**20:.0f} MB (allocations since tracing began)")
        for key, (size, n) in sorted(groups.items(), key=lambda kv: -kv[1][0])[:top]:
            lines.append(f"{size / 2**20:8.1f} MB in {n:4d} blocks: {key}")
    return lines


def _row_spec(spec: str, args: argparse.Namespace) -> tuple[str, int, str]:
    """``name[:batch[:dtype]]`` -> (name, batch, dtype), defaults from ``--batch``/``--dtype``."""
    parts = spec.split(":")
    batch = int(parts[1]) if len(parts) > 1 and parts[1] else args.batch
    dtype = parts[2] if len(parts) > 2 else args.dtype
    if parts[0] not in ROWS or dtype not in ("fp32", "bf16"):
        raise SystemExit(f"bad row {spec!r}: rows {ROWS}, dtypes fp32, bf16")
    return parts[0], batch, dtype


def run_child(args: argparse.Namespace, spec: str, impl: str) -> dict:
    row, batch, dtype = _row_spec(spec, args)
    label = f"{row} b{batch} {dtype}"
    cmd = [
        sys.executable, __file__, "--child", "--row", row, "--impl", impl,
        "--device", args.device, "--batch", str(batch), "--dtype", dtype,
        "--runs", str(args.runs), "--threads", str(args.threads),
    ] + (["--why"] if args.why and impl == "plugin" else [])  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(
            os.environ,
            TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor",
            TORCH_PLUGIN_CACHE_DIR=f"{tmp}/plugin",
        )
        try:
            p = subprocess.run(
                cmd, capture_output=True, text=True, env=env, timeout=args.timeout, check=False
            )
        except subprocess.TimeoutExpired:
            return {"row": label, "impl": impl, "error": f"timeout ({args.timeout:.0f} s)"}
    recs = [json.loads(line[4:]) for line in p.stdout.splitlines() if line.startswith("ROW ")]
    if recs:
        return dict(recs[0], row=label)
    tail = " | ".join((p.stderr or "").strip().splitlines()[-3:])
    return {"row": label, "impl": impl, "error": tail[:300]}


def table(recs: list[dict], impls: list[str], cuda: bool) -> str:
    rows: dict[str, dict[str, dict]] = {}
    for r in recs:
        rows.setdefault(r["row"], {})[r["impl"]] = r
    what = "max_memory_allocated MB" if cuda else "peak RSS MB"
    head = "| row | " + " | ".join(f"{i} {what}" for i in impls)
    head += " | " + " | ".join(f"{i} / eager" for i in impls if i != "eager")
    head += " | " + " | ".join(f"{i} above start MB" for i in impls)
    if cuda:
        head += " | " + " | ".join(f"{i} reserved MB" for i in impls)
    head += " |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    notes = []
    for row, cells in rows.items():

        def cell(impl: str, key: str, cells: dict = cells) -> str:
            c = cells.get(impl, {})
            return "ERR" if "error" in c else f"{c[key]:.0f}" if key in c else "-"

        eager = cells.get("eager", {}).get("peak_mb")
        ratios = []
        for i in impls:
            if i == "eager":
                continue
            p = cells.get(i, {}).get("peak_mb")
            ratios.append(f"{p / eager:.2f}" if p and eager else "-")
        parts = [cell(i, "peak_mb") for i in impls] + ratios
        parts += [cell(i, "above_mb") for i in impls]
        if cuda:
            parts += [cell(i, "reserved_mb") for i in impls]
        lines.append(f"| {row} | " + " | ".join(parts) + " |")
        for i, c in cells.items():
            if "error" in c:
                notes.append(f"- {row} {i}: {c['error']}")
            if "first_call_mb" in c:
                notes.append(
                    f"- {row} {i}: first call (compile) peak {c['first_call_mb']:.0f} MB, "
                    f"allocated after the calls {c['after_mb']:.0f} MB"
                )
            for line in c.get("why", []):
                notes.append(f"  - {row} {i}: {line}")
    methods = sorted({r["method"] for r in recs if "method" in r})
    return "\n".join(lines + [""] + notes + [f"- method: {', '.join(methods)}"])


def _device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return torch.cuda.get_device_name()
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
        name = re.search(r"^model name\s*:\s*(.*)$", info, re.MULTILINE)
        flags = re.search(r"^flags\s*:\s*(.*)$", info, re.MULTILINE)
        have = set(flags.group(1).split()) if flags else set()
        isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in have]
        return f"{name.group(1) if name else 'CPU'} ({os.cpu_count()} cores; {', '.join(isa)})"
    except OSError:
        return "CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--rows", default="", help="name[:batch[:dtype]],... (see the docstring)")
    ap.add_argument("--jobs", type=int, default=0, help="children at once (0: 1 CPU, 4 CUDA)")
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--runs", type=int, default=5, help="steady calls after the first")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: as is)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per child")
    ap.add_argument("--json", default="")
    ap.add_argument(
        "--why",
        action="store_true",
        help="CUDA, plugin column: record allocation stacks (Python) and print what is live "
        "at the peak",
    )
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--row")
    ap.add_argument("--impl")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    from concurrent.futures import ThreadPoolExecutor

    import torch

    impls = args.impls.split(",")
    rows = args.rows or (ISSUE_GPU_ROWS if args.device == "cuda" else ",".join(ROWS))
    cells = [(spec, impl) for spec in rows.split(",") for impl in impls]
    for spec, _ in cells:
        _row_spec(spec, args)  # a bad row fails now, not after the others ran
    jobs = args.jobs or (4 if args.device == "cuda" else 1)

    def one(cell: tuple[str, str]) -> dict:
        rec = run_child(args, *cell)
        print(f"# {cell[0]} {cell[1]}: {json.dumps(rec)}", file=sys.stderr, flush=True)
        return rec

    with ThreadPoolExecutor(jobs) as pool:
        recs = list(pool.map(one, cells))
    print(
        f"# peak_memory\n\nCommand: `python3 {' '.join(shlex.quote(a) for a in sys.argv)}`\n\n"
        f"- device: {_device_name(args.device)}; torch {torch.__version__}; "
        f"Python {sys.version.split()[0]}; {args.runs} steady calls after the first, "
        f"threads {args.threads or torch.get_num_threads()}, {jobs} children at once\n"
    )
    print(table(recs, impls, args.device == "cuda"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(recs, f, indent=1)


if __name__ == "__main__":
    main()
