// op_semantics.h: the device-neutral op semantics of code generation — for
// each ATen pointwise op that fusion groups may hold, how its IR node becomes
// an fp32 expression, from the op's template in the op table (ir/op_table.h)
// and the node's arguments. Every renderer (codegen/cpp, codegen/cuda) builds
// its kernels' arithmetic from these expressions and spells only the loads,
// stores, loops and the helpers below in its target's language.
//
// An expression uses only + - * / unary minus, comparisons, `?:`, float
// literals (`0.5f`) and these helpers, which every renderer's preamble defines
// for its target (all float -> float):
//   tp_max(a, b)   a < b ? b : a  (as std::max: a NaN in `a` propagates)
//   tp_min(a, b)   b < a ? b : a  (as std::min)
//   tp_hardtanh(x, lo, hi)  clamp as each device's ATen kernel: the CPU's
//     min(max(x, lo), hi); CUDA's keeps a NaN x, else fminf(fmaxf(x, lo), hi)
//     (they differ on a signed-zero tie: relu6(-0.0) is -0.0 on the CPU, +0.0
//     on CUDA)
//   tp_exp(x) tp_log(x) tp_sqrt(x) tp_rsqrt(x) (= 1 / sqrt(x)) tp_abs(x)
//   tp_tanh(x) tp_erf(x) tp_sigmoid(x) (= 1 / (1 + exp(-x))) tp_pow(x, y)
//   tp_round_bf16(x), tp_round_f16(x): x rounded to bfloat16 / float16
//     precision (nearest even, as c10::BFloat16 / c10::Half), returned as
//     float.
// The floating-point ops of issue #27 add, each as the C math function of
// the same name on float (ATen's semantics; C++ renderer: libm / the same
// algorithms as ATen's CPU kernels; CUDA: CUDA's float math functions, no
// fast-math intrinsics):
//   tp_sin tp_cos tp_tan tp_asin tp_acos tp_atan tp_sinh tp_cosh tp_asinh
//   tp_acosh tp_atanh tp_floor tp_ceil tp_trunc tp_exp2 tp_expm1 tp_log1p
//   tp_log2 tp_log10 tp_erfc tp_lgamma (x)
//   tp_round(x)      nearest integer, halves to even (nearbyint)
//   tp_erfinv(x)     inverse error function (CPU: ATen's calc_erfinv)
//   tp_digamma(x)    psi(x) (ATen's calc_digamma: +-inf at +-0, NaN at
//                    negative integers)
//   tp_atan2 tp_hypot tp_copysign tp_nextafter tp_fmod (a, b)
//   tp_remainder(a, b)  Python's a % b: fmod(a, b) + b when the signs differ
//   tp_floordiv(a, b)   ATen's div_floor_floating (floor of a / b, -0.0 kept)
// Numbers in the operands are the renderer's own literals.
#pragma once

#include "ir/ir.h"

#include <c10/core/ScalarType.h>

#include <optional>
#include <string>
#include <vector>

namespace torch_plugin::compiler {

// The graph IR (csrc/ir) that passes and codegen read and rewrite.
using namespace ::torch_plugin::ir;

// The helper functions an expression of pointwise_expression may call (see
// above), for renderers and tests that check their preambles define each.
const std::vector<std::string>& pointwise_helper_names();

// The fp32 expression of `n` given the expressions of its schema arguments
// (`operands[i]` is the renderer's expression for argument i when it is a
// tensor, or its literal when it is a number). nullopt when the op (or this use
// of it, e.g. gelu with an unknown approximation) is not in the table.
// A bfloat16/float16 output is rounded to its dtype (round_to_dtype), as
// eager's tensor holds every op's result: kernels keep values in fp32 between
// ops, and without it `(x.bfloat16() + 1.5).float()` kept the unrounded sum.
// typed_pointwise_expression rounds likewise; reduction plans round the
// outputs of reductions and row-wise ops (softmax, layer_norm), which compute
// in fp32 inside as eager does, at the op's boundary only.
std::optional<std::string> pointwise_expression(
    const Node& n,
    const std::vector<std::string>& operands);
// `e` (an fp32 expression) rounded to `dtype`'s precision when that is
// bfloat16 or float16 (tp_round_bf16 / tp_round_f16), else `e` unchanged.
std::string round_to_dtype(const std::string& e, c10::ScalarType dtype);

// Whether `n` is in the table (cheap pre-check for the fusion pass). Does not
// look at dtypes: which dtypes a target can load and store is the fusion
// pass's per-device check.
bool is_fusible_pointwise(const Node& n);

// Why `n`, an ATen pointwise op, does not become part of a generated kernel
// on any device: a known pointwise op without a row (digamma of order n, the
// Bessel functions), or a use of a row's op whose arguments have no exact
// expression (clamp with NaN bounds, an unknown rounding mode). nullopt when
// `n` is fusible, or is not a pointwise op this table knows. Logged by the
// fusion pass (TORCH_PLUGIN_LOGS=kernels).
std::optional<std::string> pointwise_fallback_reason(const Node& n);

// ---- typed expressions ------------------------------------------------------
//
// Kernels compute every value in a compute type (ir/op_table.h, TypeRule):
// Float (fp32) for float32/bfloat16/float16 values, Double for float64, Bool,
// and the integer types Byte (uint8), Char (int8), Short, Int, Long. A typed
// expression is device-neutral C++: its types are spelled `bool`, `tp_u8`,
// `tp_i8`, `tp_i16`, `tp_i32`, `tp_i64`, `float`, `double` (each preamble
// defines the tp_* typedefs), its constants TP_INF / TP_NAN, and it calls the
// fp32 helpers above, tp_round_bf16/f16, and the typed helpers of
// typed_helpers_source() (tpt_*: overloaded for every compute type; integer
// arithmetic wraps around, computed in the unsigned type).
//
// How a node is typed (PyTorch's type promotion, at::result_type): the rule
// of its row. kFloat rows (every row the typed block does not list) take only
// float32/bfloat16/float16 tensors and compute their fp32 template exactly as
// pointwise_expression does. Typed rows convert each operand to the compute
// type with ATen's conversions (convert_expr), and the result to the compute
// type of the node's output dtype. Constants become literals of the compute
// type; where ATen rounds a scalar to a bfloat16/float16 common dtype
// (comparisons, where, masked_fill, nan_to_num) the literal is rounded too.

// A typed expression: its source and its compute type.
struct TypedExpr {
  std::string code;
  c10::ScalarType type;
};

// The C++ float literal of `v` as a kernel writes it (`1.000000000e-01f`,
// TP_NAN, TP_INF, negatives in parentheses), rounded first to `dtype` when that
// is bfloat16 or float16 (as ATen rounds a scalar to a narrow tensor's type).
std::string float_literal(double v, std::optional<c10::ScalarType> dtype);

// The compute type of values stored as `dtype` (Float for Float, BFloat16 and
// Half); nullopt for dtypes kernels do not compute (complex, unsigned 16-64
// bit, float8, ...).
std::optional<c10::ScalarType> compute_type_of(c10::ScalarType dtype);
// The device-neutral name of compute type `t` ("float", "tp_i64", ...).
const char* compute_type_name(c10::ScalarType t);
// `e` converted to compute type `to` as ATen's c10::convert / static_cast:
// to bool is != 0 (NaN is true), float to integer truncates (to uint8 via
// int64, as c10's static_cast_with_inter_type; out-of-range values are
// undefined, as in ATen), integers to narrower integers wrap.
std::string convert_expr(const TypedExpr& e, c10::ScalarType to);
// The typed expression of node `n` given the typed expressions of its tensor
// inputs (`inputs[i]` for n.inputs[i]); nullopt when the op, this use of it
// (e.g. an integer division by a tensor), or its dtypes are not generated.
std::optional<TypedExpr> typed_pointwise_expression(
    const Node& n,
    const std::vector<TypedExpr>& inputs);
// typed_pointwise_expression with placeholder inputs: whether `n` is
// generated for its dtypes (the fusion pass's check).
bool typed_pointwise_supported(const Node& n);
// Whether `n` is a float node: every tensor float32/bfloat16/float16 and an
// fp32 expression (pointwise_expression). Only float nodes join reduction
// groups, whose kernels compute in fp32.
bool is_float_pointwise(const Node& n);
// Tensor.view(dtype) (aten::view.dtype) inside a kernel: the value `x`
// (compute type of `from`) with its bits read as dtype `to`. Exact pairs
// only: float32 <-> int32, float64 <-> int64, int16 -> bfloat16/float16,
// uint8 <-> int8, bool -> uint8/int8, and the identity; nullopt otherwise
// (op_semantics_bitcast.cpp).
std::optional<TypedExpr> bitcast_expr(
    const TypedExpr& x,
    c10::ScalarType from,
    c10::ScalarType to);
// Why aten::view.dtype node `n` (a bitcast) does not become part of a
// generated kernel (elements of different sizes, a bfloat16/float16 source,
// a bool target); nullopt when it does, or `n` is not a view.dtype.
std::optional<std::string> bitcast_fallback_reason(const Node& n);
// The typed helpers (tpt_*) as device-neutral source: every preamble defines
// TP_FN (the function qualifiers), the tp_* typedefs, TP_INF, TP_NAN,
// tpt_f32_bits(float) -> unsigned int, tpt_f64_bits(double) -> unsigned long
// long, tpt_fmodf/tpt_floorf/tpt_truncf/tpt_fabsf and the double versions
// tpt_fmod_d/tpt_floor_d/tpt_trunc_d/tpt_fabs_d, then appends this
// (op_semantics_typed_helpers.cpp).
const std::string& typed_helpers_source();

} // namespace torch_plugin::compiler
