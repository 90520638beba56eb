"""torch_plugin demo: torchvision ResNet-18 through optimize("eager"), optimize("plugin") (the
project's own compiler, the default) and optimize("inductor") (PyTorch's compiler).

Builds ResNet-18 with random weights (nothing is downloaded), runs a batch of one 3x224x224
image in eval mode on the GPU if there is one, else on the CPU, and prints for each backend:
the number of graphs captured, the first call's time (capture + backend compile + run), the
largest absolute difference from eager PyTorch, and the median latency of eager PyTorch and
of the compiled model.

    python3 examples/resnet18_demo.py [--runs 20] [--backends eager,plugin,inductor]

Exits with status 1 if a backend's output differs from eager by more than its tolerance:
1e-5 for "eager" and "aot_eager", which run the same ATen kernels; for compiling backends
1e-3 on CPU and 1e-2 on GPU, where Inductor's convolutions may pick other cuDNN algorithms
(8.7e-4 was seen on an H200).
"""

import argparse
import statistics
import sys
import time

import torch
import torchvision

import torch_plugin

EXACT_BACKENDS = ("eager", "aot_eager")


def tolerance(backend: str, device: torch.device) -> float:
    if backend in EXACT_BACKENDS:
        return 1e-5
    return 1e-2 if device.type == "cuda" else 1e-3


def median_ms(fn, x: torch.Tensor, runs: int, device: torch.device) -> float:
    """Median wall time of ``fn(x)`` in milliseconds, after three warm-up calls."""
    for _ in range(3):
        fn(x)
    times = []
    for _ in range(runs):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn(x)
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="timed calls per model (default 20)")
    parser.add_argument(
        "--backends",
        default="eager,plugin,inductor",
        help="comma-separated backends (default eager,plugin,inductor)",
    )
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval().to(device)
    x = torch.randn(1, 3, 224, 224, device=device)
    print(
        f"ResNet-18 (random weights), batch 1, {device.type}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} CPU threads"
    )

    failed = False
    with torch.no_grad():
        expected = model(x)
        eager_ms = median_ms(model, x, args.runs, device)
        print(
            f"\n{'':22}{'graphs':>7}{'first call s':>14}{'max abs err':>13}{'median ms':>11}{'vs eager':>10}"
        )
        print(f"{'eager PyTorch':22}{'-':>7}{'-':>14}{'-':>13}{eager_ms:>11.2f}{1.0:>9.2f}x")
        for backend in args.backends.split(","):
            torch_plugin.reset()
            compiled = torch_plugin.optimize(backend)(model)
            start = time.perf_counter()
            out = compiled(x)
            if device.type == "cuda":
                torch.cuda.synchronize()
            first_call_s = time.perf_counter() - start
            graphs = torch_plugin.capture.stats.graphs_compiled
            error = (out - expected).abs().max().item()
            compiled_ms = median_ms(compiled, x, args.runs, device)
            label = f'optimize("{backend}")'
            print(
                f"{label:22}{graphs:>7}{first_call_s:>14.2f}{error:>13.2e}"
                f"{compiled_ms:>11.2f}{eager_ms / compiled_ms:>9.2f}x"
            )
            if error > tolerance(backend, device):
                print(f"  error above tolerance {tolerance(backend, device):g}")
                failed = True
    print("\n'vs eager' is eager PyTorch's median latency divided by the compiled model's.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
