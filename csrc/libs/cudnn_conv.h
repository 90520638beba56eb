// cudnn_conv.h: thin wrapper of cuDNN's graph API (through cudnn-frontend,
// header-only, PyPI nvidia-cudnn-frontend) for the "plugin" compiler's CUDA
// convolutions with fused epilogues. Knows nothing of the IR.
//
// Owns: ConvDesc (one convolution's sizes, strides, dtypes, epilogue and
// the torch settings it depends on: the plan cache key, as PyTorch's own cuDNN
// path keys its plans, ATen/native/cudnn/Conv_v8.cpp), ConvPlan (its cuDNN
// operation graph and the execution plan chosen by cuDNN's heuristics, mode A
// then FALLBACK, built once per descriptor and kept in a process-wide cache,
// failures too), the at::Tensor glue that the torch_plugin::conv_pointwise
// CUDA kernel (ops/cuda/conv_pointwise_cuda.cpp) and the executor's cuDNN step
// (runtime/cuda/cudnn_step.cpp) share (run_conv_pointwise), and process-wide
// counters of what ran (tests read them through torch_plugin._C).
//
// Semantics (conv_pointwise's, ops/library_ops.cpp):
//   y = act(((conv(x, w) + b) * scale + shift) + residual)
// x [N, C, H, W], w [K, C/groups, R, S], b [K] (x's dtype), scale and shift [K]
// (x's dtype or float32: an inference batch norm, float32 under autocast),
// residual like y; every tensor channels-last (NHWC) in the plan; the
// intermediates are float32 and y is rounded once to x's dtype. fp32 (TF32
// tensor cores only when torch.backends.cudnn.allow_tf32), bf16 and fp16 with
// float32 accumulation. cuDNN: the libcudnn.so.9 torch has loaded (found with
// dlopen(RTLD_NOLOAD), cudnn-frontend's dynamic loading), so the extension has
// no link-time dependency on cuDNN; without it (or below 9.0) available() is
// false and every call runs ATen's convolution.
// Ranks: 2-d convolutions (x [N, C, H, W]) and 3-d ones (x [N, C, D, H, W],
// NDHWC in the plan) run as cuDNN's 4-d and 5-d graphs; a 1-d one (x [N, C,
// L], "channels-last" NLC) runs as a 2-d one over [N, C, 1, L], as PyTorch's
// cuDNN path does (view1d_as_2d). Grouped and depthwise convolutions: cuDNN
// takes the group count from the channels, x's C over w's C/groups.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torch_plugin::libs::cudnn {

// Whether cuDNN 9 is loaded in this process (torch's libcudnn.so.9); false
// with the reason in *why otherwise. Checked once.
bool available(std::string* why = nullptr);

// Whether cuDNN's pointwise modes compute the library ops' activation `name`
// as ATen does (relu, silu, gelu (erf), gelu_tanh, sigmoid, tanh); "" is true.
// Others (hardswish, clamp) run after the convolution (ATen or the next
// generated kernel).
bool fuses_activation(std::string_view name);

// One 2-d or 3-d convolution (a 1-d one as 2-d) with its epilogue. Every
// field is part of the plan key; the group count is too, as x_sizes[1] /
// w_sizes[1] (PyTorch's key: sizes, strides, dtype, layout (the strides),
// groups, pointer alignment, settings).
struct ConvDesc {
  std::vector<int64_t> x_sizes, x_strides, w_sizes, w_strides, y_sizes,
      y_strides, r_strides; // r_strides: empty without a residual
  std::vector<int64_t> stride, padding, dilation; // one entry per spatial dim
  // The least byte alignment (1 to 16) of the operands' pointers, as
  // PyTorch's getAlignment; cuDNN picks engines for it.
  int64_t alignment = 16;
  c10::ScalarType dtype = c10::ScalarType::Float; // x, w, b, residual, y
  c10::ScalarType vector_dtype = c10::ScalarType::Float; // scale, shift
  bool bias = false, scale = false, shift = false, residual = false;
  std::string activation; // "" or one fuses_activation takes
  bool allow_tf32 = false; // torch.backends.cudnn.allow_tf32 (fp32 only)
  bool deterministic = false; // torch.backends.cudnn.deterministic
  int device = 0;
  bool operator==(const ConvDesc& o) const;
  std::string str() const;
};

// The device pointers of one execution (nullptr for absent operands), each
// aligned to at least the descriptor's alignment.
struct ConvPointers {
  const void *x = nullptr, *w = nullptr, *b = nullptr, *scale = nullptr,
             *shift = nullptr, *r = nullptr;
  void* y = nullptr;
};

class ConvPlan {
 public:
  struct Impl;
  explicit ConvPlan(std::unique_ptr<Impl> impl);
  ~ConvPlan();
  const ConvDesc& desc() const;
  // The engine cuDNN chose, e.g. "cudnn conv+scale+shift+relu eng7 ...".
  std::string describe() const;
  // Runs on torch's current stream with torch's cuDNN handle, the workspace
  // from torch's caching allocator. False on a cuDNN error (the caller falls
  // back).
  bool execute(const ConvPointers& p) const;

 private:
  std::unique_ptr<Impl> impl_;
};

// The plan of `desc` from the process-wide cache, made on first use: loaded
// from the plan store when one is set and holds it (see PlanStore), else built
// (graph, heuristics mode A then FALLBACK, the first candidate that builds)
// and saved there; nullptr when cuDNN is not available or has no engine for
// it (also cached). Thread-safe.
std::shared_ptr<const ConvPlan> plan_conv(const ConvDesc& desc);

// Makes the plans of `descs` that are not in the cache yet, on up to
// build_threads() threads at once (a compiled graph's convolutions, before its
// first run: runtime-fusion engines compile their kernels with NVRTC inside
// cuDNN, hundreds of ms each). Each thread sets the descriptor's device and
// uses torch's cuDNN handle of that thread (handles are per thread; cuDNN may
// be called from several threads that share none); a plan built on one
// thread's handle runs on any handle of its device. Duplicates are made once;
// failures are cached as plan_conv's are. Never throws.
void plan_convs(const std::vector<ConvDesc>& descs);
// Threads plan_convs uses: set_build_threads(n) with n >= 1, or 0 for the
// default, min(8, the host's cores). Process-wide.
int build_threads();
void set_build_threads(int threads);

// Where plans persist across processes (the runtime's on-disk cache: libs
// knows nothing of it). Keys are text naming everything a plan depends on:
// the format, cuDNN's version (the loaded library's), cudnn-frontend's, the
// GPU (name, compute capability, SM count) and every descriptor field but the
// device index; the store hashes them into file names. The payload holds the
// key again (checked on load), the engine's name, workspace, engine id and
// knob choices, and the serialized execution plan when cuDNN can serialize it
// (its runtime-compiled engines: the compiled kernel comes back without
// NVRTC). Load order: the serialized plan; else the engine id and knobs
// replayed on a fresh graph; an entry neither of which gives a plan is
// rejected (removed) and the plan built as without a store.
class PlanStore {
 public:
  virtual ~PlanStore() = default;
  // The payload saved under `key`; false when there is none (or it is
  // damaged: the store reports that itself).
  virtual bool load(const std::string& key, std::string* payload) = 0;
  virtual void save(const std::string& key, const std::string& payload) = 0;
  // Removes the entry of `key` (it gave no plan).
  virtual void remove(const std::string& key) = 0;
};
// Sets the process-wide store (nullptr: none, plans are kept in memory only).
void set_plan_store(std::shared_ptr<PlanStore> store);
// The store key of `desc` (see PlanStore), for tests and logs.
std::string plan_store_key(const ConvDesc& desc);

// Process-wide counts, for tests and logs.
struct Counters {
  int64_t executions = 0; // cuDNN plans executed
  int64_t fused = 0; // executions with some epilogue fused
  int64_t plans = 0; // plans made (built, or loaded from the store)
  int64_t no_engine = 0; // descriptors cuDNN had no engine for
  int64_t disk_hits = 0; // plans deserialized from the store (no NVRTC)
  int64_t disk_replays = 0; // plans rebuilt from the store's engine and knobs
  int64_t disk_writes = 0; // plans saved to the store
  int64_t disk_rejected = 0; // store entries that gave no plan (removed)
  int64_t parallel_builds = 0; // plan_convs calls that used several threads
  int64_t split = 0; // runs: conv through cuDNN, epilogue after it (ATen)
  int64_t aten = 0; // runs of ATen's convolution (no cuDNN plan at all)
};
Counters counters();
void reset_counters();

// act(y) for the library ops' activation names (the caller's: the IR's
// ir::apply_epilogue; libs know nothing of the IR).
using Activation = at::Tensor (*)(
    const at::Tensor& y,
    std::string_view name,
    double alpha,
    double beta);

// The operands of conv_pointwise (schema: ops/library_ops.cpp).
struct ConvArgs {
  at::Tensor x, w, b, scale, shift, residual; // undefined when absent
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups = 1;
  std::string activation;
  double alpha = 0.0, beta = 0.0;
};

// The descriptor of `a` writing `y` (4-d or 5-d channels-last operands as
// run_conv_pointwise passes them), with torch's current cuDNN settings and
// the operands' pointer alignment; nullopt for what the plan cannot take
// (other ranks, dtypes other than fp32/bf16/fp16, mixed dtypes, an operand
// not channels-last, an empty tensor, channels that groups does not divide, a
// residual of other sizes or dtype: the caller applies it).
std::optional<ConvDesc> conv_desc(
    const ConvArgs& a,
    const at::Tensor& y,
    bool with_epilogue);

// y = conv_pointwise(a) on CUDA (x 3-d, 4-d or 5-d), channels-last, into `out`
// when defined (channels-last, the output's sizes and dtype) or a new tensor.
// `pinned`: a plan built earlier (the executor's step), used when its
// descriptor equals this run's; else the cache's. Fallbacks, in order: the
// fused plan; the convolution alone through cuDNN and the epilogue with ATen
// ops; ATen's convolution and epilogue (each counted). `activation` applies
// what cuDNN does not (or, in the fallbacks, every activation).
at::Tensor run_conv_pointwise(
    const ConvArgs& a,
    at::Tensor out,
    const ConvPlan* pinned,
    Activation activation);

} // namespace torch_plugin::libs::cudnn
