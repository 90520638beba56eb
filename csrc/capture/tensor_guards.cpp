// tensor_guards.cpp: the leaf guards on torch's state: TENSOR_MATCH (a
// tensor's type, dispatch keys, dtype, device, sizes, strides and
// requires_grad) and GLOBAL_STATE (grad mode, default dtype, autocast and the
// backends' flags). See leaf_guards.h for the contract: checks never raise and
// create no Python objects; references are borrowed except the objects a guard
// remembers, which it holds strongly; GIL held.
#include "capture/leaf_guards.h"

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/autograd/python_variable.h>

#include <exception>
#include <optional>
#include <utility>

namespace py = pybind11;

namespace torch_plugin::capture {
namespace {

// The dispatch keys a tensor would dispatch on in this thread: its key set with
// the thread-local include/exclude modifiers applied (as Dynamo's TensorCheck).
c10::DispatchKeySet effective_dispatch_keys(const at::Tensor& tensor) {
  c10::impl::LocalDispatchKeySet local =
      c10::impl::tls_local_dispatch_key_set();
  return (tensor.key_set() | local.included_) - local.excluded_;
}

// Concrete sizes or strides, or nullopt when some are symbolic.
std::optional<std::vector<int64_t>> concrete(c10::SymIntArrayRef values) {
  std::vector<int64_t> out;
  out.reserve(values.size());
  for (const c10::SymInt& v : values) {
    std::optional<int64_t> i = v.maybe_as_int();
    if (!i.has_value()) {
      return std::nullopt;
    }
    out.push_back(*i);
  }
  return out;
}

// True when `values` are concrete and equal `expected`.
bool same_ints(
    c10::SymIntArrayRef values,
    const std::vector<int64_t>& expected) {
  if (values.size() != expected.size()) {
    return false;
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] == kAnySize) {
      continue; // a dynamic dimension: the shape guards check it
    }
    std::optional<int64_t> v = values[i].maybe_as_int();
    if (!v.has_value() || *v != expected[i]) {
      return false;
    }
  }
  return true;
}

// Built with std::to_string. (An ostringstream here once crashed in
// std::num_put on the GPU machine: its /opt/gcc toolchain linked a private
// static libstdc++ into the module. CMakeLists.txt now links torch's shared
// libstdc++, which fixes iostreams too.)
std::string ints_for_message(const std::vector<int64_t>& values) {
  std::string out = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) {
      out += ", ";
    }
    out += values[i] == kAnySize ? std::string("*") : std::to_string(values[i]);
  }
  out += "]";
  return out;
}

std::string ints_for_message(c10::SymIntArrayRef values) {
  std::optional<std::vector<int64_t>> ints = concrete(values);
  return ints ? ints_for_message(*ints) : std::string("<symbolic>");
}

std::string dtype_for_message(c10::ScalarType dtype) {
  return repr_for_message(
      reinterpret_cast<PyObject*>(torch::getTHPDtype(dtype)));
}

std::string bool_for_message(bool b) {
  return b ? "True" : "False";
}

} // namespace

// --- TENSOR_MATCH
// --------------------------------------------------------------

namespace {

const at::Tensor& example_tensor(py::handle example) {
  if (!THPVariable_Check(example.ptr())) {
    throw py::type_error(
        "add_tensor_match expects a torch.Tensor, got " +
        type_name_for_message(Py_TYPE(example.ptr())));
  }
  return THPVariable_Unpack(example.ptr());
}

} // namespace

TensorMatch::TensorMatch(
    py::handle example,
    std::string description,
    bool check_strides,
    const std::vector<bool>& dynamic_sizes,
    const std::vector<bool>& dynamic_strides)
    : LeafGuard(std::move(description)),
      type_(
          py::reinterpret_borrow<py::object>(
              reinterpret_cast<PyObject*>(Py_TYPE(example.ptr())))),
      dispatch_keys_(effective_dispatch_keys(example_tensor(example))),
      dtype_(example_tensor(example).scalar_type()),
      device_(example_tensor(example).device()),
      requires_grad_(example_tensor(example).requires_grad()),
      layout_(example_tensor(example).layout()),
      check_strides_(check_strides && layout_ == c10::kStrided) {
  const at::Tensor& tensor = example_tensor(example);
  std::optional<std::vector<int64_t>> sizes = concrete(tensor.sym_sizes());
  if (!sizes) {
    throw py::value_error(
        "add_tensor_match: the example tensor has symbolic sizes");
  }
  sizes_ = std::move(*sizes);
  if (dynamic_sizes.size() > sizes_.size() ||
      dynamic_strides.size() > sizes_.size()) {
    throw py::value_error(
        "add_tensor_match: more dynamic-dimension flags than the example's " +
        std::to_string(sizes_.size()) + " dimensions");
  }
  for (size_t i = 0; i < dynamic_sizes.size(); ++i) {
    if (dynamic_sizes[i]) {
      sizes_[i] = kAnySize;
    }
  }
  if (check_strides_) {
    std::optional<std::vector<int64_t>> strides =
        concrete(tensor.sym_strides());
    if (!strides) {
      throw py::value_error(
          "add_tensor_match: the example tensor has symbolic strides");
    }
    strides_ = std::move(*strides);
    for (size_t i = 0; i < dynamic_strides.size(); ++i) {
      if (dynamic_strides[i]) {
        strides_[i] = kAnySize;
      }
    }
  }
}

bool TensorMatch::check(PyObject* value) const {
  // The exact Python type first: when it matches, `value` is a THPVariable.
  if (reinterpret_cast<PyObject*>(Py_TYPE(value)) != type_.ptr()) {
    return false;
  }
  try {
    const at::Tensor& tensor = THPVariable_Unpack(value);
    if (effective_dispatch_keys(tensor) != dispatch_keys_ ||
        tensor.scalar_type() != dtype_ || tensor.device() != device_ ||
        tensor.requires_grad() != requires_grad_ ||
        tensor.layout() != layout_) {
      return false;
    }
    if (!same_ints(tensor.sym_sizes(), sizes_)) {
      return false;
    }
    return !check_strides_ || same_ints(tensor.sym_strides(), strides_);
  } catch (const std::exception&) {
    // E.g. nested tensors, whose sizes() throws: not a match.
    return false;
  }
}

std::string TensorMatch::explain_failure(
    PyObject* value,
    const std::string& source) const {
  if (reinterpret_cast<PyObject*>(Py_TYPE(value)) != type_.ptr()) {
    return "type(" + source + ") is " +
        type_name_for_message(reinterpret_cast<PyTypeObject*>(type_.ptr())) +
        " failed: got " + type_name_for_message(Py_TYPE(value));
  }
  std::string detail = " (" + mismatch(value) + ")";
  try {
    const at::Tensor& tensor = THPVariable_Unpack(value);
    auto failed = [&](const std::string& check, const std::string& got) {
      return source + check + " failed: got " + got + detail;
    };
    if (tensor.scalar_type() != dtype_) {
      return failed(
          ".dtype == " + dtype_for_message(dtype_),
          dtype_for_message(tensor.scalar_type()));
    }
    if (tensor.device() != device_) {
      return failed(
          ".device == '" + device_.str() + "'",
          "'" + tensor.device().str() + "'");
    }
    if (tensor.requires_grad() != requires_grad_) {
      return failed(
          ".requires_grad == " + bool_for_message(requires_grad_),
          bool_for_message(tensor.requires_grad()));
    }
    std::optional<std::vector<int64_t>> sizes = concrete(tensor.sym_sizes());
    if (sizes && sizes->size() != sizes_.size()) {
      return failed(
          ".dim() == " + std::to_string(sizes_.size()),
          std::to_string(sizes->size()));
    }
    for (size_t i = 0; sizes && i < sizes_.size(); ++i) {
      if (sizes_[i] != kAnySize && (*sizes)[i] != sizes_[i]) {
        return failed(
            ".size()[" + std::to_string(i) +
                "] == " + std::to_string(sizes_[i]),
            std::to_string((*sizes)[i]));
      }
    }
    std::optional<std::vector<int64_t>> strides =
        check_strides_ ? concrete(tensor.sym_strides()) : std::nullopt;
    for (size_t i = 0; strides && i < strides_.size() && i < strides->size();
         ++i) {
      if (strides_[i] != kAnySize && (*strides)[i] != strides_[i]) {
        return failed(
            ".stride()[" + std::to_string(i) +
                "] == " + std::to_string(strides_[i]),
            std::to_string((*strides)[i]));
      }
    }
  } catch (const std::exception&) {
    // Fall through to the general text.
  }
  return source + " tensor check failed: " + mismatch(value);
}

std::string TensorMatch::mismatch(PyObject* value) const {
  if (reinterpret_cast<PyObject*>(Py_TYPE(value)) != type_.ptr()) {
    return expected_got(
        "type ",
        type_name_for_message(reinterpret_cast<PyTypeObject*>(type_.ptr())),
        type_name_for_message(Py_TYPE(value)));
  }
  try {
    const at::Tensor& tensor = THPVariable_Unpack(value);
    c10::DispatchKeySet keys = effective_dispatch_keys(tensor);
    if (keys != dispatch_keys_) {
      return expected_got(
          "dispatch keys ", c10::toString(dispatch_keys_), c10::toString(keys));
    }
    if (tensor.scalar_type() != dtype_) {
      return expected_got(
          "dtype ",
          dtype_for_message(dtype_),
          dtype_for_message(tensor.scalar_type()));
    }
    if (tensor.device() != device_) {
      return expected_got("device ", device_.str(), tensor.device().str());
    }
    if (tensor.requires_grad() != requires_grad_) {
      return expected_got(
          "requires_grad ",
          bool_for_message(requires_grad_),
          bool_for_message(tensor.requires_grad()));
    }
    if (tensor.layout() != layout_) {
      return expected_got(
          "layout ",
          repr_for_message(
              reinterpret_cast<PyObject*>(torch::getTHPLayout(layout_))),
          repr_for_message(
              reinterpret_cast<PyObject*>(
                  torch::getTHPLayout(tensor.layout()))));
    }
    if (!same_ints(tensor.sym_sizes(), sizes_)) {
      return expected_got(
          "size ",
          ints_for_message(sizes_),
          ints_for_message(tensor.sym_sizes()));
    }
    if (check_strides_ && !same_ints(tensor.sym_strides(), strides_)) {
      return expected_got(
          "stride ",
          ints_for_message(strides_),
          ints_for_message(tensor.sym_strides()));
    }
    return "no mismatch found on a second look";
  } catch (const std::exception& e) {
    return std::string("reading the tensor's metadata raised: ") + e.what();
  }
}

// --- GLOBAL_STATE
// --------------------------------------------------------------

namespace {

enum class FieldKind { kBool, kDtype, kMatmulPrecision, kReduction };

constexpr FieldKind kFieldKinds[GlobalState::kNumFields] = {
    FieldKind::kBool, // grad mode
    FieldKind::kDtype, // default dtype
    FieldKind::kBool, // autocast cpu
    FieldKind::kDtype, // autocast cpu dtype
    FieldKind::kBool, // autocast cuda
    FieldKind::kDtype, // autocast cuda dtype
    FieldKind::kBool, // deterministic
    FieldKind::kBool, // deterministic warn only
    FieldKind::kBool, // cudnn enabled
    FieldKind::kBool, // cudnn benchmark
    FieldKind::kBool, // cudnn deterministic
    FieldKind::kBool, // cudnn allow_tf32
    FieldKind::kBool, // cublas allow_tf32
    FieldKind::kReduction, // fp16 reduction
    FieldKind::kReduction, // bf16 reduction
    FieldKind::kMatmulPrecision,
    FieldKind::kBool, // fp16 accumulation
};

// Set while a GlobalStateMatch::Memo is alive on this thread.
thread_local int tls_memo_depth = 0;
thread_local bool tls_memo_valid = false;
thread_local GlobalState tls_memo_state;

} // namespace

const char* const GlobalState::kNames[GlobalState::kNumFields] = {
    "torch.is_grad_enabled()",
    "torch.get_default_dtype()",
    "torch.is_autocast_enabled('cpu')",
    "torch.get_autocast_dtype('cpu')",
    "torch.is_autocast_enabled('cuda')",
    "torch.get_autocast_dtype('cuda')",
    "torch.are_deterministic_algorithms_enabled()",
    "torch.is_deterministic_algorithms_warn_only_enabled()",
    "torch.backends.cudnn.enabled",
    "torch.backends.cudnn.benchmark",
    "torch.backends.cudnn.deterministic",
    "torch.backends.cudnn.allow_tf32",
    "torch.backends.cuda.matmul.allow_tf32",
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
    "torch.get_float32_matmul_precision()",
    "torch.backends.cuda.matmul.allow_fp16_accumulation",
};

GlobalState GlobalState::current() {
  at::Context& ctx = at::globalContext();
  GlobalState s;
  int64_t* f = s.fields;
  f[0] = at::GradMode::is_enabled();
  f[1] = static_cast<int64_t>(c10::get_default_dtype_as_scalartype());
  f[2] = at::autocast::is_autocast_enabled(at::kCPU);
  f[3] = static_cast<int64_t>(at::autocast::get_autocast_dtype(at::kCPU));
  f[4] = at::autocast::is_autocast_enabled(at::kCUDA);
  f[5] = static_cast<int64_t>(at::autocast::get_autocast_dtype(at::kCUDA));
  f[6] = ctx.deterministicAlgorithms();
  f[7] = ctx.deterministicAlgorithmsWarnOnly();
  f[8] = ctx.userEnabledCuDNN();
  f[9] = ctx.benchmarkCuDNN();
  f[10] = ctx.deterministicCuDNN();
  f[11] = ctx.allowTF32CuDNN();
  f[12] = ctx.allowTF32CuBLAS();
  f[13] = static_cast<int64_t>(ctx.allowFP16ReductionCuBLAS());
  f[14] = static_cast<int64_t>(ctx.allowBF16ReductionCuBLAS());
  f[15] = static_cast<int64_t>(ctx.float32MatmulPrecision());
  f[16] = ctx.allowFP16AccumulationCuBLAS();
  return s;
}

bool GlobalState::operator==(const GlobalState& other) const {
  return first_difference(other) < 0;
}

int GlobalState::first_difference(const GlobalState& other) const {
  for (int i = 0; i < kNumFields; ++i) {
    if (fields[i] != other.fields[i]) {
      return i;
    }
  }
  return -1;
}

std::string GlobalState::field_text(int i) const {
  int64_t v = fields[i];
  switch (kFieldKinds[i]) {
    case FieldKind::kBool:
      return bool_for_message(v != 0);
    case FieldKind::kDtype:
      return dtype_for_message(static_cast<c10::ScalarType>(v));
    case FieldKind::kMatmulPrecision:
      return v == 0 ? "'highest'" : v == 1 ? "'high'" : "'medium'";
    case FieldKind::kReduction:
      return v == 0 ? "True" : v == 1 ? "False" : "False (split-K off)";
  }
  return std::to_string(v);
}

GlobalStateMatch::Memo::Memo() {
  if (tls_memo_depth++ == 0) {
    tls_memo_valid = false;
  }
}

GlobalStateMatch::Memo::~Memo() {
  if (--tls_memo_depth == 0) {
    tls_memo_valid = false;
  }
}

GlobalStateMatch::GlobalStateMatch(std::string description)
    : LeafGuard(std::move(description)), expected_(GlobalState::current()) {}

bool GlobalStateMatch::check(PyObject* /*value*/) const {
  try {
    if (tls_memo_depth == 0) {
      return GlobalState::current() == expected_;
    }
    if (!tls_memo_valid) {
      tls_memo_state = GlobalState::current();
      tls_memo_valid = true;
    }
    return tls_memo_state == expected_;
  } catch (const std::exception&) {
    return false;
  }
}

std::string GlobalStateMatch::mismatch(PyObject* /*value*/) const {
  GlobalState now = GlobalState::current();
  int i = expected_.first_difference(now);
  if (i < 0) {
    return "no mismatch found on a second look";
  }
  if (i == 0) {
    auto mode = [](int64_t enabled) {
      return enabled ? "enabled" : "disabled";
    };
    return std::string("expected grad mode ") + mode(expected_.fields[0]) +
        ", got " + mode(now.fields[0]);
  }
  return std::string("expected ") + GlobalState::kNames[i] + " " +
      expected_.field_text(i) + ", got " + now.field_text(i);
}

std::string GlobalStateMatch::explain_failure(
    PyObject* /*value*/,
    const std::string& /*source*/) const {
  GlobalState now = GlobalState::current();
  int i = expected_.first_difference(now);
  if (i < 0) {
    return "global state: no mismatch found on a second look";
  }
  return std::string(GlobalState::kNames[i]) +
      " == " + expected_.field_text(i) + " failed: got " + now.field_text(i);
}

} // namespace torch_plugin::capture
