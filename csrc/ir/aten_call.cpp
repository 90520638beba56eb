// aten_call.cpp: runs any ATen op of the IR through the PyTorch dispatcher
// (see aten_call.h).
#include "ir/aten_call.h"

#include <ATen/ScalarOps.h>

namespace torch_plugin::ir {
namespace {

bool is_optional_tensor_list(const c10::TypePtr& t) {
  auto list = t->castRaw<c10::ListType>();
  return list && list->getElementType()->kind() == c10::TypeKind::OptionalType;
}

c10::TypePtr unwrap_optional(const c10::TypePtr& t) {
  if (auto opt = t->castRaw<c10::OptionalType>())
    return opt->getElementType();
  return t;
}

// A Python number given for a Tensor argument (FX allows `mul.Tensor(x, 2)`): a
// 0-dim "wrapped number" tensor, which type promotion treats like a Scalar.
c10::IValue wrapped_number(const AttrValue& v) {
  at::Tensor t;
  if (auto* i = std::get_if<int64_t>(&v))
    t = c10::scalar_to_tensor(c10::Scalar(*i));
  else if (auto* d = std::get_if<double>(&v))
    t = c10::scalar_to_tensor(c10::Scalar(*d));
  else if (auto* b = std::get_if<bool>(&v))
    t = c10::scalar_to_tensor(c10::Scalar(*b));
  else
    TORCH_CHECK(
        false,
        "a constant for a Tensor argument must be a number, got ",
        to_string(v));
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return c10::IValue(t);
}

c10::IValue to_ivalue(const AttrValue& v, const c10::TypePtr& declared) {
  c10::TypePtr type = unwrap_optional(declared);
  if (type->kind() == c10::TypeKind::TensorType &&
      !std::holds_alternative<std::monostate>(v))
    return wrapped_number(v);
  return std::visit(
      [&](const auto& x) -> c10::IValue {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return c10::IValue();
        } else if constexpr (std::is_same_v<T, int64_t>) {
          if (type->kind() == c10::TypeKind::FloatType)
            return c10::IValue(static_cast<double>(x));
          return c10::IValue(x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (type->kind() == c10::TypeKind::DeviceObjType)
            return c10::IValue(c10::Device(x));
          return c10::IValue(x);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          auto list = type->castRaw<c10::ListType>();
          if (list &&
              list->getElementType()->kind() == c10::TypeKind::FloatType)
            return c10::IValue(std::vector<double>(x.begin(), x.end()));
          return c10::IValue(x);
        } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
          c10::List<bool> list;
          for (bool b : x)
            list.push_back(b);
          return c10::IValue(list);
        } else {
          return c10::IValue(x);
        }
      },
      v);
}

} // namespace

AtenCall::AtenCall(const Node& node, const TableIndex& index_of)
    : name_(node.qualified_name()),
      op_(c10::Dispatcher::singleton().findSchemaOrThrow(
          node.op.c_str(),
          node.overload == "default" ? "" : node.overload.c_str())) {
  const auto& schema = op_.schema();
  const auto& arguments = schema.arguments();
  TORCH_CHECK(
      node.args.size() <= arguments.size(),
      name_,
      ": ",
      node.args.size(),
      " arguments given, the schema has ",
      arguments.size());
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (i >= node.args.size()) {
      TORCH_CHECK(
          arguments[i].default_value().has_value(),
          name_,
          ": argument ",
          arguments[i].name(),
          " missing");
      stack_template_.push_back(*arguments[i].default_value());
      continue;
    }
    const Arg& a = node.args[i];
    if (a.kind == Arg::Kind::kConst) {
      stack_template_.push_back(to_ivalue(a.value, arguments[i].type()));
      continue;
    }
    stack_template_.emplace_back();
    TensorArg t;
    t.position = i;
    t.is_list = a.kind == Arg::Kind::kTensorList;
    t.optional_elements =
        t.is_list && is_optional_tensor_list(arguments[i].type());
    for (int64_t idx : a.inputs)
      t.slots.push_back(idx < 0 ? -1 : index_of(node.inputs[idx]));
    tensor_args_.push_back(std::move(t));
  }
  for (const Value* out : node.outputs) {
    out_slots_.push_back(index_of(out));
    out_dtypes_.push_back(out->dtype);
  }
}

void AtenCall::run(std::vector<at::Tensor>& slots) const {
  torch::jit::Stack stack(stack_template_);
  for (const TensorArg& t : tensor_args_) {
    if (!t.is_list) {
      stack[t.position] = slots[t.slots[0]];
    } else if (t.optional_elements) {
      c10::List<std::optional<at::Tensor>> list;
      for (int s : t.slots)
        list.push_back(s < 0 ? std::nullopt : std::optional(slots[s]));
      stack[t.position] = c10::IValue(list);
    } else {
      c10::List<at::Tensor> list;
      for (int s : t.slots)
        list.push_back(slots[s]);
      stack[t.position] = c10::IValue(list);
    }
  }
  op_.callBoxed(stack);
  // The result as its IR value's dtype (see run's comment in aten_call.h).
  auto store = [&](size_t k, at::Tensor t) {
    if (k >= out_slots_.size())
      return;
    if (t.defined() && t.scalar_type() != out_dtypes_[k] &&
        at::isFloatingType(t.scalar_type()) &&
        at::isFloatingType(out_dtypes_[k]))
      t = t.to(out_dtypes_[k]);
    slots[out_slots_[k]] = std::move(t);
  };
  size_t k = 0;
  for (c10::IValue& r : stack) {
    if (r.isTensor()) {
      store(k, r.toTensor());
      ++k;
    } else if (r.isTensorList()) {
      for (const at::Tensor& e : r.toTensorVector()) {
        store(k, e);
        ++k;
      }
    } else if (r.isNone()) {
      ++k;
    }
  }
}

} // namespace torch_plugin::ir
