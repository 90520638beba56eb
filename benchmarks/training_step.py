"""Benchmark: one training step (forward, loss, backward, AdamW step, zero_grad) on CUDA,
eager vs eager fused vs torch.compile vs torch_plugin with the whole step compiled, one
process per row (issue #30's training rows).

Rows (``--rows``, default ``resnet50,bert,gpt2,vit``; builders in ``benchmarks/gpu_rows.py``,
random weights, seed 0, training mode): ``resnet50`` and ``vit`` (torchvision, 224x224;
ViT-B/16; cross-entropy against fixed random labels), ``bert`` (BertModel, BERT-base; the
mean square of ``last_hidden_state``, the pooler unused, so its weights get no gradient),
``gpt2`` (GPT2LMHeadModel, GPT-2 small with its LM head; next-token cross-entropy), text at
128 tokens; also ``resnet18``, ``mobilenet_v3_large``, ``efficientnet_b0``, ``gpt2_body``,
``llama`` (as gpu_models), and the tiny CPU rows ``mlp`` and ``cnn`` (smoke tests).
``--dtypes`` fp32 (TF32 allowed: ``torch.set_float32_matmul_precision("high")``,
``--matmul-precision``) and bf16 (``torch.autocast(device, torch.bfloat16)`` around the
forward and the loss; fp32 weights and optimizer). ``--batch`` 32. Dropout is off (every
probability 0, so that each compiled variant can be checked against eager: compiled dropout
draws other masks); ``--dropout`` keeps the models' own (the checks then report the
difference and are not pass/fail).

Variants (``--variants``, measured in this order by default): ``eager`` (``AdamW(lr=1e-4,
foreach=True)``), ``eager_fused`` (``fused=True``), ``plugin`` (``torch_plugin.optimize``
around the whole step function: forward, loss, backward, ``opt.step()``, ``zero_grad()``),
``compile`` (``torch.compile`` on the module, eager foreach step), ``compile_opt``
(``torch.compile`` on the module and on a function calling ``opt.step()``: PyTorch's
compiled-optimizer recipe). Each torch.compile variant runs inside
``torch._inductor.utils.fresh_cache()`` (empty Inductor and Triton cache directories, the
in-process caches cleared), so that neither finds the other's kernels, and torch.compile's
one-time costs of the process (imports, compile workers) are paid before the first of them
by a small compiled layer (``compile_warmup_s`` in their records; the plugin, measured
before them, pays its own first-use costs in its cold compile).

Method. Each row is a child process with empty Inductor, Triton and plugin caches. It builds
the model and runs two references of 3 eager (foreach) steps from the initial weights: the
*precise* one (fp32 without TF32 or autocast) and *eager* (the row's dtype and precision).
Then per variant: restores the initial weights and buffers, builds a fresh AdamW, resets the
peak memory counter, runs 3 steps (the first: cold compile; its wall time minus one steady
step is ``cold s``; the 3 steps' minus 3 steady steps, ``cold 3 s``, also counts what
compiles at the second step: the plugin's optimizer step, which runs eager's first to create
the state) and checks them: ``loss err`` (the first loss: the forward from the common start) and
``moment err`` (|m - m_ref| / |m_ref| of AdamW's ``exp_avg`` after the first step, over all
parameters: the first gradients), ``loss3 err`` (the later losses), ``update err`` (|dW -
dW_ref| / |dW_ref| over all parameters, dW the change of the weights over the 3 steps) and
``buffer err`` (BatchNorm's running statistics after the 3 steps).
The table shows them against eager; the verdict is PyTorch's accuracy rule (its dynamo
benchmarks compare against an fp64 run): each figure of the variant against the precise
reference is at most ``--tol-mult`` (3) times eager's own against it plus an absolute
tolerance (``training_check.TOLERANCES``, times ``--tol-scale``), so that TF32 and bf16 rounding, which
eager has as well, pass, and a wrong gradient, update or buffer does not. A variant that
fails is reported as such and takes no part in the speed-ups. Then ``--warmup`` steps and
``--steps`` timed steps (CUDA events around each step; the median). ``peak MB``:
``torch.cuda.max_memory_allocated`` over the variant's whole run (compile, check, timing),
weights and inputs included. The plugin's optimizer steps compiled and run as eager, its
graph breaks, failed frames and graphs run as eager graphs are in the notes (on CUDA its
multi-tensor optimizer kernels need ``TORCH_PLUGIN_CUDA_OPTIMIZER_KERNELS=1`` until verified
on a GPU; the header lists every ``TORCH_PLUGIN_*`` variable of the run).

The runner is gpu_models' (``gpu_runner``): ``--gpus N`` runs N rows at once, one child per
GPU, each pinned to 1/N of the cores; rows go longest first (estimated: ``--plan`` prints the
schedule); ``--deadline-s`` / ``--hard-deadline-s`` / ``--timeout``; ``--shard K/N`` runs the
K-th of N balanced parts; the JSON is rewritten after every row; ``--append`` / ``--resume``
run only the rows missing; ``--merge A.json B.json --out t.md`` joins calls (no GPU).

    # the 8 rows (4 models x fp32, bf16) on 4 GPUs: about 5 minutes estimated (--plan);
    # a row that would not end by 470 s is not started (a second call with --append runs it)
    TORCH_PLUGIN_CUDA_OPTIMIZER_KERNELS=1 python3 benchmarks/training_step.py --gpus 4 \\
        --deadline-s 360 --hard-deadline-s 470 --out benchmarks/results/training-step-h100x4.md
    # half the rows per call (4 rows on 2 GPUs, about 5 minutes each)
    python3 benchmarks/training_step.py --shard 1/2 --gpus 2 --out r1.md
    python3 benchmarks/training_step.py --shard 2/2 --gpus 2 --out r2.md
    python3 benchmarks/training_step.py --merge r1.json r2.json --out table.md
    # CPU smoke test (seconds)
    python3 benchmarks/training_step.py --device cpu --rows mlp --dtypes fp32 --batch 4 \\
        --variants eager,eager_fused,plugin --warmup 1 --steps 3
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import shlex
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gpu_models
import gpu_runner
import gpu_table
import training_check as tc
import training_table
from gpu_rows import COMPILE_EST_S, MODEL_ROWS, build_model

ROWS = ["resnet50", "bert", "gpt2", "vit"]
TINY_ROWS = ["mlp", "cnn"]
VARIANTS = ["eager", "eager_fused", "plugin", "compile", "compile_opt"]
LR = 1e-4
# --- time estimates (seconds, an H100 host's 1/4 of 64 cores), for scheduling only ----------
# Training compiles forward and backward: twice gpu_models' inference estimate; compiling
# AdamW's step (PyTorch's recipe) over a model's 150-200 parameters: OPT_COMPILE_EST_S; the
# plugin's whole step: PLUGIN_EST_S; a child's startup and the snapshots: STARTUP_EST_S; eager milliseconds per step (fp32, batch 32; bf16 about half).
TRAIN_COMPILE_X = 2.0
OPT_COMPILE_EST_S = 15.0
PLUGIN_EST_S = 15.0
STARTUP_EST_S = 25.0
WARM_COMPILE_EST_S = 10.0  # warm_compile, before the first torch.compile variant
STEP_MS_EST = {"resnet50": 60.0, "bert": 50.0, "gpt2": 70.0, "vit": 90.0}


def estimate_s(row: str, batch: int, dtype: str, variants: list[str], steps: int) -> float:
    """Estimated wall seconds of one child measuring ``variants`` on one row."""
    if row in TINY_ROWS:
        return 5.0 + 10.0 * sum(v.startswith("compile") for v in variants)
    base = COMPILE_EST_S.get(row, 15.0) * TRAIN_COMPILE_X * (1.2 if dtype == "bf16" else 1.0)
    ms = STEP_MS_EST.get(row, 60.0) * batch / 32 * (0.5 if dtype == "bf16" else 1.0)
    total = STARTUP_EST_S + 2 * tc.CHECK_STEPS * ms / 1e3  # the two references
    if any(v.startswith("compile") for v in variants):
        total += WARM_COMPILE_EST_S
    for v in variants:
        total += {
            "plugin": PLUGIN_EST_S,
            "compile": base,
            "compile_opt": base + OPT_COMPILE_EST_S,
        }.get(v, 0.0)
        total += (tc.CHECK_STEPS + 10 + steps) * ms / 1e3
    return total


# --- the child: one row, every variant ---------------------------------------------------------
def build_row(name: str, batch: int, device: str, dropout: bool):
    """``(model, call, inputs, loss_fn)``: the model in training mode, ``call(module, *inputs)``
    its output tensor, and ``loss_fn(out)`` the row's scalar loss (targets fixed, seed 1).
    Raises SystemExit for an unknown row."""
    import torch
    import torch.nn.functional as F

    if name in TINY_ROWS:
        torch.manual_seed(0)
        if name == "mlp":
            model = torch.nn.Sequential(
                torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64),
                torch.nn.Linear(64, 10),
            )  # fmt: skip
            x = torch.randn(batch, 32)
        else:
            model = torch.nn.Sequential(
                torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 10),
            )  # fmt: skip
            x = torch.randn(batch, 3, 8, 8)
        model, call, inputs = model.to(device), _call, (x.to(device),)
    elif name in MODEL_ROWS:
        model, call, inputs = build_model(name, batch, device, dropout=dropout)
    else:
        raise SystemExit(f"unknown row {name}; rows: {', '.join(MODEL_ROWS + TINY_ROWS)}")
    model.train()
    g = torch.Generator().manual_seed(1)
    if name in ("gpt2",):  # next token; the last position has none
        ids = inputs[0]
        target = torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], -100)], dim=1)

        def loss_fn(out):
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))

    elif name in ("bert", "gpt2_body", "llama"):

        def loss_fn(out):
            return out.float().square().mean()

    else:
        target = torch.randint(0, 10 if name in TINY_ROWS else 1000, (batch,), generator=g)
        target = target.to(device)

        def loss_fn(out):
            return F.cross_entropy(out, target)

    return model, call, inputs, loss_fn


def _call(module, x):
    """The tiny rows' ``call``: the module on its input."""
    return module(x)


def make_step(variant: str, model, call, inputs, loss_fn, opt, device: str, bf16: bool):
    """The training step of ``variant``, as a no-argument function returning the detached
    loss: it calls the step function (the batch its argument, as a training loop's) on
    ``inputs``. Raises SystemExit for an unknown variant."""
    import torch

    if variant not in VARIANTS:
        raise SystemExit(f"unknown variant {variant}; variants: {', '.join(VARIANTS)}")
    module = torch.compile(model) if variant in ("compile", "compile_opt") else model
    if variant == "compile_opt":

        @torch.compile(fullgraph=False)
        def opt_step():
            opt.step()

        def step(x):
            with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
                loss = loss_fn(call(module, x))
            loss.backward()
            opt_step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()

    else:

        def step(x):
            with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
                loss = loss_fn(call(module, x))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.detach()

    if variant == "plugin":
        import torch_plugin

        step = torch_plugin.optimize(step, backend="plugin")
    return lambda: step(*inputs)


def make_optimizer(variant: str, model):
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    kind = {"fused": True} if variant == "eager_fused" else {"foreach": True}
    return torch.optim.AdamW(params, lr=LR, **kind)


def _counters() -> dict:
    """The plugin's counters: optimizer steps compiled / run as eager, graphs run as eager
    graphs, and capture's frames, failures, graph breaks, graphs compiled, recompiles."""
    import torch_plugin
    from torch_plugin.compiler import optimizer_step, training

    st = torch_plugin.stats
    return {
        "compiled_steps": optimizer_step.counters["compiled_steps"],
        "eager_steps": optimizer_step.counters["eager_steps"],
        # graphs run as the eager graph, and forward/backward graphs run as their ATen graph
        "eager_graphs": gpu_models._eager_graphs() + sum(training.counters.values()),
        "frames_captured": st.frames_captured,
        # capture gave up on these frames (they ran unmodified); not counted: the benchmark's
        # own log handlers, which the plugin's log calls inside the step enter
        "frames_failed": sum(1 for f in st.failures if not f[0].endswith(".emit")),
        "graph_breaks": len(st.graph_breaks),
        "graphs_compiled": st.graphs_compiled,
        "recompiles": st.recompiles,
    }


class _Warnings(logging.Handler):
    """Collects torch_plugin's WARNING messages (an internal capture error: a frame that runs
    unmodified) while installed, first line of each, at most 6."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.msgs: list[str] = []

    def emit(self, record):
        if len(self.msgs) < 6:
            self.msgs.append(record.getMessage().splitlines()[0][:240])

    def __enter__(self):
        logging.getLogger("torch_plugin").addHandler(self)
        return self

    def __exit__(self, *exc):
        logging.getLogger("torch_plugin").removeHandler(self)


def measure(variant, row, init, ref, precise, args) -> dict:
    """One variant of one row from the state ``init``, checked against eager's reference
    ``ref`` and the precise one ``precise`` (:func:`reference`'s): the record (``ms``,
    ``first_s``, ``compile_s``, ``compile3_s``, ``peak_mb``, the check's figures against
    eager and against the precise reference, eager's own (``floor``), the verdict, the
    plugin's counters and notes)."""
    import optimizer_step as opt_bench  # benchmarks/optimizer_step.py: its timing loop
    import torch

    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model, call, inputs, loss_fn = row
    tc.restore(model, init)
    torch.manual_seed(0)
    gc.collect()
    if cuda:
        sync()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    opt = make_optimizer(variant, model)
    step = make_step(variant, model, call, inputs, loss_fn, opt, args.device, args.dtype == "bf16")
    c0 = _counters()
    fresh = contextlib.nullcontext()
    if variant.startswith("compile"):  # empty Inductor/Triton caches: a cold compile
        fresh = _fresh_cache()()
    with fresh, gpu_models._Notes() as notes, _Warnings() as warnings:
        got, got_losses, first, first_steps = tc.check_steps(step, model, opt, sync)
    # the peak of the steps, not of the check's sums on the device below
    peak = torch.cuda.max_memory_allocated() if cuda else 0
    dev = args.device
    check = tc.compare(init, ref[0], got, ref[1], got_losses, dev)
    check_precise = tc.compare(init, precise[0], got, precise[1], got_losses, dev)
    floor = tc.compare(init, precise[0], ref[0], precise[1], ref[1], dev)
    tol = tc.tolerances(args.dtype, args.tol_scale)
    check_ok = None if args.dropout else tc.passes(check_precise, floor, tol, args.tol_mult)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    ms = opt_bench._time(step, args.device, args.warmup, args.steps)
    rec = {"ms": ms, "first_s": first, "compile_s": max(first - ms * 1e-3, 0.0)}
    rec["compile3_s"] = max(first_steps - tc.CHECK_STEPS * ms * 1e-3, 0.0)
    rec.update(check=check, check_precise=check_precise, floor=floor, check_ok=check_ok)
    if cuda:
        rec["peak_mb"] = max(peak, torch.cuda.max_memory_allocated()) / 2**20
    c1 = _counters()
    if variant == "plugin":
        rec["plugin"] = {k: c1[k] - c0[k] for k in c1}
        if rec["plugin"]["eager_graphs"] > 0:
            rec["eager_graphs"] = rec["plugin"]["eager_graphs"]
    if notes.msgs or warnings.msgs:
        rec["notes"] = notes.msgs + warnings.msgs
    return rec


def _fresh_cache():
    """``torch._inductor.utils.fresh_cache`` (``fresh_inductor_cache`` before torch 2.8)."""
    from torch._inductor import utils

    return getattr(utils, "fresh_cache", None) or utils.fresh_inductor_cache


def warm_compile(device: str) -> float:
    """Pays torch.compile's one-time costs of the process (Dynamo's, AOTAutograd's and
    Inductor's imports, the compile workers, the toolchain's probes) on a small linear layer
    with its backward, in an empty cache; returns its wall seconds. The child runs it before
    its first torch.compile variant, so that each variant's cold compile is its own graphs'
    (and the variants' order does not decide which pays them)."""
    import torch

    fresh_cache = _fresh_cache()
    t0 = time.perf_counter()
    lin = torch.nn.Linear(8, 8).to(device)

    def f(x):
        return torch.relu(lin(x)).sum()

    with fresh_cache():
        torch.compile(f)(torch.randn(4, 8, device=device)).backward()
    if device == "cuda":
        torch.cuda.synchronize()
    torch._dynamo.reset()
    return time.perf_counter() - t0


def reference(row, args, precise: bool = False) -> tuple[tuple, list[float]]:
    """Eager's check steps (foreach AdamW) from the model's current state: (the state after
    them, as :func:`check_steps` gives it; their losses). ``precise``: in fp32 without TF32
    (matmul precision "highest", cuDNN TF32 off) and without autocast, the reference both
    eager and the variants are measured against. Leaves the model in the state after the
    steps."""
    import torch

    model, call, inputs, loss_fn = row
    old = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    bf16 = args.dtype == "bf16" and not precise
    if precise:
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = False
    try:
        opt = make_optimizer("eager", model)
        step = make_step("eager", model, call, inputs, loss_fn, opt, args.device, bf16)
        torch.manual_seed(0)
        sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
        state, losses, _, _ = tc.check_steps(step, model, opt, sync)
        return state, losses
    finally:
        torch.set_float32_matmul_precision(old[0])
        torch.backends.cudnn.allow_tf32 = old[1]


def child(args: argparse.Namespace) -> None:
    """Measures one row, every variant of ``--variants`` in this process, in order; prints a
    ``META`` line, then one ``ROW`` JSON line per variant."""
    t_start = time.perf_counter()
    with contextlib.suppress(Exception):  # die with the runner (Linux PR_SET_PDEATHSIG = 1)
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    if args.cpus:
        os.sched_setaffinity(0, gpu_runner.parse_cpus(args.cpus))
    import torch

    torch.set_float32_matmul_precision(args.matmul_precision)
    cuda = args.device == "cuda"
    meta = gpu_models.device_meta(args.device, args.matmul_precision)
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith("TORCH_PLUGIN_")}
    env = {k: v for k, v in env.items() if k != "TORCH_PLUGIN_CACHE_DIR"}
    meta["versions"] += "; " + (" ".join(f"{k}={v}" for k, v in env.items()) or "no TORCH_PLUGIN_*")
    print("META " + json.dumps(meta), flush=True)
    import torch_plugin  # its import (the extension, AOTAutograd) is startup, not a compile

    row = build_row(args.row, args.batch, args.device, args.dropout)
    init = tc.snapshot(row[0])
    precise = reference(row, args, precise=True)
    tc.restore(row[0], init)
    ref = reference(row, args)
    startup_s = time.perf_counter() - t_start
    warmup_s = None
    for variant in args.variants.split(","):
        if variant.startswith("compile") and warmup_s is None:
            try:
                warmup_s = round(warm_compile(args.device), 1)
            except Exception as e:  # noqa: BLE001 - the variants will say what fails
                warmup_s = f"failed: {type(e).__name__}: {str(e)[:200]}"
        t_variant = time.perf_counter()
        rec = {"row": args.row, "batch": args.batch, "dtype": args.dtype, "backend": variant}
        rec.update(
            job="main",
            gpu=meta["gpu"],
            tol=tc.tolerances(args.dtype, args.tol_scale),
            tol_mult=args.tol_mult,
        )
        try:
            rec.update(measure(variant, row, init, ref, precise, args))
        except Exception as e:  # noqa: BLE001 - a variant's failure is reported, not fatal
            rec["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        rec.update(startup_s=round(startup_s, 1), wall_s=round(time.perf_counter() - t_variant, 1))
        if variant.startswith("compile"):
            rec["compile_warmup_s"] = warmup_s
        print("ROW " + json.dumps(rec), flush=True)
        torch._dynamo.reset()
        torch_plugin.reset()
        gc.collect()
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()


# --- the parent ----------------------------------------------------------------------------------
def launch_child(job, worker, timeout: float, args) -> tuple[list[dict], dict | None, bool]:
    """Runs ``job`` (a :class:`gpu_runner.Job`; its backends are variants) in a child on
    ``worker``'s GPU and CPUs with empty caches. Returns (records, meta, timed_out)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor")
        env.update(TRITON_CACHE_DIR=f"{tmp}/triton", TORCH_PLUGIN_CACHE_DIR=f"{tmp}/plugin")
        if worker.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = worker.gpu
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--row", job.row,
               "--batch", str(job.batch), "--dtypes", job.dtype, "--variants",
               ",".join(job.backends), "--steps", str(args.steps), "--warmup",
               str(args.warmup), "--matmul-precision", args.matmul_precision,
               "--device", args.device]  # fmt: skip
        cmd += ["--tol-scale", str(args.tol_scale), "--tol-mult", str(args.tol_mult)]
        if args.dropout:
            cmd += ["--dropout"]
        if worker.cpus:
            cmd += ["--cpus", worker.cpus]
        return gpu_models._run(cmd, env, timeout)


def make_jobs(rows: list[str], dtypes: list[str], args) -> list[gpu_runner.Job]:
    """One job per (row, dtype), longest first (estimate, then the given order)."""
    variants = [v for v in args.variants.split(",") if v]
    for v in variants:
        if v not in VARIANTS:
            raise SystemExit(f"unknown variant {v}; variants: {', '.join(VARIANTS)}")
    jobs = []
    for row in rows:
        if row not in MODEL_ROWS + TINY_ROWS:
            raise SystemExit(f"unknown row {row}; rows: {', '.join(MODEL_ROWS + TINY_ROWS)}")
        for d in dtypes:
            if d not in tc.TOLERANCES:
                raise SystemExit(f"unknown dtype {d}; dtypes: fp32, bf16")
            est = estimate_s(row, args.batch, d, variants, args.steps)
            jobs.append(gpu_runner.Job(row, args.batch, d, "main", variants, est))
    order = {j.key: i for i, j in enumerate(jobs)}
    return sorted(jobs, key=lambda j: (-j.est_s, order[j.key]))


def write(out, meta, records, backends=None, echo: bool = False) -> str:
    """The results files: training_table's report to ``out``, the JSON beside it."""
    return gpu_runner.write(out, meta, records, backends, echo, report=training_table.report)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default=",".join(ROWS))
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--steps", type=int, default=20, help="timed steps (the median)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps after the check's")
    ap.add_argument("--dropout", action="store_true", help="keep the models' dropout")
    ap.add_argument("--tol-scale", type=float, default=1.0, help="check: x the absolute tols")
    ap.add_argument("--tol-mult", type=float, default=tc.FLOOR_MULT, help="check: x eager's error")
    ap.add_argument("--matmul-precision", default="high", choices=["highest", "high", "medium"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--gpus", type=int, default=1, help="rows at once, one GPU each")
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
    ap.add_argument("--out", default="", help="markdown path; the JSON goes beside it")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--row", help=argparse.SUPPRESS)
    ap.add_argument("--cpus", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.runs, args.ma_cap_s = args.steps, 0.0  # what gpu_runner reads
    if args.child:
        args.dtype = args.dtypes
        child(args)
        return
    command = "python3 " + " ".join(shlex.quote(a) for a in [sys.argv[0]] + (argv or sys.argv[1:]))
    if args.merge:
        meta, recs = gpu_table.merge([gpu_table.load(p) for p in args.merge])
        write(args.out, meta, recs, echo=not args.out)
        return
    rows = [r for r in args.rows.split(",") if r]
    jobs = make_jobs(rows, [d for d in args.dtypes.split(",") if d], args)
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
    signal.signal(signal.SIGTERM, gpu_models._stop)
    signal.signal(signal.SIGINT, gpu_models._stop)
    runner = gpu_runner.Runner(todo, args, command, prior, launch_child, writer=write)
    meta, recs = runner.run()
    write(args.out, meta, recs, args.variants.split(","), echo=True)


if __name__ == "__main__":
    main()
