// kernel_cache.h: generated C++ kernels compiled by the host compiler into
// shared libraries, loaded with dlopen, cached in memory and on disk (the CPU
// device's kernels; runtime/cuda has the CUDA ones).
//
// The disk cache (the runtime's kernel cache folder, runtime/options.h) holds
// one <key>.kernel per kernel: a verified cache entry (runtime/cache_file.h:
// the shared library behind a header with the SHA-256 of its bytes), where the key is the SHA-256 of the source, the
// compiler command and flags, the CPU (model and flags from /proc/cpuinfo,
// since kernels use -march=native), the torch version and the cache format.
// An entry is loaded only from verified bytes (written to a fresh private
// file that is dlopen'ed and removed); a damaged one (truncated, flipped,
// swapped, not loadable) is reported with a warning, removed and compiled
// again. Compilation runs the system C++ compiler (RuntimeOptions::cxx, else
// c++, g++ or clang++); a missing compiler is an error that says what to
// install.
// Thread-safe. No Python objects.
#pragma once

#include <string>
#include <vector>

namespace torch_plugin::runtime::cpu {

// A generated kernel's entry point: args = its output data pointers, then its
// input data pointers; the sizes and strides of every operand are baked into
// its code.
using KernelFn = void (*)(void** args);

// The entry point `kernel` of each source, compiling the missing ones in
// parallel (one compiler process per core).
std::vector<KernelFn> load_kernels(const std::vector<std::string>& sources);

struct KernelCacheStats {
  int compiled = 0; // compiler runs
  int disk_hits = 0; // loaded from the disk cache
  int memory_hits = 0; // already loaded in this process
  int disk_rejected = 0; // damaged disk entries, compiled again
};
KernelCacheStats kernel_cache_stats();

// Forgets which kernels this process has loaded (the libraries stay mapped),
// so that the next load_kernels reads the disk cache again. For tests.
void forget_loaded_kernels();

} // namespace torch_plugin::runtime::cpu
