// cuda_kernels.h: generated CUDA kernels compiled with NVRTC, loaded with the
// driver API, cached in memory and on disk, and launched on PyTorch's current
// stream.
//
// Owns: compiling CUDA C++ sources for a device's architecture, the CUDA part
// of the kernel cache, and the kernel launch. Does not own: what a kernel
// computes (compiler/codegen/cuda renders the source) or which buffers it gets
// (the executor's CUDA kernel step, the torch_plugin::fused CUDA kernel).
//
// Compilation: NVRTC (cuda_api.h) with `--gpu-architecture=sm_XY --std=c++17
// -lineinfo` for the device's compute capability X.Y, giving a CUBIN; when this
// NVRTC does not list sm_XY among its supported architectures, PTX for the
// newest supported compute_XY below it, which the driver compiles on load.
// Sources include nothing (no headers are passed to NVRTC).
//
// Cache: in memory by (hash, device); on disk as
// <kernel cache dir>/cuda/<hash>.cubin (or .ptx), where the kernel cache dir is
// the CPU kernels' (runtime/options.h: set_kernel_cache_dir, given by Python
// from TORCH_PLUGIN_CACHE_DIR, default ~/.cache/torch_plugin) and the hash
// (SHA-256) covers the cache format, the source, the target architecture, the
// NVRTC version and the flags. Each file is a verified cache entry
// (runtime/cache_file.h: the image behind a header with its own SHA-256),
// written through a temporary file with an unpredictable name in the same
// folder, fsync'ed and renamed into place. An entry whose hash does not hold
// (truncated, flipped, swapped) or that the driver rejects (cuModuleLoadData
// fails: an incompatible driver) is deleted and recompiled, with a warning. A
// failure to write the disk cache is a warning, not an error.
//
// Errors raise c10::Error naming the library, the call, its status and the
// kernel: "torch_plugin: NVRTC nvrtcCompileProgram failed
// (NVRTC_ERROR_COMPILATION) for kernel fused_3 (sm_90): <log>" followed by the
// generated source lines the log's errors point at; "torch_plugin: CUDA
// cuLaunchKernel failed (CUDA_ERROR_INVALID_VALUE: invalid argument) for kernel
// fused_3 (grid 1, block 2048, shared 0 bytes)".
//
// Thread-safe. No Python objects; the GIL is not needed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torch_plugin::runtime::cuda {

// A loaded kernel. `function` is a CUfunction of a module loaded into
// `device`'s primary context (modules stay loaded for the process's lifetime);
// `name` names the kernel in error messages (the fusion group's name).
struct CudaFunction {
  void* function = nullptr; // CUfunction
  std::string name;
  int device = -1;
};

// One kernel to load: its source, entry symbol (an `extern "C" __global__`
// function) and the name for messages (defaults to `entry`).
struct CudaKernelSource {
  std::string source;
  std::string entry = "kernel";
  std::string name;
};

// Compiles (or finds in the cache) and loads `source` for CUDA device
// `device_index` (-1: the current device), and returns its `entry` function.
// Raises c10::Error for a compile error (with the log and the failing source
// lines), a driver error (with its status), or a missing entry
// (cuModuleGetFunction: CUDA_ERROR_NOT_FOUND).
CudaFunction load_cuda_kernel(
    const std::string& source,
    const std::string& entry,
    int device_index,
    const std::string& name = "");

// load_cuda_kernel for several kernels of one device, running NVRTC for the
// ones not in the cache on several threads at once (up to one per core). The
// result is in the order of `kernels`; the first error raised by any kernel is
// raised after all compilations finished.
std::vector<CudaFunction> load_cuda_kernels(
    const std::vector<CudaKernelSource>& kernels,
    int device_index);

// Launches `f` 1-d: `grid` blocks of `block` threads with `shared_bytes` of
// dynamic shared memory, on c10::cuda::getCurrentCUDAStream(f.device), under a
// CUDAGuard for f.device. `pointers` are the kernel's parameters, one pointer
// each (kernel ABI: outputs then inputs, see compiler/codegen/cuda). Dynamic
// shared memory above 48 KiB is enabled with cuFuncSetAttribute
// (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) on first use. Asynchronous:
// an error raised while the kernel runs surfaces at the next synchronization,
// as for any CUDA kernel. Raises c10::Error for an invalid configuration (grid
// < 1 or > 2^31-1, block < 1 or > 1024, shared_bytes < 0) or a launch failure.
void launch_cuda_kernel(
    const CudaFunction& f,
    int64_t grid,
    int64_t block,
    int64_t shared_bytes,
    const std::vector<void*>& pointers);

// Compile-only check for tests and CI (NVRTC only: no GPU or driver needed):
// compiles `source` for `arch` ("sm_90" or "compute_90") to PTX and returns the
// PTX. Raises c10::Error like load_cuda_kernel on a compile error. Not cached.
std::string nvrtc_compile_check(
    const std::string& source,
    const std::string& arch,
    const std::string& name = "check");

// The NVRTC version as major * 1000 + minor * 10 (13000 for 13.0).
int nvrtc_version();

// <kernel cache dir>/cuda
std::string cuda_kernel_cache_dir();

struct CudaKernelCacheStats {
  int compiled = 0; // NVRTC compilations
  int disk_hits = 0; // loaded from the disk cache
  int memory_hits = 0; // already loaded in this process
  int disk_rejected = 0; // cached files the driver rejected (recompiled)
};
CudaKernelCacheStats cuda_kernel_cache_stats();

} // namespace torch_plugin::runtime::cuda
