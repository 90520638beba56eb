// op_table_typed.cpp: the typed block of the op table (ir/op_table.h,
// TypedRow): comparisons, where, masked_fill, logical and bitwise ops,
// integer arithmetic with ATen's wrap-around, division modes, remainder and
// fmod, isnan/isinf/isfinite/signbit, nan_to_num, sign, dtype conversions,
// bitcasts (view.dtype) and alias.
// Each row is merged into the float block's row of the same name (its fp32
// expression stays what Float computes) or becomes a new pointwise row.
//
// Templates use the tpt_* helpers (codegen/op_semantics.h): overloaded for
// every compute type, integer arithmetic in the unsigned type (wrap-around,
// no signed overflow), NaN-propagating max/min for floats. Some rows are
// completed in codegen/op_semantics.cpp: _to_copy (conversions), clamp
// (bounds may be None), nan_to_num (defaults of the dtype), the division
// modes (rounding_mode picks the template).
//
// Integer division by zero: ATen raises (CPU) for div(rounding_mode=...),
// floor_divide, remainder and fmod on integers; a kernel cannot raise, so
// with an integer compute type these rows fuse only when the divisor is a
// nonzero constant (divisor_arg), and fall back to ATen otherwise.
#include "ir/op_table.h"

namespace torch_plugin::ir {

const std::vector<TypedRow>& typed_rows() {
  using R = TypeRule;
  constexpr uint8_t all = kTypeAll;
  constexpr uint8_t num = kTypeFloat | kTypeDouble | kTypeInt; // no bool
  constexpr uint8_t real = kTypeFloat | kTypeDouble;
  constexpr uint8_t bits = kTypeInt | kTypeBool;
  static const std::vector<TypedRow> rows = {
      // ---- ops-typed block: comparisons (promoted operands, bool result)
      {"aten::eq.Tensor", R::kCompare, all, "($0 == $1)"},
      {"aten::eq.Scalar", R::kCompare, all, "($0 == $1)"},
      {"aten::ne.Tensor", R::kCompare, all, "($0 != $1)"},
      {"aten::ne.Scalar", R::kCompare, all, "($0 != $1)"},
      {"aten::lt.Tensor", R::kCompare, all, "($0 < $1)"},
      {"aten::lt.Scalar", R::kCompare, all, "($0 < $1)"},
      {"aten::le.Tensor", R::kCompare, all, "($0 <= $1)"},
      {"aten::le.Scalar", R::kCompare, all, "($0 <= $1)"},
      {"aten::gt.Tensor", R::kCompare, all, "($0 > $1)"},
      {"aten::gt.Scalar", R::kCompare, all, "($0 > $1)"},
      {"aten::ge.Tensor", R::kCompare, all, "($0 >= $1)"},
      {"aten::ge.Scalar", R::kCompare, all, "($0 >= $1)"},
      // ---- selection: the condition read as bool, values in the result type
      {"aten::where.self", R::kResult, all, "($0 ? $1 : $2)", 1u << 0},
      {"aten::where.ScalarSelf", R::kResult, all, "($0 ? $1 : $2)", 1u << 0},
      {"aten::where.ScalarOther", R::kResult, all, "($0 ? $1 : $2)", 1u << 0},
      {"aten::masked_fill.Scalar", R::kResult, all, "($1 ? $2 : $0)", 1u << 1},
      {"aten::masked_fill.Tensor", R::kResult, all, "($1 ? $2 : $0)", 1u << 1},
      // ---- logical ops (operands as bool)
      {"aten::logical_and", R::kLogical, all, "($0 && $1)"},
      {"aten::logical_or", R::kLogical, all, "($0 || $1)"},
      {"aten::logical_xor", R::kLogical, all, "($0 != $1)"},
      {"aten::logical_not", R::kLogical, all, "(!$0)"},
      // ---- bitwise ops (bool and integers)
      {"aten::bitwise_and.Tensor", R::kResult, bits, "tpt_and($0, $1)"},
      {"aten::bitwise_and.Scalar", R::kResult, bits, "tpt_and($0, $1)"},
      {"aten::bitwise_or.Tensor", R::kResult, bits, "tpt_or($0, $1)"},
      {"aten::bitwise_or.Scalar", R::kResult, bits, "tpt_or($0, $1)"},
      {"aten::bitwise_xor.Tensor", R::kResult, bits, "tpt_xor($0, $1)"},
      {"aten::bitwise_xor.Scalar", R::kResult, bits, "tpt_xor($0, $1)"},
      {"aten::bitwise_not", R::kResult, bits, "tpt_not($0)"},
      {"aten::bitwise_left_shift.Tensor",
       R::kResult,
       kTypeInt,
       "tpt_shl($0, $1)"},
      {"aten::bitwise_left_shift.Tensor_Scalar",
       R::kResult,
       kTypeInt,
       "tpt_shl($0, $1)"},
      {"aten::bitwise_right_shift.Tensor",
       R::kResult,
       kTypeInt,
       "tpt_shr($0, $1)"},
      {"aten::bitwise_right_shift.Tensor_Scalar",
       R::kResult,
       kTypeInt,
       "tpt_shr($0, $1)"},
      {"aten::__lshift__.Scalar", R::kResult, kTypeInt, "tpt_shl($0, $1)"},
      {"aten::__lshift__.Tensor", R::kResult, kTypeInt, "tpt_shl($0, $1)"},
      {"aten::__rshift__.Scalar", R::kResult, kTypeInt, "tpt_shr($0, $1)"},
      {"aten::__rshift__.Tensor", R::kResult, kTypeInt, "tpt_shr($0, $1)"},
      // ---- arithmetic in the result type (integers wrap around). add/sub
      // with alpha: x + alpha * y rounded once (ATen's kernels: Vectorized
      // fmadd on the CPU, nvcc's contraction on CUDA); alpha = 1 is exact.
      {"aten::add.Tensor", R::kResult, all, "tpt_fma($2, $1, $0)"},
      {"aten::add.Scalar", R::kResult, all, "tpt_fma($2, $1, $0)"},
      {"aten::sub.Tensor", R::kResult, num, "tpt_fma(tpt_neg($2), $1, $0)"},
      {"aten::sub.Scalar", R::kResult, num, "tpt_fma(tpt_neg($2), $1, $0)"},
      {"aten::rsub.Scalar", R::kResult, num, "tpt_fma(tpt_neg($2), $0, $1)"},
      {"aten::rsub.Tensor", R::kResult, num, "tpt_fma(tpt_neg($2), $0, $1)"},
      {"aten::mul.Tensor", R::kResult, all, "tpt_mul($0, $1)"},
      {"aten::mul.Scalar", R::kResult, all, "tpt_mul($0, $1)"},
      {"aten::neg", R::kResult, num, "tpt_neg($0)"},
      {"aten::abs", R::kResult, num, "tpt_abs($0)"},
      {"aten::maximum", R::kResult, all, "tpt_max($0, $1)"},
      {"aten::minimum", R::kResult, all, "tpt_min($0, $1)"},
      {"aten::clamp_min", R::kResult, num, "tpt_max($0, $1)"},
      {"aten::clamp_max", R::kResult, num, "tpt_min($0, $1)"},
      // Bounds may be None: op_semantics.cpp drops that side.
      {"aten::clamp", R::kResult, num, "tpt_min(tpt_max($0, $1), $2)"},
      {"aten::sign", R::kResult, bits | kTypeDouble, "tpt_sign($0)"},
      // ---- division: true division (integers promote to float), modes
      {"aten::div.Tensor", R::kResult, real, "($0 / $1)"},
      {"aten::div.Scalar", R::kResult, real, "($0 / $1)"},
      // rounding_mode picks tpt_div_trunc / tpt_div_floor / true division.
      {"aten::div.Tensor_mode", R::kResult, num, "tpt_div_floor($0, $1)", 0, 1},
      {"aten::div.Scalar_mode", R::kResult, num, "tpt_div_floor($0, $1)", 0, 1},
      {"aten::floor_divide", R::kResult, num, "tpt_div_floor($0, $1)", 0, 1},
      {"aten::floor_divide.Scalar",
       R::kResult,
       num,
       "tpt_div_floor($0, $1)",
       0,
       1},
      {"aten::remainder.Tensor",
       R::kResult,
       num,
       "tpt_remainder($0, $1)",
       0,
       1},
      {"aten::remainder.Scalar",
       R::kResult,
       num,
       "tpt_remainder($0, $1)",
       0,
       1},
      {"aten::fmod.Tensor", R::kResult, num, "tpt_fmod($0, $1)", 0, 1},
      {"aten::fmod.Scalar", R::kResult, num, "tpt_fmod($0, $1)", 0, 1},
      // ---- classification (bool result)
      {"aten::isnan", R::kPredicate, all, "tpt_isnan($0)"},
      {"aten::isinf", R::kPredicate, all, "tpt_isinf($0)"},
      {"aten::isfinite", R::kPredicate, all, "tpt_isfinite($0)"},
      {"aten::isposinf", R::kPredicate, all, "tpt_isposinf($0)"},
      {"aten::isneginf", R::kPredicate, all, "tpt_isneginf($0)"},
      {"aten::signbit", R::kPredicate, all, "tpt_signbit($0)"},
      // nan, posinf, neginf: op_semantics.cpp fills the defaults.
      {"aten::nan_to_num", R::kResult, all, "tpt_nan_to_num($0, $1, $2, $3)"},
      // ---- conversions: op_semantics.cpp converts with ATen's semantics.
      {"aten::_to_copy", R::kResult, all, "$0"},
      // ---- bitcasts (Tensor.view(dtype)) of same-size dtypes: the bits
      // reinterpreted (op_semantics.cpp, bitcast_expr), and alias (the
      // identity: functionalization puts one after each view).
      {"aten::view.dtype", R::kResult, all, "$0"},
      {"aten::alias", R::kResult, all, "$0"},
      {"aten::clone", R::kResult, all, "$0"}, // a copy: op_table.cpp
      // ---- end of ops-typed block
  };
  return rows;
}

} // namespace torch_plugin::ir
