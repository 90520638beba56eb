// op_semantics_typed.cpp: typed expressions of pointwise nodes (see
// op_semantics.h, "typed expressions"): compute types from the op table's
// type rules (ir/op_table.h, TypeRule) and PyTorch's type promotion,
// conversions with ATen's semantics, literals of every compute type, and the
// device-neutral tpt_* helpers every renderer's preamble appends.
//
// Type promotion follows at::native::result_type (ATen/native/
// TypeProperties.cpp): tensors with dims, zero-dim tensors and wrapped
// numbers (constants) in three tiers, a lower tier counting only when its
// category (bool < integer < floating) is higher; a float constant counts as
// the default dtype.
#include "compiler/codegen/op_semantics.h"

#include "ir/op_table.h"

#include <c10/core/DefaultDtype.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

namespace torch_plugin::compiler {
namespace {

using ST = c10::ScalarType;

bool is_float_dtype(ST t) {
  return t == ST::Float || t == ST::BFloat16 || t == ST::Half;
}

bool is_int_compute(ST t) {
  return t == ST::Byte || t == ST::Char || t == ST::Short || t == ST::Int ||
      t == ST::Long;
}

uint8_t class_of(ST compute) {
  if (compute == ST::Float)
    return kTypeFloat;
  if (compute == ST::Double)
    return kTypeDouble;
  if (compute == ST::Bool)
    return kTypeBool;
  return kTypeInt;
}

ST promote_skip_undefined(ST a, ST b) {
  if (a == ST::Undefined)
    return b;
  if (b == ST::Undefined)
    return a;
  return c10::promoteTypes(a, b);
}

// c10's combine_categories (no complex types here).
ST combine_categories(ST higher, ST lower) {
  if (c10::isFloatingType(higher))
    return higher;
  if (higher == ST::Bool || c10::isFloatingType(lower))
    return promote_skip_undefined(higher, lower);
  if (higher != ST::Undefined)
    return higher;
  return lower;
}

// at::result_type of arguments `args` of `n` (tensors and number constants).
std::optional<ST> result_type(
    const Node& n,
    std::initializer_list<size_t> args) {
  ST dim = ST::Undefined, zero = ST::Undefined, wrapped = ST::Undefined;
  for (size_t i : args) {
    if (i >= n.args.size())
      return std::nullopt;
    const Arg& a = n.args[i];
    if (a.kind == Arg::Kind::kTensor) {
      const Value* v = n.inputs.at(a.inputs.at(0));
      if (v->sizes.empty())
        zero = promote_skip_undefined(zero, v->dtype);
      else
        dim = promote_skip_undefined(dim, v->dtype);
    } else if (std::holds_alternative<int64_t>(a.value)) {
      wrapped = promote_skip_undefined(wrapped, ST::Long);
    } else if (std::holds_alternative<double>(a.value)) {
      wrapped = promote_skip_undefined(
          wrapped, c10::typeMetaToScalarType(c10::get_default_dtype()));
    } else if (std::holds_alternative<bool>(a.value)) {
      wrapped = promote_skip_undefined(wrapped, ST::Bool);
    } else {
      return std::nullopt;
    }
  }
  return combine_categories(dim, combine_categories(zero, wrapped));
}

std::string paren_if_negative(const std::string& s, bool negative) {
  return negative ? "(" + s + ")" : s;
}

// `v` rounded to `dtype` (bfloat16 / float16 as c10 does), else as float.
float round_to(double v, std::optional<ST> dtype) {
  const float f = static_cast<float>(v);
  if (dtype == ST::BFloat16)
    return static_cast<float>(c10::BFloat16(f));
  if (dtype == ST::Half)
    return static_cast<float>(c10::Half(f));
  return f;
}

std::string float_lit(float f) {
  if (std::isnan(f))
    return "TP_NAN";
  if (std::isinf(f))
    return f > 0 ? "TP_INF" : "(-TP_INF)";
  std::ostringstream os;
  os.precision(9);
  os << std::scientific << f << "f";
  return paren_if_negative(os.str(), std::signbit(f));
}

std::string double_lit(double d) {
  if (std::isnan(d))
    return "((double)TP_NAN)";
  if (std::isinf(d))
    return d > 0 ? "((double)TP_INF)" : "(-(double)TP_INF)";
  std::ostringstream os;
  os.precision(17);
  os << std::scientific << d;
  return paren_if_negative(os.str(), std::signbit(d));
}

std::string int_lit(int64_t v, ST t) {
  const std::string body = v == std::numeric_limits<int64_t>::min()
      ? "(-9223372036854775807LL - 1)"
      : "(" + std::to_string(v) + "LL)";
  return "((" + std::string(compute_type_name(t)) + ")" + body + ")";
}

// The literal of constant `v` in compute type `t`; `round` is the dtype a
// scalar is rounded to first (ATen's common dtype) where ATen rounds it.
std::optional<std::string> typed_literal(
    const AttrValue& v,
    ST t,
    std::optional<ST> round) {
  double d;
  if (auto* i = std::get_if<int64_t>(&v)) {
    if (is_int_compute(t))
      return int_lit(*i, t); // wraps to t, as ATen's cast of a wrapped number
    d = static_cast<double>(*i);
  } else if (auto* b = std::get_if<bool>(&v)) {
    d = *b ? 1.0 : 0.0;
  } else if (auto* x = std::get_if<double>(&v)) {
    d = *x;
  } else {
    return std::nullopt;
  }
  if (t == ST::Bool)
    return d != 0.0 || std::isnan(d) ? "true" : "false";
  if (t == ST::Float)
    return float_lit(round_to(d, round));
  if (t == ST::Double)
    return double_lit(d);
  // A float constant in an integer type: truncated, and in range (ATen
  // raises on overflow: not fused).
  if (!std::isfinite(d))
    return std::nullopt;
  const double tr = std::trunc(d);
  const int64_t lo = t == ST::Byte ? 0
      : t == ST::Char              ? -128
      : t == ST::Short             ? -32768
      : t == ST::Int               ? std::numeric_limits<int32_t>::min()
                                   : std::numeric_limits<int64_t>::min();
  const double hi = t == ST::Byte ? 255.0
      : t == ST::Char             ? 127.0
      : t == ST::Short            ? 32767.0
      : t == ST::Int              ? 2147483647.0
                                  : 9223372036854775807.0;
  if (tr < static_cast<double>(lo) || tr >= hi + 1.0)
    return std::nullopt;
  return int_lit(static_cast<int64_t>(tr), t);
}

// The largest finite value of `dtype` (float dtypes).
double max_finite(ST dtype) {
  switch (dtype) {
    case ST::BFloat16:
      return static_cast<float>(std::numeric_limits<c10::BFloat16>::max());
    case ST::Half:
      return static_cast<float>(std::numeric_limits<c10::Half>::max());
    case ST::Double:
      return std::numeric_limits<double>::max();
    default:
      return std::numeric_limits<float>::max();
  }
}

std::string substitute(const char* t, const std::vector<std::string>& ops) {
  std::string out;
  for (size_t i = 0; t[i] != '\0'; ++i) {
    if (t[i] == '$' && isdigit(t[i + 1])) {
      const size_t k = t[++i] - '0';
      if (k >= ops.size() || ops[k].empty())
        return "";
      out += ops[k];
    } else {
      out += t[i];
    }
  }
  return out;
}

bool is_none(const Node& n, size_t i) {
  return i >= n.args.size() ||
      (n.args[i].kind == Arg::Kind::kConst &&
       std::holds_alternative<std::monostate>(n.args[i].value));
}

// A kFloat row: every tensor a float dtype; the fp32 template as
// pointwise_expression computes it.
std::optional<TypedExpr> float_expression(
    const Node& n,
    const std::vector<TypedExpr>& inputs) {
  for (const Value* v : n.inputs)
    if (!is_float_dtype(v->dtype))
      return std::nullopt;
  if (!is_float_dtype(n.outputs[0]->dtype))
    return std::nullopt;
  std::vector<std::string> operands;
  for (const Arg& a : n.args) {
    if (a.kind == Arg::Kind::kTensor)
      operands.push_back(inputs.at(a.inputs.at(0)).code);
    else if (auto lit = typed_literal(a.value, ST::Float, std::nullopt))
      operands.push_back(*lit);
    else
      operands.push_back("0.0f");
  }
  auto e = pointwise_expression(n, operands);
  if (!e)
    return std::nullopt;
  return TypedExpr{*e, ST::Float};
}

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

} // namespace

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

std::optional<ST> compute_type_of(ST dtype) {
  switch (dtype) {
    case ST::Float:
    case ST::BFloat16:
    case ST::Half:
      return ST::Float;
    case ST::Double:
    case ST::Bool:
    case ST::Byte:
    case ST::Char:
    case ST::Short:
    case ST::Int:
    case ST::Long:
      return dtype;
    default:
      return std::nullopt;
  }
}

const char* compute_type_name(ST t) {
  switch (t) {
    case ST::Float:
      return "float";
    case ST::Double:
      return "double";
    case ST::Bool:
      return "bool";
    case ST::Byte:
      return "tp_u8";
    case ST::Char:
      return "tp_i8";
    case ST::Short:
      return "tp_i16";
    case ST::Int:
      return "tp_i32";
    case ST::Long:
      return "tp_i64";
    default:
      TORCH_CHECK(false, "codegen: no compute type ", t);
  }
}

std::string convert_expr(const TypedExpr& e, ST to) {
  if (e.type == to)
    return e.code;
  if (to == ST::Bool)
    return "(" + e.code + " != 0)";
  if (to == ST::Byte && (e.type == ST::Float || e.type == ST::Double))
    return "((tp_u8)(tp_i64)(" + e.code + "))";
  return "((" + std::string(compute_type_name(to)) + ")(" + e.code + "))";
}

bool is_float_pointwise(const Node& n) {
  if (n.outputs.size() != 1 || !is_fusible_pointwise(n))
    return false;
  const std::vector<TypedExpr> inputs(n.inputs.size(), {"x", ST::Float});
  return float_expression(n, inputs).has_value();
}

std::optional<TypedExpr> typed_pointwise_expression(
    const Node& n,
    const std::vector<TypedExpr>& inputs) {
  const OpInfo* op = find_op(n);
  if (!op || op->category != OpCategory::kPointwise || n.outputs.size() != 1 ||
      inputs.size() != n.inputs.size() || !is_fusible_pointwise(n))
    return std::nullopt;
  const ST out_dtype = n.outputs[0]->dtype;
  const std::optional<ST> out = compute_type_of(out_dtype);
  if (!out)
    return std::nullopt;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (compute_type_of(n.inputs[i]->dtype) != inputs[i].type)
      return std::nullopt;
  if (op->type_rule == TypeRule::kFloat)
    return float_expression(n, inputs);

  // The compute type, the result's type, and the dtype scalars round to.
  ST ct = *out, result = *out;
  std::optional<ST> round;
  switch (op->type_rule) {
    case TypeRule::kResult:
      if (op->bool_args || n.op == "aten::nan_to_num")
        round = out_dtype;
      break;
    case TypeRule::kCompare: {
      const auto common = result_type(n, {0, 1});
      if (!common || !compute_type_of(*common))
        return std::nullopt;
      ct = *compute_type_of(*common);
      round = *common;
      result = ST::Bool;
      break;
    }
    case TypeRule::kLogical:
      ct = result = ST::Bool;
      break;
    case TypeRule::kPredicate:
      if (n.args.empty() || n.args[0].kind != Arg::Kind::kTensor)
        return std::nullopt;
      ct = inputs.at(n.args[0].inputs.at(0)).type;
      result = ST::Bool;
      break;
    case TypeRule::kFloat:
      break;
  }
  if (!(class_of(ct) & op->type_classes))
    return std::nullopt;

  // Integer division: the divisor must be a nonzero constant.
  if (op->divisor_arg >= 0 && is_int_compute(ct)) {
    const size_t d = static_cast<size_t>(op->divisor_arg);
    if (d >= n.args.size() || n.args[d].kind != Arg::Kind::kConst)
      return std::nullopt;
    const AttrValue& v = n.args[d].value;
    const bool nonzero =
        (std::holds_alternative<int64_t>(v) && std::get<int64_t>(v) != 0) ||
        (std::holds_alternative<bool>(v) && std::get<bool>(v));
    if (!nonzero)
      return std::nullopt;
  }

  // Operands: each argument in the compute type (conditions as bool).
  std::vector<std::string> ops;
  for (size_t i = 0; i < n.args.size(); ++i) {
    const Arg& a = n.args[i];
    const ST want = (op->bool_args >> i) & 1u ? ST::Bool : ct;
    if (a.kind == Arg::Kind::kTensor) {
      const size_t k = a.inputs.at(0);
      std::string e = convert_expr(inputs.at(k), want);
      // ATen casts an operand of another dtype to a bf16/fp16 common dtype.
      if (want == ST::Float && n.inputs[k]->dtype != round &&
          (round == ST::BFloat16 || round == ST::Half))
        e = std::string(
                round == ST::BFloat16 ? "tp_round_bf16(" : "tp_round_f16(") +
            e + ")";
      ops.push_back(e);
    } else if (a.kind == Arg::Kind::kConst) {
      ops.push_back(typed_literal(a.value, want, round).value_or(""));
    } else {
      ops.push_back("");
    }
  }

  if (n.op == "aten::view" || n.op == "aten::alias") {
    if (n.op == "aten::alias")
      return inputs.at(0);
    // aten::view.dtype only (other overloads are not pointwise rows).
    return bitcast_expr(inputs.at(0), n.inputs[0]->dtype, out_dtype);
  }
  const char* tmpl = op->typed_expression;
  std::string special;
  if (n.op == "aten::_to_copy") {
    const TypedExpr& x = inputs.at(0);
    if (out_dtype == ST::BFloat16)
      return TypedExpr{
          "tp_round_bf16(" + convert_expr(x, ST::Float) + ")", ST::Float};
    if (out_dtype == ST::Half)
      return TypedExpr{
          "tp_round_f16(" + convert_expr(x, ST::Float) + ")", ST::Float};
    return TypedExpr{convert_expr(x, *out), *out};
  } else if (n.op == "aten::clamp") {
    const bool lo = !is_none(n, 1), hi = !is_none(n, 2);
    tmpl = lo && hi ? "tpt_min(tpt_max($0, $1), $2)"
        : lo        ? "tpt_max($0, $1)"
        : hi        ? "tpt_min($0, $2)"
                    : "$0";
  } else if (n.op == "aten::nan_to_num") {
    if (ct != ST::Float && ct != ST::Double) {
      tmpl = "$0";
    } else {
      ops.resize(4);
      const double m = max_finite(out_dtype);
      const double dflt[4] = {0.0, 0.0, m, -m};
      for (size_t i = 1; i < 4; ++i)
        if (is_none(n, i))
          ops[i] = *typed_literal(AttrValue(dflt[i]), ct, round);
    }
  } else if (
      n.op == "aten::div" &&
      (n.overload == "Tensor_mode" || n.overload == "Scalar_mode")) {
    const AttrValue& mode = n.const_arg(2);
    if (std::holds_alternative<std::monostate>(mode)) {
      if (ct != ST::Float && ct != ST::Double)
        return std::nullopt;
      tmpl = "($0 / $1)";
    } else if (auto* s = std::get_if<std::string>(&mode)) {
      if (*s == "trunc")
        tmpl = "tpt_div_trunc($0, $1)";
      else if (*s == "floor")
        tmpl = "tpt_div_floor($0, $1)";
      else
        return std::nullopt;
    } else {
      return std::nullopt;
    }
  }

  std::string code;
  if (ct == ST::Float && (op->expression || !op->variants.empty()) &&
      op->type_rule == TypeRule::kResult) {
    // The float block's fp32 template (pointwise_expression: pow, clamp
    // bounds, variants), operands converted to float.
    std::vector<std::string> fops = ops;
    for (std::string& s : fops)
      if (s.empty())
        s = "0.0f";
    auto e = pointwise_expression(n, fops);
    if (!e)
      return std::nullopt;
    code = *e;
  } else {
    if (!tmpl)
      return std::nullopt;
    code = substitute(tmpl, ops);
    if (code.empty())
      return std::nullopt;
  }
  return TypedExpr{convert_expr({code, result}, *out), *out};
}

bool typed_pointwise_supported(const Node& n) {
  std::vector<TypedExpr> inputs;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const auto t = compute_type_of(n.inputs[i]->dtype);
    if (!t)
      return false;
    inputs.push_back({"x" + std::to_string(i), *t});
  }
  return typed_pointwise_expression(n, inputs).has_value();
}

const std::string& typed_helpers_source() {
  static const std::string s =
      R"(// ---- typed helpers (codegen/op_semantics.h) ----
// Integers: arithmetic in the unsigned type U (wrap-around, as ATen; no
// signed overflow), division modes, remainder and fmod with ATen's sign
// rules (divisors are nonzero constants: the op table's divisor_arg), shifts
// as ATen's lshift/rshift (a shift by a negative amount or past the width
// gives 0, or the sign for >>).
#define TPT_INT(T, U, SIGNED) \
TP_FN T tpt_add(T a, T b) { return (T)((U)a + (U)b); } \
TP_FN T tpt_sub(T a, T b) { return (T)((U)a - (U)b); } \
TP_FN T tpt_mul(T a, T b) { return (T)((U)a * (U)b); } \
TP_FN T tpt_neg(T a) { return (T)((U)0 - (U)a); } \
TP_FN T tpt_fma(T a, T b, T c) { return tpt_add(c, tpt_mul(a, b)); } \
TP_FN T tpt_abs(T a) { return a < (T)0 ? tpt_neg(a) : a; } \
TP_FN T tpt_max(T a, T b) { return a < b ? b : a; } \
TP_FN T tpt_min(T a, T b) { return b < a ? b : a; } \
TP_FN T tpt_and(T a, T b) { return (T)(a & b); } \
TP_FN T tpt_or(T a, T b) { return (T)(a | b); } \
TP_FN T tpt_xor(T a, T b) { return (T)(a ^ b); } \
TP_FN T tpt_not(T a) { return (T)(~a); } \
TP_FN T tpt_shl(T a, T b) { \
  return (b < (T)0 || (U)b >= (U)(sizeof(T) * 8)) ? (T)0 : (T)((U)a << (U)b); } \
TP_FN T tpt_shr(T a, T b) { \
  const U m = (U)(sizeof(T) * 8 - (SIGNED ? 1 : 0)); \
  return (T)((b < (T)0 || (U)b >= m) ? (a >> m) : (a >> b)); } \
TP_FN T tpt_div_trunc(T a, T b) { return (SIGNED && b == (T)-1) ? tpt_neg(a) : (T)(a / b); } \
TP_FN T tpt_div_floor(T a, T b) { \
  if (SIGNED && b == (T)-1) return tpt_neg(a); \
  const T q = (T)(a / b), r = (T)(a % b); \
  return (r != (T)0 && ((a < (T)0) != (b < (T)0))) ? (T)(q - (T)1) : q; } \
TP_FN T tpt_fmod(T a, T b) { return (SIGNED && b == (T)-1) ? (T)0 : (T)(a % b); } \
TP_FN T tpt_remainder(T a, T b) { \
  if (SIGNED && b == (T)-1) return (T)0; \
  const T r = (T)(a % b); \
  return (r != (T)0 && ((r < (T)0) != (b < (T)0))) ? (T)(r + b) : r; } \
TP_FN T tpt_sign(T a) { return (T)(((T)0 < a) - (a < (T)0)); } \
TP_FN bool tpt_isnan(T) { return false; } \
TP_FN bool tpt_isinf(T) { return false; } \
TP_FN bool tpt_isfinite(T) { return true; } \
TP_FN bool tpt_isposinf(T) { return false; } \
TP_FN bool tpt_isneginf(T) { return false; } \
TP_FN bool tpt_signbit(T a) { return a < (T)0; }
TPT_INT(tp_u8, unsigned int, 0)
TPT_INT(tp_i8, unsigned int, 1)
TPT_INT(tp_i16, unsigned int, 1)
TPT_INT(tp_i32, unsigned int, 1)
TPT_INT(tp_i64, unsigned long long, 1)
// Bool: + is or, * is and (ATen computes bool arithmetic in bool).
TP_FN bool tpt_add(bool a, bool b) { return a || b; }
TP_FN bool tpt_mul(bool a, bool b) { return a && b; }
TP_FN bool tpt_fma(bool a, bool b, bool c) { return c || (a && b); }
TP_FN bool tpt_max(bool a, bool b) { return a || b; }
TP_FN bool tpt_min(bool a, bool b) { return a && b; }
TP_FN bool tpt_and(bool a, bool b) { return a && b; }
TP_FN bool tpt_or(bool a, bool b) { return a || b; }
TP_FN bool tpt_xor(bool a, bool b) { return a != b; }
TP_FN bool tpt_not(bool a) { return !a; }
TP_FN bool tpt_sign(bool a) { return a; }
TP_FN bool tpt_isnan(bool) { return false; }
TP_FN bool tpt_isinf(bool) { return false; }
TP_FN bool tpt_isfinite(bool) { return true; }
TP_FN bool tpt_isposinf(bool) { return false; }
TP_FN bool tpt_isneginf(bool) { return false; }
TP_FN bool tpt_signbit(bool) { return false; }
// Floating types: max/min propagate NaN from either side (ATen's
// maximum/minimum), floor division as ATen's div_floor_floating, remainder
// takes the divisor's sign, sign(NaN) is 0 (ATen's CPU kernel).
// ADD/SUB/MUL: fp64's TP_D* (per preamble: never contracted into an FMA, as
// eager rounds each op). FMA: rounded once (ATen's add/sub with alpha).
#define TPT_PLAIN_ADD(a, b) ((a) + (b))
#define TPT_PLAIN_SUB(a, b) ((a) - (b))
#define TPT_PLAIN_MUL(a, b) ((a) * (b))
#define TPT_FLT(T, FMOD, FLOOR, TRUNC, FABS, BITS, TOP, ADD, SUB, MUL, FMA) \
TP_FN T tpt_add(T a, T b) { return ADD(a, b); } \
TP_FN T tpt_sub(T a, T b) { return SUB(a, b); } \
TP_FN T tpt_mul(T a, T b) { return MUL(a, b); } \
TP_FN T tpt_fma(T a, T b, T c) { return FMA(a, b, c); } \
TP_FN T tpt_neg(T a) { return -a; } \
TP_FN T tpt_abs(T a) { return FABS(a); } \
TP_FN T tpt_max(T a, T b) { return (a != a || b != b) ? a + b : (a < b ? b : a); } \
TP_FN T tpt_min(T a, T b) { return (a != a || b != b) ? a + b : (b < a ? b : a); } \
TP_FN bool tpt_signbit(T a) { return (BITS(a) >> TOP) != 0; } \
TP_FN T tpt_div_trunc(T a, T b) { return TRUNC(a / b); } \
TP_FN T tpt_div_floor(T a, T b) { \
  if (b == (T)0) return a / b; \
  const T mod = FMOD(a, b); \
  T div = (a - mod) / b; \
  if (mod != (T)0 && ((b < (T)0) != (mod < (T)0))) div -= (T)1; \
  if (div != (T)0) { \
    T fl = FLOOR(div); \
    if (div - fl > (T)0.5) fl += (T)1; \
    return fl; } \
  return tpt_signbit(a / b) ? -(T)0 : (T)0; } \
TP_FN T tpt_fmod(T a, T b) { return FMOD(a, b); } \
TP_FN T tpt_remainder(T a, T b) { \
  T mod = FMOD(a, b); \
  if (mod != (T)0 && ((b < (T)0) != (mod < (T)0))) mod += b; \
  return mod; } \
TP_FN T tpt_sign(T a) { return (T)((T)0 < a) - (T)(a < (T)0); } \
TP_FN bool tpt_isnan(T a) { return a != a; } \
TP_FN bool tpt_isinf(T a) { return a == (T)TP_INF || a == -(T)TP_INF; } \
TP_FN bool tpt_isfinite(T a) { return a == a && !tpt_isinf(a); } \
TP_FN bool tpt_isposinf(T a) { return a == (T)TP_INF; } \
TP_FN bool tpt_isneginf(T a) { return a == -(T)TP_INF; } \
TP_FN T tpt_nan_to_num(T a, T nan, T posinf, T neginf) { \
  return a != a ? nan : (a == (T)TP_INF ? posinf : (a == -(T)TP_INF ? neginf : a)); }
TPT_FLT(float, tpt_fmodf, tpt_floorf, tpt_truncf, tpt_fabsf, tpt_f32_bits, 31,
        TPT_PLAIN_ADD, TPT_PLAIN_SUB, TPT_PLAIN_MUL, tpt_fmaf)
TPT_FLT(double, tpt_fmod_d, tpt_floor_d, tpt_trunc_d, tpt_fabs_d, tpt_f64_bits, 63,
        TP_DADD, TP_DSUB, TP_DMUL, tpt_fma_d)
// ---- end of typed helpers ----
)";
  return s;
}

} // namespace torch_plugin::compiler
