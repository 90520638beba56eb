// cuda_api.cpp: opening NVRTC and the CUDA driver at run time (see cuda_api.h).
#include "runtime/cuda/cuda_api.h"

#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <dlfcn.h>

#include <mutex>
#include <string>
#include <vector>

#ifndef TORCH_PLUGIN_CUDA_MAJOR
#define TORCH_PLUGIN_CUDA_MAJOR (CUDA_VERSION / 1000)
#endif

// The symbol a name of cuda.h stands for after macro expansion.
#define TP_SYMBOL_NAME2(x) #x
#define TP_SYMBOL_NAME(x) TP_SYMBOL_NAME2(x)

namespace torch_plugin::runtime::cuda {
namespace {

// torch's library directory (site-packages/torch/lib), from the path of the
// loaded libc10_cuda.so; empty when it cannot be told.
std::string torch_lib_dir() {
  Dl_info info;
  // Any function of libc10_cuda.so.
  auto fn = reinterpret_cast<void*>(&c10::cuda::getCurrentCUDAStream);
  if (dladdr(fn, &info) == 0 || info.dli_fname == nullptr)
    return "";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

// Opens the first of `candidates` that loads; `tried` collects each failure.
void* open_first(
    const std::vector<std::string>& candidates,
    std::string* opened,
    std::string* tried) {
  for (const std::string& c : candidates) {
    void* h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) {
      *opened = c;
      return h;
    }
    const char* e = dlerror();
    *tried += "\n  " + c + ": " + (e ? e : "not found");
  }
  return nullptr;
}

template <typename F>
void bind_symbol(
    void* handle,
    const char* symbol,
    const std::string& lib,
    F* out) {
  void* p = dlsym(handle, symbol);
  TORCH_CHECK(
      p,
      "torch_plugin: ",
      lib,
      " has no entry point ",
      symbol,
      " (too old a version?)");
  *out = reinterpret_cast<F>(p);
}

NvrtcApi open_nvrtc() {
  const std::string so =
      "libnvrtc.so." + std::to_string(TORCH_PLUGIN_CUDA_MAJOR);
  NvrtcApi api;
  std::string tried;
  // 1. The NVRTC torch loaded (RTLD_NOLOAD: only if already in the process).
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (h) {
    api.path = so + " (already loaded)";
  } else {
    tried += "\n  " + so + ": not loaded yet";
    // 2. The nvidia-cuda-nvrtc wheel beside torch, 3. the linker's search path.
    std::vector<std::string> candidates;
    std::string lib = torch_lib_dir();
    if (!lib.empty()) {
      std::string nv = lib + "/../../nvidia/";
      candidates.push_back(
          nv + "cu" + std::to_string(TORCH_PLUGIN_CUDA_MAJOR) + "/lib/" + so);
      candidates.push_back(nv + "cuda_nvrtc/lib/" + so);
    }
    candidates.push_back(so);
    candidates.push_back("libnvrtc.so");
    h = open_first(candidates, &api.path, &tried);
  }
  TORCH_CHECK(
      h,
      "torch_plugin: cannot load NVRTC, which compiles the generated CUDA "
      "kernels; tried:",
      tried,
      "\nInstall the NVRTC wheel torch was built with (pip install "
      "nvidia-cuda-nvrtc) or a CUDA toolkit whose lib64 is on the linker path.");
#define TP_BIND(name) bind_symbol(h, TP_SYMBOL_NAME(name), api.path, &api.name)
  TP_BIND(nvrtcVersion);
  TP_BIND(nvrtcGetErrorString);
  TP_BIND(nvrtcCreateProgram);
  TP_BIND(nvrtcDestroyProgram);
  TP_BIND(nvrtcCompileProgram);
  TP_BIND(nvrtcGetProgramLogSize);
  TP_BIND(nvrtcGetProgramLog);
  TP_BIND(nvrtcGetPTXSize);
  TP_BIND(nvrtcGetPTX);
  TP_BIND(nvrtcGetCUBINSize);
  TP_BIND(nvrtcGetCUBIN);
  TP_BIND(nvrtcGetNumSupportedArchs);
  TP_BIND(nvrtcGetSupportedArchs);
  return api;
}

DriverApi open_driver() {
  DriverApi api;
  std::string tried;
  void* h = open_first({"libcuda.so.1", "libcuda.so"}, &api.path, &tried);
  TORCH_CHECK(
      h,
      "torch_plugin: cannot load the CUDA driver library; tried:",
      tried,
      "\nIs an NVIDIA driver installed?");
  TP_BIND(cuInit);
  TP_BIND(cuGetErrorName);
  TP_BIND(cuGetErrorString);
  TP_BIND(cuDeviceGet);
  TP_BIND(cuDeviceGetAttribute);
  TP_BIND(cuDevicePrimaryCtxRetain);
  TP_BIND(cuCtxGetCurrent);
  TP_BIND(cuCtxSetCurrent);
  TP_BIND(cuModuleLoadData);
  TP_BIND(cuModuleUnload);
  TP_BIND(cuModuleGetFunction);
  TP_BIND(cuFuncSetAttribute);
  TP_BIND(cuLaunchKernel);
#undef TP_BIND
  return api;
}

} // namespace

const NvrtcApi& nvrtc() {
  static const NvrtcApi api = open_nvrtc();
  return api;
}

const DriverApi& driver() {
  static const DriverApi api = [] {
    DriverApi d = open_driver();
    // cuInit is idempotent; the CUDA runtime has usually called it already.
    CUresult r = d.cuInit(0);
    if (r != CUDA_SUCCESS) {
      const char* name = nullptr;
      const char* text = nullptr;
      d.cuGetErrorName(r, &name);
      d.cuGetErrorString(r, &text);
      TORCH_CHECK(
          false,
          "torch_plugin: CUDA cuInit failed (",
          name ? name : "CUresult " + std::to_string(static_cast<int>(r)),
          ": ",
          text ? text : "",
          ") with ",
          d.path);
    }
    return d;
  }();
  return api;
}

std::string nvrtc_status(nvrtcResult r) {
  const char* s = nvrtc().nvrtcGetErrorString(r);
  return s ? s : "NVRTC status " + std::to_string(static_cast<int>(r));
}

std::string cu_status(CUresult r) {
  const DriverApi& d = driver();
  const char* name = nullptr;
  const char* text = nullptr;
  d.cuGetErrorName(r, &name);
  d.cuGetErrorString(r, &text);
  std::string out =
      name ? name : "CUresult " + std::to_string(static_cast<int>(r));
  if (text)
    out += std::string(": ") + text;
  return out;
}

void check_cu(CUresult r, const char* call, const std::string& context) {
  if (r == CUDA_SUCCESS)
    return;
  TORCH_CHECK(
      false,
      "torch_plugin: CUDA ",
      call,
      " failed (",
      cu_status(r),
      ")",
      context);
}

void make_context_current(int device) {
  const DriverApi& d = driver();
  CUcontext ctx = nullptr;
  check_cu(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (ctx)
    return;
  CUdevice dev = 0;
  std::string where = " for device " + std::to_string(device);
  check_cu(d.cuDeviceGet(&dev, device), "cuDeviceGet", where);
  // Retained for the process's lifetime, as the CUDA runtime does.
  check_cu(
      d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain", where);
  check_cu(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent", where);
}

int compute_capability(int device) {
  const DriverApi& d = driver();
  CUdevice dev = 0;
  std::string where = " for device " + std::to_string(device);
  check_cu(d.cuDeviceGet(&dev, device), "cuDeviceGet", where);
  int major = 0, minor = 0;
  check_cu(
      d.cuDeviceGetAttribute(
          &major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
      "cuDeviceGetAttribute",
      where);
  check_cu(
      d.cuDeviceGetAttribute(
          &minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
      "cuDeviceGetAttribute",
      where);
  return major * 10 + minor;
}

} // namespace torch_plugin::runtime::cuda
