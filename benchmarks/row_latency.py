"""Side-by-side latency and peak memory of rows of issue #29 in one process: eager, the
plugin (default options), the plugin with cuBLASLt's padded products in chunks rather than
row classes for batch > 1 GPT-2 rows (``_C._cuda.cublaslt_padding(in_place=False)``), and torch.compile's reduce-overhead mode
(``BASE=0`` skips it); median ms of 30 calls between CUDA events after 4 warm-up calls, the
peak of ``max_memory_allocated`` over them, the error against eager, and the plugin's CUDA
graph counters (``tail_splits``: graphs captured up to a tail, cuda_graphs.tail_split).
INFO logs of torch_plugin on stderr.

Usage (GPU): python3 benchmarks/row_latency.py gpt2:1:fp32 gpt2:32:bf16 ... (name:batch:dtype,
rows of benchmarks/gpu_rows.py). The full table with cold compiles is gpu_models.py's."""

import contextlib
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch

import torch_plugin
from torch_plugin import _C
from torch_plugin.compiler import cuda_graphs

torch.set_float32_matmul_precision("high")
from gpu_models import build

from torch_plugin.compiler.cuda_graphs import median_cuda_ms

logging.basicConfig(level=logging.WARNING)
logging.getLogger("torch_plugin").setLevel(logging.INFO)


def timed(f, inputs, n=30):
    """Median CUDA-event ms of n calls (the compiler's own timing helper)."""
    return median_cuda_ms(lambda: f(*inputs), runs=n)


def measure(label, f, inputs, ref):
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    out = f(*inputs)
    for _ in range(3):
        out = f(*inputs)
    o = out if isinstance(out, torch.Tensor) else out[0]
    r = ref if isinstance(ref, torch.Tensor) else ref[0]
    err = ((o.float() - r.float()).abs().max() / r.float().abs().max()).item()
    del out, o
    t = timed(f, inputs)
    peak = torch.cuda.max_memory_allocated() / 2**20
    print(f"  {label:14s} {t:8.3f} ms  peak {peak:8.1f} MB  err {err:.2e}", flush=True)
    return t


for spec in sys.argv[1:]:
    name, batch, dt = spec.split(":")
    fn, inputs = build(name, int(batch), "cuda")
    ac = torch.autocast("cuda", torch.bfloat16) if dt == "bf16" else contextlib.nullcontext()
    print(spec, flush=True)
    with torch.no_grad(), ac:
        ref = fn(*inputs)
        measure("eager", fn, inputs, ref)
        before = dict(cuda_graphs.counters)
        measure("plugin", torch_plugin.optimize(fn, backend="plugin"), inputs, ref)
        print(
            "   cuda graphs:",
            {k: v - before.get(k, 0) for k, v in cuda_graphs.counters.items()},
            flush=True,
        )
        torch_plugin.reset()
        if "gpt2" in name and int(batch) > 1:
            _C._cuda.cublaslt_padding(None, False)
            measure("plugin_chunks", torch_plugin.optimize(fn, backend="plugin"), inputs, ref)
            _C._cuda.cublaslt_padding(None, True)
            torch_plugin.reset()
        if os.environ.get("BASE", "1") == "1":
            measure("compile_ro", torch.compile(fn, mode="reduce-overhead"), inputs, ref)
            torch._dynamo.reset()
