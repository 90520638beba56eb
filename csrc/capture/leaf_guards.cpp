// leaf_guards.cpp: the leaf guard kinds on Python objects and the helpers of
// every guard's failure message; the guards on tensors and on torch's global
// state are in tensor_guards.cpp (see leaf_guards.h for the contract:
// checks never raise and create no Python objects; references are borrowed
// except the objects a guard remembers, which it holds strongly; GIL held).
#include "capture/leaf_guards.h"

#include <torch/csrc/autograd/python_variable.h>

#include <exception>
#include <optional>
#include <utility>

namespace py = pybind11;

namespace torch_plugin::capture {

std::string expected_got(
    const std::string& what,
    const std::string& expected,
    const std::string& got) {
  return "expected " + what + expected + ", got " + got;
}

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

} // namespace torch_plugin::capture
