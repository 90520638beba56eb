// kernel_cache.h: generated C++ kernels compiled into shared libraries, loaded
// with dlopen, cached in memory and on disk.
//
// The disk cache (set_kernel_cache_dir; TORCH_PLUGIN_CACHE_DIR, default
// ~/.cache/torch_plugin) holds one <hash>.so per kernel, where the hash covers
// the source, the compiler command and flags, and the CPU (model and flags from
// /proc/cpuinfo, since kernels use -march=native). Compilation runs the system
// C++ compiler ($CXX, else c++, g++ or clang++); a missing compiler is an error
// that says what to install. Thread-safe. No Python objects.
#pragma once

#include <string>
#include <vector>

namespace torch_plugin::runtime {

using KernelFn = void (*)(void** args);

void set_kernel_cache_dir(const std::string& dir);
// The entry point `kernel` of each source, compiling the missing ones in
// parallel (one compiler process per core).
std::vector<KernelFn> load_kernels(const std::vector<std::string>& sources);

struct KernelCacheStats {
  int compiled = 0;     // compiler runs
  int disk_hits = 0;    // loaded from the disk cache
  int memory_hits = 0;  // already loaded in this process
};
KernelCacheStats kernel_cache_stats();

}  // namespace torch_plugin::runtime
