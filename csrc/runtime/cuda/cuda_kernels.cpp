// cuda_kernels.cpp: NVRTC compilation, the CUDA kernel cache and the launcher
// (see cuda_kernels.h).
#include "runtime/cuda/cuda_kernels.h"

#include "runtime/cache_file.h"
#include "runtime/cuda/cuda_api.h"
#include "runtime/options.h"

#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <c10/util/hash.h>

#include <sys/stat.h>
#include <unistd.h>
#include <utime.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <unordered_map>

namespace torch_plugin::runtime::cuda {
namespace {

// NVRTC options besides --gpu-architecture (part of the cache key).
const std::vector<std::string> kFlags = {"--std=c++17", "-lineinfo"};

std::mutex mu; // guards modules, stats, large_shared
std::unordered_map<std::string, CUmodule> modules; // "<hash>@<device>"
std::unordered_map<CUfunction, int64_t> large_shared; // dynamic smem enabled
CudaKernelCacheStats stats;

// What NVRTC produces for one device: CUBIN for sm_XY, or PTX for compute_XY.
struct Target {
  std::string arch; // "sm_90" or "compute_89"
  bool cubin = true;
};

Target target_for(int cc) {
  static std::mutex target_mu;
  static std::map<int, Target> targets;
  std::lock_guard<std::mutex> lock(target_mu);
  auto it = targets.find(cc);
  if (it != targets.end())
    return it->second;
  const NvrtcApi& n = nvrtc();
  int count = 0;
  nvrtcResult r = n.nvrtcGetNumSupportedArchs(&count);
  TORCH_CHECK(
      r == NVRTC_SUCCESS,
      "torch_plugin: NVRTC nvrtcGetNumSupportedArchs failed (",
      nvrtc_status(r),
      ")");
  std::vector<int> archs(count);
  r = n.nvrtcGetSupportedArchs(archs.data());
  TORCH_CHECK(
      r == NVRTC_SUCCESS,
      "torch_plugin: NVRTC nvrtcGetSupportedArchs failed (",
      nvrtc_status(r),
      ")");
  Target t;
  if (std::find(archs.begin(), archs.end(), cc) != archs.end()) {
    t = {"sm_" + std::to_string(cc), true};
  } else {
    // PTX for the newest architecture below: the driver compiles it for cc.
    int best = -1;
    for (int a : archs) {
      if (a <= cc)
        best = std::max(best, a);
    }
    std::ostringstream listed;
    for (int a : archs)
      listed << " " << a;
    TORCH_CHECK(
        best > 0,
        "torch_plugin: NVRTC ",
        nvrtc_version(),
        " (",
        n.path,
        ") supports none of the architectures up to the device's compute "
        "capability ",
        cc / 10,
        ".",
        cc % 10,
        " (it supports",
        listed.str(),
        ")");
    t = {"compute_" + std::to_string(best), false};
  }
  return targets[cc] = t;
}

std::string cache_key(const std::string& source, const Target& t) {
  std::string all = "torch_plugin CUDA kernel cache 2";
  all.push_back('\0');
  all += source;
  all.push_back('\0');
  all += t.arch;
  all.push_back('\0');
  all += std::to_string(nvrtc_version());
  for (const std::string& f : kFlags) {
    all.push_back('\0');
    all += f;
  }
  return sha256_hex(all);
}

// "\nthe generated source at the errors:\n   12 | float y = x +;"
// from NVRTC log lines of the form "<file>(<line>): error: ...".
std::string failing_lines(const std::string& log, const std::string& source) {
  std::vector<std::string> lines;
  std::istringstream src(source);
  for (std::string l; std::getline(src, l);)
    lines.push_back(l);
  std::set<int> seen;
  std::vector<int> order;
  std::istringstream in(log);
  for (std::string l; std::getline(in, l) && order.size() < 8;) {
    size_t close = l.find("): ");
    if (close == std::string::npos)
      continue;
    std::string rest = l.substr(close + 3);
    if (rest.rfind("error", 0) != 0 && rest.rfind("catastrophic error", 0) != 0)
      continue;
    size_t open = l.rfind('(', close);
    if (open == std::string::npos || open + 1 == close)
      continue;
    std::string digits = l.substr(open + 1, close - open - 1);
    if (digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    int line = std::stoi(digits);
    if (line >= 1 && line <= static_cast<int>(lines.size()) &&
        seen.insert(line).second)
      order.push_back(line);
  }
  if (order.empty())
    return "";
  std::ostringstream out;
  out << "\nthe generated source at the error" << (order.size() > 1 ? "s" : "")
      << ":";
  for (int line : order) {
    char num[16];
    std::snprintf(num, sizeof num, "%5d", line);
    out << "\n" << num << " | " << lines[line - 1];
  }
  return out.str();
}

// Compiles `source` for `arch`: a CUBIN for sm_XY, PTX (NUL-terminated, as
// cuModuleLoadData wants it) for compute_XY.
std::string compile(
    const std::string& source,
    const std::string& name,
    const std::string& arch) {
  const NvrtcApi& n = nvrtc();
  const bool cubin = arch.rfind("sm_", 0) == 0;
  const std::string file = name + ".cu";
  const std::string what = " for kernel " + name + " (" + arch + ")";
  nvrtcProgram prog = nullptr;
  nvrtcResult r = n.nvrtcCreateProgram(
      &prog, source.c_str(), file.c_str(), 0, nullptr, nullptr);
  TORCH_CHECK(
      r == NVRTC_SUCCESS,
      "torch_plugin: NVRTC nvrtcCreateProgram failed (",
      nvrtc_status(r),
      ")",
      what);
  struct Destroy {
    const NvrtcApi& n;
    nvrtcProgram* p;
    ~Destroy() {
      n.nvrtcDestroyProgram(p);
    }
  } destroy{n, &prog};
  const std::string arch_flag = "--gpu-architecture=" + arch;
  std::vector<const char*> options = {arch_flag.c_str()};
  for (const std::string& f : kFlags)
    options.push_back(f.c_str());
  r = n.nvrtcCompileProgram(
      prog, static_cast<int>(options.size()), options.data());
  if (r != NVRTC_SUCCESS) {
    size_t size = 0;
    std::string log;
    if (n.nvrtcGetProgramLogSize(prog, &size) == NVRTC_SUCCESS && size > 1) {
      log.resize(size);
      if (n.nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS)
        log.clear();
      while (!log.empty() && (log.back() == '\0' || log.back() == '\n'))
        log.pop_back();
    }
    TORCH_CHECK(
        false,
        "torch_plugin: NVRTC nvrtcCompileProgram failed (",
        nvrtc_status(r),
        ")",
        what,
        ":\n",
        log,
        failing_lines(log, source));
  }
  size_t size = 0;
  std::string image;
  if (cubin) {
    r = n.nvrtcGetCUBINSize(prog, &size);
    TORCH_CHECK(
        r == NVRTC_SUCCESS,
        "torch_plugin: NVRTC nvrtcGetCUBINSize failed (",
        nvrtc_status(r),
        ")",
        what);
    image.resize(size);
    r = n.nvrtcGetCUBIN(prog, image.data());
    TORCH_CHECK(
        r == NVRTC_SUCCESS,
        "torch_plugin: NVRTC nvrtcGetCUBIN failed (",
        nvrtc_status(r),
        ")",
        what);
  } else {
    r = n.nvrtcGetPTXSize(prog, &size);
    TORCH_CHECK(
        r == NVRTC_SUCCESS,
        "torch_plugin: NVRTC nvrtcGetPTXSize failed (",
        nvrtc_status(r),
        ")",
        what);
    image.resize(size); // includes the terminating NUL
    r = n.nvrtcGetPTX(prog, image.data());
    TORCH_CHECK(
        r == NVRTC_SUCCESS,
        "torch_plugin: NVRTC nvrtcGetPTX failed (",
        nvrtc_status(r),
        ")",
        what);
  }
  return image;
}

// mkdir -p; false when the folder cannot be made.
bool make_dirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      std::string part = path.substr(0, i);
      if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST)
        return false;
    }
  }
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Writes `data` as the verified cache entry dir/name (runtime/cache_file.h).
// Failures are warnings: the kernel is then only kept in memory.
void write_file_atomic(
    const std::string& dir,
    const std::string& name,
    const std::string& data) {
  if (!make_dirs(dir)) {
    TORCH_WARN(
        "torch_plugin: cannot create the CUDA kernel cache folder ",
        dir,
        ": ",
        std::strerror(errno),
        " (kernels are not cached on disk)");
    return;
  }
  std::string why;
  if (!write_cache_entry(dir, name, data, &why))
    TORCH_WARN("torch_plugin: cannot write ", dir, "/", name, ": ", why);
}

// Loads `image` into the current context; nullptr and the status on failure.
CUmodule load_module(const std::string& image, CUresult* status) {
  CUmodule m = nullptr;
  *status = driver().cuModuleLoadData(&m, image.data());
  return *status == CUDA_SUCCESS ? m : nullptr;
}

int resolve_device(int device_index) {
  return device_index >= 0 ? device_index : c10::cuda::current_device();
}

} // namespace

int nvrtc_version() {
  static const int v = [] {
    int major = 0, minor = 0;
    nvrtcResult r = nvrtc().nvrtcVersion(&major, &minor);
    TORCH_CHECK(
        r == NVRTC_SUCCESS,
        "torch_plugin: NVRTC nvrtcVersion failed (",
        nvrtc_status(r),
        ")");
    return major * 1000 + minor * 10;
  }();
  return v;
}

std::string cuda_kernel_cache_dir() {
  return kernel_cache_dir() + "/cuda";
}

CudaKernelCacheStats cuda_kernel_cache_stats() {
  std::lock_guard<std::mutex> lock(mu);
  return stats;
}

std::vector<CudaFunction> load_cuda_kernels(
    const std::vector<CudaKernelSource>& kernels,
    int device_index) {
  if (kernels.empty())
    return {};
  const int device = resolve_device(device_index);
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  make_context_current(device);
  const Target target = target_for(compute_capability(device));
  const std::string ext = target.cubin ? ".cubin" : ".ptx";
  const std::string dir = cuda_kernel_cache_dir();
  const size_t n = kernels.size();
  auto name_of = [&](size_t i) {
    return kernels[i].name.empty() ? kernels[i].entry : kernels[i].name;
  };

  std::vector<std::string> keys(n);
  for (size_t i = 0; i < n; ++i)
    keys[i] = cache_key(kernels[i].source, target);
  const std::string at_device = "@" + std::to_string(device);
  std::vector<CUmodule> mods(n, nullptr);
  std::vector<size_t> missing; // first index of each key not in memory
  {
    std::lock_guard<std::mutex> lock(mu);
    std::set<std::string> queued;
    for (size_t i = 0; i < n; ++i) {
      auto it = modules.find(keys[i] + at_device);
      if (it != modules.end()) {
        mods[i] = it->second;
        stats.memory_hits++;
      } else if (queued.insert(keys[i]).second) {
        missing.push_back(i);
      }
    }
  }

  // The disk cache; a file the driver rejects is removed and recompiled.
  std::vector<size_t> to_compile;
  std::vector<std::string> images(n);
  for (size_t i : missing) {
    const std::string path = dir + "/" + keys[i] + ext;
    std::string image, why;
    if (!read_cache_entry(path, &image, &why) && why != "missing") {
      TORCH_WARN(
          "torch_plugin: the cached CUDA kernel ",
          path,
          " is damaged (",
          why,
          "); compiling ",
          name_of(i),
          " again");
      unlink(path.c_str());
      std::lock_guard<std::mutex> lock(mu);
      stats.disk_rejected++;
    } else if (why.empty()) {
      if (!target.cubin && (image.empty() || image.back() != '\0'))
        image.push_back('\0');
      CUresult status;
      if (CUmodule m = load_module(image, &status)) {
        std::lock_guard<std::mutex> lock(mu);
        auto [it, fresh] = modules.emplace(keys[i] + at_device, m);
        if (!fresh)
          driver().cuModuleUnload(m); // another thread loaded it meanwhile
        mods[i] = it->second;
        stats.disk_hits++;
        utime(path.c_str(), nullptr); // used now (least-recently-used eviction)
        continue;
      }
      TORCH_WARN(
          "torch_plugin: the cached CUDA kernel ",
          path,
          " does not load (cuModuleLoadData: ",
          cu_status(status),
          "); compiling ",
          name_of(i),
          " again");
      unlink(path.c_str());
      std::lock_guard<std::mutex> lock(mu);
      stats.disk_rejected++;
    }
    to_compile.push_back(i);
  }

  // NVRTC on up to one thread per core; each program is independent (NVRTC's
  // API may be called from several threads at once; NVRTC User Guide, "Thread
  // Safety").
  std::vector<std::exception_ptr> errors(n);
  {
    std::atomic<size_t> next{0};
    auto work = [&] {
      for (size_t k; (k = next++) < to_compile.size();) {
        size_t i = to_compile[k];
        try {
          images[i] = compile(kernels[i].source, name_of(i), target.arch);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      }
    };
    size_t workers = std::min<size_t>(
        to_compile.size(), std::max(1u, std::thread::hardware_concurrency()));
    std::vector<std::thread> threads;
    for (size_t t = 1; t < workers; ++t)
      threads.emplace_back(work);
    work();
    for (std::thread& t : threads)
      t.join();
  }
  for (size_t i : to_compile) {
    if (errors[i])
      std::rethrow_exception(errors[i]);
  }
  for (size_t i : to_compile) {
    CUresult status;
    CUmodule m = load_module(images[i], &status);
    if (!m) {
      check_cu(
          status,
          "cuModuleLoadData",
          " for kernel " + name_of(i) + " (" + target.arch + ")");
    }
    write_file_atomic(dir, keys[i] + ext, images[i]);
    std::lock_guard<std::mutex> lock(mu);
    auto [it, fresh] = modules.emplace(keys[i] + at_device, m);
    if (!fresh)
      driver().cuModuleUnload(m);
    mods[i] = it->second;
    stats.compiled++;
  }

  // Duplicates of a key take the module of its first occurrence.
  std::vector<CudaFunction> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (!mods[i]) {
      std::lock_guard<std::mutex> lock(mu);
      mods[i] = modules.at(keys[i] + at_device);
    }
    CUfunction fn = nullptr;
    CUresult r =
        driver().cuModuleGetFunction(&fn, mods[i], kernels[i].entry.c_str());
    if (r != CUDA_SUCCESS) {
      check_cu(
          r,
          "cuModuleGetFunction",
          " for kernel " + name_of(i) + " (entry '" + kernels[i].entry +
              "': the source must define it as extern \"C\" __global__)");
    }
    out[i] = {reinterpret_cast<void*>(fn), name_of(i), device};
  }
  return out;
}

CudaFunction load_cuda_kernel(
    const std::string& source,
    const std::string& entry,
    int device_index,
    const std::string& name) {
  return load_cuda_kernels({{source, entry, name}}, device_index)[0];
}

void launch_cuda_kernel(
    const CudaFunction& f,
    int64_t grid,
    int64_t block,
    int64_t shared_bytes,
    const std::vector<void*>& pointers) {
  auto config = [&] {
    std::ostringstream s;
    s << " for kernel " << f.name << " (grid " << grid << ", block " << block
      << ", shared " << shared_bytes << " bytes)";
    return s.str();
  };
  TORCH_CHECK(
      f.function != nullptr && f.device >= 0,
      "torch_plugin: CUDA kernel ",
      f.name,
      " is not loaded (load_cuda_kernel first)");
  TORCH_CHECK(
      grid >= 1 && grid <= INT_MAX && block >= 1 && block <= 1024 &&
          shared_bytes >= 0 && shared_bytes <= INT_MAX,
      "torch_plugin: invalid CUDA launch configuration",
      config(),
      ": grid must be in [1, 2^31-1], block in [1, 1024], shared >= 0");
  const DriverApi& d = driver();
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(f.device));
  make_context_current(f.device);
  auto fn = static_cast<CUfunction>(f.function);
  if (shared_bytes > 48 * 1024) {
    std::lock_guard<std::mutex> lock(mu);
    int64_t& enabled = large_shared[fn];
    if (enabled < shared_bytes) {
      CUresult r = d.cuFuncSetAttribute(
          fn,
          CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
          static_cast<int>(shared_bytes));
      if (r != CUDA_SUCCESS) {
        check_cu(
            r, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", config());
      }
      enabled = shared_bytes;
    }
  }
  c10::SmallVector<void*, 16> params(pointers.size());
  for (size_t i = 0; i < pointers.size(); ++i)
    params[i] = const_cast<void**>(&pointers[i]);
  CUstream stream =
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(f.device))
          .stream();
  CUresult r = d.cuLaunchKernel(
      fn,
      static_cast<unsigned>(grid),
      1,
      1,
      static_cast<unsigned>(block),
      1,
      1,
      static_cast<unsigned>(shared_bytes),
      stream,
      params.data(),
      nullptr);
  if (r != CUDA_SUCCESS)
    check_cu(r, "cuLaunchKernel", config());
}

std::string nvrtc_compile_check(
    const std::string& source,
    const std::string& arch,
    const std::string& name) {
  std::string virt = arch;
  if (virt.rfind("sm_", 0) == 0)
    virt = "compute_" + virt.substr(3);
  TORCH_CHECK(
      virt.rfind("compute_", 0) == 0 && virt.size() > 8,
      "torch_plugin: nvrtc_compile_check: arch must be like 'sm_90' or "
      "'compute_90', got '",
      arch,
      "'");
  std::string ptx = compile(source, name, virt);
  while (!ptx.empty() && ptx.back() == '\0')
    ptx.pop_back();
  return ptx;
}

} // namespace torch_plugin::runtime::cuda
