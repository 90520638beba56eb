"""Per-call cost of an exported graph's guard check (issue #25), on torchvision ResNet-18.

``torch_plugin.export(model, x)`` returns a graph module whose forward first checks the call
against the capture's guards (``gm._export_guards.check``: the structure of the arguments,
then one C++ guard-tree call for the tensors' metadata). This script times, in one process,
interleaved, after warm-up, under ``torch.no_grad()``:

- ``check``: the guard check alone, on the call's ``(args, kwargs)``;
- ``exported``: a whole call of the exported graph module (check included);
- ``unchecked``: the same graph module with its check replaced by a no-op;
- ``eager``: the model itself;

each the median over ``--repeats`` rounds of ``--number`` calls, for each device available
(CPU; CUDA when present, synchronized after each round). The check's share of a call is
``check / exported``.

Usage: ``python benchmarks/export_guard_cost.py [--batch 1] [--number 50] [--repeats 11]``
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time

import torch

import torch_plugin


def _median_us(fn, number: int, repeats: int, sync) -> float:
    rounds = []
    for _ in range(repeats):
        sync()
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        sync()
        rounds.append((time.perf_counter() - t0) / number * 1e6)
    return statistics.median(rounds)


def measure(device: str, batch: int, number: int, repeats: int) -> dict:
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval().to(device)
    x = torch.randn(batch, 3, 224, 224, device=device)
    with torch.no_grad():
        gm, _ = torch_plugin.export(model, x)
        unchecked, _ = torch_plugin.export(model, x)
    unchecked._export_guards.check = lambda call: None  # instance attribute shadows the method
    call = ((x,), {})
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    cases = {
        "check": lambda: gm._export_guards.check(call),
        "exported": lambda: gm(x),
        "unchecked": lambda: unchecked(x),
        "eager": lambda: model(x),
    }
    with torch.no_grad():
        for fn in cases.values():  # warm-up
            for _ in range(3):
                fn()
        times = {k: [] for k in cases}
        for _ in range(3):  # interleaved rounds, medians of medians
            for k, fn in cases.items():
                times[k].append(_median_us(fn, number if k != "check" else 20000, repeats, sync))
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--number", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=11)
    args = ap.parse_args(argv)
    print(f"command: {' '.join([sys.executable.split('/')[-1], *sys.argv])}")
    print(f"python {platform.python_version()}, torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}")  # fmt: skip
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print("\n| device | check us | exported us | unchecked us | eager us | check share |")
    print("|---|---|---|---|---|---|")
    for device in devices:
        r = measure(device, args.batch, args.number, args.repeats)
        print(
            f"| {device} | {r['check']:.2f} | {r['exported']:.1f} | {r['unchecked']:.1f} "
            f"| {r['eager']:.1f} | {r['check'] / r['exported']:.2%} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
