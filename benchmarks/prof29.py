"""Profile rows of issue #29: per-kernel CUDA time of eager, torch.compile and the plugin.

Usage: python3 benchmarks/prof29.py resnet50:32:fp32 resnet50:32:bf16 ... (name:batch:dtype).
BACKENDS (comma-separated, default eager,compile,compile_ro,plugin) picks the implementations;
PROFILE=0 skips the per-kernel profiles. The plugin's cuDNN counters
(torch_plugin._C._cudnn.counters) are printed after its row where the build has them."""
import os
import statistics
import sys
import time

import torch

torch.set_float32_matmul_precision("high")
import torch_plugin

DEV = os.environ.get("DEV", "cuda")
from torch.profiler import ProfilerActivity, profile


def build(name, batch):
    torch.manual_seed(0)
    if name.startswith("resnet50") or name.startswith("mobilenet") or name.startswith("resnet18") or name == "effnet":
        import torchvision
        ctor = {"resnet50": torchvision.models.resnet50, "resnet18": torchvision.models.resnet18,
                "mobilenet": torchvision.models.mobilenet_v3_large,
                "effnet": torchvision.models.efficientnet_b0}[name]
        m = ctor(weights=None).to(DEV).eval()
        return m, (torch.randn(batch, 3, 224, 224, device=DEV),)
    if name == "vit":
        import torchvision
        m = torchvision.models.vit_b_16(weights=None).to(DEV).eval()
        return m, (torch.randn(batch, 3, 224, 224, device=DEV),)
    if name == "gpt2lm":
        import transformers
        m = transformers.GPT2LMHeadModel(transformers.GPT2Config(use_cache=False)).to(DEV).eval()
        ids = torch.randint(0, 1000, (batch, 128), device=DEV)
        return (lambda ids: m(input_ids=ids).logits), (ids,)
    raise SystemExit(name)

def timeit(fn, args, n=20):
    ts = []
    for _ in range(n):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); fn(*args); e.record(); torch.cuda.synchronize(); ts.append(s.elapsed_time(e))
    return statistics.median(ts)

def prof(fn, args, top=14):
    with profile(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(3):
            fn(*args)
        torch.cuda.synchronize()
    agg = {}
    for ev in p.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            k = ev.name[:90]
            t, c = agg.get(k, (0.0, 0))
            agg[k] = (t + ev.device_time / 1000 / 3, c + 1)
    tot = sum(t for t, _ in agg.values())
    print(f"    total kernel ms/call {tot:.3f}, {sum(c for _, c in agg.values())//3} kernels/call")
    for k, (t, c) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"    {t:7.3f} ms  x{c//3:4d}  {k}")

if __name__ == "__main__":
    for spec in sys.argv[1:]:
        name, batch, dt = spec.split(":")
        batch = int(batch)
        fn, args = build(name, batch)
        ctx = (lambda: torch.autocast("cuda", torch.bfloat16)) if dt == "bf16" else (lambda: torch.autocast("cuda", enabled=False))
        def wrap(f):
            def g(*a):
                with torch.no_grad(), ctx():
                    return f(*a)
            return g
        print(f"== {spec}", flush=True)
        for be in os.environ.get("BACKENDS", "eager,compile,compile_ro,plugin").split(","):
            if be == "eager": f = wrap(fn)
            elif be == "compile": torch._dynamo.reset(); f = wrap(torch.compile(fn))
            elif be == "compile_ro": torch._dynamo.reset(); f = wrap(torch.compile(fn, mode="reduce-overhead"))
            else: f = wrap(torch_plugin.optimize()(fn))
            t0 = time.perf_counter(); f(*args); torch.cuda.synchronize(); cold = time.perf_counter() - t0
            for _ in range(3): f(*args)
            ms = timeit(f, args)
            print(f"  {be:10s} {ms:8.3f} ms  (first call {cold:.1f} s)", flush=True)
            if be in ("compile", "plugin") and os.environ.get("PROFILE", "1") != "0":
                prof(f, args)
            cd = getattr(torch_plugin._C, "_cudnn", None)
            if be == "plugin" and cd is not None:
                print("    cudnn counters", cd.counters(), flush=True)
        torch._dynamo.reset()
