// op_table.cpp: the rows of the op table and the epilogue table (see
// op_table.h).
//
// Pointwise semantics follow ATen's kernels (gelu uses erf; relu is
// tp_max(x, 0.0f), which keeps a NaN x as ATen does); arithmetic in float.
// alpha of add/sub is argument 2. aten::_to_copy is pointwise only as a dtype
// conversion (codegen/op_semantics.cpp checks its other arguments and rounds
// to bf16 / fp16).
#include "ir/op_table.h"

#include "ir/op_schema.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <limits>
#include <unordered_map>

namespace torch_plugin::ir {
namespace {

using K = EpilogueKind;

OpInfo pointwise(
    const char* name,
    const char* expression,
    EpilogueKind epilogue = K::kNone) {
  OpInfo op{name, OpCategory::kPointwise};
  op.expression = expression;
  op.epilogue = epilogue;
  return op;
}

OpInfo reduction(
    const char* name,
    ReductionKind kind,
    std::vector<Combine> passes,
    bool rowwise) {
  OpInfo op{name, OpCategory::kReduction};
  op.reduction = {kind, std::move(passes), rowwise};
  return op;
}

OpInfo view(const char* name) {
  return OpInfo{name, OpCategory::kView};
}

OpInfo library(const char* name, size_t activation) {
  OpInfo op{name, OpCategory::kLibrary};
  op.activation_arg = activation;
  return op;
}

std::vector<OpInfo> make_table() {
  OpInfo gelu{"aten::gelu", OpCategory::kPointwise};
  gelu.variant_arg = schema::gelu::kApproximate;
  gelu.variants = {
      {"none",
       "(0.5f * $0 * (1.0f + tp_erf($0 * 0.70710678118654752f)))",
       K::kGelu},
      // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), ATen's GeluType::Tanh.
      {"tanh",
       // x^3 first, then times kappa, as ATen's kernels (CPU and CUDA).
       "(0.5f * $0 * (1.0f + tp_tanh(0.79788456080286535588f * ($0 + 0.044715f * ($0 * $0 * "
       "$0)))))",
       K::kGeluTanh},
  };
  const Combine S = Combine::kSum, M = Combine::kMax;
  const Combine N = Combine::kMin, P = Combine::kProd, AM = Combine::kArgMax,
                AN = Combine::kArgMin;
  return {
      pointwise("aten::add.Tensor", "($0 + $2 * $1)"),
      pointwise("aten::add.Scalar", "($0 + $2 * $1)"),
      pointwise("aten::sub.Tensor", "($0 - $2 * $1)"),
      pointwise("aten::sub.Scalar", "($0 - $2 * $1)"),
      pointwise("aten::rsub.Scalar", "($1 - $2 * $0)"),
      pointwise("aten::mul.Tensor", "($0 * $1)"),
      pointwise("aten::mul.Scalar", "($0 * $1)"),
      pointwise("aten::div.Tensor", "($0 / $1)"),
      pointwise("aten::div.Scalar", "($0 / $1)"),
      pointwise("aten::neg", "(-$0)"),
      // The identity (functionalization's alias after a view; typed too).
      pointwise("aten::alias", "$0"),
      // A copy into the layout the IR gives its output (memory_format: the
      // traced strides; typed too): a layout change inside a kernel.
      pointwise("aten::clone", "$0"),
      pointwise("aten::relu", "tp_max($0, 0.0f)", K::kRelu),
      pointwise("aten::sigmoid", "tp_sigmoid($0)", K::kSigmoid),
      // x / (1 + exp(-x)): ATen's CUDA silu_kernel and CPU vectorized kernel
      // (x * sigmoid(x) differs in the last bit in a quarter of the values).
      pointwise("aten::silu", "($0 / (1.0f + tp_exp(-$0)))", K::kSilu),
      pointwise("aten::tanh", "tp_tanh($0)", K::kTanh),
      pointwise("aten::exp", "tp_exp($0)"),
      pointwise("aten::log", "tp_log($0)"),
      pointwise("aten::sqrt", "tp_sqrt($0)"),
      pointwise("aten::rsqrt", "tp_rsqrt($0)"),
      pointwise("aten::abs", "tp_abs($0)"),
      pointwise("aten::erf", "tp_erf($0)"),
      pointwise("aten::reciprocal", "(1.0f / $0)"),
      pointwise("aten::pow.Tensor_Scalar", "tp_pow($0, $1)"),
      // NaN from either side, as ATen (tpt_*: the typed helpers).
      pointwise("aten::maximum", "tpt_max($0, $1)"),
      pointwise("aten::minimum", "tpt_min($0, $1)"),
      pointwise("aten::clamp_min", "tp_max($0, $1)"),
      pointwise("aten::clamp_max", "tp_min($0, $1)"),
      pointwise("aten::hardtanh", "tp_hardtanh($0, $1, $2)", K::kClamp),
      pointwise(
          "aten::hardswish",
          "($0 * tp_min(tp_max($0 + 3.0f, 0.0f), 6.0f) / 6.0f)",
          K::kHardswish),
      pointwise(
          "aten::hardsigmoid",
          "(tp_min(tp_max($0 + 3.0f, 0.0f), 6.0f) / 6.0f)"),
      gelu,
      pointwise("aten::_to_copy", "$0"),
      // Bounds that are None or NaN: codegen/op_semantics.cpp.
      pointwise("aten::clamp", "tp_min(tp_max($0, $1), $2)", K::kClamp),

      // ---- floating-point pointwise ops (issue #27, ops-float) ----------
      // Each as ATen's CPU/CUDA kernel computes it in float (sources:
      // aten/src/ATen/native/cpu/UnaryOpsKernel.cpp, BinaryOpsKernel.cpp,
      // Activation.cpp, Math.h); nan/inf/-0.0 as there. Uses with arguments
      // that need more than the template (None, a rounding mode, decimals)
      // are special cases in codegen/op_semantics.cpp.
      pointwise("aten::sin", "tp_sin($0)"),
      pointwise("aten::cos", "tp_cos($0)"),
      pointwise("aten::tan", "tp_tan($0)"),
      pointwise("aten::asin", "tp_asin($0)"),
      pointwise("aten::acos", "tp_acos($0)"),
      pointwise("aten::atan", "tp_atan($0)"),
      pointwise("aten::sinh", "tp_sinh($0)"),
      pointwise("aten::cosh", "tp_cosh($0)"),
      pointwise("aten::asinh", "tp_asinh($0)"),
      pointwise("aten::acosh", "tp_acosh($0)"),
      pointwise("aten::atanh", "tp_atanh($0)"),
      pointwise("aten::floor", "tp_floor($0)"),
      pointwise("aten::ceil", "tp_ceil($0)"),
      pointwise("aten::trunc", "tp_trunc($0)"),
      pointwise("aten::round", "tp_round($0)"),
      // round(x * 10^d) / 10^d (d < 0: round(x / 10^-d) * 10^-d): op_semantics.
      pointwise("aten::round.decimals", "tp_round($0)"),
      pointwise("aten::frac", "($0 - tp_trunc($0))"),
      // (0 < x) - (x < 0): sign(nan) = 0, sign(-0.0) = +0.0, as ATen.
      pointwise(
          "aten::sign",
          "(($0 > 0.0f ? 1.0f : 0.0f) - ($0 < 0.0f ? 1.0f : 0.0f))"),
      pointwise(
          "aten::sgn",
          "(($0 > 0.0f ? 1.0f : 0.0f) - ($0 < 0.0f ? 1.0f : 0.0f))"),
      pointwise("aten::exp2", "tp_exp2($0)"),
      pointwise("aten::expm1", "tp_expm1($0)"),
      pointwise("aten::log1p", "tp_log1p($0)"),
      pointwise("aten::log2", "tp_log2($0)"),
      pointwise("aten::log10", "tp_log10($0)"),
      pointwise("aten::erfc", "tp_erfc($0)"),
      pointwise("aten::erfinv", "tp_erfinv($0)"),
      pointwise("aten::lgamma", "tp_lgamma($0)"),
      pointwise("aten::digamma", "tp_digamma($0)"),
      // logit(x, eps=None) = log(x / (1 - x)); eps clamps x first:
      // op_semantics.
      pointwise("aten::logit", "tp_log($0 / (1.0f - $0))"),
      // Activations (F.*; selu arrives as elu, relu6 as hardtanh).
      pointwise("aten::leaky_relu", "($0 > 0.0f ? $0 : $0 * $1)"),
      // elu(x, alpha, scale, input_scale)
      pointwise(
          "aten::elu",
          "($0 <= 0.0f ? tp_expm1($0 * $3) * ($1 * $2) : $0 * $2)"),
      // celu(x, alpha) = elu(x, alpha, 1, 1 / alpha)
      pointwise(
          "aten::celu", "($0 <= 0.0f ? tp_expm1($0 * (1.0f / $1)) * $1 : $0)"),
      // softplus(x, beta, threshold)
      pointwise(
          "aten::softplus",
          "($0 * $1 > $2 ? $0 : tp_log1p(tp_exp($0 * $1)) / $1)"),
      pointwise("aten::mish", "($0 * tp_tanh(tp_log1p(tp_exp($0))))"),
      pointwise("aten::hardshrink", "(($0 >= -($1) && $0 <= $1) ? 0.0f : $0)"),
      pointwise(
          "aten::softshrink",
          "($0 > $1 ? $0 - $1 : ($0 < -($1) ? $0 + $1 : $0 * 0.0f))"),
      // threshold(x, threshold, value)
      pointwise("aten::threshold", "($0 <= $1 ? $2 : $0)"),
      // Binary ops.
      pointwise("aten::pow.Tensor_Tensor", "tp_pow($0, $1)"),
      pointwise("aten::pow.Scalar", "tp_pow($0, $1)"),
      pointwise("aten::atan2", "tp_atan2($0, $1)"),
      pointwise("aten::hypot", "tp_hypot($0, $1)"),
      pointwise("aten::copysign.Tensor", "tp_copysign($0, $1)"),
      pointwise("aten::copysign.Scalar", "tp_copysign($0, $1)"),
      pointwise("aten::nextafter", "tp_nextafter($0, $1)"),
      pointwise("aten::fmod.Tensor", "tp_fmod($0, $1)"),
      pointwise("aten::fmod.Scalar", "tp_fmod($0, $1)"),
      pointwise("aten::remainder.Tensor", "tp_remainder($0, $1)"),
      pointwise("aten::remainder.Scalar", "tp_remainder($0, $1)"),
      // rounding_mode None / "trunc" / "floor" (floor_divide): op_semantics.
      pointwise("aten::div.Tensor_mode", "($0 / $1)"),
      pointwise("aten::div.Scalar_mode", "($0 / $1)"),
      // xlogy(x, y): nan if y is nan, else 0 if x == 0, else x log(y).
      pointwise(
          "aten::xlogy.Tensor",
          "($1 != $1 ? $1 : ($0 == 0.0f ? 0.0f : $0 * tp_log($1)))"),
      // lerp(self, end, weight), ATen's Lerp.h: two formulas by |weight|.
      pointwise(
          "aten::lerp.Scalar",
          "(tp_abs($2) < 0.5f ? $0 + $2 * ($1 - $0) : $1 - ($1 - $0) * (1.0f - $2))"),
      pointwise(
          "aten::lerp.Tensor",
          "(tp_abs($2) < 0.5f ? $0 + $2 * ($1 - $0) : $1 - ($1 - $0) * (1.0f - $2))"),
      // clamp(x, min?, max?) with tensor bounds: a NaN bound gives NaN, as
      // ATen's clamp kernel; None bounds: op_semantics.
      pointwise(
          "aten::clamp.Tensor",
          "($1 != $1 ? $1 : ($2 != $2 ? $2 : tp_min(tp_max($0, $1), $2)))"),
      // ---- end of floating-point pointwise ops ---------------------------

      reduction("aten::sum.dim_IntList", ReductionKind::kSum, {S}, false),
      reduction("aten::mean.dim", ReductionKind::kMean, {S}, false),
      reduction("aten::amax", ReductionKind::kAmax, {M}, false),
      reduction("aten::var.correction", ReductionKind::kVar, {S, S}, false),
      reduction("aten::_softmax", ReductionKind::kSoftmax, {M, S}, true),
      reduction("aten::_log_softmax", ReductionKind::kLogSoftmax, {M, S}, true),
      reduction(
          "aten::native_layer_norm", ReductionKind::kLayerNorm, {S, S}, true),
      // Issue #27 (reductions). std arrives as var.correction + sqrt (core
      // ATen decomposition); logsumexp is kept whole (decompositions.py).
      reduction("aten::mean", ReductionKind::kMean, {S}, false),
      reduction("aten::prod.dim_int", ReductionKind::kProd, {P}, false),
      reduction("aten::prod", ReductionKind::kProd, {P}, false),
      reduction("aten::amin", ReductionKind::kAmin, {N}, false),
      reduction("aten::max", ReductionKind::kAmax, {M}, false),
      reduction("aten::min", ReductionKind::kAmin, {N}, false),
      reduction("aten::max.dim", ReductionKind::kMaxDim, {AM}, false),
      reduction("aten::min.dim", ReductionKind::kMinDim, {AN}, false),
      reduction("aten::argmax", ReductionKind::kArgMax, {AM}, false),
      reduction("aten::argmin", ReductionKind::kArgMin, {AN}, false),
      reduction(
          "aten::var_mean.correction", ReductionKind::kVarMean, {S, S}, false),
      reduction("aten::logsumexp", ReductionKind::kLogSumExp, {M, S}, false),
      reduction(
          "aten::cumsum", ReductionKind::kCumSum, {Combine::kScanSum}, true),
      reduction(
          "aten::cumprod", ReductionKind::kCumProd, {Combine::kScanProd}, true),
      // Issue #27 (any/all): every overload (whole tensor, one dim, dims).
      reduction("aten::any", ReductionKind::kAny, {M}, false),
      reduction("aten::any.dim", ReductionKind::kAny, {M}, false),
      reduction("aten::any.dims", ReductionKind::kAny, {M}, false),
      reduction("aten::all", ReductionKind::kAll, {N}, false),
      reduction("aten::all.dim", ReductionKind::kAll, {N}, false),
      reduction("aten::all.dims", ReductionKind::kAll, {N}, false),

      view("aten::view"),
      view("aten::_unsafe_view"),
      view("aten::permute"),
      view("aten::t"),

      library(
          "torch_plugin::conv_pointwise", schema::conv_pointwise::kActivation),
      library(
          "torch_plugin::linear_pointwise",
          schema::linear_pointwise::kActivation),
  };
}

// The typed block merged in: typing added to the row of the same name, or a
// new pointwise row (its fp32 expression: none, Float uses the typed one).
std::vector<OpInfo> with_typing(std::vector<OpInfo> table) {
  for (const TypedRow& t : typed_rows()) {
    OpInfo* row = nullptr;
    for (OpInfo& op : table)
      if (op.name == t.name)
        row = &op;
    if (!row) {
      table.push_back(OpInfo{t.name, OpCategory::kPointwise});
      row = &table.back();
    }
    row->type_rule = t.rule;
    // A row with an fp32 expression (the float block's) keeps computing it.
    const bool has_float = row->expression || !row->variants.empty();
    row->type_classes = t.classes | (has_float ? kTypeFloat : 0);
    row->typed_expression = t.typed_expression;
    row->bool_args = t.bool_args;
    row->divisor_arg = t.divisor_arg;
  }
  return table;
}

const std::unordered_map<std::string, size_t>& index() {
  static const std::unordered_map<std::string, size_t> m = [] {
    std::unordered_map<std::string, size_t> out;
    const auto& t = op_table();
    for (size_t i = 0; i < t.size(); ++i)
      out.emplace(t[i].name, i);
    return out;
  }();
  return m;
}

const OpVariant* variant_of(const OpInfo& op, const Node& n) {
  if (op.variant_arg >= n.args.size() ||
      n.args[op.variant_arg].kind != Arg::Kind::kConst)
    return nullptr;
  const auto* v = std::get_if<std::string>(&n.args[op.variant_arg].value);
  if (!v)
    return nullptr;
  for (const OpVariant& var : op.variants)
    if (*v == var.value)
      return &var;
  return nullptr;
}

} // namespace

const std::vector<EpilogueInfo>& epilogues() {
  static const std::vector<EpilogueInfo> t = {
      {K::kNone,
       "",
       false,
       [](const at::Tensor& y, double, double) {
         return y;
       }},
      {K::kRelu,
       "relu",
       true,
       [](const at::Tensor& y, double, double) {
         return at::relu(y);
       }},
      {K::kSilu,
       "silu",
       false,
       [](const at::Tensor& y, double, double) {
         return at::silu(y);
       }},
      {K::kGelu,
       "gelu",
       false,
       [](const at::Tensor& y, double, double) {
         return at::gelu(y);
       }},
      {K::kGeluTanh,
       "gelu_tanh",
       true,
       [](const at::Tensor& y, double, double) {
         return at::gelu(y, "tanh");
       }},
      {K::kSigmoid,
       "sigmoid",
       false,
       [](const at::Tensor& y, double, double) {
         return at::sigmoid(y);
       }},
      {K::kTanh,
       "tanh",
       false,
       [](const at::Tensor& y, double, double) {
         return at::tanh(y);
       }},
      {K::kHardswish,
       "hardswish",
       false,
       [](const at::Tensor& y, double, double) {
         return at::hardswish(y);
       }},
      {K::kClamp,
       "clamp",
       false,
       [](const at::Tensor& y, double alpha, double beta) {
         return at::clamp(y, alpha, beta);
       }},
  };
  return t;
}

const EpilogueInfo* find_epilogue(std::string_view name) {
  for (const EpilogueInfo& e : epilogues())
    if (name == e.name)
      return &e;
  return nullptr;
}

const EpilogueInfo& epilogue_info(EpilogueKind kind) {
  for (const EpilogueInfo& e : epilogues())
    if (e.kind == kind)
      return e;
  TORCH_CHECK(
      false, "epilogue_info: no row for epilogue ", static_cast<int>(kind));
}

void check_epilogue_name(std::string_view name) {
  if (find_epilogue(name))
    return;
  std::string expected;
  const auto& t = epilogues();
  for (size_t i = 1; i < t.size(); ++i)
    expected += std::string(i == 1 ? "" : (i + 1 == t.size() ? " or " : ", ")) +
        t[i].name;
  TORCH_CHECK(
      false,
      "unknown activation '",
      std::string(name),
      "'; expected ",
      expected);
}

at::Tensor apply_epilogue(
    const at::Tensor& y,
    std::string_view name,
    double alpha,
    double beta) {
  check_epilogue_name(name);
  return find_epilogue(name)->reference(y, alpha, beta);
}

const CombineInfo& combine_info(Combine c) {
  constexpr double inf = std::numeric_limits<double>::infinity();
  static const CombineInfo infos[] = {
      {Combine::kSum, 0.0, "sum"},
      {Combine::kMax, -inf, "max"},
      {Combine::kMin, inf, "min"},
      {Combine::kProd, 1.0, "prod"},
      {Combine::kArgMax, -inf, "argmax"},
      {Combine::kArgMin, inf, "argmin"},
      {Combine::kScanSum, 0.0, "cumsum"},
      {Combine::kScanProd, 1.0, "cumprod"},
  };
  for (const CombineInfo& i : infos)
    if (i.kind == c)
      return i;
  TORCH_CHECK(false, "combine_info: no row for ", static_cast<int>(c));
}

const std::vector<OpInfo>& op_table() {
  static const std::vector<OpInfo> t = with_typing(make_table());
  return t;
}

const OpInfo* find_op(const std::string& qualified_name) {
  auto it = index().find(qualified_name);
  return it == index().end() ? nullptr : &op_table()[it->second];
}

const OpInfo* find_op(const Node& n) {
  return find_op(n.qualified_name());
}

const char* pointwise_template(const Node& n) {
  const OpInfo* op = find_op(n);
  if (!op || op->category != OpCategory::kPointwise)
    return nullptr;
  if (op->variants.empty())
    return op->expression;
  const OpVariant* v = variant_of(*op, n);
  return v ? v->expression : nullptr;
}

std::optional<EpilogueUse> epilogue_of(const Node& n) {
  const OpInfo* op = find_op(n);
  if (!op || op->category != OpCategory::kPointwise)
    return std::nullopt;
  EpilogueKind kind = op->epilogue;
  if (!op->variants.empty()) {
    const OpVariant* v = variant_of(*op, n);
    kind = v ? v->epilogue : K::kNone;
  }
  if (kind == K::kNone)
    return std::nullopt;
  EpilogueUse use{kind};
  if (kind == K::kClamp) {
    auto bound = [&](size_t i, double dflt) {
      const AttrValue& v = n.const_arg(i);
      if (auto* k = std::get_if<int64_t>(&v))
        return static_cast<double>(*k);
      if (auto* d = std::get_if<double>(&v))
        return *d;
      return dflt;
    };
    use.alpha = bound(schema::clamp::kMin, -3.4e38);
    use.beta = bound(schema::clamp::kMax, 3.4e38);
  }
  return use;
}

bool is_library_node(const Node& n) {
  const OpInfo* op = find_op(n);
  return op && op->category == OpCategory::kLibrary;
}

size_t activation_arg(const Node& library_node) {
  const OpInfo* op = find_op(library_node);
  TORCH_CHECK(
      op && op->category == OpCategory::kLibrary,
      "activation_arg: ",
      library_node.qualified_name(),
      " is not a library op");
  return op->activation_arg;
}

} // namespace torch_plugin::ir
