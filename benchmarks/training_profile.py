"""Where a training step spends its GPU time (issue #30): the top CUDA kernels per step of
each variant of ``benchmarks/training_step.py`` (eager foreach, the plugin with the whole
step compiled, torch.compile ...), from ``torch.profiler``.

Usage (on a GPU machine, the repository on PYTHONPATH)::

    python3 benchmarks/training_profile.py resnet50:fp32 bert:bf16:eager+plugin --top 25

Each argument is ``row:dtype[:variant+variant...]`` (rows and variants as training_step's;
default variants ``eager+plugin``), batch ``--batch`` (32). Per variant it prints the median
wall time of 10 steps (CUDA events, synchronised after each step: host-bound steps show here),
the first step's time (the cold compile), the CUDA kernel time per step and the number of
kernels, the peak memory, then the ``--top`` kernels by time with their count per step. The
plugin's generated kernels are named ``tp_<kind>_<ops>`` (``tp_pw_add_relu``), so a line names
what it fuses. Run it alone on its GPU: the wall times of a step are host times too.

``--host N`` also prints the N Python functions with the most own time over 5 steps
(``cProfile``, sorted by ``tottime``), for steps whose wall time is above their CUDA time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def profile_host(step, top: int, steps: int = 5) -> None:
    """Prints the ``top`` Python functions by own time over ``steps`` calls of ``step``."""
    import cProfile
    import io
    import pstats

    import torch

    torch.cuda.synchronize()
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    print(out.getvalue(), flush=True)


def profile_step(step, label: str, top: int, steps: int = 3, host: int = 0) -> None:
    """Prints ``step``'s timings and its ``top`` CUDA kernels (see the module doc); with
    ``host``, that many Python functions by own time (:func:`profile_host`)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    for _ in range(5):
        step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(10):
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    total = sum(e.self_device_time_total for e in events) / steps / 1000
    count = sum(e.count for e in events) / steps
    peak = torch.cuda.max_memory_allocated() / 2**20
    print(
        f"== {label}: wall {times[len(times) // 2]:.2f} ms (median), first step {first:.1f} s; "
        f"{total:.2f} ms CUDA, {count:.0f} kernels per step; peak {peak:.0f} MB",
        flush=True,
    )
    for e in sorted(events, key=lambda e: -e.self_device_time_total)[:top]:
        ms = e.self_device_time_total / steps / 1000
        print(f"  {ms:7.3f} ms x{e.count // steps:<5d} {e.key[:120]}", flush=True)
    if host:
        profile_host(step, host)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("specs", nargs="+", help="row:dtype[:variant+variant...]")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--top", type=int, default=22, help="kernels listed per variant")
    ap.add_argument("--matmul-precision", default="high", choices=["highest", "high", "medium"])
    ap.add_argument("--host", type=int, default=0, help="Python functions listed by own time")
    args = ap.parse_args(argv)

    import torch
    import training_step as ts

    if not torch.cuda.is_available():
        raise SystemExit("training_profile.py needs a CUDA GPU")
    torch.set_float32_matmul_precision(args.matmul_precision)
    for spec in args.specs:
        parts = spec.split(":")
        if len(parts) not in (2, 3) or parts[1] not in ("fp32", "bf16"):
            raise SystemExit(f"bad spec {spec!r}: row:dtype[:variant+variant...]")
        row, dtype = parts[0], parts[1]
        variants = parts[2].split("+") if len(parts) == 3 else ["eager", "plugin"]
        for variant in variants:
            import torch_plugin

            torch_plugin.reset()
            torch.cuda.reset_peak_memory_stats()
            model, call, inputs, loss_fn = ts.build_row(row, args.batch, "cuda", dropout=False)
            opt = ts.make_optimizer(variant, model)
            step = ts.make_step(variant, model, call, inputs, loss_fn, opt, "cuda", dtype == "bf16")
            profile_step(step, f"{row} b{args.batch} {dtype} {variant}", args.top, host=args.host)
            del model, opt, step
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
