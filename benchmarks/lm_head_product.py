"""GPT-2's LM head product alone, [4096, 768] x [768, 50257] (issue #29): the time and the top
kernels of each way to run it, bf16 and fp32 (TF32 allowed), one process, one GPU.

Rows: eager ``F.linear`` (cuBLAS on rows of 50257 elements: not 16-byte aligned), torch.compile
(default mode; its output has a padded row stride, printed), and ``optimize("plugin")`` with
CUDA graphs off through each padded-product path of ``libs/cublaslt.h``: row classes in place
(the default), padded chunks (``_C._cuda.cublaslt_padding(in_place=False)``) and unpadded
(``cublaslt_padding(0)``). Each: median of 20 calls between CUDA events after 3 warm-up
calls, the four kernels with the most CUDA time (torch.profiler), the output's strides and its
largest difference from eager's.

Usage (GPU): python3 benchmarks/lm_head_product.py [--m 4096] [--k 768] [--n 50257]
"""

from __future__ import annotations

import argparse
import functools
import statistics


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--k", type=int, default=768)
    ap.add_argument("--n", type=int, default=50257)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F
    from torch.profiler import ProfilerActivity, profile

    import torch_plugin
    from torch_plugin import _C

    torch.set_float32_matmul_precision("high")

    def timed(f, runs: int = 20) -> float:
        for _ in range(3):
            f()
        times = []
        for _ in range(runs):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            f()
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
        return statistics.median(times)

    def kernels(f) -> str:
        f()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as p:
            f()
            torch.cuda.synchronize()
        ev = [e for e in p.key_averages() if e.device_type.name == "CUDA"]
        ev.sort(key=lambda e: -e.self_device_time_total)
        return "; ".join(f"{e.key[:70]} {e.self_device_time_total / 1e3:.3f}" for e in ev[:4])

    def report(label: str, f, suffix: str = "") -> None:
        print(f"  {label:16s} {timed(f):7.3f} ms | {kernels(f)}{suffix}", flush=True)

    before = _C._cuda.cublaslt_padding()
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn(args.m, args.k, device="cuda", dtype=dtype)
        w = torch.randn(args.n, args.k, device="cuda", dtype=dtype)
        linear = functools.partial(F.linear, weight=w)
        ref = linear(x)
        print(f"== {dtype}", flush=True)
        report("eager", functools.partial(linear, x))
        compiled = torch.compile(linear)
        report("compile", functools.partial(compiled, x), f" | stride {compiled(x).stride()}")
        torch._dynamo.reset()
        paths = {
            "plugin in place": (before["scratch_bytes"], True),
            "plugin chunks": (before["scratch_bytes"], False),
            "plugin unpadded": (0, False),
        }
        for label, (scratch, in_place) in paths.items():
            _C._cuda.cublaslt_padding(scratch, in_place)
            plugin = torch_plugin.optimize("plugin", options={"cuda_graphs": False})(linear)
            out = plugin(x)
            err = (out.float() - ref.float()).abs().max().item()
            report(
                label, functools.partial(plugin, x), f" | stride {out.stride()} max diff {err:.3g}"
            )
            torch_plugin.reset()
        _C._cuda.cublaslt_padding(before["scratch_bytes"], before["in_place_on"])


if __name__ == "__main__":
    main()
