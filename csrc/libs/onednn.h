// onednn.h: thin wrappers over oneDNN (CPU): convolution and matmul with a
// fused epilogue (post-ops), weights either reordered once into oneDNN's
// preferred layout (packed) or read from the caller's memory (borrowed).
//
// Owns: the oneDNN engine and primitives; the prepacked weight memory of each
// packed primitive; per thread, a scratch buffer for borrowed convolution
// weights (as large as the largest reordered weight) and one scratchpad that
// every primitive executed on that thread uses (user scratchpad mode: as large
// as the largest primitive's, instead of one held per primitive). Does not own:
// the graph (the caller passes plain shapes) or the tensors it runs on.
// Sources: oneDNN developer guide, "Primitive Attributes: Post-ops" and
// "Convolution"; API v3.x (the PyPI wheel onednn 2026.1 is oneDNN 3.13) and
// v2.x (Debian 12's libdnnl-dev 2.6). Thread safety: execute() may run
// concurrently from several threads. Only compiled when oneDNN is found
// (TORCH_PLUGIN_HAVE_ONEDNN). This header and onednn.cpp include no PyTorch
// header: torch ships its own (newer) oneDNN headers for its private copy,
// which must not shadow those of the library we link.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torch_plugin::libs {

// The fused epilogue:
//   dst = act((op(src, weights) + bias) [* scale] [+ shift] [+ residual]).
// act: "" (none), "relu", "silu", "gelu" (erf), "gelu_tanh", "sigmoid", "tanh",
// "hardswish", "clamp" (alpha=min, beta=max). scale and shift (convolutions
// only): per output channel, [OC] each, or nullptr; copied when the primitive
// is made (an inference batch norm after the convolution, as oneDNN binary
// post-ops: no scaled copy of the weight, no second pass over the output).
struct Epilogue {
  bool residual = false;
  std::string activation;
  float alpha = 0.f;
  float beta = 0.f;
  const float* scale = nullptr;
  const float* shift = nullptr;
};

// How a primitive holds its weight. kPacked reorders a copy into the layout
// oneDNN prefers (blocked) once; kBorrowed reads the caller's memory, which
// must outlive the primitive: a matmul reads it as it is, a convolution
// reorders it per execute() into a per-thread scratch buffer when its kernel
// wants another layout (what eager's mkldnn convolution does per call), so the
// weight is held once (the caller's) however many primitives read it.
enum class WeightMode { kPacked, kBorrowed };

// 2-d convolution, fp32, activations NHWC (channels_last).
class OneDnnConv {
 public:
  using Weights = WeightMode;
  // weight: [OC, IC/groups, KH, KW] with element strides weight_strides (any
  // dense layout: OIHW contiguous, channels_last, ...); bias: [OC] or nullptr
  // (always copied). weights: see WeightMode.
  OneDnnConv(
      const std::vector<int64_t>& input_sizes,
      const std::vector<int64_t>& output_sizes,
      const float* weight,
      const std::vector<int64_t>& weight_sizes,
      const std::vector<int64_t>& weight_strides,
      const float* bias,
      std::vector<int64_t> stride,
      std::vector<int64_t> padding,
      std::vector<int64_t> dilation,
      int64_t groups,
      Epilogue epilogue,
      Weights weights = Weights::kPacked);
  ~OneDnnConv();
  // input [N, IC, H, W], residual (or nullptr) and output [N, OC, OH, OW], all
  // channels_last (NHWC in memory).
  void execute(const float* input, const float* residual, float* output) const;
  std::string implementation()
      const; // oneDNN's implementation name, e.g. "brg:avx512_core"

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// dst[M, N] = act(src[M, K] @ weight[N, K]^T + bias[N] [+ residual[M, N]]),
// fp32.
class OneDnnLinear {
 public:
  // How the weight is held (WeightMode): kPacked, one more copy of the weight
  // in oneDNN's blocked layout; kBorrowed, the caller's [N, K] memory as it is.
  using Weights = WeightMode;
  // weight: [N, K] row-major, or, with weight_transposed, stored row-major
  // as [K, N] (GPT-2's Conv1D); bias: [N] or nullptr (always copied).
  OneDnnLinear(
      int64_t m,
      int64_t n,
      int64_t k,
      const float* weight,
      const float* bias,
      Epilogue epilogue,
      Weights weights = Weights::kPacked,
      bool weight_transposed = false);
  ~OneDnnLinear();
  // input [M, K], residual [M, N] (or nullptr), output [M, N], all row-major.
  void execute(const float* input, const float* residual, float* output) const;
  std::string implementation() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace torch_plugin::libs
