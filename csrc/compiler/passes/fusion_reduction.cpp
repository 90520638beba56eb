// fusion_reduction.cpp: the domain, output levels and index outputs of each
// reduction, scan and row-wise op of the op table, for the "fusion" pass (see
// fusion_reduction.h and fusion.cpp).
#include "compiler/passes/fusion_reduction.h"

#include "compiler/codegen/renderer.h"
#include "ir/op_schema.h"
#include "ir/op_table.h"

#include <set>
#include <variant>

namespace torch_plugin::compiler::fusion_detail {
namespace {

std::optional<std::vector<int64_t>> normalize_dims(
    const AttrValue& v,
    size_t rank) {
  std::set<int64_t> dims;
  if (std::holds_alternative<std::monostate>(v)) {
    for (size_t d = 0; d < rank; ++d)
      dims.insert(static_cast<int64_t>(d));
  } else if (auto* list = std::get_if<std::vector<int64_t>>(&v)) {
    if (list->empty())
      for (size_t d = 0; d < rank; ++d)
        dims.insert(static_cast<int64_t>(d));
    for (int64_t d : *list) {
      if (d < 0)
        d += static_cast<int64_t>(rank);
      if (d < 0 || d >= static_cast<int64_t>(rank))
        return std::nullopt;
      dims.insert(d);
    }
  } else if (auto* one = std::get_if<int64_t>(&v)) {
    int64_t d = *one < 0 ? *one + static_cast<int64_t>(rank) : *one;
    if (d < 0 || d >= static_cast<int64_t>(rank))
      return std::nullopt;
    dims.insert(d);
  } else {
    return std::nullopt;
  }
  return std::vector<int64_t>(dims.begin(), dims.end());
}

// Reductions: the input and every value output in a dtype the device's
// reduction
// kernels load and store, index outputs int64 (the reduction renderers store
// those themselves), all on one device.
bool reduction_dtypes_ok(const Node& n, const std::vector<bool>& index) {
  if (n.outputs.size() != index.size())
    return false;
  const c10::Device device = n.outputs[0]->device;
  for (const Value* v : n.inputs)
    if (v->device != device ||
        !reduction_dtype_supported(device.type(), v->dtype))
      return false;
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    const Value* v = n.outputs[i];
    if (v->device != device)
      return false;
    if (index[i] ? v->dtype != c10::ScalarType::Long
                 : !reduction_dtype_supported(device.type(), v->dtype))
      return false;
  }
  for (const Arg& a : n.args)
    if (a.kind == Arg::Kind::kTensorList)
      return false;
  return true;
}

// A reduction's `dtype` argument: None, the input's dtype, or float32 (a
// bf16/fp16 input widened exactly, as the kernels do anyway). Other dtypes
// (ATen rounds the input to them first, or they are not kernel dtypes) stay
// ATen calls.
bool dtype_arg_ok(const Node& n, size_t arg) {
  if (arg >= n.args.size())
    return false;
  const AttrValue& v = n.const_arg(arg);
  if (std::holds_alternative<std::monostate>(v))
    return true;
  const auto* i = std::get_if<int64_t>(&v);
  if (!i)
    return false;
  const auto t = static_cast<c10::ScalarType>(*i);
  return t == n.tensor_arg(0)->dtype || t == c10::ScalarType::Float;
}

// any/all: the input in any dtype the device's pointwise kernels load (the
// kernels test it against zero in its own type), the output bool (uint8 for a
// uint8 input, as ATen).
bool any_all_dtypes_ok(const Node& n) {
  if (n.outputs.size() != 1 || n.inputs.size() != 1)
    return false;
  const Value* x = n.inputs[0];
  const Value* y = n.outputs[0];
  return x->device == y->device &&
      kernel_dtype_supported(x->device.type(), x->dtype) &&
      (y->dtype == c10::ScalarType::Bool || y->dtype == c10::ScalarType::Byte);
}

// cumsum/cumprod of bool or an integer dtype into int64 (ATen's promotion
// with dtype None; or dtype=int64 given), on one device whose pointwise
// kernels load the input: exact int64 scans (wrapping as ATen's).
bool integer_scan(const Node& n) {
  if (n.outputs.size() != 1 || n.inputs.size() != 1)
    return false;
  const Value* x = n.inputs[0];
  const Value* y = n.outputs[0];
  const AttrValue& d = n.const_arg(schema::cumsum::kDtype);
  const bool dtype_ok = std::holds_alternative<std::monostate>(d) ||
      (std::get_if<int64_t>(&d) &&
       static_cast<c10::ScalarType>(std::get<int64_t>(d)) ==
           c10::ScalarType::Long);
  return dtype_ok && x->device == y->device &&
      (x->dtype == c10::ScalarType::Bool ||
       c10::isIntegralType(x->dtype, /*includeBool=*/false)) &&
      kernel_dtype_supported(x->device.type(), x->dtype) &&
      y->dtype == c10::ScalarType::Long;
}

} // namespace

std::optional<ReductionInfo> reduction_info(const Node& n) {
  const OpInfo* op = find_op(n);
  if (!op || op->category != OpCategory::kReduction || n.outputs.empty() ||
      n.args.empty() || n.args[0].kind != Arg::Kind::kTensor)
    return std::nullopt;
  const Value* x = n.tensor_arg(0);
  // Empty inputs (an identity or an error in ATen) and 0-d inputs stay ATen
  // calls.
  if (x->sizes.empty() || x->numel() == 0)
    return std::nullopt;
  const size_t rank = x->sizes.size();
  ReductionInfo info;
  info.domain.sizes = x->sizes;
  info.index.assign(n.outputs.size(), false);
  auto keepdim_level = [&](size_t arg) {
    return std::get<bool>(n.const_arg(arg)) ? Level::kOuterKeep : Level::kOuter;
  };
  const bool all = n.overload == "default" &&
      (n.op == "aten::mean" || n.op == "aten::prod" || n.op == "aten::max" ||
       n.op == "aten::min" || n.op == "aten::any" || n.op == "aten::all");
  std::optional<std::vector<int64_t>> dims;
  switch (op->reduction.kind) {
    case ReductionKind::kSum:
    case ReductionKind::kMean:
    case ReductionKind::kProd:
      if (all) {
        if (!dtype_arg_ok(n, schema::reduce_all::kDtype))
          return std::nullopt;
        dims = normalize_dims(std::monostate{}, rank);
        info.levels = {Level::kOuter};
        break;
      }
      if (op->reduction.kind == ReductionKind::kProd
              ? !dtype_arg_ok(n, schema::sum::kDtype)
              : !std::holds_alternative<std::monostate>(
                    n.const_arg(schema::sum::kDtype)) &&
                  !dtype_arg_ok(n, schema::sum::kDtype))
        return std::nullopt;
      dims = normalize_dims(n.const_arg(schema::sum::kDim), rank);
      info.levels = {keepdim_level(schema::sum::kKeepdim)};
      break;
    case ReductionKind::kAmax:
    case ReductionKind::kAmin:
    case ReductionKind::kLogSumExp:
      if (all) {
        dims = normalize_dims(std::monostate{}, rank);
        info.levels = {Level::kOuter};
        break;
      }
      dims = normalize_dims(n.const_arg(schema::amax::kDim), rank);
      info.levels = {keepdim_level(schema::amax::kKeepdim)};
      break;
    case ReductionKind::kMaxDim:
    case ReductionKind::kMinDim:
      if (!std::get_if<int64_t>(&n.const_arg(schema::amax::kDim)))
        return std::nullopt;
      dims = normalize_dims(n.const_arg(schema::amax::kDim), rank);
      info.levels = {
          keepdim_level(schema::amax::kKeepdim),
          keepdim_level(schema::amax::kKeepdim)};
      info.index = {false, true};
      break;
    case ReductionKind::kArgMax:
    case ReductionKind::kArgMin:
      // dim=None: the index into the flattened input (row-major over all
      // dims); keepdim then keeps every dim as size 1.
      dims = normalize_dims(n.const_arg(schema::amax::kDim), rank);
      info.levels = {keepdim_level(schema::amax::kKeepdim)};
      info.index = {true};
      break;
    case ReductionKind::kVar:
    case ReductionKind::kVarMean: {
      const AttrValue& c = n.const_arg(schema::var::kCorrection);
      if (!std::holds_alternative<std::monostate>(c) &&
          !std::get_if<int64_t>(&c) && !std::get_if<double>(&c))
        return std::nullopt;
      dims = normalize_dims(n.const_arg(schema::var::kDim), rank);
      info.levels.assign(
          n.outputs.size(), keepdim_level(schema::var::kKeepdim));
      break;
    }
    case ReductionKind::kCumSum:
    case ReductionKind::kCumProd:
      if (!std::get_if<int64_t>(&n.const_arg(schema::cumsum::kDim)))
        return std::nullopt;
      dims = normalize_dims(n.const_arg(schema::cumsum::kDim), rank);
      info.levels = {Level::kFull};
      if (integer_scan(n)) {
        if (!dims)
          return std::nullopt;
        info.domain.reduce = *dims;
        info.integer = true;
        return info;
      }
      if (!dtype_arg_ok(n, schema::cumsum::kDtype))
        return std::nullopt;
      break;
    case ReductionKind::kSoftmax:
    case ReductionKind::kLogSoftmax:
      if (std::get<bool>(n.const_arg(schema::softmax::kHalfToFloat)))
        return std::nullopt;
      dims = normalize_dims(n.const_arg(schema::softmax::kDim), rank);
      info.levels = {Level::kFull};
      break;
    case ReductionKind::kLayerNorm: {
      namespace ln = schema::layer_norm;
      const auto* shape =
          std::get_if<std::vector<int64_t>>(&n.const_arg(ln::kNormalizedShape));
      if (!shape || shape->empty() || shape->size() > rank)
        return std::nullopt;
      for (size_t i : {ln::kWeight, ln::kBias}) {
        if (n.args[i].kind == Arg::Kind::kConst &&
            !std::holds_alternative<std::monostate>(n.args[i].value))
          return std::nullopt;
      }
      if (!std::get_if<double>(&n.const_arg(ln::kEps)))
        return std::nullopt;
      std::vector<int64_t> d;
      for (size_t i = rank - shape->size(); i < rank; ++i)
        d.push_back(static_cast<int64_t>(i));
      dims = d;
      info.levels = {Level::kFull, Level::kOuterKeep, Level::kOuterKeep};
      break;
    }
    case ReductionKind::kAny:
    case ReductionKind::kAll:
      // any(x), any.dim(x, int, keepdim), any.dims(x, int[]?, keepdim).
      if (all) {
        dims = normalize_dims(std::monostate{}, rank);
        info.levels = {Level::kOuter};
      } else {
        dims = normalize_dims(n.const_arg(schema::amax::kDim), rank);
        info.levels = {keepdim_level(schema::amax::kKeepdim)};
      }
      if (!dims || !any_all_dtypes_ok(n))
        return std::nullopt;
      info.domain.reduce = *dims;
      return info;
    case ReductionKind::kNone:
      return std::nullopt;
  }
  if (!dims || info.levels.size() != n.outputs.size() ||
      !reduction_dtypes_ok(n, info.index))
    return std::nullopt;
  info.domain.reduce = *dims;
  return info;
}

} // namespace torch_plugin::compiler::fusion_detail
