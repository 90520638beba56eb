// op_semantics.cpp: ATen pointwise op -> device-neutral fp32 expression, from
// the op table's templates (ir/op_table.h; see op_semantics.h for the helpers
// an expression may call).
//
// Each template has $0, $1, ... standing for the expressions of schema
// arguments 0, 1, ...; arithmetic in float. How fast the helpers are
// is each renderer's business (the C++ renderer's tp_exp, tp_tanh and tp_erf
// are branch-free so that their loops vectorize); pow with a small constant
// exponent (2, 3, 0.5, -0.5, -1, -2, 1) is multiplications, a square root or a
// division here already, exact and fast on every target.
// aten::_to_copy between float32, bfloat16 and float16 is a pointwise op too:
// to bf16 / fp16 it rounds (tp_round_bf16 / tp_round_f16), to float it is the
// identity.
#include "compiler/codegen/op_semantics.h"

#include "ir/op_schema.h"
#include "ir/op_table.h"

#include <c10/core/Device.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <unordered_map>

namespace torch_plugin::compiler {
namespace {

// Whether the device argument `spelled` ("cpu", "cuda", "cuda:1") names
// `device` (no index: the current one, i.e. the value's own).
bool same_device(const std::string& spelled, const c10::Device& device) {
  try {
    const c10::Device d(spelled);
    return d.type() == device.type() &&
        (!d.has_index() || d.index() == device.index());
  } catch (const c10::Error&) {
    return false;
  }
}

// _to_copy is pointwise only as a dtype conversion on the same device and
// layout (arguments: self, dtype, layout, device, pin_memory, non_blocking,
// memory_format); which dtypes a kernel can load and store is the fusion
// pass's per-device check.
bool is_dtype_conversion(const Node& n) {
  namespace to_copy = schema::to_copy;
  if (n.op != "aten::_to_copy" || n.args.size() < to_copy::kCount ||
      n.outputs.size() != 1 || n.inputs.size() != 1)
    return false;
  for (size_t i : {to_copy::kLayout, to_copy::kDevice, to_copy::kPinMemory}) {
    const AttrValue& v = n.args[i].value;
    if (std::holds_alternative<std::monostate>(v))
      continue;
    if (i == to_copy::kLayout && std::get_if<int64_t>(&v) &&
        std::get<int64_t>(v) == 0)
      continue; // strided
    if (i == to_copy::kDevice && std::get_if<std::string>(&v) &&
        same_device(std::get<std::string>(v), n.inputs[0]->device))
      continue;
    if (i == to_copy::kPinMemory && std::get_if<bool>(&v) && !std::get<bool>(v))
      continue;
    return false;
  }
  return true;
}

bool is_none(const Arg& a) {
  return a.kind == Arg::Kind::kConst &&
      std::holds_alternative<std::monostate>(a.value);
}

// A constant number argument as a double (nullopt: not a constant number).
std::optional<double> const_number(const Node& n, size_t i) {
  if (i >= n.args.size() || n.args[i].kind != Arg::Kind::kConst)
    return std::nullopt;
  const AttrValue& v = n.args[i].value;
  if (auto* k = std::get_if<int64_t>(&v))
    return static_cast<double>(*k);
  if (auto* d = std::get_if<double>(&v))
    return *d;
  return std::nullopt;
}

// Constant number arguments that ATen's kernels round to a bfloat16/float16
// result's dtype before computing in float: the wrapped number is cast to the
// common dtype (TensorIterator) and read as scalar_t, or the kernel converts
// it with Scalar::to<scalar_t>(). Measured against eager on both devices
// (torch 2.11; docs/internals/cuda_kernels.md, "Numerics against ATen"):
// fmod, remainder and pow round the scalar on both; add/sub/rsub (other and
// alpha) on the CPU only (CUDA's opmath kernels read the original scalar);
// threshold's bound on CUDA only. Other scalars (mul, div, the activations'
// parameters) stay float, as ATen's opmath.
std::vector<size_t> narrowed_scalar_args(const Node& n) {
  if (n.outputs.size() != 1)
    return {};
  const c10::ScalarType t = n.outputs[0]->dtype;
  if (t != c10::ScalarType::BFloat16 && t != c10::ScalarType::Half)
    return {};
  const bool cuda = n.outputs[0]->device.is_cuda();
  if (n.op == "aten::pow")
    return {0, 1}; // pow.Scalar's base, pow.Tensor_Scalar's exponent
  if (n.op == "aten::fmod" || n.op == "aten::remainder")
    return {0, 1};
  // A constant self (rsub arrives as sub.Tensor(0.1, x)), other, alpha.
  if (n.op == "aten::add" || n.op == "aten::sub" || n.op == "aten::rsub")
    return cuda ? std::vector<size_t>{} : std::vector<size_t>{0, 1, 2};
  if (n.op == "aten::threshold") // CPU compares in float, CUDA in scalar_t
    return cuda ? std::vector<size_t>{1, 2} : std::vector<size_t>{2};
  return {};
}

// The floating-point ops whose expression depends on more than the template
// (issue #27): the expression, "" when this use has none (the op falls back),
// or nullopt when the template applies.
std::optional<std::string> special_case(
    const Node& n,
    const std::vector<std::string>& x) {
  const std::string name = n.qualified_name();
  if (name == "aten::clamp" || name == "aten::clamp.Tensor") {
    // clamp(self, min?, max?): a None bound is left out (both None: ATen
    // raises). A constant NaN bound falls back (ATen's scalar kernels differ
    // on it between their scalar and vector paths).
    if (n.args.size() < 3)
      return std::string();
    const bool lo = !is_none(n.args[1]), hi = !is_none(n.args[2]);
    if (!lo && !hi)
      return std::string();
    for (size_t i : {size_t{1}, size_t{2}}) {
      if (n.args[i].kind != Arg::Kind::kConst || is_none(n.args[i]))
        continue;
      const auto v = const_number(n, i);
      if (!v || std::isnan(*v))
        return std::string();
    }
    const bool tensor = name == "aten::clamp.Tensor";
    std::string e = x.at(0);
    if (tensor) {
      // ATen's vector clamp (max/min instructions) gives the bound on a tie
      // (+0.0 against a -0.0 bound); x's NaN propagates.
      if (lo)
        e = "tp_max(" + x.at(1) + ", " + e + ")";
      if (hi)
        e = "tp_min(" + x.at(2) + ", " + e + ")";
      e = "(" + x.at(0) + " != " + x.at(0) + " ? " + x.at(0) + " : " + e + ")";
    } else {
      if (lo)
        e = "tp_max(" + e + ", " + x.at(1) + ")";
      if (hi)
        e = "tp_min(" + e + ", " + x.at(2) + ")";
    }
    // A NaN tensor bound gives NaN (ATen's clamp_kernel).
    if (tensor && hi)
      e = "(" + x.at(2) + " != " + x.at(2) + " ? " + x.at(2) + " : " + e + ")";
    if (tensor && lo)
      e = "(" + x.at(1) + " != " + x.at(1) + " ? " + x.at(1) + " : " + e + ")";
    return e;
  }
  if (n.op == "aten::nextafter" &&
      (n.outputs.empty() || n.outputs[0]->dtype != c10::ScalarType::Float))
    return std::string(); // steps by the stored type's ulp, not float's
  if (name == "aten::round.decimals") {
    // ATen's round_decimals_kernel: ten_pow = (float)10^|d|; d >= 0:
    // nearbyint(x * ten_pow) / ten_pow, else nearbyint(x / ten_pow) * ten_pow.
    const AttrValue& v = n.const_arg(1);
    const auto* d = std::get_if<int64_t>(&v);
    if (!d || *d > 38 || *d < -38)
      return std::string();
    const float ten_pow =
        static_cast<float>(std::pow(10.0, std::abs(static_cast<double>(*d))));
    // ATen's CUDA kernel computes a bfloat16/float16 tensor in scalar_t: 10^d
    // and the product (quotient) are rounded to the dtype before nearbyint;
    // the CPU kernel computes in float.
    const c10::ScalarType t =
        n.outputs.empty() ? c10::ScalarType::Float : n.outputs[0]->dtype;
    const bool narrow = n.outputs.size() == 1 &&
        n.outputs[0]->device.is_cuda() &&
        (t == c10::ScalarType::BFloat16 || t == c10::ScalarType::Half);
    const std::string p = float_literal(
        ten_pow, narrow ? std::optional<c10::ScalarType>(t) : std::nullopt);
    const std::string round_fn = !narrow ? ""
        : t == c10::ScalarType::BFloat16 ? "tp_round_bf16"
                                         : "tp_round_f16";
    const std::string q =
        round_fn + "(" + x.at(0) + (*d >= 0 ? " * " : " / ") + p + ")";
    if (*d >= 0)
      return "(tp_round(" + q + ") / " + p + ")";
    return "(tp_round(" + q + ") * " + p + ")";
  }
  if ((name == "aten::div.Tensor" || name == "aten::div.Scalar") &&
      n.outputs.size() == 1 && n.outputs[0]->device.is_cuda() &&
      n.args.size() >= 2 && n.args[1].kind == Arg::Kind::kConst) {
    // ATen's div_true_kernel_cuda multiplies by the divisor's reciprocal when
    // the divisor is a CPU scalar: inv_b = opmath_t(1) / b, from the original
    // (unrounded) scalar, then a * inv_b in opmath (float for float, bfloat16
    // and float16); up to one float ulp from a / b. The CPU kernel divides.
    // __fmul_rn: never contracted with a following add into an FMA (eager
    // rounds the product: it is its own kernel).
    const c10::ScalarType t = n.outputs[0]->dtype;
    const auto v = const_number(n, 1);
    if (v &&
        (t == c10::ScalarType::Float || t == c10::ScalarType::BFloat16 ||
         t == c10::ScalarType::Half)) {
      const float inv = 1.0f / static_cast<float>(*v);
      return "__fmul_rn(" + x.at(0) + ", " + float_literal(inv, std::nullopt) +
          ")";
    }
  }
  if (name == "aten::div.Tensor_mode" || name == "aten::div.Scalar_mode") {
    if (n.args.size() < 3)
      return std::string();
    if (is_none(n.args[2]))
      return "(" + x.at(0) + " / " + x.at(1) + ")";
    const auto* mode = std::get_if<std::string>(&n.args[2].value);
    if (!mode)
      return std::string();
    if (*mode == "trunc")
      return "tp_trunc(" + x.at(0) + " / " + x.at(1) + ")";
    if (*mode == "floor")
      return "tp_floordiv(" + x.at(0) + ", " + x.at(1) + ")";
    return std::string();
  }
  if (name == "aten::logit") {
    // ATen's logit_kernel: eps None (or < 0) is log(x / (1 - x)); else x is
    // clamped to [eps, 1 - eps] first (NaN stays NaN).
    if (n.args.size() < 2 || is_none(n.args[1]))
      return std::nullopt;
    const auto eps = const_number(n, 1);
    if (!eps)
      return std::string();
    if (*eps < 0)
      return std::nullopt;
    // ATen's CPU kernel rounds the bounds to a bfloat16/float16 output's
    // dtype, its CUDA kernel keeps them in float: one expression cannot be
    // both, so only float32 outputs fuse.
    if (!n.outputs.empty() && n.outputs[0]->dtype != c10::ScalarType::Float)
      return std::string();
    // The bounds in the output's dtype, as ATen's scalar_t lo = eps,
    // hi = scalar_t(1) - eps.
    const c10::ScalarType t =
        n.outputs.empty() ? c10::ScalarType::Float : n.outputs[0]->dtype;
    auto in_dtype = [t](float v) {
      if (t == c10::ScalarType::BFloat16)
        return static_cast<float>(c10::BFloat16(v));
      if (t == c10::ScalarType::Half)
        return static_cast<float>(c10::Half(v));
      return v;
    };
    const float e = in_dtype(static_cast<float>(*eps));
    std::ostringstream lo, hi;
    lo.precision(9);
    hi.precision(9);
    lo << std::scientific << e << "f";
    hi << std::scientific << in_dtype(1.0f - e) << "f";
    const std::string c = "(" + x.at(0) + " < " + lo.str() + " ? " + lo.str() +
        " : (" + x.at(0) + " > " + hi.str() + " ? " + hi.str() + " : " +
        x.at(0) + "))";
    return "tp_log(" + c + " / (1.0f - " + c + "))";
  }
  return std::nullopt;
}

} // namespace

const std::vector<std::string>& pointwise_helper_names() {
  static const std::vector<std::string> names = {
      "tp_max",
      "tp_min",
      "tp_hardtanh",
      "tp_exp",
      "tp_log",
      "tp_sqrt",
      "tp_rsqrt",
      "tp_abs",
      "tp_tanh",
      "tp_erf",
      "tp_sigmoid",
      "tp_pow",
      "tp_round_bf16",
      "tp_round_f16",
      // floating-point pointwise ops (issue #27)
      "tp_sin",
      "tp_cos",
      "tp_tan",
      "tp_asin",
      "tp_acos",
      "tp_atan",
      "tp_sinh",
      "tp_cosh",
      "tp_asinh",
      "tp_acosh",
      "tp_atanh",
      "tp_floor",
      "tp_ceil",
      "tp_trunc",
      "tp_round",
      "tp_exp2",
      "tp_expm1",
      "tp_log1p",
      "tp_log2",
      "tp_log10",
      "tp_erfc",
      "tp_erfinv",
      "tp_lgamma",
      "tp_digamma",
      "tp_atan2",
      "tp_hypot",
      "tp_copysign",
      "tp_nextafter",
      "tp_fmod",
      "tp_remainder",
      "tp_floordiv"};
  return names;
}

std::optional<std::string> pointwise_fallback_reason(const Node& n) {
  // ATen pointwise ops without a row, and why.
  static const std::unordered_map<std::string, const char*> no_row = {
      {"aten::polygamma", "no exact formula for polygamma of order n > 0"},
      {"aten::special_erfcx", "no erfcx helper (scaled erfc) in the renderers"},
      {"aten::i0", "no Bessel-function helper in the renderers"},
      {"aten::special_i0e", "no Bessel-function helper in the renderers"},
      {"aten::special_i1", "no Bessel-function helper in the renderers"},
      {"aten::special_i1e", "no Bessel-function helper in the renderers"},
      {"aten::igamma", "no incomplete-gamma helper in the renderers"},
      {"aten::igammac", "no incomplete-gamma helper in the renderers"},
  };
  const std::string name = n.qualified_name();
  if (name == "aten::view.dtype")
    return bitcast_fallback_reason(n);
  auto it = no_row.find(name);
  if (it == no_row.end())
    it = no_row.find(n.op);
  if (it != no_row.end())
    return std::string(it->second);
  const OpInfo* op = find_op(n);
  if (!op || op->category != OpCategory::kPointwise)
    return std::nullopt;
  if (!is_fusible_pointwise(n))
    return std::string("not a pointwise use of ") + name;
  std::vector<std::string> dummy(n.args.size(), "x");
  if (pointwise_expression(n, dummy).has_value())
    return std::nullopt;
  if (n.op == "aten::clamp")
    return std::string("a bound that is NaN, or both bounds None");
  if (n.op == "aten::round")
    return std::string("decimals is not a constant integer");
  if (n.op == "aten::div")
    return std::string("rounding_mode is not None, 'trunc' or 'floor'");
  if (n.op == "aten::logit")
    return std::string("eps is not a constant");
  if (n.op == "aten::nextafter")
    return std::string(
        "in bfloat16/float16 it steps by that type's ulp; kernels compute in float32");
  return std::string(
      "an argument the op's template cannot take (None or a string)");
}

bool is_fusible_pointwise(const Node& n) {
  if (n.op == "aten::_to_copy")
    return is_dtype_conversion(n);
  const OpInfo* op = find_op(n);
  return op && op->category == OpCategory::kPointwise &&
      (op->expression || !op->variants.empty() || op->typed_expression);
}

std::string round_to_dtype(const std::string& e, c10::ScalarType dtype) {
  if (dtype == c10::ScalarType::BFloat16)
    return "tp_round_bf16(" + e + ")";
  if (dtype == c10::ScalarType::Half)
    return "tp_round_f16(" + e + ")";
  return e;
}

namespace {

std::optional<std::string> unrounded_expression(
    const Node& n,
    const std::vector<std::string>& given);

} // namespace

std::optional<std::string> pointwise_expression(
    const Node& n,
    const std::vector<std::string>& given) {
  auto e = unrounded_expression(n, given);
  // The op's result in its output dtype, as eager's tensor holds it (the
  // conversion _to_copy rounds already).
  if (!e || n.op == "aten::_to_copy" || n.outputs.size() != 1)
    return e;
  return round_to_dtype(*e, n.outputs[0]->dtype);
}

namespace {

std::optional<std::string> unrounded_expression(
    const Node& n,
    const std::vector<std::string>& given) {
  const char* t = pointwise_template(n);
  if (!t)
    return std::nullopt;
  std::vector<std::string> operands = given;
  for (size_t i : narrowed_scalar_args(n))
    if (i < operands.size() && n.args[i].kind == Arg::Kind::kConst)
      if (const auto v = const_number(n, i))
        operands[i] = float_literal(*v, n.outputs[0]->dtype);
  if (n.qualified_name() == "aten::pow.Tensor_Scalar") {
    // tp_pow is a scalar libm call on the CPU (20-40 ns) that keeps the loop
    // from vectorizing; these exponents are exact as products/roots (as ATen's
    // pow_tensor_scalar_optimized_kernel special-cases 2, 3, 0.5, -0.5, -1,
    // -2).
    const AttrValue& e = n.const_arg(schema::pow::kExponent);
    double exponent = std::holds_alternative<int64_t>(e)
        ? static_cast<double>(std::get<int64_t>(e))
        : std::holds_alternative<double>(e)
        ? std::get<double>(e)
        : std::numeric_limits<double>::quiet_NaN();
    // ATen picks the special case from the exponent in a bf16/fp16 dtype.
    const c10::ScalarType out = n.outputs.at(0)->dtype;
    if (out == c10::ScalarType::BFloat16)
      exponent =
          static_cast<float>(c10::BFloat16(static_cast<float>(exponent)));
    else if (out == c10::ScalarType::Half)
      exponent = static_cast<float>(c10::Half(static_cast<float>(exponent)));
    const std::string& x = operands.at(0);
    if (exponent == 1.0)
      return x;
    if (exponent == 2.0)
      return "(" + x + " * " + x + ")";
    if (exponent == 3.0)
      return "(" + x + " * " + x + " * " + x + ")";
    if (exponent == 0.5)
      return "tp_sqrt(" + x + ")";
    if (exponent == -0.5)
      return "tp_rsqrt(" + x + ")";
    if (exponent == -1.0)
      return "(1.0f / " + x + ")";
    if (exponent == -2.0)
      return "(1.0f / (" + x + " * " + x + "))";
  }
  if (n.op == "aten::_to_copy") {
    if (!is_dtype_conversion(n))
      return std::nullopt;
    if (n.outputs[0]->dtype == c10::ScalarType::BFloat16)
      return "tp_round_bf16(" + operands.at(0) + ")";
    if (n.outputs[0]->dtype == c10::ScalarType::Half)
      return "tp_round_f16(" + operands.at(0) + ")";
  }
  if (auto e = special_case(n, operands))
    return e->empty() ? std::nullopt : e;
  if (n.op == "aten::clamp_min" || n.op == "aten::clamp_max" ||
      n.op == "aten::hardtanh") {
    for (size_t i = 1; i < n.args.size(); ++i) {
      if (std::holds_alternative<std::monostate>(n.args[i].value))
        return std::nullopt;
    }
  }
  std::string out;
  for (size_t i = 0; t[i] != '\0'; ++i) {
    if (t[i] == '$' && isdigit(t[i + 1])) {
      size_t k = t[++i] - '0';
      if (k >= operands.size())
        return std::nullopt;
      out += operands[k];
    } else {
      out += t[i];
    }
  }
  return out;
}

} // namespace

} // namespace torch_plugin::compiler
