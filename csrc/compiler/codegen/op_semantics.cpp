// op_semantics.cpp: ATen pointwise op -> device-neutral fp32 expression, one
// table entry per op (see op_semantics.h for the helpers an expression may
// call).
//
// Each entry: the op's qualified name and a template in which $0, $1, ... stand
// for the expressions of schema arguments 0, 1, ...; arithmetic in float.
// Semantics follow ATen's kernels (e.g. gelu uses erf; relu is
// tp_max(x, 0.0f), which keeps a NaN x as ATen does). How fast the helpers are
// is each renderer's business (the C++ renderer's tp_exp, tp_tanh and tp_erf
// are branch-free so that their loops vectorize); pow with a small constant
// exponent (2, 3, 0.5, -0.5, -1, -2, 1) is multiplications, a square root or a
// division here already, exact and fast on every target.
// aten::_to_copy between float32, bfloat16 and float16 is a pointwise op too:
// to bf16 / fp16 it rounds (tp_round_bf16 / tp_round_f16), to float it is the
// identity.
#include "compiler/codegen/op_semantics.h"

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <limits>
#include <map>

namespace torch_plugin::compiler {
namespace {

// op -> template. alpha of add/sub is argument 2.
const std::map<std::string, std::string>& table() {
  static const std::map<std::string, std::string> t = {
      {"aten::add.Tensor", "($0 + $2 * $1)"},
      {"aten::add.Scalar", "($0 + $2 * $1)"},
      {"aten::sub.Tensor", "($0 - $2 * $1)"},
      {"aten::sub.Scalar", "($0 - $2 * $1)"},
      {"aten::rsub.Scalar", "($1 - $2 * $0)"},
      {"aten::mul.Tensor", "($0 * $1)"},
      {"aten::mul.Scalar", "($0 * $1)"},
      {"aten::div.Tensor", "($0 / $1)"},
      {"aten::div.Scalar", "($0 / $1)"},
      {"aten::neg", "(-$0)"},
      {"aten::relu", "tp_max($0, 0.0f)"},
      {"aten::sigmoid", "tp_sigmoid($0)"},
      {"aten::silu", "($0 * tp_sigmoid($0))"},
      {"aten::tanh", "tp_tanh($0)"},
      {"aten::exp", "tp_exp($0)"},
      {"aten::log", "tp_log($0)"},
      {"aten::sqrt", "tp_sqrt($0)"},
      {"aten::rsqrt", "tp_rsqrt($0)"},
      {"aten::abs", "tp_abs($0)"},
      {"aten::erf", "tp_erf($0)"},
      {"aten::reciprocal", "(1.0f / $0)"},
      {"aten::pow.Tensor_Scalar", "tp_pow($0, $1)"},
      {"aten::maximum", "tp_max($0, $1)"},
      {"aten::minimum", "tp_min($0, $1)"},
      {"aten::clamp_min", "tp_max($0, $1)"},
      {"aten::clamp_max", "tp_min($0, $1)"},
      {"aten::hardtanh", "tp_min(tp_max($0, $1), $2)"},
      {"aten::hardswish",
       "($0 * tp_min(tp_max($0 + 3.0f, 0.0f), 6.0f) / 6.0f)"},
      {"aten::hardsigmoid", "(tp_min(tp_max($0 + 3.0f, 0.0f), 6.0f) / 6.0f)"},
      {"aten::gelu",
       "(0.5f * $0 * (1.0f + tp_erf($0 * 0.70710678118654752f)))"},
      {"aten::_to_copy", "$0"},
  };
  return t;
}

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
  if (n.op != "aten::_to_copy" || n.args.size() < 7 || n.outputs.size() != 1 ||
      n.inputs.size() != 1)
    return false;
  for (size_t i : {2, 3, 4}) {
    const AttrValue& v = n.args[i].value;
    if (std::holds_alternative<std::monostate>(v))
      continue;
    if (i == 2 && std::get_if<int64_t>(&v) && std::get<int64_t>(v) == 0)
      continue; // strided
    if (i == 3 && std::get_if<std::string>(&v) &&
        same_device(std::get<std::string>(v), n.inputs[0]->device))
      continue;
    if (i == 4 && std::get_if<bool>(&v) && !std::get<bool>(v))
      continue;
    return false;
  }
  return true;
}

} // namespace

const std::vector<std::string>& pointwise_helper_names() {
  static const std::vector<std::string> names = {
      "tp_max",
      "tp_min",
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
      "tp_round_f16"};
  return names;
}

bool is_fusible_pointwise(const Node& n) {
  if (n.op == "aten::_to_copy")
    return is_dtype_conversion(n);
  return table().count(n.qualified_name()) > 0;
}

std::optional<std::string> pointwise_expression(
    const Node& n,
    const std::vector<std::string>& operands) {
  auto it = table().find(n.qualified_name());
  if (it == table().end())
    return std::nullopt;
  if (n.op == "aten::gelu") {
    const std::string& approximate = std::get<std::string>(n.const_arg(1));
    if (approximate == "tanh") {
      // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as ATen's
      // GeluType::Tanh.
      const std::string& x = operands.at(0);
      return "(0.5f * " + x + " * (1.0f + tp_tanh(0.79788456080286535588f * (" +
          x + " + 0.044715f * " + x + " * " + x + " * " + x + "))))";
    }
    if (approximate != "none")
      return std::nullopt;
  }
  if (n.op == "aten::pow") {
    // tp_pow is a scalar libm call on the CPU (20-40 ns) that keeps the loop
    // from vectorizing; these exponents are exact as products/roots (as ATen's
    // pow_tensor_scalar_optimized_kernel special-cases 2, 3, 0.5, -0.5, -1,
    // -2).
    const AttrValue& e = n.const_arg(1);
    double exponent = std::holds_alternative<int64_t>(e)
        ? static_cast<double>(std::get<int64_t>(e))
        : std::holds_alternative<double>(e)
        ? std::get<double>(e)
        : std::numeric_limits<double>::quiet_NaN();
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
  if (n.op == "aten::clamp_min" || n.op == "aten::clamp_max" ||
      n.op == "aten::hardtanh") {
    for (size_t i = 1; i < n.args.size(); ++i) {
      if (std::holds_alternative<std::monostate>(n.args[i].value))
        return std::nullopt;
    }
  }
  std::string out;
  const std::string& t = it->second;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '$' && i + 1 < t.size() && isdigit(t[i + 1])) {
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

} // namespace torch_plugin::compiler
