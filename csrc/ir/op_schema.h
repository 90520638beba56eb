// op_schema.h: named argument positions of the ops the compiler reads or
// rewrites, in the order of each op's schema (Node::args), so that passes,
// codegen and the runtime write `args[linear_pointwise::kActivation]` instead
// of a bare number. One namespace per schema (ops sharing a schema share one,
// as noted). The torch_plugin:: library ops' schemas are defined in
// ops/library_ops.cpp; these positions must follow them.
#pragma once

#include <cstddef>

namespace torch_plugin::ir::schema {

// aten::convolution(input, weight, bias?, stride, padding, dilation,
// transposed, output_padding, groups)
namespace convolution {
enum : size_t {
  kInput,
  kWeight,
  kBias,
  kStride,
  kPadding,
  kDilation,
  kTransposed,
  kOutputPadding,
  kGroups
};
} // namespace convolution

// aten::addmm(self, mat1, mat2, beta=1, alpha=1)
namespace addmm {
enum : size_t { kSelf, kMat1, kMat2, kBeta, kAlpha };
} // namespace addmm

// aten::mm(self, mat2)
namespace mm {
enum : size_t { kSelf, kMat2 };
} // namespace mm

// aten::add.Tensor(self, other, alpha=1) (also sub.Tensor, add.Scalar)
namespace add {
enum : size_t { kSelf, kOther, kAlpha };
} // namespace add

// aten::gelu(self, approximate="none")
namespace gelu {
enum : size_t { kSelf, kApproximate };
} // namespace gelu

// aten::clamp(self, min?, max?), aten::hardtanh(self, min_val, max_val)
namespace clamp {
enum : size_t { kSelf, kMin, kMax };
} // namespace clamp

// aten::pow.Tensor_Scalar(self, exponent)
namespace pow {
enum : size_t { kSelf, kExponent };
} // namespace pow

// aten::permute(self, dims)
namespace permute {
enum : size_t { kSelf, kDims };
} // namespace permute

// aten::_to_copy(self, dtype?, layout?, device?, pin_memory?, non_blocking,
// memory_format?)
namespace to_copy {
enum : size_t {
  kSelf,
  kDtype,
  kLayout,
  kDevice,
  kPinMemory,
  kNonBlocking,
  kMemoryFormat,
  kCount
};
} // namespace to_copy

// aten::sum.dim_IntList(self, dim?, keepdim, dtype?), aten::mean.dim (same)
namespace sum {
enum : size_t { kSelf, kDim, kKeepdim, kDtype };
} // namespace sum

// aten::amax(self, dim, keepdim)
namespace amax {
enum : size_t { kSelf, kDim, kKeepdim };
} // namespace amax

// aten::var.correction(self, dim?, correction?, keepdim)
namespace var {
enum : size_t { kSelf, kDim, kCorrection, kKeepdim };
} // namespace var

// aten::_softmax(self, dim, half_to_float), aten::_log_softmax (same)
namespace softmax {
enum : size_t { kSelf, kDim, kHalfToFloat };
} // namespace softmax

// aten::native_layer_norm(input, normalized_shape, weight?, bias?, eps)
namespace layer_norm {
enum : size_t { kInput, kNormalizedShape, kWeight, kBias, kEps };
} // namespace layer_norm

// Issue #27 (reductions). aten::prod.dim_int(self, dim, keepdim, dtype?) is
// sum's schema; amin, max.dim, min.dim, argmax(self, dim?, keepdim), argmin
// and logsumexp(self, dim[], keepdim) are amax's; var_mean.correction is
// var's. aten::prod.default(self, dtype?), aten::mean.default (same):
namespace reduce_all {
enum : size_t { kSelf, kDtype };
} // namespace reduce_all

// aten::cumsum(self, dim, dtype?), aten::cumprod (same)
namespace cumsum {
enum : size_t { kSelf, kDim, kDtype };
} // namespace cumsum

// torch_plugin::conv_pointwise(x, w, b?, residual?, stride, padding, dilation,
// groups, activation, alpha, beta, scale?=None, shift?=None); scale and shift
// (per output channel) may be absent from a node (graphs lowered before they
// existed): Node::tensor_arg is nullptr for an absent argument.
namespace conv_pointwise {
enum : size_t {
  kX,
  kW,
  kBias,
  kResidual,
  kStride,
  kPadding,
  kDilation,
  kGroups,
  kActivation,
  kAlpha,
  kBeta,
  kScale,
  kShift
};
} // namespace conv_pointwise

// torch_plugin::linear_pointwise(x, w, b?, residual?, activation, alpha, beta)
namespace linear_pointwise {
enum : size_t { kX, kW, kBias, kResidual, kActivation, kAlpha, kBeta };
} // namespace linear_pointwise

// What the library ops (conv_pointwise, linear_pointwise) have at the same
// positions.
namespace library {
enum : size_t { kX, kW, kBias, kResidual };
} // namespace library

} // namespace torch_plugin::ir::schema
