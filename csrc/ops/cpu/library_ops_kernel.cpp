// library_ops_kernel.cpp: CPU kernels of conv_pointwise and linear_pointwise,
// composed of ATen ops. They are the reference and the path without oneDNN;
// compiled graphs run these nodes as prepacked oneDNN primitives (csrc/libs).
#include "ops/library_ops.h"

#include "ir/op_table.h"

#include <ATen/ATen.h>
#include <torch/library.h>

namespace torch_plugin::ops {

at::Tensor apply_activation(
    const at::Tensor& y,
    c10::string_view a,
    double alpha,
    double beta) {
  return ir::apply_epilogue(
      y, std::string_view(a.data(), a.size()), alpha, beta);
}

namespace {

at::Tensor conv_pointwise_cpu(
    const at::Tensor& x,
    const at::Tensor& w,
    const std::optional<at::Tensor>& b,
    const std::optional<at::Tensor>& residual,
    at::IntArrayRef stride,
    at::IntArrayRef padding,
    at::IntArrayRef dilation,
    int64_t groups,
    c10::string_view activation,
    double alpha,
    double beta,
    const std::optional<at::Tensor>& scale,
    const std::optional<at::Tensor>& shift) {
  check_conv_ranks(x, w, stride, padding, dilation);
  at::Tensor y = at::convolution(
      x,
      w,
      b,
      stride,
      padding,
      dilation,
      false,
      std::vector<int64_t>(stride.size(), 0),
      groups);
  std::vector<int64_t> channels(y.dim() - 1, 1); // [K, 1, ...]
  channels[0] = -1;
  if (scale)
    y = y * scale->reshape(channels);
  if (shift)
    y = y + shift->reshape(channels);
  if (residual)
    y = y + *residual;
  y = apply_activation(y, activation, alpha, beta);
  // Channels innermost, as the Meta kernel's strides.
  switch (y.dim()) {
    case 4:
      return y.contiguous(at::MemoryFormat::ChannelsLast);
    case 5:
      return y.contiguous(at::MemoryFormat::ChannelsLast3d);
    default:
      return y.transpose(1, 2).contiguous().transpose(1, 2);
  }
}

at::Tensor linear_pointwise_cpu(
    const at::Tensor& x,
    const at::Tensor& w,
    const std::optional<at::Tensor>& b,
    const std::optional<at::Tensor>& residual,
    c10::string_view activation,
    double alpha,
    double beta) {
  at::Tensor y = at::linear(x, w, b);
  if (residual)
    y = y + *residual;
  return apply_activation(y, activation, alpha, beta).contiguous();
}

} // namespace

} // namespace torch_plugin::ops

TORCH_LIBRARY_IMPL(torch_plugin, CPU, m) {
  m.impl("conv_pointwise", torch_plugin::ops::conv_pointwise_cpu);
  m.impl("linear_pointwise", torch_plugin::ops::linear_pointwise_cpu);
}
