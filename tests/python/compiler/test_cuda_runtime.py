"""The CUDA runtime (csrc/runtime/cuda) through ``torch_plugin._C._cuda`` and the CUDA kernel
of ``torch_plugin::fused``.

Compile-only tests (NVRTC, no GPU) run wherever the extension has its CUDA parts: a valid
kernel compiles to PTX, a kernel written the way contract 3 of the codegen asks (no
includes, device math builtins, warp shuffles, inline PTX for fp16) compiles, and a
compile error raises naming NVRTC, the call, the status and the failing source line. GPU
tests skip without a GPU: a hand-written kernel against torch, the disk cache across
processes (a hit; a corrupted file recompiled), launches on the current stream, and the
``torch_plugin::fused`` op on CUDA tensors.
"""

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
import torch

from torch_plugin import _C

cuda_rt = getattr(_C, "_cuda", None)
needs_cuda_parts = pytest.mark.skipif(
    cuda_rt is None, reason="torch_plugin built without its CUDA parts"
)
needs_gpu = pytest.mark.skipif(
    cuda_rt is None or not torch.cuda.is_available(), reason="needs a CUDA GPU"
)

# out[i] = tanh(a[i]) * b[i] + 1 for i < *n; one thread per element. Every parameter is a
# pointer (the launcher passes one pointer per tensor), so n comes in a one-element tensor.
AXPY = """
extern "C" __global__ void tanh_mul_add(float* out, const float* a, const float* b,
                                        const long* n) {
  long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < *n) out[i] = tanhf(a[i]) * b[i] + 1.0f;
}
"""

# Contract 3's ABI (pointers only, sizes baked in) with the building blocks the CUDA renderer
# uses: device math, warp shuffles, fp16 conversions through inline PTX, bf16 by bits.
CONTRACT_KERNEL = """
__device__ __forceinline__ float tp_f16_to_f32(unsigned short h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short tp_f32_to_f16(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
__device__ __forceinline__ float tp_bf16_to_f32(unsigned short b) {
  return __uint_as_float(((unsigned int)b) << 16);
}
extern "C" __global__ void kernel(float* out0, unsigned short* out1, const unsigned short* in0,
                                  const unsigned short* in1) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float x = tp_f16_to_f32(in0[i]) + tp_bf16_to_f32(in1[i]);
  float y = expf(x) + erff(x) + rsqrtf(fabsf(x) + 1.0f) + fmaxf(x, 0.0f) + powf(2.0f, x);
  for (int o = 16; o > 0; o >>= 1) y += __shfl_xor_sync(0xffffffffu, y, o);
  out0[i] = y;
  out1[i] = tp_f32_to_f16(tanhf(x));
}
"""


@needs_cuda_parts
def test_valid_kernel_compiles_to_ptx():
    ptx = cuda_rt.nvrtc_compile_check(AXPY, "sm_90")
    assert ".entry tanh_mul_add" in ptx
    assert ".target sm_90" in ptx
    major, _minor = cuda_rt.nvrtc_version()
    assert major >= 11


@needs_cuda_parts
def test_contract_kernel_compiles_without_includes():
    ptx = cuda_rt.nvrtc_compile_check(CONTRACT_KERNEL, "compute_80")
    assert ".entry kernel" in ptx
    assert "shfl.sync.bfly" in ptx


@needs_cuda_parts
def test_compile_error_names_nvrtc_and_quotes_the_line():
    source = textwrap.dedent(
        """\
        extern "C" __global__ void broken(float* out, const float* a) {
          int i = threadIdx.x;
          float y = a[i] * ;
          out[i] = y + undefined_name;
        }
        """
    )
    with pytest.raises(RuntimeError) as info:
        cuda_rt.nvrtc_compile_check(source, "sm_90")
    message = str(info.value)
    assert "torch_plugin: NVRTC nvrtcCompileProgram failed (NVRTC_ERROR_COMPILATION)" in message
    assert "for kernel check (compute_90)" in message
    assert "error" in message  # NVRTC's log
    # The failing lines of the source, with their line numbers.
    assert "    3 |   float y = a[i] * ;" in message
    assert "    4 |   out[i] = y + undefined_name;" in message


@needs_cuda_parts
def test_bad_arch_is_an_error():
    with pytest.raises(RuntimeError, match="arch must be like 'sm_90'"):
        cuda_rt.nvrtc_compile_check(AXPY, "ampere")


def test_fused_schema_carries_the_launch_configuration():
    schema = torch.ops.torch_plugin.fused.default._schema
    names = [a.name for a in schema.arguments]
    assert names[-6:] == ["name", "target", "entry", "grid", "block", "shared_bytes"]
    defaults = {a.name: a.default_value for a in schema.arguments[-5:]}
    assert defaults == {"target": "cpp", "entry": "kernel", "grid": 0, "block": 0,
                        "shared_bytes": 0}  # fmt: skip


def _fused_args(inputs, source, target, **launch):
    f32 = torch.float32
    n = inputs[0].numel()
    return (
        inputs, source, [[n]] * len(inputs), [[1]] * len(inputs), [f32] * len(inputs),
        [[n]], [[1]], [f32], "hand_written",
    ), dict(target=target, **launch)  # fmt: skip


def test_fused_cpu_kernel_refuses_a_cuda_kernel():
    args, kwargs = _fused_args([torch.randn(8)], "not compiled", "cuda", grid=1, block=8)
    with pytest.raises(RuntimeError, match="generated for target 'cuda', but its inputs are on"):
        torch.ops.torch_plugin.fused(*args, **kwargs)
    with pytest.raises(RuntimeError, match="unknown target 'rocm'"):
        args, kwargs = _fused_args([torch.randn(8)], "", "rocm")
        torch.ops.torch_plugin.fused(*args, **kwargs)


def test_fused_meta_kernel_with_launch_configuration():
    args, kwargs = _fused_args([torch.empty(8, device="meta")], "", "cuda", grid=1, block=8)
    (out,) = torch.ops.torch_plugin.fused(*args, **kwargs)
    assert out.device.type == "meta" and out.shape == (8,)


# --- GPU ----------------------------------------------------------------------------------


@needs_gpu
def test_launch_matches_torch():
    n = 100_003  # not a multiple of the block
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.empty(n, device="cuda")
    count = torch.tensor([n], device="cuda")
    cuda_rt.launch(AXPY, "tanh_mul_add", (n + 255) // 256, 256, 0, [out, a, b, count])
    torch.testing.assert_close(out, torch.tanh(a) * b + 1)


@needs_gpu
def test_launch_on_the_current_stream():
    """On a side stream that is held back by a sleep, the kernel must wait for the copy that
    fills its input; launched on another stream it would read zeros."""
    n = 1 << 20
    src = torch.randn(n, device="cuda")
    x = torch.zeros(n, device="cuda")
    out = torch.empty(n, device="cuda")
    count = torch.tensor([n], device="cuda")
    ones = torch.zeros(n, device="cuda")  # filled on the side stream too
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)
        x.copy_(src)
        ones.fill_(1.0)
        cuda_rt.launch(AXPY, "tanh_mul_add", n // 256, 256, 0, [out, x, ones, count])
    side.synchronize()
    torch.testing.assert_close(out, torch.tanh(src) + 1)


def _run_in_fresh_process(cache_dir: Path, source: str) -> dict:
    script = textwrap.dedent(
        f"""
        import json, torch
        from torch_plugin import _C
        n = 4096
        a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        out = torch.empty(n, device="cuda")
        count = torch.tensor([n], device="cuda")
        _C._cuda.launch({source!r}, "tanh_mul_add", n // 256, 256, 0, [out, a, b, count])
        torch.testing.assert_close(out, torch.tanh(a) * b + 1)
        print(json.dumps(_C._cuda.cache_stats()))
        """
    )
    env = dict(os.environ, TORCH_PLUGIN_CACHE_DIR=str(cache_dir))
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def _unique_source() -> str:
    # A comment makes the source (and its cache key) new to every cache.
    return f"// {uuid.uuid4()}\n{AXPY}"


@needs_gpu
def test_disk_cache_hit_in_a_fresh_process(tmp_path: Path):
    source = _unique_source()
    first = _run_in_fresh_process(tmp_path, source)
    assert first["compiled"] == 1 and first["disk_hits"] == 0
    files = list((tmp_path / "cuda").iterdir())
    assert len(files) == 1 and files[0].suffix in (".cubin", ".ptx")
    second = _run_in_fresh_process(tmp_path, source)
    assert second["compiled"] == 0 and second["disk_hits"] == 1


@needs_gpu
def test_corrupted_cached_kernel_is_recompiled(tmp_path: Path):
    source = _unique_source()
    _run_in_fresh_process(tmp_path, source)
    (cached,) = (tmp_path / "cuda").iterdir()
    garbage = b"\x7fELF garbage, not a cubin"
    cached.write_bytes(garbage)
    stats = _run_in_fresh_process(tmp_path, source)
    assert stats["disk_rejected"] == 1 and stats["compiled"] == 1
    assert cached.read_bytes() != garbage  # rewritten
    assert _run_in_fresh_process(tmp_path, source)["disk_hits"] == 1
    assert not [p for p in (tmp_path / "cuda").iterdir() if p.name.startswith(".")]


# out0 = a * b + 1 over [R, C] (b broadcast from [C]), contiguous; the op's ABI: outputs,
# then inputs, sizes baked in.
R, C = 37, 129
FUSED_SOURCE = f"""
extern "C" __global__ void kernel(float* out0, const float* a, const float* b) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < {R * C}) out0[i] = a[i] * b[i % {C}] + 1.0f;
}}
"""


def _fused_cuda(a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
    f32 = torch.float32
    return torch.ops.torch_plugin.fused(
        [a, b], FUSED_SOURCE, [[R, C], [C]], [[C, 1], [1]], [f32, f32],
        [[R, C]], [[C, 1]], [f32], "hand_fused",
        target="cuda", entry="kernel", grid=(R * C + 127) // 128, block=128,
    )  # fmt: skip


@needs_gpu
def test_fused_op_on_cuda():
    a, b = torch.randn(R, C, device="cuda"), torch.randn(C, device="cuda")
    (out,) = _fused_cuda(a, b)
    assert out.device == a.device and out.stride() == (C, 1)
    torch.testing.assert_close(out, a * b + 1)
    # Inputs with other strides are copied to the planned ones first.
    a_t = torch.randn(C, R, device="cuda").t()
    b_s = torch.randn(2 * C, device="cuda")[::2]
    (out,) = _fused_cuda(a_t, b_s)
    torch.testing.assert_close(out, a_t * b_s + 1)


@needs_gpu
def test_fused_op_on_cuda_launch_error_names_the_kernel():
    a, b = torch.randn(R, C, device="cuda"), torch.randn(C, device="cuda")
    f32 = torch.float32
    with pytest.raises(RuntimeError, match=r"invalid CUDA launch configuration for kernel "
                       r"hand_fused \(grid 1, block 4096, shared 0 bytes\)"):  # fmt: skip
        torch.ops.torch_plugin.fused(
            [a, b], FUSED_SOURCE, [[R, C], [C]], [[C, 1], [1]], [f32, f32],
            [[R, C]], [[C, 1]], [f32], "hand_fused", target="cuda", grid=1, block=4096,
        )  # fmt: skip
    with pytest.raises(RuntimeError, match="generated for target 'cpp'"):
        torch.ops.torch_plugin.fused(
            [a, b], FUSED_SOURCE, [[R, C], [C]], [[C, 1], [1]], [f32, f32],
            [[R, C]], [[C, 1]], [f32], "hand_fused",
        )  # fmt: skip
