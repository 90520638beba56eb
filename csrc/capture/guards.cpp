// guards.cpp: guard tree evaluation and the accessor kinds (see guards.h for
// ownership: accessors return NEW references; FrameValues borrows; GIL held).
#include "capture/guards.h"

#include <utility>

namespace py = pybind11;

namespace torch_plugin::capture {
namespace {

// An interned str: dict lookups and getattr compare such names by identity
// first.
py::object interned(const std::string& name) {
  PyObject* s = PyUnicode_InternFromString(name.c_str());
  if (s == nullptr) {
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(s);
}

// --- root accessors: read from the frame
// -----------------------------------------

class LocalAccessor : public GuardAccessor {
 public:
  LocalAccessor(int slot, const std::string& name)
      : GuardAccessor(name), slot_(slot) {}

  PyObject* access(PyObject* /*parent*/, const FrameValues& frame)
      const override {
    if (slot_ >= frame.nargs || frame.args[slot_] == nullptr) {
      return nullptr;
    }
    return Py_NewRef(frame.args[slot_]);
  }

  std::string what() const override {
    return "argument slot " + std::to_string(slot_);
  }

  int slot() const {
    return slot_;
  }

 private:
  Py_ssize_t slot_;
};

class GlobalAccessor : public GuardAccessor {
 public:
  explicit GlobalAccessor(const std::string& name)
      : GuardAccessor("G['" + name + "']"),
        name_(interned(name)),
        name_text_(name) {}

  PyObject* access(PyObject* /*parent*/, const FrameValues& frame)
      const override {
    PyObject* value = PyDict_GetItemWithError(frame.globals, name_.ptr());
    if (value == nullptr && !PyErr_Occurred() && frame.builtins != nullptr) {
      value = PyDict_GetItemWithError(frame.builtins, name_.ptr());
    }
    return Py_XNewRef(value);
  }

  std::string what() const override {
    return "global '" + name_text_ + "'";
  }

  const std::string& name() const {
    return name_text_;
  }

 private:
  py::object name_;
  std::string name_text_;
};

class ClosureAccessor : public GuardAccessor {
 public:
  ClosureAccessor(int index, const std::string& name)
      : GuardAccessor(name), index_(index) {}

  PyObject* access(PyObject* /*parent*/, const FrameValues& frame)
      const override {
    if (frame.closure == nullptr || index_ >= PyTuple_GET_SIZE(frame.closure)) {
      return nullptr;
    }
    PyObject* cell = PyTuple_GET_ITEM(frame.closure, index_);
    if (!PyCell_Check(cell)) {
      return nullptr;
    }
    return Py_XNewRef(PyCell_GET(cell)); // nullptr for an empty cell
  }

  std::string what() const override {
    return "closure cell " + std::to_string(index_);
  }

  int index() const {
    return static_cast<int>(index_);
  }

 private:
  Py_ssize_t index_;
};

// A fixed object known when the guard was built (e.g. the globals dict of an
// inlined function's module). Holds a strong reference; returns a NEW
// reference.
class ObjectAccessor : public GuardAccessor {
 public:
  ObjectAccessor(py::handle obj, const std::string& name)
      : GuardAccessor(name), obj_(py::reinterpret_borrow<py::object>(obj)) {}

  PyObject* access(PyObject* /*parent*/, const FrameValues& /*frame*/)
      const override {
    return Py_NewRef(obj_.ptr());
  }

  std::string what() const override {
    return "fixed object";
  }

  PyObject* object() const {
    return obj_.ptr();
  }

 private:
  py::object obj_;
};

// --- child accessors: read from the parent value
// --------------------------------

class AttrAccessor : public GuardAccessor {
 public:
  AttrAccessor(const std::string& parent_source, const std::string& name)
      : GuardAccessor(parent_source + "." + name),
        name_(interned(name)),
        name_text_(name) {}

  PyObject* access(PyObject* parent, const FrameValues& /*frame*/)
      const override {
    return PyObject_GetAttr(parent, name_.ptr());
  }

  std::string what() const override {
    return "attribute '" + name_text_ + "'";
  }

  const std::string& name() const {
    return name_text_;
  }

 private:
  py::object name_;
  std::string name_text_;
};

class ItemAccessor : public GuardAccessor {
 public:
  ItemAccessor(const std::string& parent_source, py::handle key)
      : GuardAccessor(parent_source + "[" + repr_for_message(key.ptr()) + "]"),
        key_(py::reinterpret_borrow<py::object>(key)) {
    if (PyLong_CheckExact(key.ptr())) {
      index_ = PyLong_AsSsize_t(key.ptr());
      if (index_ == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        index_ = kNoIndex;
      }
    }
  }

  PyObject* access(PyObject* parent, const FrameValues& /*frame*/)
      const override {
    // Fast paths that create no objects: exact list/tuple with an int index,
    // exact dict (a missing key is "absent", without a KeyError).
    if (index_ != kNoIndex &&
        (PyList_CheckExact(parent) || PyTuple_CheckExact(parent))) {
      Py_ssize_t size = Py_SIZE(parent);
      Py_ssize_t i = index_ < 0 ? index_ + size : index_;
      if (i < 0 || i >= size) {
        return nullptr;
      }
      return Py_NewRef(
          PyList_CheckExact(parent) ? PyList_GET_ITEM(parent, i)
                                    : PyTuple_GET_ITEM(parent, i));
    }
    if (PyDict_CheckExact(parent)) {
      return Py_XNewRef(PyDict_GetItemWithError(parent, key_.ptr()));
    }
    return PyObject_GetItem(parent, key_.ptr());
  }

  std::string what() const override {
    return "item " + repr_for_message(key_.ptr());
  }

  // Same key: same type and equal (so 1 and True stay distinct).
  bool has_key(py::handle key) const {
    if (Py_TYPE(key.ptr()) != Py_TYPE(key_.ptr())) {
      return false;
    }
    int eq = PyObject_RichCompareBool(key.ptr(), key_.ptr(), Py_EQ);
    if (eq < 0) {
      throw py::error_already_set();
    }
    return eq == 1;
  }

 private:
  static constexpr Py_ssize_t kNoIndex = PY_SSIZE_T_MIN;
  py::object key_;
  Py_ssize_t index_ = kNoIndex;
};

} // namespace

// --- GuardAccessor / GuardManager
// -----------------------------------------------

GuardAccessor::GuardAccessor(std::string child_source)
    : child_(std::make_unique<GuardManager>(std::move(child_source))) {}

GuardAccessor::~GuardAccessor() = default;

GuardManager::GuardManager(std::string source, bool has_value)
    : source_(std::move(source)), has_value_(has_value) {}

GuardManager::~GuardManager() = default;

template <typename A, typename Match, typename Make>
GuardManager& GuardManager::child_for(Match match, Make make) {
  for (const auto& accessor : accessors_) {
    if (auto* typed = dynamic_cast<A*>(accessor.get());
        typed && match(*typed)) {
      return typed->child();
    }
  }
  accessors_.push_back(make());
  return accessors_.back()->child();
}

GuardManager& GuardManager::attr(const std::string& name) {
  if (!has_value_) {
    throw py::type_error(
        "the root of a guard tree has no value: use local(), global_() "
        "or closure() to reach one");
  }
  return child_for<AttrAccessor>(
      [&](const AttrAccessor& a) { return a.name() == name; },
      [&] { return std::make_unique<AttrAccessor>(source_, name); });
}

GuardManager& GuardManager::item(py::handle key) {
  if (!has_value_) {
    throw py::type_error(
        "the root of a guard tree has no value: use local(), global_() "
        "or closure() to reach one");
  }
  return child_for<ItemAccessor>(
      [&](const ItemAccessor& a) { return a.has_key(key); },
      [&] { return std::make_unique<ItemAccessor>(source_, key); });
}

void GuardManager::add_leaf_guard(std::unique_ptr<LeafGuard> guard) {
  if (!has_value_ && guard->needs_value()) {
    throw py::type_error(
        "the root of a guard tree has no value to check: add '" +
        guard->description() + "' to a child (local(), global_(), closure())");
  }
  leaves_.push_back(std::move(guard));
}

bool GuardManager::check(PyObject* value, const FrameValues& frame) const {
  for (const auto& leaf : leaves_) {
    if (!leaf->check(value)) {
      return false;
    }
  }
  for (const auto& accessor : accessors_) {
    PyObject* child_value = accessor->access(value, frame);
    if (child_value == nullptr) {
      PyErr_Clear();
      return false;
    }
    bool ok = accessor->child().check(child_value, frame);
    Py_DECREF(child_value);
    if (!ok) {
      return false;
    }
  }
  return true;
}

std::optional<std::string> GuardManager::failure_reason(
    PyObject* value,
    const FrameValues& frame) const {
  for (const auto& leaf : leaves_) {
    if (!leaf->check(value)) {
      return leaf->description() + ": " + leaf->mismatch(value);
    }
  }
  for (const auto& accessor : accessors_) {
    PyObject* child_value = accessor->access(value, frame);
    if (child_value == nullptr) {
      std::string error = take_error_for_message();
      std::string reason = accessor->child().source() + ": ";
      reason += error.empty()
          ? accessor->what() + " is not set"
          : "reading " + accessor->what() + " raised " + error;
      return reason;
    }
    std::optional<std::string> reason =
        accessor->child().failure_reason(child_value, frame);
    Py_DECREF(child_value);
    if (reason) {
      return reason;
    }
  }
  return std::nullopt;
}

size_t GuardManager::num_checks() const {
  size_t n = leaves_.size();
  for (const auto& accessor : accessors_) {
    n += accessor->child().num_checks();
  }
  return n;
}

// --- RootGuardManager
// -----------------------------------------------------------

RootGuardManager::RootGuardManager()
    : GuardManager("<frame>", /*has_value=*/false) {}

GuardManager& RootGuardManager::local(int slot, const std::string& name) {
  if (slot < 0) {
    throw py::value_error(
        "local(): argument slot must be >= 0, got " + std::to_string(slot));
  }
  return child_for<LocalAccessor>(
      [&](const LocalAccessor& a) { return a.slot() == slot; },
      [&] { return std::make_unique<LocalAccessor>(slot, name); });
}

GuardManager& RootGuardManager::global(const std::string& name) {
  return child_for<GlobalAccessor>(
      [&](const GlobalAccessor& a) { return a.name() == name; },
      [&] { return std::make_unique<GlobalAccessor>(name); });
}

GuardManager& RootGuardManager::closure(int index, const std::string& name) {
  if (index < 0) {
    throw py::value_error(
        "closure(): cell index must be >= 0, got " + std::to_string(index));
  }
  return child_for<ClosureAccessor>(
      [&](const ClosureAccessor& a) { return a.index() == index; },
      [&] { return std::make_unique<ClosureAccessor>(index, name); });
}

GuardManager& RootGuardManager::object(
    py::handle obj,
    const std::string& name) {
  return child_for<ObjectAccessor>(
      [&](const ObjectAccessor& a) { return a.object() == obj.ptr(); },
      [&] { return std::make_unique<ObjectAccessor>(obj, name); });
}

void RootGuardManager::add_global_state_match() {
  add_leaf_guard(std::make_unique<GlobalStateMatch>("global state"));
}

} // namespace torch_plugin::capture
