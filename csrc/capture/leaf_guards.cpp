// leaf_guards.cpp: the leaf guard kinds (see leaf_guards.h for the contract:
// checks never raise and create no Python objects; references are borrowed
// except the objects a guard remembers, which it holds strongly; GIL held).
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

std::string expected_got(
    const std::string& what,
    const std::string& expected,
    const std::string& got) {
  return "expected " + what + expected + ", got " + got;
}

std::string bool_for_message(bool b) {
  return b ? "True" : "False";
}

} // namespace

std::string repr_for_message(PyObject* obj, size_t limit) {
  if (obj == nullptr) {
    return "<NULL>";
  }
  PyObject* repr = PyObject_Repr(obj);
  if (repr == nullptr) {
    PyErr_Clear();
    return "<" + type_name_for_message(Py_TYPE(obj)) + " object (repr failed)>";
  }
  Py_ssize_t size = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(repr, &size);
  std::string text =
      utf8 ? std::string(utf8, static_cast<size_t>(size)) : "<repr>";
  if (utf8 == nullptr) {
    PyErr_Clear();
  }
  Py_DECREF(repr);
  if (text.size() > limit) {
    text = text.substr(0, limit) + "...";
  }
  return text;
}

std::string type_name_for_message(PyTypeObject* type) {
  PyObject* qualname = PyType_GetQualName(type);
  PyObject* module =
      PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "__module__");
  std::string name = type->tp_name;
  if (qualname != nullptr && PyUnicode_Check(qualname)) {
    name = PyUnicode_AsUTF8(qualname);
    if (module != nullptr && PyUnicode_Check(module) &&
        PyUnicode_CompareWithASCIIString(module, "builtins") != 0) {
      name = std::string(PyUnicode_AsUTF8(module)) + "." + name;
    }
  }
  Py_XDECREF(qualname);
  Py_XDECREF(module);
  PyErr_Clear();
  return name;
}

std::string take_error_for_message() {
  if (!PyErr_Occurred()) {
    return "";
  }
  PyObject *type = nullptr, *value = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  std::string text = type
      ? type_name_for_message(reinterpret_cast<PyTypeObject*>(type))
      : std::string("error");
  if (value != nullptr) {
    PyObject* str = PyObject_Str(value);
    if (str != nullptr && PyUnicode_Check(str) &&
        PyUnicode_GetLength(str) > 0) {
      text += ": ";
      const char* utf8 = PyUnicode_AsUTF8(str);
      text += utf8 ? utf8 : "?";
    }
    Py_XDECREF(str);
  }
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(traceback);
  PyErr_Clear();
  return text;
}

LeafGuard::LeafGuard(std::string description)
    : description_(std::move(description)) {}

std::string LeafGuard::explain_failure(
    PyObject* value,
    const std::string& /*source*/) const {
  return description_ + ": " + mismatch(value);
}

// --- TYPE_MATCH
// ----------------------------------------------------------------

TypeMatch::TypeMatch(py::handle type, std::string description)
    : LeafGuard(std::move(description)) {
  if (!PyType_Check(type.ptr())) {
    throw py::type_error(
        "add_type_match expects a type, got " +
        type_name_for_message(Py_TYPE(type.ptr())));
  }
  type_ = py::reinterpret_borrow<py::object>(type);
}

bool TypeMatch::check(PyObject* value) const {
  return reinterpret_cast<PyObject*>(Py_TYPE(value)) == type_.ptr();
}

std::string TypeMatch::explain_failure(
    PyObject* value,
    const std::string& source) const {
  return "type(" + source + ") is " +
      type_name_for_message(reinterpret_cast<PyTypeObject*>(type_.ptr())) +
      " failed: got " + type_name_for_message(Py_TYPE(value));
}

std::string TypeMatch::mismatch(PyObject* value) const {
  return expected_got(
      "type ",
      type_name_for_message(reinterpret_cast<PyTypeObject*>(type_.ptr())),
      type_name_for_message(Py_TYPE(value)));
}

// --- ID_MATCH
// ------------------------------------------------------------------

IdMatch::IdMatch(py::handle obj, std::string description, bool weak)
    : LeafGuard(std::move(description)),
      ptr_(obj.ptr()),
      obj_(weak ? py::object() : py::reinterpret_borrow<py::object>(obj)) {}

bool IdMatch::check(PyObject* value) const {
  return value == ptr_;
}

std::string IdMatch::explain_failure(PyObject* value, const std::string& source)
    const {
  return source + " is <the object seen at capture> failed: " + mismatch(value);
}

std::string IdMatch::mismatch(PyObject* value) const {
  auto id_of = [](PyObject* o) {
    return std::to_string(reinterpret_cast<uintptr_t>(o));
  };
  // Alive when weak: a tree whose watched object died reports that instead
  // (RootGuardManager::failure_reason) and runs no leaf.
  std::string out = "expected the object " + repr_for_message(ptr_) + " (id " +
      id_of(ptr_) + "), got " + repr_for_message(value) + " (id " +
      id_of(value) + ")";
  return out;
}

// --- EQUALS_MATCH
// --------------------------------------------------------------

EqualsMatch::EqualsMatch(py::handle expected, std::string description)
    : LeafGuard(std::move(description)),
      expected_(py::reinterpret_borrow<py::object>(expected)) {}

bool EqualsMatch::check(PyObject* value) const {
  if (Py_TYPE(value) != Py_TYPE(expected_.ptr())) {
    return false;
  }
  int equal = PyObject_RichCompareBool(value, expected_.ptr(), Py_EQ);
  if (equal < 0) {
    PyErr_Clear();
    return false;
  }
  return equal == 1;
}

std::string EqualsMatch::explain_failure(
    PyObject* value,
    const std::string& source) const {
  std::string got = Py_TYPE(value) == Py_TYPE(expected_.ptr())
      ? repr_for_message(value)
      : repr_for_message(value) + " of type " +
          type_name_for_message(Py_TYPE(value));
  if (Py_TYPE(value) == Py_TYPE(expected_.ptr()) &&
      PyObject_RichCompareBool(value, expected_.ptr(), Py_EQ) < 0) {
    got += " (== raised " + take_error_for_message() + ")";
  }
  return source + " == " + repr_for_message(expected_.ptr()) + " failed: got " +
      got;
}

std::string EqualsMatch::mismatch(PyObject* value) const {
  if (Py_TYPE(value) != Py_TYPE(expected_.ptr())) {
    return expected_got(
        "type ",
        type_name_for_message(Py_TYPE(expected_.ptr())),
        type_name_for_message(Py_TYPE(value)));
  }
  std::string got = repr_for_message(value);
  if (PyObject_RichCompareBool(value, expected_.ptr(), Py_EQ) < 0) {
    got += " (== raised " + take_error_for_message() + ")";
  }
  return expected_got("", repr_for_message(expected_.ptr()), got);
}

// --- LEN_MATCH
// -----------------------------------------------------------------

LenMatch::LenMatch(Py_ssize_t n, std::string description)
    : LeafGuard(std::move(description)), n_(n) {}

bool LenMatch::check(PyObject* value) const {
  Py_ssize_t n = PyObject_Size(value);
  if (n < 0) {
    PyErr_Clear();
    return false;
  }
  return n == n_;
}

std::string LenMatch::explain_failure(
    PyObject* value,
    const std::string& source) const {
  Py_ssize_t n = PyObject_Size(value);
  std::string got =
      n < 0 ? "len() raised " + take_error_for_message() : std::to_string(n);
  return "len(" + source + ") == " + std::to_string(n_) + " failed: got " + got;
}

std::string LenMatch::mismatch(PyObject* value) const {
  Py_ssize_t n = PyObject_Size(value);
  if (n < 0) {
    return "expected len " + std::to_string(n_) + ", len() raised " +
        take_error_for_message();
  }
  return expected_got("len ", std::to_string(n_), std::to_string(n));
}

// --- DICT_KEYS_MATCH
// -----------------------------------------------------------

DictKeysMatch::DictKeysMatch(
    std::vector<py::object> keys,
    std::string description)
    : LeafGuard(std::move(description)), keys_(std::move(keys)) {}

bool DictKeysMatch::check(PyObject* value) const {
  if (!PyDict_Check(value) ||
      PyDict_GET_SIZE(value) != static_cast<Py_ssize_t>(keys_.size())) {
    return false;
  }
  if (!PyDict_CheckExact(value)) {
    // Subclasses (OrderedDict) may keep their own order: ask them.
    PyObject* keys = PyMapping_Keys(value);
    if (keys == nullptr) {
      PyErr_Clear();
      return false;
    }
    bool ok = PyList_GET_SIZE(keys) == static_cast<Py_ssize_t>(keys_.size());
    for (Py_ssize_t i = 0; ok && i < PyList_GET_SIZE(keys); ++i) {
      int eq = PyObject_RichCompareBool(
          PyList_GET_ITEM(keys, i), keys_[i].ptr(), Py_EQ);
      ok = eq == 1;
    }
    Py_DECREF(keys);
    PyErr_Clear();
    return ok;
  }
  Py_ssize_t pos = 0;
  PyObject* key = nullptr;
  size_t i = 0;
  while (PyDict_Next(value, &pos, &key, nullptr)) {
    if (i >= keys_.size()) {
      return false;
    }
    // RichCompareBool tries identity first: the usual interned-str case is
    // cheap. A key's __eq__ may mutate the dict: hold the key, recheck the
    // size.
    Py_INCREF(key);
    int eq = PyObject_RichCompareBool(key, keys_[i].ptr(), Py_EQ);
    Py_DECREF(key);
    if (eq != 1 ||
        PyDict_GET_SIZE(value) != static_cast<Py_ssize_t>(keys_.size())) {
      PyErr_Clear();
      return false;
    }
    ++i;
  }
  return i == keys_.size();
}

std::string DictKeysMatch::mismatch(PyObject* value) const {
  if (!PyDict_Check(value)) {
    return "expected a dict, got " + type_name_for_message(Py_TYPE(value));
  }
  py::list expected;
  for (const py::object& k : keys_) {
    expected.append(k);
  }
  PyObject* got = PyMapping_Keys(value);
  std::string got_text =
      got ? repr_for_message(got, 200) : take_error_for_message();
  Py_XDECREF(got);
  return expected_got("keys ", repr_for_message(expected.ptr(), 200), got_text);
}

// --- NOT_IN_DICT
// ---------------------------------------------------------------

NotInDict::NotInDict(py::object key, std::string description)
    : LeafGuard(std::move(description)), key_(std::move(key)) {}

bool NotInDict::check(PyObject* value) const {
  if (!PyDict_Check(value)) {
    return false;
  }
  int found = PyDict_Contains(value, key_.ptr());
  if (found < 0) {
    PyErr_Clear();
    return false;
  }
  return found == 0;
}

std::string NotInDict::mismatch(PyObject* value) const {
  if (!PyDict_Check(value)) {
    return "expected a dict, got " + type_name_for_message(Py_TYPE(value));
  }
  return "expected no key " + repr_for_message(key_.ptr(), 80) + ", found one";
}

// --- EMPTY_ATTR_DICTS
// ----------------------------------------------------------

EmptyAttrDicts::EmptyAttrDicts(
    std::vector<std::string> names,
    std::string description)
    : LeafGuard(std::move(description)) {
  for (const std::string& name : names) {
    names_.push_back(
        py::reinterpret_steal<py::object>(
            PyUnicode_InternFromString(name.c_str())));
  }
}

// Index of the first name whose dict is not empty (or cannot be read), -1
// when all are empty, names_.size() when `value` has no instance __dict__. No
// allocation on this path (it is the guard's hot path).
Py_ssize_t EmptyAttrDicts::first_nonempty(PyObject* value) const {
  PyObject** dict_ptr = _PyObject_GetDictPtr(value);
  if (dict_ptr == nullptr || *dict_ptr == nullptr) {
    return static_cast<Py_ssize_t>(names_.size());
  }
  for (size_t i = 0; i < names_.size(); ++i) {
    PyObject* entry = PyDict_GetItemWithError(*dict_ptr, names_[i].ptr());
    if (entry == nullptr) {
      if (PyErr_Occurred()) {
        PyErr_Clear();
        return static_cast<Py_ssize_t>(i);
      }
      continue;
    }
    Py_ssize_t n =
        PyDict_Check(entry) ? PyDict_GET_SIZE(entry) : PyObject_Size(entry);
    if (n != 0) {
      PyErr_Clear();
      return static_cast<Py_ssize_t>(i);
    }
  }
  return -1;
}

bool EmptyAttrDicts::check(PyObject* value) const {
  return first_nonempty(value) < 0;
}

std::string EmptyAttrDicts::mismatch(PyObject* value) const {
  Py_ssize_t i = first_nonempty(value);
  if (i == static_cast<Py_ssize_t>(names_.size())) {
    return "expected an object with a __dict__, got " +
        type_name_for_message(Py_TYPE(value));
  }
  if (i < 0) {
    return "no mismatch";
  }
  return "expected " + names_[static_cast<size_t>(i)].cast<std::string>() +
      " empty, it is not";
}

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
