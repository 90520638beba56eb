// library_ops.cpp: the torch_plugin operator library — its one TORCH_LIBRARY
// block (the schemas of every torch_plugin:: op) and the Meta kernels.
//
// Ops:
//   conv_pointwise(x, w, b?, residual?, stride, padding, dilation, groups, activation,
//                  alpha, beta) -> Tensor      act(conv2d(x, w, b) [+ residual])
//   linear_pointwise(x, w, b?, residual?, activation, alpha, beta) -> Tensor
//                                               act(x @ w.T + b [+ residual])
// activation: "", "relu", "silu", "gelu", "gelu_tanh", "sigmoid", "tanh", "hardswish",
// "clamp" (alpha=min, beta=max). CPU kernels: ops/cpu/library_ops_kernel.cpp (the
// reference; compiled graphs run oneDNN primitives for these nodes, csrc/libs).
// These registrations are the project's only static constructors (STYLE.md 11).
#include "ops/library_ops.h"

#include <ATen/ops/empty.h>
#include <torch/library.h>

namespace torch_plugin::ops {
namespace {

at::Tensor conv_pointwise_meta(const at::Tensor& x, const at::Tensor& w,
                               const std::optional<at::Tensor>& b,
                               const std::optional<at::Tensor>& residual, at::IntArrayRef stride,
                               at::IntArrayRef padding, at::IntArrayRef dilation, int64_t groups,
                               c10::string_view activation, double alpha, double beta) {
  TORCH_CHECK(x.dim() == 4 && w.dim() == 4, "conv_pointwise: expected 4-d input and weight, got ",
              x.dim(), "-d and ", w.dim(), "-d");
  std::vector<int64_t> out = {x.size(0), w.size(0)};
  for (int i = 0; i < 2; ++i) {
    int64_t k = (w.size(2 + i) - 1) * dilation[i] + 1;
    out.push_back((x.size(2 + i) + 2 * padding[i] - k) / stride[i] + 1);
  }
  return at::empty(out, x.options().memory_format(at::MemoryFormat::ChannelsLast));
}

at::Tensor linear_pointwise_meta(const at::Tensor& x, const at::Tensor& w,
                                 const std::optional<at::Tensor>& b,
                                 const std::optional<at::Tensor>& residual,
                                 c10::string_view activation, double alpha, double beta) {
  TORCH_CHECK(x.size(-1) == w.size(1), "linear_pointwise: input has ", x.size(-1),
              " features, weight expects ", w.size(1));
  std::vector<int64_t> out = x.sizes().vec();
  out.back() = w.size(0);
  return at::empty(out, x.options());
}

}  // namespace

void link_library_ops() {}

}  // namespace torch_plugin::ops

TORCH_LIBRARY(torch_plugin, m) {
  m.def(
      "conv_pointwise(Tensor x, Tensor w, Tensor? b, Tensor? residual, int[] stride, "
      "int[] padding, int[] dilation, int groups, str activation, float alpha, float beta) "
      "-> Tensor");
  m.def(
      "linear_pointwise(Tensor x, Tensor w, Tensor? b, Tensor? residual, str activation, "
      "float alpha, float beta) -> Tensor");
}

TORCH_LIBRARY_IMPL(torch_plugin, Meta, m) {
  m.impl("conv_pointwise", torch_plugin::ops::conv_pointwise_meta);
  m.impl("linear_pointwise", torch_plugin::ops::linear_pointwise_meta);
}
