"""cuDNN plans of a compiled graph: built on several threads at compile time
(libs::cudnn::plan_convs, TORCH_PLUGIN_CUDNN_THREADS) and persisted across processes in the
kernel cache folder's cudnn/ subfolder (libs::cudnn::PlanStore, runtime/cuda/cudnn_step.cpp).

Each case runs a small convolutional model (stem, residual blocks with batch norm, a strided
and a grouped convolution: several distinct cuDNN graphs) compiled by the "plugin" backend in
fresh processes against one fresh cache folder, and compares what the processes saw: outputs
(against eager in each process, and between processes), and the process-wide counters of
torch_plugin._C._cudnn (plans made, plan_convs calls on several threads, the store's hits,
replays, writes and rejected entries). GPU tests; they skip without a GPU or without the cuDNN
part of the build."""

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _cudnn_module():
    from torch_plugin import _C

    return getattr(_C, "_cudnn", None)


needs_cudnn_build = pytest.mark.skipif(
    not torch.version.cuda or _cudnn_module() is None,
    reason="built without cudnn-frontend's headers (CUDA convolutions stay ATen's)",
)

pytestmark = needs_cudnn_build

# Compiles the model, runs it on three fresh inputs (seeded: every process sees the same),
# checks each output against eager and writes the outputs, the counters and the first call's
# time to argv[1] (torch.save) and argv[1] + ".json".
_SCRIPT = r"""
import json, sys, time
import torch
import torch.nn.functional as F
import torch_plugin
from torch_plugin import _C

dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[sys.argv[2]]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        bn = torch.nn.BatchNorm2d
        self.stem, self.b0 = torch.nn.Conv2d(3, 32, 3, 2, 1, bias=False), bn(32)
        self.c1, self.b1 = torch.nn.Conv2d(32, 32, 3, 1, 1, bias=False), bn(32)
        self.c2, self.b2 = torch.nn.Conv2d(32, 32, 3, 1, 1, bias=False), bn(32)
        self.down = torch.nn.Conv2d(32, 64, 3, 2, 1)
        self.grouped = torch.nn.Conv2d(64, 64, 3, 1, 1, groups=4)
        self.point = torch.nn.Conv2d(64, 48, 1)

    def forward(self, x):
        y = F.relu(self.b0(self.stem(x)))
        y = F.relu(self.b2(self.c2(F.relu(self.b1(self.c1(y))))) + y)
        y = F.relu(self.down(y))
        y = F.silu(self.grouped(y))
        return self.point(y)


torch.manual_seed(0)
model = Net()
g = torch.Generator().manual_seed(1)
for m in model.modules():
    if isinstance(m, torch.nn.BatchNorm2d):
        m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
        m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
model = model.to("cuda", dtype).eval()
torch_plugin.config.always_run_compiled = True
compiled = torch_plugin.optimize(model, options={"cuda_graphs": False})
_C._cudnn.reset_counters()
outs = []
first = None
with torch.no_grad():
    for call in range(3):
        x = torch.randn(4, 3, 40, 36, generator=torch.Generator().manual_seed(10 + call))
        x = x.to("cuda", dtype)
        want = model(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        got = compiled(x)
        torch.cuda.synchronize()
        if call == 0:
            first = time.perf_counter() - t0
        tol = 1e-2 if dtype == torch.float32 else 4e-2
        span = want.float().abs().max().item() + 1.0
        torch.testing.assert_close(got, want, rtol=tol, atol=tol * span)
        outs.append(got.float().cpu())
torch.save(outs, sys.argv[1])
c = dict(_C._cudnn.counters())
c["first_call_s"] = first
c["threads"] = _C._cudnn.build_threads()
with open(sys.argv[1] + ".json", "w") as f:
    json.dump(c, f)
"""


def _run(
    tmp_path: Path,
    cache: Path,
    name: str,
    dtype: str,
    threads: int | None = None,
    plan_cache: str | None = None,
):
    """Runs _SCRIPT in a fresh process with the kernel cache folder `cache` (and
    TORCH_PLUGIN_CUDNN_PLAN_CACHE=`plan_cache` if given; on by default); returns its outputs
    and counters."""
    env = dict(os.environ, TORCH_PLUGIN_CACHE_DIR=str(cache))
    env.pop("TORCH_PLUGIN_CUDNN_PLAN_CACHE", None)
    if plan_cache is not None:
        env["TORCH_PLUGIN_CUDNN_PLAN_CACHE"] = plan_cache
    env.pop("TORCH_PLUGIN_CUDNN_THREADS", None)
    if threads is not None:
        env["TORCH_PLUGIN_CUDNN_THREADS"] = str(threads)
    out = tmp_path / f"{name}.pt"
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(out), dtype],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    counters = json.loads(Path(str(out) + ".json").read_text())
    print(name, counters)
    return torch.load(out), counters, proc.stderr


def _same(a, b):
    for x, y in zip(a, b, strict=True):
        span = y.abs().max().item() + 1.0
        torch.testing.assert_close(x, y, rtol=1e-2, atol=1e-2 * span)


def _plan_files(cache: Path) -> list[Path]:
    return sorted((cache / "cudnn").glob("*.plan"))


@needs_gpu
@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_parallel_plans_match_serial(tmp_path, dtype):
    serial, cs, _ = _run(tmp_path, tmp_path / "serial", "serial", dtype, threads=1)
    parallel, cp, _ = _run(tmp_path, tmp_path / "parallel", "parallel", dtype, threads=4)
    assert cs["threads"] == 1 and cp["threads"] == 4
    # Every convolution's plan was made at compile time (no plan on a later call), the same
    # number either way; only the 4-thread process built them on several threads.
    # Six convolutions, the stem ATen's; two of the others may share a plan (bf16 did on an H100).
    assert cs["plans"] == cp["plans"] >= 4, (cs, cp)
    assert cs["parallel_builds"] == 0 and cp["parallel_builds"] >= 1, (cs, cp)
    assert cs["aten"] == cp["aten"] == 0, (cs, cp)
    assert cs["disk_hits"] == cp["disk_hits"] == 0, (cs, cp)
    _same(parallel, serial)


@needs_gpu
@pytest.mark.slow
def test_plan_cache_turned_off(tmp_path):
    """TORCH_PLUGIN_CUDNN_PLAN_CACHE=0: no early parallel builds and nothing on disk, the
    same outputs as with it on."""
    on, c_on, _ = _run(tmp_path, tmp_path / "on", "on", "fp32", threads=4)
    off, c_off, _ = _run(tmp_path, tmp_path / "off", "off", "fp32", threads=4, plan_cache="0")
    assert c_off["parallel_builds"] == 0 and c_off["disk_writes"] == 0, c_off
    assert not _plan_files(tmp_path / "off"), _plan_files(tmp_path / "off")
    assert c_off["plans"] == c_on["plans"] > 0 and c_off["aten"] == 0, (c_on, c_off)
    _same(off, on)


@needs_gpu
@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
def test_second_process_loads_plans_from_disk(tmp_path, dtype):
    cache = tmp_path / "cache"
    first, c1, _ = _run(tmp_path, cache, "first", dtype)
    assert c1["disk_writes"] == c1["plans"] > 0 and c1["disk_hits"] == 0, c1
    files = _plan_files(cache)
    assert len(files) == c1["plans"], files
    second, c2, _ = _run(tmp_path, cache, "second", dtype)
    # Every plan came from disk: deserialized (runtime-compiled engines) or replayed from
    # its engine id and knobs; nothing was built again or written.
    assert c2["plans"] == c1["plans"], (c1, c2)
    assert c2["disk_hits"] + c2["disk_replays"] == c2["plans"], c2
    assert c2["disk_hits"] >= 1, c2  # at least one serialized plan loaded (no NVRTC)
    assert c2["disk_writes"] == 0 and c2["disk_rejected"] == 0, c2
    assert c2["aten"] == 0, c2
    _same(second, first)
    print("first call:", c1["first_call_s"], "s cold,", c2["first_call_s"], "s from disk")


def _rewrite(entry: Path, payload: bytes) -> None:
    """Writes `payload` as a verified entry at `entry` (the header of runtime/cache_file.h)."""
    digest = hashlib.sha256(entry.name.encode() + b"\0" + payload).hexdigest()
    entry.write_bytes(b"TPCACHE1" + digest.encode() + b"\n" + payload)


@needs_gpu
@pytest.mark.slow
def test_damaged_and_stale_entries_are_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    first, c1, _ = _run(tmp_path, cache, "first", "bf16")
    files = _plan_files(cache)
    assert len(files) >= 3, files
    # A flipped byte fails the entry's hash; another entry's payload under this name (a
    # correct header: the key inside the payload differs) is stale; a payload whose key
    # matches but whose plan bytes are garbage gives no plan. All three are rebuilt.
    damaged = bytearray(files[0].read_bytes())
    damaged[-1] ^= 0xFF
    files[0].write_bytes(bytes(damaged))
    _rewrite(files[1], files[2].read_bytes()[73:])
    payload = files[2].read_bytes()[73:]
    fields = payload.split(b"\0", 5)
    fields[3] = b"-1"  # no engine id to replay
    fields[5] = b"\x00garbage" * 8  # not a serialized plan
    _rewrite(files[2], b"\0".join(fields))
    second, c2, err = _run(tmp_path, cache, "second", "bf16")
    assert "is damaged" in err, err[-2000:]
    assert c2["plans"] == c1["plans"] and c2["aten"] == 0, c2
    assert c2["disk_rejected"] == 2, c2  # the stale and the garbage ones (the damaged is
    assert c2["disk_writes"] == 3, c2  # dropped by the store's check); all three rebuilt
    _same(second, first)
    third, c3, _ = _run(tmp_path, cache, "third", "bf16")
    assert c3["disk_writes"] == 0 and c3["disk_rejected"] == 0, c3
    assert c3["disk_hits"] + c3["disk_replays"] == c3["plans"], c3
    _same(third, first)


@needs_gpu
def test_store_key_names_versions_and_gpu():
    cd = _cudnn_module()
    key = cd.store_key([1, 8, 5, 5], [8, 8, 3, 3], "bf16", 0)
    version = torch.backends.cudnn.version()
    assert f"cuDNN {version}" in key, key
    assert torch.cuda.get_device_name(0) in key, key
    major, minor = torch.cuda.get_device_capability(0)
    assert f"sm_{major}{minor}" in key, key
    assert key != cd.store_key([1, 8, 5, 5], [8, 8, 3, 3], "fp16", 0)
    assert key != cd.store_key([2, 8, 5, 5], [8, 8, 3, 3], "bf16", 0)


def test_build_threads_knob():
    from torch_plugin import _C

    cd = _cudnn_module()
    saved = _C._runtime.options()["cudnn_threads"]
    try:
        _C._runtime.configure({"cudnn_threads": "3"})
        assert cd.build_threads() == 3
        _C._runtime.configure({"cudnn_threads": ""})
        assert cd.build_threads() == min(8, os.cpu_count() or 1)
    finally:
        _C._runtime.configure({"cudnn_threads": saved})
