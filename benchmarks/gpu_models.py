"""Benchmark: eager vs torch.compile vs torch_plugin on CUDA, issue #29's table, one process
per row.

Rows (``benchmarks/gpu_rows.py``; ``--rows``, default issue #29's): ``resnet18``,
``resnet50``, ``mobilenet_v3_large``, ``efficientnet_b0``, ``vit`` (torchvision, 224x224;
ViT-B/16), ``bert`` (BERT-base), ``gpt2`` (GPT-2 small WITH its LM head, returning the
logits), ``llama`` (a Llama-style decoder from a config), all text rows at 128 tokens; at
batch 1 and 32, fp32 and bf16 (``torch.autocast("cuda", torch.bfloat16)``) as in the issue's
table: fp32 only for ResNet-18, MobileNetV3-Large and EfficientNet-B0. Also available:
``gpt2_body`` (GPT2Model, the old ``gpt2`` row) and the micro rows ``pointwise``,
``ln_gelu_res``, ``tiny``. ``--rows name:batch:dtype`` names one row exactly.

Columns (``--backends``, in the order measured; default ``eager,plugin,compile,compile_ro``):
``eager``; ``compile`` (``torch.compile``, default mode); ``compile_ro``
(``mode="reduce-overhead"``); ``plugin`` (``torch_plugin.optimize("plugin")``, default
options); optional ``inductor`` (``optimize("inductor")``) and ``plugin_ro``
(``optimize("plugin", mode="reduce-overhead")``). ``--ma`` adds ``compile_ma``
(``mode="max-autotune"``) in a child of its own per row (eager measured again there), killed
after ``--ma-cap-s`` (plus 60 s to start) and shown as ``cap``. The plugin is measured before
torch.compile, so that it pays the process's first imports of AOTAutograd and friends (its
cold compile is the conservative one); ``import torch_plugin`` itself is part of the child's
startup, as ``import torch`` is.

Method. ``torch.set_float32_matmul_precision("high")`` for every implementation (TF32
products; ``--matmul-precision highest`` for none). Each row is a child process (``--child``)
with empty Inductor, Triton and plugin cache directories, which builds the model once, runs
eager once for the reference output, and measures each backend in turn: the first call (cold
compile = its time minus one steady call), 3 untimed calls, then the median of ``--runs``
calls each between two CUDA events (after 3 more untimed calls); the peak of
``torch.cuda.max_memory_allocated`` from before the first call (compile included) plus the
weights and inputs; the error against eager (max |out - eager| / max |eager|). The plugin's
decisions to run a graph as its eager graph are logged in the row's notes.

The runner (parent process) fits a GPU budget: ``--gpus N`` runs N children at once, each on
its own GPU (``CUDA_VISIBLE_DEVICES``) and, by default, its own 1/N of the CPU cores; rows go
longest first (estimated); no row starts after ``--deadline-s`` or when its estimate would
pass ``--hard-deadline-s``, where running children are killed (their rows: not run). The JSON
(``--out`` with .json) is rewritten after every row, so a killed call leaves its rows; a
later call with ``--resume FILE...`` (or ``--append``) runs only the rows those files lack,
and ``--merge A.json B.json --out table.md`` joins calls into one table (no GPU needed).
``--shard K/N`` runs the K-th of N balanced parts; ``--plan`` prints the schedule.

    python3 benchmarks/gpu_models.py --out r.md                     # the whole table, 1 GPU
    python3 benchmarks/gpu_models.py --gpus 2 --deadline-s 470 --hard-deadline-s 540 --out r.md
    python3 benchmarks/gpu_models.py --resume r.json --out r2.md    # the rows r.json lacks
    python3 benchmarks/gpu_models.py --merge r.json r2.json --out table.md
    python3 benchmarks/gpu_models.py --device cpu --rows tiny --backends eager,plugin  # smoke

benchmarks/README.md has the commands that fit the device tool's 10-minute calls.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gpu_runner
import gpu_table
from gpu_rows import ISSUE_PLAN, build, plan

DEFAULT_BACKENDS = "eager,plugin,compile,compile_ro"


# --- the child: one row, every backend ---------------------------------------------------------
def compiled(backend: str, fn):
    """``fn`` compiled by ``backend`` (a column name). Raises SystemExit for another name."""
    import torch

    if backend == "eager":
        return fn
    if backend == "compile":
        return torch.compile(fn)
    if backend == "compile_ro":
        return torch.compile(fn, mode="reduce-overhead")
    if backend == "compile_ma":
        return torch.compile(fn, mode="max-autotune")
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
    for attr in ("logits", "last_hidden_state"):
        if hasattr(out, attr):
            return getattr(out, attr)
    raise TypeError(type(out))


def _time(call, runs: int, cuda: bool) -> float:
    """Median milliseconds of ``call()`` over ``runs`` calls after 3 untimed ones: CUDA events
    around each call on CUDA (the host's work included: the next call starts after the
    previous one ended), ``perf_counter`` on the CPU."""
    import torch

    for _ in range(3):
        call()
    times = []
    for _ in range(runs):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            call()
            times.append((time.perf_counter() - t0) * 1e3)
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


class _Notes:
    """Collects the plugin's INFO messages about eager graphs while active (compile time)."""

    def __enter__(self):
        import logging

        self.msgs: list[str] = []
        outer = self

        class H(logging.Handler):
            def emit(self, record):
                msg = record.getMessage()
                if "eager graph" in msg and len(outer.msgs) < 6:
                    outer.msgs.append(msg[:240])

        self.log = logging.getLogger("torch_plugin.backends.plugin")
        self.level, self.h = self.log.level, H()
        self.log.addHandler(self.h)
        self.log.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc):
        self.log.removeHandler(self.h)
        self.log.setLevel(self.level)


def _eager_graphs() -> int:
    try:
        from torch_plugin.compiler.pipeline import counters
    except ImportError:
        return 0
    return counters.get("eager_graphs", 0)


def measure(backend, fn, inputs, ref, args, model_bytes: int, autocast) -> dict:
    """One backend on one row: the record of ``gpu_table`` (``ms``, ``compile_s``,
    ``peak_mb``, ``err``, plugin notes)."""
    import torch

    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    f = compiled(backend, fn)
    plugin = backend.startswith("plugin")
    eg0 = _eager_graphs() if plugin else 0
    rec: dict = {}
    with torch.no_grad(), autocast:
        sync()
        base = torch.cuda.memory_allocated() if cuda else 0
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        with _Notes() as notes:
            t0 = time.perf_counter()
            out = f(*inputs)
            sync()
            first = time.perf_counter() - t0
            del out
            for _ in range(3):
                f(*inputs)
            sync()
        if args.row == "tiny":
            n = 2000
            sync()
            t0 = time.perf_counter()
            for _ in range(n):
                f(*inputs)
            sync()
            ms = (time.perf_counter() - t0) * 1e3 / n
        elif args.row == "pointwise" and cuda:
            ms = _time_burst(lambda: f(*inputs), args.runs)
        else:
            ms = _time(lambda: f(*inputs), args.runs, cuda)
        if cuda:
            peak = torch.cuda.max_memory_allocated() - base
            rec["peak_mb"] = (model_bytes + peak) / 2**20
        out = _first_tensor(f(*inputs)).float().clone()
    rec["err"] = ((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
    rec.update(ms=ms, compile_s=max(first - ms * 1e-3, 0.0))
    if notes.msgs:
        rec["notes"] = notes.msgs
    if plugin and _eager_graphs() > eg0:
        rec["eager_graphs"] = _eager_graphs() - eg0
    if args.row == "pointwise" and cuda:
        rec["gbps"] = 2 * inputs[0].numel() * inputs[0].element_size() / (ms * 1e-3) / 1e9
    return rec


def device_meta(device: str, matmul_precision: str) -> dict:
    """A child's ``META`` record: the GPU's name ("cpu" on the CPU), the versions (torch,
    CUDA, cuDNN, Python) and the matmul precision with the TF32 switches it set."""
    import torch

    cuda = device == "cuda"
    versions = f"torch {torch.__version__}, CUDA {torch.version.cuda}"
    if cuda:
        versions += f", cuDNN {torch.backends.cudnn.version()}"
    versions += f", Python {sys.version.split()[0]}"
    tf32 = f"matmul TF32 {torch.backends.cuda.matmul.allow_tf32}, "
    tf32 += f"cuDNN TF32 {torch.backends.cudnn.allow_tf32}"
    return {
        "gpu": torch.cuda.get_device_name() if cuda else "cpu",
        "versions": versions,
        "matmul_precision": f"{matmul_precision} ({tf32})",
    }


def child(args: argparse.Namespace) -> None:
    """Measures one row, every backend of ``--backends`` in this process, in order; prints a
    ``META`` line, then one ``ROW`` JSON line per backend (the ``ma`` job folds its eager
    milliseconds into the compile_ma record)."""
    t_start = time.perf_counter()
    with contextlib.suppress(Exception):  # die with the runner (Linux PR_SET_PDEATHSIG = 1)
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    if args.cpus:
        os.sched_setaffinity(0, gpu_runner.parse_cpus(args.cpus))
    import torch

    torch.set_float32_matmul_precision(args.matmul_precision)
    if args.padded_chunks:  # padded cuBLASLt products in chunks, not in place (A/B runs)
        from torch_plugin import _C

        _C._cuda.cublaslt_padding(in_place=False)
    cuda = args.device == "cuda"
    meta = device_meta(args.device, args.matmul_precision)
    gpu = meta["gpu"]
    print("META " + json.dumps(meta), flush=True)
    fn, inputs = build(args.row, args.batch, args.device)
    if cuda:
        torch.cuda.synchronize()
    model_bytes = torch.cuda.memory_allocated() if cuda else 0
    bf16 = args.dtype == "bf16"
    autocast = torch.autocast(args.device, torch.bfloat16) if bf16 else contextlib.nullcontext()
    with torch.no_grad(), autocast:
        ref = _first_tensor(fn(*inputs)).float().clone()
    copy_gbps = None
    if args.row == "pointwise" and cuda:
        x, y = inputs[0], torch.empty_like(inputs[0])
        ms = _time_burst(lambda: y.copy_(x), 50)
        copy_gbps = 2 * x.numel() * x.element_size() / (ms * 1e-3) / 1e9
    if any(b in ("inductor", "plugin", "plugin_ro") for b in args.backends.split(",")):
        # Its import (the extension, AOTAutograd) is startup, not the plugin column's compile.
        import torch_plugin

    eager_ms = None
    startup_s = time.perf_counter() - t_start
    for backend in args.backends.split(","):
        t_backend = time.perf_counter()
        rec = {"row": args.row, "batch": args.batch, "dtype": args.dtype, "backend": backend}
        rec.update(job=args.job, gpu=gpu)
        try:
            rec.update(measure(backend, fn, inputs, ref, args, model_bytes, autocast))
            if copy_gbps:
                rec["copy_gbps"] = copy_gbps
        except Exception as e:  # noqa: BLE001 - a backend's failure is reported, not fatal
            rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        rec.update(startup_s=round(startup_s, 1), wall_s=round(time.perf_counter() - t_backend, 1))
        if args.job == "ma" and backend == "eager":
            eager_ms = rec.get("ms")
        else:
            if args.job == "ma":
                rec["eager_ms"] = eager_ms
            print("ROW " + json.dumps(rec), flush=True)
        torch._dynamo.reset()
        with contextlib.suppress(Exception):  # eager-only runs need no torch_plugin
            import torch_plugin

            torch_plugin.reset()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


# --- the parent: launching children ------------------------------------------------------------
def launch_child(job, worker, timeout: float, args) -> tuple[list[dict], dict | None, bool]:
    """Runs ``job`` in a child process on ``worker``'s GPU and CPUs, with empty caches; kills
    its process group after ``timeout`` seconds. Returns (records, meta, timed_out)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor")
        env.update(TRITON_CACHE_DIR=f"{tmp}/triton", TORCH_PLUGIN_CACHE_DIR=f"{tmp}/plugin")
        if worker.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = worker.gpu
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--row", job.row,
               "--batch", str(job.batch), "--dtype", job.dtype, "--backends",
               ",".join(job.backends), "--runs", str(args.runs), "--job", job.kind,
               "--matmul-precision", args.matmul_precision, "--device", args.device]  # fmt: skip
        if worker.cpus:
            cmd += ["--cpus", worker.cpus]
        if args.padded_chunks:
            cmd += ["--padded-chunks"]
        recs, meta, timed_out = _run(cmd, env, timeout)
        if args.warm and job.kind == "main" and not timed_out:
            i = cmd.index("--runs") + 1
            warm, _, _ = _run(cmd[:i] + ["5"] + cmd[i + 1 :], env, timeout)
            by = {r["backend"]: r for r in warm}
            for r in recs:
                if "compile_s" in by.get(r["backend"], {}):
                    r["warm_compile_s"] = by[r["backend"]]["compile_s"]
    return recs, meta, timed_out


# The children running now (their process groups are killed if the runner is stopped).
_LIVE: set[subprocess.Popen] = set()


def _stop(signum, frame) -> None:
    """SIGTERM/SIGINT in the runner: kill the children's process groups and exit. The results
    files hold every row finished before (the rows running then: not run, resumable)."""
    for p in list(_LIVE):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    os._exit(128 + signum)


def _run(cmd: list[str], env: dict, timeout: float) -> tuple[list[dict], dict | None, bool]:
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         start_new_session=True)  # fmt: skip
    _LIVE.add(p)
    timed_out = False
    try:
        out, err = p.communicate(timeout=max(timeout, 1.0))
    except subprocess.TimeoutExpired:
        timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
    finally:
        _LIVE.discard(p)
    lines = out.splitlines()
    recs = [json.loads(x[4:]) for x in lines if x.startswith("ROW ")]
    metas = [json.loads(x[5:]) for x in lines if x.startswith("META ")]
    if p.returncode and not timed_out:
        tail = " | ".join((err or "").strip().splitlines()[-3:])
        recs.append({"crash": tail or f"exit status {p.returncode}"})
    return recs, (metas[0] if metas else None), timed_out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default=",".join(ISSUE_PLAN))
    ap.add_argument("--batches", default=None, help="default: 1,32")
    ap.add_argument("--dtypes", default=None, help="default: issue #29's dtypes of each row")
    ap.add_argument("--backends", default=DEFAULT_BACKENDS)
    ap.add_argument("--ma", action="store_true", help="add compile_ma (max-autotune), capped")
    ap.add_argument("--ma-cap-s", type=float, default=240.0)
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--matmul-precision", default="high", choices=["highest", "high", "medium"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--gpus", type=int, default=1)
    pin_help = "each GPU's child gets 1/N of the cores (default: if --gpus > 1)"
    ap.add_argument("--pin-cpus", action=argparse.BooleanOptionalAction, help=pin_help)
    ap.add_argument("--deadline-s", type=float, default=0.0, help="no row starts after (0: none)")
    ap.add_argument("--hard-deadline-s", type=float, default=0.0,
                    help="running children are killed, their rows not run (0: none)")  # fmt: skip
    ap.add_argument("--timeout", type=float, default=420.0, help="per child, seconds")
    ap.add_argument("--shard", default="", help="K/N: the K-th of N balanced parts of the rows")
    ap.add_argument("--resume", nargs="+", default=[], help="results JSON: skip their rows")
    ap.add_argument("--append", action="store_true", help="--resume from --out's JSON if any")
    ap.add_argument("--retry-errors", action="store_true", help="with --resume: rerun failures")
    ap.add_argument("--merge", nargs="+", default=[], help="join results JSON files; no GPU")
    ap.add_argument("--plan", action="store_true", help="print the schedule and exit")
    ap.add_argument("--warm", action="store_true", help="second child per row: warm compile")
    ap.add_argument(
        "--padded-chunks",
        action="store_true",
        help="padded cuBLASLt products (odd N: GPT-2's LM head) in chunks through a scratch, "
        "as before row classes (A/B against the in-place default)",
    )
    ap.add_argument("--out", default="", help="markdown path; the JSON goes beside it")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--row", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--dtype", default="fp32", help=argparse.SUPPRESS)
    ap.add_argument("--job", default="main", help=argparse.SUPPRESS)
    ap.add_argument("--cpus", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return
    command = "python3 " + " ".join(shlex.quote(a) for a in [sys.argv[0]] + (argv or sys.argv[1:]))
    if args.merge:
        meta, recs = gpu_table.merge([gpu_table.load(p) for p in args.merge])
        gpu_runner.write(args.out, meta, recs)
        return
    backends = [b for b in args.backends.split(",") if b]
    if args.ma and "compile_ma" not in backends:
        backends.append("compile_ma")
    jobs = gpu_runner.make_jobs(plan(args.rows, args.batches, args.dtypes), backends, args)
    jobs = gpu_runner.shard(jobs, args.shard)
    resume = list(args.resume)
    out_json = os.path.splitext(args.out)[0] + ".json" if args.out else ""
    if args.append and out_json and os.path.exists(out_json):
        resume.append(out_json)
    prior = gpu_table.merge([gpu_table.load(p) for p in resume]) if resume else ({}, [])
    todo = gpu_runner.pending(jobs, prior[1], args.retry_errors)
    if args.plan:
        print(gpu_runner.describe_plan(todo, len(jobs), args))
        return
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    runner = gpu_runner.Runner(todo, args, command, prior, launch_child)
    meta, recs = runner.run()
    gpu_runner.write(args.out, meta, recs, backends, echo=True)


if __name__ == "__main__":
    main()
