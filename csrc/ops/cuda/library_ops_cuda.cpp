// library_ops_cuda.cpp: the CUDA kernel of torch_plugin::linear_pointwise,
// y = act(x @ w^T + b [+ residual]) (schema and semantics: library_ops.cpp;
// reference: ops/cpu/library_ops_kernel.cpp, whose result this matches).
//
// One cublasLtMatmul (libs/cublaslt.h) computes the product with as much of
// the epilogue as cuBLASLt fuses:
//   bias b [N] (same dtype)            -> CUBLASLT_EPILOGUE_BIAS
//   residual of the output's shape and dtype -> cuBLASLt's C (beta = 1)
//   an activation cuBLASLt fuses       -> its epilogue (libs/cublaslt.h,
//                                         epilogue_for: relu, the tanh GELU)
// The rest runs as ATen ops after the product, in the reference's order: a
// residual that broadcasts or has another dtype (y + residual), then any
// other activation ("gelu" (exact erf), "silu", "sigmoid", "tanh",
// "hardswish", "clamp"), which then is never fused. Inputs cuBLASLt does not
// take (dtypes other than float32/bfloat16/float16, mixed dtypes, empty
// sizes, no algorithm) run the reference composite of ATen ops. conv_pointwise
// has no CUDA kernel here (cuDNN's part of issue #11).
#include "libs/cublaslt.h"
#include "ops/library_ops.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

namespace torch_plugin::ops {

namespace {

namespace lt = libs::cublaslt;

at::Tensor linear_pointwise_reference(
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

at::Tensor linear_pointwise_cuda(
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
      "linear_pointwise: expected an input with at least 1 dimension and a "
      "2-d weight, got ",
      x.dim(),
      "-d and ",
      w.dim(),
      "-d");
  TORCH_CHECK(
      x.size(-1) == w.size(1),
      "linear_pointwise: input has ",
      x.size(-1),
      " features, weight expects ",
      w.size(1));
  const c10::ScalarType dtype = x.scalar_type();
  const int64_t k = w.size(1), n = w.size(0);
  auto same = [&](const at::Tensor& t) {
    return t.scalar_type() == dtype && t.device() == x.device();
  };
  const bool bias_ok = !b || (same(*b) && b->dim() == 1 && b->size(0) == n);
  if (!lt::dtype_of(dtype) || !same(w) || !bias_ok || x.numel() == 0 ||
      n == 0 || k == 0)
    return linear_pointwise_reference(
        x, w, b, residual, activation, alpha, beta);
  c10::cuda::CUDAGuard guard(x.device());

  std::vector<int64_t> out_sizes = x.sizes().vec();
  out_sizes.back() = n;
  const int64_t m = x.numel() / k;
  at::Tensor y = at::empty(out_sizes, x.options());
  at::Tensor y2d = y.view({m, n});
  at::Tensor x2d = x.dim() == 2 ? x : x.reshape({m, k});

  at::Tensor c2d;
  if (residual && same(*residual) &&
      residual->sizes() == c10::IntArrayRef(out_sizes))
    c2d = residual->reshape({m, n});
  // The activation joins the product only after the whole residual did.
  const bool residual_done = !residual || c2d.defined();
  const bool bias = b.has_value();
  const std::string_view act(activation.data(), activation.size());
  const std::optional<lt::Epilogue> fused =
      residual_done ? lt::epilogue_for(act, bias) : std::nullopt;
  const lt::Epilogue epilogue = fused ? *fused : *lt::epilogue_for("", bias);
  const bool activation_done = activation.empty() || fused.has_value();
  if (!lt::run_linear(
          x2d, w, bias ? *b : at::Tensor(), c2d, epilogue, y2d, nullptr))
    return linear_pointwise_reference(
        x, w, b, residual, activation, alpha, beta);
  if (!residual_done)
    y = y + *residual;
  if (!activation_done)
    y = apply_activation(y, activation, alpha, beta);
  return y.contiguous();
}

} // namespace


} // namespace torch_plugin::ops

TORCH_LIBRARY_IMPL(torch_plugin, CUDA, m) {
  m.impl("linear_pointwise", torch_plugin::ops::linear_pointwise_cuda);
}
