"""Benchmark: one linear product on CUDA, three ways, per shape (issue #11).

For each ``M x N x K`` (fp32 by default): ``plugin`` is
``torch.ops.torch_plugin.linear_pointwise(x, w, b)`` (a cuBLASLt plan: the heuristic's
candidates and their split-K versions timed once, see csrc/libs/cublaslt.cpp), ``linear`` is
``F.linear(x, w, b)`` (PyTorch's cuBLASLt path with its heuristic's first choice), ``mm`` is
``x @ w.t()`` without the bias (cuBLAS's own gemm). Reported: GPU time per call in
microseconds (the profiler's kernel times summed over 20 calls, so launch gaps do not count)
and the kernels each call ran. ``TORCH_PLUGIN_CUBLASLT_TUNING=verbose`` also prints every
candidate's time; ``=0`` takes the heuristic's first.

    python3 benchmarks/gemm_shapes.py [--shapes 128x768x768,4096x768x3072] [--dtype fp32]
"""

from __future__ import annotations

import argparse

DEFAULT_SHAPES = "128x768x768,128x3072x768,128x768x3072,4096x768x768,4096x768x3072"


def main() -> None:
    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    from torch_plugin import _C  # noqa: F401 - registers the torch_plugin ops

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=DEFAULT_SHAPES)
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    args = ap.parse_args()
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    if not torch.cuda.is_available():
        raise SystemExit("gemm_shapes: needs a CUDA GPU")
    op = torch.ops.torch_plugin.linear_pointwise
    print(f"GPU: {torch.cuda.get_device_name()}; torch {torch.__version__}; {args.dtype}")
    print("| M x N x K | way | GPU us/call | kernels |\n|---|---|---|---|")
    for shape in args.shapes.split(","):
        m, n, k = (int(s) for s in shape.split("x"))
        x = torch.randn(m, k, device="cuda", dtype=dtype)
        w = torch.randn(n, k, device="cuda", dtype=dtype)
        b = torch.randn(n, device="cuda", dtype=dtype)
        ways = {
            "plugin": lambda x=x, w=w, b=b: op(x, w, b, None, "", 0.0, 0.0),
            "linear": lambda x=x, w=w, b=b: F.linear(x, w, b),
            "mm": lambda x=x, w=w: x @ w.t(),
        }
        for name, fn in ways.items():
            for _ in range(5):
                fn()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(20):
                    fn()
                torch.cuda.synchronize()
            events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
            us = sum(e.self_device_time_total for e in events) / 20
            kernels = "; ".join(e.key[:60] for e in events)
            print(f"| {m} x {n} x {k} | {name} | {us:.1f} | {kernels} |", flush=True)


if __name__ == "__main__":
    main()
