// op_semantics_bitcast.cpp: Tensor.view(dtype) (aten::view.dtype) of
// same-size dtypes as a typed expression (see op_semantics.h, "typed
// expressions"): which bitcasts kernels compute exactly, and why the others
// stay ATen calls.
#include "compiler/codegen/op_semantics.h"

#include <c10/util/Exception.h>

namespace torch_plugin::compiler {

using ST = c10::ScalarType;

// Tensor.view(dtype) (aten::view.dtype) inside a kernel: the value of `x`
// (compute type of `from`) with its bits read as `to`. Exact pairs only:
// float32 <-> int32, float64 <-> int64, int16 -> bfloat16/float16 (the
// narrow value loaded exactly into float), uint8 <-> int8, bool -> uint8/
// int8, and the identity. nullopt otherwise (bitcast_fallback_reason says
// why).
std::optional<TypedExpr> bitcast_expr(const TypedExpr& x, ST from, ST to) {
  if (from == to)
    return x;
  if (from == ST::Float && to == ST::Int)
    return TypedExpr{"((tp_i32)tpt_f32_bits(" + x.code + "))", ST::Int};
  if (from == ST::Int && to == ST::Float)
    return TypedExpr{
        "tpt_f32_from_bits((unsigned int)(" + x.code + "))", ST::Float};
  if (from == ST::Double && to == ST::Long)
    return TypedExpr{"((tp_i64)tpt_f64_bits(" + x.code + "))", ST::Long};
  if (from == ST::Long && to == ST::Double)
    return TypedExpr{
        "tpt_f64_from_bits((unsigned long long)(" + x.code + "))", ST::Double};
  if (from == ST::Short && (to == ST::BFloat16 || to == ST::Half))
    return TypedExpr{
        std::string(
            to == ST::BFloat16 ? "tpt_bf16_from_bits" : "tpt_f16_from_bits") +
            "((unsigned int)(tp_u16)(" + x.code + "))",
        ST::Float};
  if ((from == ST::Byte || from == ST::Char || from == ST::Bool) &&
      (to == ST::Byte || to == ST::Char))
    return TypedExpr{convert_expr(x, to), to}; // two's complement wrap
  return std::nullopt;
}

std::optional<std::string> bitcast_fallback_reason(const Node& n) {
  if (n.qualified_name() != "aten::view.dtype" || n.inputs.size() != 1 ||
      n.outputs.size() != 1)
    return std::nullopt;
  const ST from = n.inputs[0]->dtype, to = n.outputs[0]->dtype;
  if (c10::elementSize(from) != c10::elementSize(to))
    return std::string(
        "elements of different sizes: the view changes the last dim, not "
        "each element");
  if (!compute_type_of(from) || !compute_type_of(to))
    return std::string("a dtype kernels do not compute");
  if (bitcast_expr({"x", *compute_type_of(from)}, from, to))
    return std::nullopt;
  if (from == ST::BFloat16 || from == ST::Half)
    return std::string(
        "a bfloat16/float16 value is held in float32 inside kernels: a "
        "computed NaN's bits are not ATen's (they differ between its own "
        "scalar and vector paths)");
  if (to == ST::Bool)
    return std::string(
        "bytes other than 0 and 1 are not valid bools (ATen keeps them)");
  return std::string("no exact bitcast between these dtypes in kernels");
}

} // namespace torch_plugin::compiler
