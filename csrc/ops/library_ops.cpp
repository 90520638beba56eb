// library_ops.cpp: the torch_plugin operator library — its one TORCH_LIBRARY
// block (the schemas of every torch_plugin:: op), the Meta kernels of the
// library ops and the Autograd registrations of all ops.
//
// Ops:
//   conv_pointwise(x, w, b?, residual?, stride, padding, dilation, groups,
//                  activation, alpha, beta, scale?=None, shift?=None) -> Tensor
//       act(conv(x, w, b) [* scale] [+ shift] [+ residual]); x [N, C, H,
//       W], w [K, C/groups, R, S], b, scale, shift [K] (scale and shift: an
//       inference batch norm after the convolution, per output channel),
//       residual like the output; output [N, K, P, Q] in channels_last
//       strides (oneDNN's and cuDNN's fast layout). 1-d (x [N, C, L]) and 3-d
//       (x [N, C, D, H, W]) alike, stride, padding and dilation one entry per
//       spatial dimension, the output channels innermost (NLC, NDHWC).
//   linear_pointwise(x, w, b?, residual?, activation, alpha, beta) -> Tensor
//       act(x @ w.T + b [+ residual]); x [..., K], w [N, K], b [N]; output
//       [..., N], contiguous.
//   fused(inputs, source, <signature>, name, target, entry, grid, block,
//         shared_bytes) -> Tensor[]
//       one generated kernel; see fused_op.h (Meta: fused_op.cpp, CPU:
//       cpu/fused_kernel.cpp, CUDA: cuda/fused_kernel_cuda.cpp).
//   scaled_dot_product_attention(query, key, value, attn_mask?, dropout_p,
//       is_causal, scale?, enable_gqa) -> Tensor
//       aten's, with a fixed output layout and no dropout, a leaf of traced
//       inference graphs; see attention_op.cpp (schema and kernels there).
//   run_graph(executor, inputs) -> Tensor[]
//       a whole compiled graph: its Executor, an object of the custom class
//       torch.classes.torch_plugin.Executor; see executor_op.h (CPU and Meta:
//       executor_op.cpp).
// CUDA kernel of linear_pointwise: ops/cuda/library_ops_cuda.cpp (cuBLASLt).
// activation: "" or a name of the op table's epilogues (ir/op_table.h: relu,
// silu, gelu, its tanh form, sigmoid, tanh, hardswish, clamp with alpha=min,
// beta=max). Any float dtype the ATen ops
// take. CPU kernels: ops/cpu/library_ops_kernel.cpp (the reference; compiled
// graphs run oneDNN primitives for these nodes, csrc/libs). The Meta kernels
// work on symbolic sizes.
//
// Autograd: the ops have no derivatives, by design. The "plugin" backend puts
// them only into graphs that AOTAutograd has already split into forward and
// backward (the backward is a graph of its own), so inside a compiled model
// they never see inputs that require grad. For a direct call with such inputs
// the Autograd key has PyTorch's "not implemented" kernel: the forward runs,
// and a backward through the op raises an error naming it (never a silently
// wrong or missing gradient).
//
// Static constructors register with the dispatcher; they stay linked because
// csrc/ops is built as a CMake OBJECT library (csrc/CMakeLists.txt), as are the
// runtime's step registrations (runtime/step_registry.h).
#include "ops/library_ops.h"

#include "ir/op_table.h"
#include "ops/executor_op.h"
#include "ops/fused_op.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/library.h>

namespace torch_plugin::ops {

void check_activation(c10::string_view a) {
  ir::check_epilogue_name(std::string_view(a.data(), a.size()));
}

void check_conv_ranks(
    const at::Tensor& x,
    const at::Tensor& w,
    at::IntArrayRef stride,
    at::IntArrayRef padding,
    at::IntArrayRef dilation) {
  TORCH_CHECK(
      x.dim() >= 3 && x.dim() <= 5 && w.dim() == x.dim(),
      "conv_pointwise: expected a 3-d, 4-d or 5-d input and a weight of its "
      "rank, got ",
      x.dim(),
      "-d and ",
      w.dim(),
      "-d");
  const size_t spatial = static_cast<size_t>(x.dim() - 2);
  TORCH_CHECK(
      stride.size() == spatial && padding.size() == spatial &&
          dilation.size() == spatial,
      "conv_pointwise: stride, padding and dilation must have ",
      spatial,
      " entries each for a ",
      x.dim(),
      "-d input");
}

namespace {

at::Tensor conv_pointwise_meta(
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
    const std::optional<at::Tensor>& /*scale*/,
    const std::optional<at::Tensor>& /*shift*/) {
  check_activation(activation);
  check_conv_ranks(x, w, stride, padding, dilation);
  std::vector<c10::SymInt> out = {x.sym_size(0), w.sym_size(0)};
  for (int64_t i = 0; i + 2 < x.dim(); ++i) {
    c10::SymInt k = (w.sym_size(2 + i) - 1) * dilation[i] + 1;
    out.push_back((x.sym_size(2 + i) + 2 * padding[i] - k) / stride[i] + 1);
  }
  // Channels innermost (channels_last for 4-d, channels_last_3d for 5-d).
  std::vector<c10::SymInt> strides(out.size(), 1);
  c10::SymInt s = out[1];
  for (size_t i = out.size(); i-- > 2;) {
    strides[i] = s;
    s = s * out[i];
  }
  strides[0] = s;
  return at::empty_strided_symint(
      out, strides, x.scalar_type(), std::nullopt, x.device(), std::nullopt);
}

at::Tensor linear_pointwise_meta(
    const at::Tensor& x,
    const at::Tensor& w,
    const std::optional<at::Tensor>& b,
    const std::optional<at::Tensor>& residual,
    c10::string_view activation,
    double alpha,
    double beta) {
  check_activation(activation);
  TORCH_CHECK(
      x.dim() >= 1 && w.dim() == 2,
      "linear_pointwise: expected an input with at least "
      "1 dimension and a 2-d weight, got ",
      x.dim(),
      "-d and ",
      w.dim(),
      "-d");
  TORCH_CHECK(
      x.sym_size(-1) == w.sym_size(1),
      "linear_pointwise: input has ",
      x.sym_size(-1),
      " features, weight expects ",
      w.sym_size(1));
  std::vector<c10::SymInt> out = x.sym_sizes().vec();
  out.back() = w.sym_size(0);
  return at::empty_symint(
      out,
      x.scalar_type(),
      std::nullopt,
      x.device(),
      std::nullopt,
      std::nullopt);
}

} // namespace

} // namespace torch_plugin::ops

TORCH_LIBRARY(torch_plugin, m) {
  m.def(
      "conv_pointwise(Tensor x, Tensor w, Tensor? b, Tensor? residual, int[] stride, "
      "int[] padding, int[] dilation, int groups, str activation, float alpha, float beta, "
      "Tensor? scale=None, Tensor? shift=None) -> Tensor");
  m.def(
      "linear_pointwise(Tensor x, Tensor w, Tensor? b, Tensor? residual, str activation, "
      "float alpha, float beta) -> Tensor");
  m.def(
      "fused(Tensor[] inputs, str source, int[][] input_sizes, int[][] input_strides, "
      "ScalarType[] input_dtypes, int[][] output_sizes, int[][] output_strides, "
      "ScalarType[] output_dtypes, str name=\"fused\", str target=\"cpp\", "
      "str entry=\"kernel\", int grid=0, int block=0, int shared_bytes=0) -> Tensor[]");
  m.class_<torch_plugin::ops::ExecutorObject>("Executor")
      .def(
          "describe",
          [](const c10::intrusive_ptr<torch_plugin::ops::ExecutorObject>&
                 self) { return self->executor->describe(); });
  m.def(
      "run_graph(__torch__.torch.classes.torch_plugin.Executor executor, Tensor[] inputs) "
      "-> Tensor[]");
}

TORCH_LIBRARY_IMPL(torch_plugin, Autograd, m) {
  for (const char* op :
       {"conv_pointwise",
        "linear_pointwise",
        "fused",
        "run_graph",
        "scaled_dot_product_attention"}) {
    m.impl(op, torch::autograd::autogradNotImplementedFallback());
  }
}

TORCH_LIBRARY_IMPL(torch_plugin, Meta, m) {
  m.impl("conv_pointwise", torch_plugin::ops::conv_pointwise_meta);
  m.impl("linear_pointwise", torch_plugin::ops::linear_pointwise_meta);
}
