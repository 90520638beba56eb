// conv_pointwise_cuda.cpp: the CUDA kernel of torch_plugin::conv_pointwise,
// y = act(((conv(x, w) + b) * scale + shift) + residual), 1-d, 2-d or 3-d
// (schema and
// semantics: library_ops.cpp; reference: ops/cpu/library_ops_kernel.cpp),
// through cuDNN's graph API (libs/cudnn_conv.h, run_conv_pointwise): one
// cuDNN plan with the epilogue fused, in channels-last (NLC, NHWC, NDHWC); the
// fallbacks
// (the convolution alone through cuDNN and the epilogue with ATen ops, or
// ATen's convolution) are run_conv_pointwise's. The output is channels-last,
// as on the CPU. scale and shift may be float32 for a bf16/fp16 convolution
// (a batch norm under autocast): then the epilogue is computed in float32 and
// rounded once. Built only with cudnn-frontend's headers (csrc/CMakeLists.txt):
// without them CUDA conv_pointwise has no kernel and the library_patterns
// pass leaves CUDA convolutions to ATen.
#include "ir/op_table.h"
#include "libs/cudnn_conv.h"
#include "ops/library_ops.h"

#include <torch/library.h>

namespace torch_plugin::ops {

namespace {

at::Tensor conv_pointwise_cuda(
    const at::Tensor& x,
    const at::Tensor& w,
    const std::optional<at::Tensor>& b,
    const std::optional<at::Tensor>& residual,
    at::IntArrayRef stride,
    at::IntArrayRef padding,
    at::IntArrayRef dilation,
    int64_t groups,
    c10::string_view act,
    double alpha,
    double beta,
    const std::optional<at::Tensor>& scale,
    const std::optional<at::Tensor>& shift) {
  check_activation(act);
  check_conv_ranks(x, w, stride, padding, dilation);
  libs::cudnn::ConvArgs a;
  a.x = x;
  a.w = w;
  a.b = b ? *b : at::Tensor();
  a.residual = residual ? *residual : at::Tensor();
  a.scale = scale ? *scale : at::Tensor();
  a.shift = shift ? *shift : at::Tensor();
  a.stride = stride.vec();
  a.padding = padding.vec();
  a.dilation = dilation.vec();
  a.groups = groups;
  a.activation = std::string(act.data(), act.size());
  a.alpha = alpha;
  a.beta = beta;
  return libs::cudnn::run_conv_pointwise(
      a, at::Tensor(), nullptr, ir::apply_epilogue);
}

} // namespace

} // namespace torch_plugin::ops

TORCH_LIBRARY_IMPL(torch_plugin, CUDA, m) {
  m.impl("conv_pointwise", torch_plugin::ops::conv_pointwise_cuda);
}
