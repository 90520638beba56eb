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
#include <c10/util/Exception.h>

#include <limits>

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
  const OpInfo* op = find_op(n);
  return op && op->category == OpCategory::kPointwise &&
      (op->expression || !op->variants.empty() || op->typed_expression);
}

std::optional<std::string> pointwise_expression(
    const Node& n,
    const std::vector<std::string>& operands) {
  const char* t = pointwise_template(n);
  if (!t)
    return std::nullopt;
  if (n.op == "aten::pow") {
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

} // namespace torch_plugin::compiler
