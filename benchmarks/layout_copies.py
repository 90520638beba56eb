"""Layout copies per call of the plugin on rows of issue #29 (``_C._compiler.layout_copies``:
channels-last weight copies of cuDNN convolutions, kernel-input and graph-output copies) and
the cuDNN counters, then latency (median of 30 calls, CUDA events) of the plugin without and
with CUDA graphs, and of torch.compile's reduce-overhead mode with ``BASE=1``; ``LOGINFO=1``
shows torch_plugin's INFO logs.

Usage (GPU): BASE=1 python3 benchmarks/layout_copies.py resnet18:32:fp32 efficientnet_b0:32:fp32"""

import contextlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch

import torch_plugin
from torch_plugin import _C

torch.set_float32_matmul_precision("high")
from gpu_models import build

from torch_plugin.compiler.cuda_graphs import median_cuda_ms

if os.environ.get("LOGINFO") == "1":
    import logging

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("torch_plugin").setLevel(logging.INFO)


def timed(f, inputs, n=30):
    """Median CUDA-event ms of n calls (the compiler's own timing helper)."""
    return median_cuda_ms(lambda: f(*inputs), runs=n)


for spec in sys.argv[1:]:
    name, batch, dt = spec.split(":")
    fn, inputs = build(name, int(batch), "cuda")
    ac = torch.autocast("cuda", torch.bfloat16) if dt == "bf16" else contextlib.nullcontext()
    f = torch_plugin.optimize(fn, backend="plugin", options={"cuda_graphs": False})
    with torch.no_grad(), ac:
        ref = fn(*inputs)
        for _ in range(3):
            f(*inputs)
        torch.cuda.synchronize()
        _C._compiler.reset_layout_copies()
        _C._cudnn.reset_counters()
        out = f(*inputs)
        torch.cuda.synchronize()
        copies = _C._compiler.layout_copies()
        print(
            spec,
            "layout copies per call:",
            sum(copies.values()),
            copies,
            "cudnn:",
            _C._cudnn.counters(),
            flush=True,
        )
        t_ng = timed(f, inputs)
        torch_plugin.reset()
        g = torch_plugin.optimize(fn, backend="plugin")
        for _ in range(3):
            g(*inputs)
        t = timed(g, inputs)
        msg = f"{spec} plugin {t:.3f} ms (no cuda graphs {t_ng:.3f} ms)"
        if os.environ.get("BASE") == "1":
            h = torch.compile(fn, mode="reduce-overhead")
            for _ in range(3):
                h(*inputs)
            msg += f" compile_ro {timed(h, inputs):.3f} ms"
            torch._dynamo.reset()
        print(msg, flush=True)
    torch_plugin.reset()
