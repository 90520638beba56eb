// kernel_cache.cpp: compile, load and cache generated kernels (see kernel_cache.h).
#include "runtime/kernel_cache.h"

#include <c10/util/Exception.h>

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

namespace torch_plugin::runtime {
namespace {

constexpr const char* kFlags = "-O3 -march=native -fopenmp -fPIC -shared -fno-math-errno -std=c++17";

std::mutex mu;
std::string cache_dir;
std::unordered_map<std::string, KernelFn> loaded;  // hash -> entry point
KernelCacheStats stats;

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string cpu_id() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, id;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0 || line.rfind("flags", 0) == 0) id += line;
    if (line.empty() && !id.empty()) break;
  }
  return id;
}

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

const std::string& compiler() {
  static const std::string cxx = [] {
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("CXX")) candidates.push_back(env);
    candidates.insert(candidates.end(), {"c++", "g++", "clang++"});
    for (const std::string& c : candidates) {
      if (std::system(("command -v " + c + " > /dev/null 2>&1").c_str()) == 0) return c;
    }
    return std::string();
  }();
  TORCH_CHECK(!cxx.empty(),
              "torch_plugin: no C++ compiler found for generated kernels (tried $CXX, c++, g++, "
              "clang++); install one, e.g. `apt-get install g++`, or set "
              "TORCH_PLUGIN_FUSION=0 to run without generated kernels");
  return cxx;
}

std::string key_of(const std::string& source) {
  static const std::string target = cpu_id();
  uint64_t h = fnv1a(source);
  h = fnv1a(compiler() + " " + kFlags, h);
  h = fnv1a(target, h);
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// The cache folder; the caller holds `mu`.
std::string cache_dir_locked() {
  if (cache_dir.empty()) {
    // Until the compiler sets it: also for kernels of a loaded graph module.
    const char* env = std::getenv("TORCH_PLUGIN_CACHE_DIR");
    const char* home = std::getenv("HOME");
    cache_dir = env && *env ? std::string(env)
                            : std::string(home ? home : "/tmp") + "/.cache/torch_plugin";
  }
  return cache_dir;
}

// Compiles `source` into <dir>/<key>.so (atomically: a temporary, then rename).
void compile(const std::string& source, const std::string& so) {
  std::string tmp = so + "." + std::to_string(getpid()) + "." +
                    std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  std::ofstream(tmp + ".cpp") << source;
  std::string cmd = compiler() + " " + kFlags + " -o " + tmp + ".so " + tmp + ".cpp 2> " + tmp + ".log";
  int rc = std::system(cmd.c_str());
  std::ostringstream log;
  log << std::ifstream(tmp + ".log").rdbuf();
  std::remove((tmp + ".cpp").c_str());
  std::remove((tmp + ".log").c_str());
  TORCH_CHECK(rc == 0, "torch_plugin: compiling a generated kernel failed (", cmd, "):\n",
              log.str(), "\nsource:\n", source);
  TORCH_CHECK(std::rename((tmp + ".so").c_str(), so.c_str()) == 0, "torch_plugin: cannot move ",
              tmp, ".so to ", so);
}

KernelFn load(const std::string& so) {
  void* handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  TORCH_CHECK(handle, "torch_plugin: cannot load kernel ", so, ": ", dlerror());
  auto fn = reinterpret_cast<KernelFn>(dlsym(handle, "kernel"));
  TORCH_CHECK(fn, "torch_plugin: ", so, " has no symbol 'kernel'");
  return fn;  // the library stays loaded for the process's lifetime
}

}  // namespace

std::string kernel_cache_dir() {
  std::lock_guard<std::mutex> lock(mu);
  return cache_dir_locked();
}

void set_kernel_cache_dir(const std::string& d) {
  std::lock_guard<std::mutex> lock(mu);
  cache_dir = d;
}

std::vector<KernelFn> load_kernels(const std::vector<std::string>& sources) {
  std::vector<KernelFn> out(sources.size(), nullptr);
  std::vector<std::string> keys;
  for (const std::string& s : sources) keys.push_back(key_of(s));
  const std::string d = kernel_cache_dir();
  std::system(("mkdir -p '" + d + "'").c_str());
  std::vector<size_t> missing;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < sources.size(); ++i) {
      auto it = loaded.find(keys[i]);
      if (it != loaded.end()) {
        out[i] = it->second;
        stats.memory_hits++;
      } else if (exists(d + "/" + keys[i] + ".so")) {
        out[i] = loaded[keys[i]] = load(d + "/" + keys[i] + ".so");
        stats.disk_hits++;
      } else {
        missing.push_back(i);
      }
    }
  }
  // Compile the missing ones, at most one compiler per core at a time.
  size_t workers = std::max(1u, std::thread::hardware_concurrency());
  for (size_t start = 0; start < missing.size(); start += workers) {
    std::vector<std::future<void>> jobs;
    for (size_t k = start; k < std::min(missing.size(), start + workers); ++k) {
      size_t i = missing[k];
      jobs.push_back(std::async(std::launch::async, [&, i] {
        compile(sources[i], d + "/" + keys[i] + ".so");
      }));
    }
    for (auto& j : jobs) j.get();
  }
  std::lock_guard<std::mutex> lock(mu);
  for (size_t i : missing) {
    auto it = loaded.find(keys[i]);
    out[i] = it != loaded.end() ? it->second : (loaded[keys[i]] = load(d + "/" + keys[i] + ".so"));
    stats.compiled++;
  }
  return out;
}

KernelCacheStats kernel_cache_stats() {
  std::lock_guard<std::mutex> lock(mu);
  return stats;
}

}  // namespace torch_plugin::runtime
