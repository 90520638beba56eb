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

} // namespace

std::string float_literal(double v, std::optional<c10::ScalarType> dtype) {
  return float_lit(round_to(v, dtype));
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

  if (n.op == "aten::view" || n.op == "aten::alias" || n.op == "aten::clone") {
    if (n.op == "aten::alias" || n.op == "aten::clone")
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
    // A bfloat16/float16 result rounded to its dtype, as eager's tensor holds
    // it (pointwise_expression rounds the fp32 templates' results itself).
    if (*out == ST::Float)
      return TypedExpr{
          round_to_dtype(convert_expr({code, result}, *out), out_dtype), *out};
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

} // namespace torch_plugin::compiler
