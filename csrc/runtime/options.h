// options.h: the runtime's options, set by the embedding program (Python:
// torch_plugin._C._runtime.configure), never read from the environment here.
//
// Owns: RuntimeOptions (plain strings, "" = the default, each parsed by the
// part that uses it, as documented per field) and the kernel cache folder that
// every device's kernel cache shares. A device part that must hand an option to
// a library wrapper (csrc/libs knows nothing of the runtime) registers an
// options listener, called with the options when it registers and after every
// configure(). Thread-safe. No Python objects.
#pragma once

#include <string>

namespace torch_plugin::runtime {

struct RuntimeOptions {
  // The kernel cache folder (generated kernels of every device; CUDA kernels
  // in its cuda/ subfolder). "": <home>/.cache/torch_plugin, home from the
  // password database (Python passes the folder it resolved from
  // TORCH_PLUGIN_CACHE_DIR, XDG_CACHE_HOME and HOME).
  std::string cache_dir;
  // The C++ compiler command for generated CPU kernels, split on whitespace,
  // its first word looked up on PATH. "": the first of c++, g++, clang++ on
  // PATH.
  std::string cxx;
  // The path of torch_plugin/_onednn.so (the oneDNN wrappers). "": _onednn.so
  // beside the extension module. Read when oneDNN is first used.
  std::string onednn_library;
  // How CPU linear steps hold their weight: "packed" (a copy in oneDNN's
  // blocked layout), anything else borrowed (read where it is).
  std::string onednn_weights;
  // CUDA products: "" or "1" time cuBLASLt's candidates and cuBLAS's gemm,
  // "0" takes the heuristic's first, "verbose" also prints each candidate's
  // time, "gemm" takes cuBLAS's gemm wherever it can run.
  std::string cublaslt_tuning;
  // How many candidates cuBLASLt's heuristic is asked for: an integer, clamped
  // to 1..64; "": 8.
  std::string cublaslt_candidates;
  // Threads that build a compiled graph's cuDNN convolution plans at once: an
  // integer >= 1; "" (or anything else): min(8, the host's cores).
  std::string cudnn_threads;
};

// The options now in effect (a copy).
RuntimeOptions runtime_options();
// Replaces the options and notifies the listeners.
void configure(const RuntimeOptions& options);

// Sets only the kernel cache folder (the compiler pipeline's "cache_dir").
void set_kernel_cache_dir(const std::string& dir);
// The kernel cache folder: RuntimeOptions::cache_dir, else the default above.
std::string kernel_cache_dir();

// Called with the current options at once, then after every configure().
using OptionsListener = void (*)(const RuntimeOptions& options);
void add_options_listener(OptionsListener listener);
// Static registration of a listener, in the device's file.
struct OptionsListenerRegistration {
  explicit OptionsListenerRegistration(OptionsListener listener) {
    add_options_listener(listener);
  }
};

} // namespace torch_plugin::runtime
