// cuda_api.h: NVRTC and the CUDA driver API, opened at run time with dlopen.
//
// Owns: finding and opening libnvrtc and libcuda, the typed entry points the
// runtime calls (NvrtcApi, DriverApi), status-to-text helpers, and making a
// device's primary context current on the calling thread. Nothing here is
// linked at build time: the extension imports on machines with no NVIDIA driver
// (and compiles CUDA C++ there with NVRTC alone), and uses the NVRTC that torch
// itself loaded (PyTorch's ATen/cuda/nvrtc_stub/ATenNVRTC.h, which declares
// torch's own lazily loaded stub, is not shipped in torch's wheels, and its
// libcaffe2_nvrtc.so needs libcuda.so.1, i.e. a driver, even to compile).
//
// Where the libraries come from:
//   NVRTC: libnvrtc.so.<CUDA major of torch> already loaded in the process
//     (`import torch` loads it from the nvidia-cuda-nvrtc wheel), else the one
//     in that wheel beside torch (site-packages/nvidia/cu13/lib or
//     nvidia/cuda_nvrtc/lib, found from libc10_cuda.so's own path), else the
//     dynamic linker's search path (a CUDA toolkit registered with ldconfig),
//     else plain libnvrtc.so.
//   Driver: libcuda.so.1 (installed by the NVIDIA driver).
// Driver entry points are looked up under the names cuda.h maps them to (e.g.
// a `cuFoo` that cuda.h #defines to `cuFoo_v2`), so the types and the symbols
// agree. Thread-safe (each library is opened once).
#pragma once

#include <cuda.h>
#include <nvrtc.h>

#include <string>

namespace torch_plugin::runtime::cuda {

struct NvrtcApi {
  std::string path; // the library that was opened
  decltype(&::nvrtcVersion) nvrtcVersion;
  decltype(&::nvrtcGetErrorString) nvrtcGetErrorString;
  decltype(&::nvrtcCreateProgram) nvrtcCreateProgram;
  decltype(&::nvrtcDestroyProgram) nvrtcDestroyProgram;
  decltype(&::nvrtcCompileProgram) nvrtcCompileProgram;
  decltype(&::nvrtcGetProgramLogSize) nvrtcGetProgramLogSize;
  decltype(&::nvrtcGetProgramLog) nvrtcGetProgramLog;
  decltype(&::nvrtcGetPTXSize) nvrtcGetPTXSize;
  decltype(&::nvrtcGetPTX) nvrtcGetPTX;
  decltype(&::nvrtcGetCUBINSize) nvrtcGetCUBINSize;
  decltype(&::nvrtcGetCUBIN) nvrtcGetCUBIN;
  decltype(&::nvrtcGetNumSupportedArchs) nvrtcGetNumSupportedArchs;
  decltype(&::nvrtcGetSupportedArchs) nvrtcGetSupportedArchs;
};

struct DriverApi {
  std::string path;
  decltype(&::cuInit) cuInit;
  decltype(&::cuGetErrorName) cuGetErrorName;
  decltype(&::cuGetErrorString) cuGetErrorString;
  decltype(&::cuDeviceGet) cuDeviceGet;
  decltype(&::cuDeviceGetAttribute) cuDeviceGetAttribute;
  decltype(&::cuDevicePrimaryCtxRetain) cuDevicePrimaryCtxRetain;
  decltype(&::cuCtxGetCurrent) cuCtxGetCurrent;
  decltype(&::cuCtxSetCurrent) cuCtxSetCurrent;
  decltype(&::cuModuleLoadData) cuModuleLoadData;
  decltype(&::cuModuleUnload) cuModuleUnload;
  decltype(&::cuModuleGetFunction) cuModuleGetFunction;
  decltype(&::cuFuncSetAttribute) cuFuncSetAttribute;
  decltype(&::cuLaunchKernel) cuLaunchKernel;
};

// The opened library. Raises c10::Error saying what was tried and how to get
// the library when it cannot be opened or lacks an entry point.
const NvrtcApi& nvrtc();
// Also runs cuInit(0) once; raises c10::Error naming cuInit and its status when
// that fails (e.g. CUDA_ERROR_NO_DEVICE).
const DriverApi& driver();

// "NVRTC_ERROR_COMPILATION"
std::string nvrtc_status(nvrtcResult r);
// "CUDA_ERROR_INVALID_VALUE: invalid argument"
std::string cu_status(CUresult r);

// Raises c10::Error "torch_plugin: CUDA <call> failed (<status>)<context>"
// unless r is CUDA_SUCCESS.
void check_cu(CUresult r, const char* call, const std::string& context = "");

// Makes the primary context of CUDA device `device` current on this thread when
// the thread has no current context (the state of a thread on which the CUDA
// runtime has not made one current, e.g. a thread that never called
// cudaSetDevice). PyTorch and the CUDA runtime use the same primary context.
// The caller holds a c10::cuda::CUDAGuard for `device`.
void make_context_current(int device);

// The device's compute capability as major * 10 + minor (90 for sm_90).
int compute_capability(int device);

} // namespace torch_plugin::runtime::cuda
