// guard_accessors.h: the accessor kinds of the guard tree (see guards.h:
// accessors return NEW references, or nullptr with an error set; FrameValues
// borrows; GIL held): where a guarded value is read from — the frame's locals,
// globals, closure cells or a fixed object (root accessors), or an attribute
// or item of the parent value (child accessors). Private to guards.cpp, which
// creates them (GuardManager::attr, item; RootGuardManager::local, global,
// closure, object).
//
// CPython facts (public cpython/ headers, 3.11 and 3.12): `_PyType_Lookup`
// returns a BORROWED attribute from a type's MRO without raising and without
// creating objects (it uses the type attribute cache); `_PyObject_GetDictPtr`
// returns the address of an instance's __dict__ slot (3.11/3.12 materialize a
// managed dict there on first use, once per object).
#pragma once

#include "capture/frame_compat.h"
#include "capture/guards.h"

#include <string>
#include <utility>

namespace torch_plugin::capture {

namespace py = pybind11;


// An interned str: dict lookups and getattr compare such names by identity
// first.
inline py::object interned(const std::string& name) {
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

// What the nn.Module attribute fast path needs: torch.nn.Module, its
// __getattr__, object.__getattribute__, and the interned names of the three
// dicts Module.__getattr__ searches. STRONG references, kept for the process.
struct ModuleFacts {
  PyTypeObject* module_type = nullptr;
  PyObject* module_getattr = nullptr;
  PyObject* object_getattribute = nullptr;
  PyObject* getattr_name = nullptr;
  PyObject* getattribute_name = nullptr;
  PyObject* dict_names[3] = {nullptr, nullptr, nullptr};
  // Item reads on module containers (see ItemAccessor).
  PyObject* getitem_name = nullptr;
  PyObject* modulelist_getitem = nullptr;
  PyObject* sequential_getitem = nullptr;
  PyObject* moduledict_getitem = nullptr;
};

// The instance __dict__ of `obj` (BORROWED), or nullptr (no error set).
inline PyObject* instance_dict(PyObject* obj) {
  PyObject** dictptr = _PyObject_GetDictPtr(obj);
  PyObject* dict = dictptr ? *dictptr : nullptr;
  return dict != nullptr && PyDict_CheckExact(dict) ? dict : nullptr;
}

// Loaded on first use (building a tree, GIL held); nullptr if torch.nn cannot
// be imported (then every attribute read uses getattr).
inline const ModuleFacts* module_facts() {
  static ModuleFacts facts;
  static bool loaded = false;
  if (loaded) {
    return facts.module_type ? &facts : nullptr;
  }
  loaded = true;
  PyObject* nn = PyImport_ImportModule("torch.nn");
  PyObject* module = nn ? PyObject_GetAttrString(nn, "Module") : nullptr;
  Py_XDECREF(nn);
  if (module == nullptr || !PyType_Check(module)) {
    PyErr_Clear();
    Py_XDECREF(module);
    return nullptr;
  }
  facts.getattr_name = PyUnicode_InternFromString("__getattr__");
  facts.getattribute_name = PyUnicode_InternFromString("__getattribute__");
  const char* names[3] = {"_parameters", "_buffers", "_modules"};
  for (int i = 0; i < 3; ++i) {
    facts.dict_names[i] = PyUnicode_InternFromString(names[i]);
  }
  auto* type = reinterpret_cast<PyTypeObject*>(module);
  facts.module_getattr = Py_XNewRef(_PyType_Lookup(type, facts.getattr_name));
  facts.object_getattribute =
      Py_XNewRef(_PyType_Lookup(&PyBaseObject_Type, facts.getattribute_name));
  if (facts.module_getattr == nullptr || facts.object_getattribute == nullptr) {
    PyErr_Clear();
    Py_DECREF(module);
    return nullptr;
  }
  facts.getitem_name = PyUnicode_InternFromString("__getitem__");
  const char* containers[3] = {"ModuleList", "Sequential", "ModuleDict"};
  PyObject** getitems[3] = {
      &facts.modulelist_getitem,
      &facts.sequential_getitem,
      &facts.moduledict_getitem};
  PyObject* nn_again = PyImport_ImportModule("torch.nn");
  for (int i = 0; nn_again != nullptr && i < 3; ++i) {
    PyObject* cls = PyObject_GetAttrString(nn_again, containers[i]);
    if (cls != nullptr && PyType_Check(cls)) {
      *getitems[i] = Py_XNewRef(_PyType_Lookup(
          reinterpret_cast<PyTypeObject*>(cls), facts.getitem_name));
    }
    Py_XDECREF(cls);
  }
  Py_XDECREF(nn_again);
  PyErr_Clear();
  facts.module_type = type; // keeps the reference from GetAttrString
  return &facts;
}

// getattr(obj, name). For an nn.Module whose class neither overrides
// __getattribute__/__getattr__ nor defines `name`, the value is what
// Module.__getattr__ would find: the instance dict, then `_parameters`,
// `_buffers`, `_modules` (in that order). Those are read directly, with no
// Python code run and no AttributeError created on the way; anything else
// goes through PyObject_GetAttr.
class AttrAccessor : public GuardAccessor {
 public:
  AttrAccessor(const std::string& parent_source, const std::string& name)
      : GuardAccessor(parent_source + "." + name),
        name_(interned(name)),
        name_text_(name),
        facts_(module_facts()) {}

  PyObject* access(PyObject* parent, const FrameValues& /*frame*/)
      const override {
    if (facts_ != nullptr && plain_module_type(Py_TYPE(parent))) {
      if (PyObject* dict = instance_dict(parent)) {
        PyObject* value = PyDict_GetItemWithError(dict, name_.ptr());
        if (value != nullptr) {
          return Py_NewRef(value);
        }
        for (PyObject* key : facts_->dict_names) {
          PyObject* sub = PyDict_GetItemWithError(dict, key);
          if (sub != nullptr && PyDict_CheckExact(sub)) {
            PyObject* found = PyDict_GetItemWithError(sub, name_.ptr());
            if (found != nullptr) {
              return Py_NewRef(found);
            }
          }
        }
        if (PyErr_Occurred()) {
          return nullptr;
        }
      }
    }
    return PyObject_GetAttr(parent, name_.ptr());
  }

  std::string what() const override {
    return "attribute '" + name_text_ + "'";
  }

  const std::string& name() const {
    return name_text_;
  }

 private:
  // True when `type` is an nn.Module subclass on which getattr(obj, name_)
  // ends in Module.__getattr__ unless the instance dict has the name. Cached
  // per type version (a class change gives the type a new version tag).
  bool plain_module_type(PyTypeObject* type) const {
    if (type == cached_type_ && type->tp_version_tag == cached_version_ &&
        (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) {
      return cached_plain_;
    }
    bool plain = PyType_IsSubtype(type, facts_->module_type) &&
        _PyType_Lookup(type, facts_->getattr_name) == facts_->module_getattr &&
        _PyType_Lookup(type, facts_->getattribute_name) ==
            facts_->object_getattribute &&
        _PyType_Lookup(type, name_.ptr()) == nullptr;
    cached_type_ = type;
    cached_version_ = type->tp_version_tag;
    cached_plain_ = plain;
    return plain;
  }

  py::object name_;
  std::string name_text_;
  const ModuleFacts* facts_;
  mutable PyTypeObject* cached_type_ = nullptr; // compared by address only
  mutable unsigned int cached_version_ = 0;
  mutable bool cached_plain_ = false;
};

class ItemAccessor : public GuardAccessor {
 public:
  ItemAccessor(const std::string& parent_source, py::handle key)
      : GuardAccessor(parent_source + "[" + repr_for_message(key.ptr()) + "]"),
        key_(py::reinterpret_borrow<py::object>(key)),
        facts_(module_facts()) {
    if (PyLong_CheckExact(key.ptr())) {
      index_ = PyLong_AsSsize_t(key.ptr());
      if (index_ == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        index_ = kNoIndex;
      }
      if (index_ >= 0 && index_ != kNoIndex) {
        // ModuleList keys its _modules by str(index).
        PyObject* text = PyUnicode_FromFormat("%zd", index_);
        if (text == nullptr) {
          throw py::error_already_set();
        }
        PyUnicode_InternInPlace(&text);
        index_text_ = py::reinterpret_steal<py::object>(text);
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
    if (facts_ != nullptr) {
      if (PyObject* found = module_container_item(parent)) {
        return Py_NewRef(found);
      }
      if (PyErr_Occurred()) {
        return nullptr;
      }
    }
    return PyObject_GetItem(parent, key_.ptr());
  }

  std::string what() const override {
    return "item " + repr_for_message(key_.ptr());
  }

  enum class Container { kNone, kModuleList, kSequential, kModuleDict };

  // torch.nn.ModuleList / Sequential / ModuleDict (or a subclass keeping
  // their __getitem__): the item, read from `_modules` the way their
  // __getitem__ does, without running it. BORROWED, or nullptr (then the
  // caller uses PyObject_GetItem; an error is set only if a dict read raised).
  PyObject* module_container_item(PyObject* parent) const {
    Container kind = container_kind(Py_TYPE(parent));
    if (kind == Container::kNone) {
      return nullptr;
    }
    PyObject* dict = instance_dict(parent);
    PyObject* modules = dict == nullptr
        ? nullptr
        : PyDict_GetItemWithError(dict, facts_->dict_names[2]);
    if (modules == nullptr || !PyDict_CheckExact(modules)) {
      return nullptr;
    }
    if (kind == Container::kModuleDict) {
      return PyUnicode_CheckExact(key_.ptr())
          ? PyDict_GetItemWithError(modules, key_.ptr())
          : nullptr;
    }
    if (index_ == kNoIndex) {
      return nullptr;
    }
    Py_ssize_t size = PyDict_GET_SIZE(modules);
    Py_ssize_t i = index_ < 0 ? index_ + size : index_;
    if (i < 0 || i >= size) {
      return nullptr; // out of range: let __getitem__ raise
    }
    if (kind == Container::kModuleList) {
      // self._modules[str(index)]; negative indices take the slow path.
      return index_ >= 0 ? PyDict_GetItemWithError(modules, index_text_.ptr())
                         : nullptr;
    }
    // Sequential: the i-th value of _modules.
    Py_ssize_t pos = 0;
    PyObject* value = nullptr;
    for (Py_ssize_t n = 0; PyDict_Next(modules, &pos, nullptr, &value); ++n) {
      if (n == i) {
        return value;
      }
    }
    return nullptr;
  }

  Container container_kind(PyTypeObject* type) const {
    if (type == cached_type_ && type->tp_version_tag == cached_version_ &&
        (type->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) {
      return cached_kind_;
    }
    Container kind = Container::kNone;
    if (PyType_IsSubtype(type, facts_->module_type)) {
      PyObject* getitem = _PyType_Lookup(type, facts_->getitem_name);
      if (getitem == nullptr) {
        kind = Container::kNone;
      } else if (getitem == facts_->modulelist_getitem) {
        kind = Container::kModuleList;
      } else if (getitem == facts_->sequential_getitem) {
        kind = Container::kSequential;
      } else if (getitem == facts_->moduledict_getitem) {
        kind = Container::kModuleDict;
      }
    }
    cached_type_ = type;
    cached_version_ = type->tp_version_tag;
    cached_kind_ = kind;
    return kind;
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
  py::object index_text_; // str(index_) for index_ >= 0
  const ModuleFacts* facts_;
  mutable PyTypeObject* cached_type_ = nullptr; // compared by address only
  mutable unsigned int cached_version_ = 0;
  mutable Container cached_kind_ = Container::kNone;
};

} // namespace torch_plugin::capture
