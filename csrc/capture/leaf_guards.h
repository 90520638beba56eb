// leaf_guards.h: the checks at the nodes of a guard tree (TYPE_MATCH, ID_MATCH,
// EQUALS_MATCH, LEN_MATCH, DICT_KEYS_MATCH, TENSOR_MATCH, GLOBAL_STATE).
//
// Owns: one class per guard kind, each checking one value, and the text that
// explains a mismatch. Does not own where the value comes from (guards.h: the
// accessors and managers of the tree).
//
// Ownership: `check` and `mismatch` BORROW `value`. Guards that remember Python
// objects (a type, the constant of EQUALS_MATCH, dict keys, the object of an
// ID_MATCH that cannot be weakly referenced) hold STRONG references to them for
// their lifetime; a weak ID_MATCH holds none (see IdMatch).
// GIL: held by every caller.
//
// Contract: `check` never leaves a Python exception set and never throws: any
// error while checking means "fails" (the error is cleared). It creates no
// Python objects. `mismatch` runs only after `check` failed (for
// failure_reason) and may create objects, e.g. reprs.
//
// Sources: CPython's object protocol (PyObject_RichCompareBool, PyObject_Size,
// PyDict_Next); libtorch for tensors (THPVariable_Unpack in
// torch/csrc/autograd/python_variable.h, at::Tensor's metadata, the TLS
// dispatch key modifiers in c10/core/impl/LocalDispatchKeySet.h); for global
// state at::GradMode, at::autocast (ATen/autocast_mode.h), c10's default dtype
// and at::globalContext() (ATen/Context.h: the flags behind torch.backends).
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <c10/core/Device.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/Layout.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch_plugin::capture {

class LeafGuard {
 public:
  explicit LeafGuard(std::string description);
  virtual ~LeafGuard() = default;
  LeafGuard(const LeafGuard&) = delete;
  LeafGuard& operator=(const LeafGuard&) = delete;

  // True when `value` (borrowed; nullptr only for guards on global state)
  // passes. Never raises; clears any Python error and returns false.
  virtual bool check(PyObject* value) const = 0;

  // Why check(value) failed, e.g. "expected size [4, 8], got [16, 8]".
  virtual std::string mismatch(PyObject* value) const = 0;

  // The failed check in source terms, for failure_reason and the recompile
  // log: "L['x'].size()[0] == 8 failed: got 16 (...)". `source` is the printed
  // source of the value. Defaults to "<description>: <mismatch>".
  virtual std::string explain_failure(
      PyObject* value,
      const std::string& source) const;

  // Guards on global state take no value; every other guard needs one.
  virtual bool needs_value() const {
    return true;
  }

  // The text given when the guard was added, e.g. "L['x'] tensor".
  const std::string& description() const {
    return description_;
  }

 private:
  std::string description_;
};

// TYPE_MATCH: `type(value) is type` (exact type, no subclasses).
class TypeMatch : public LeafGuard {
 public:
  TypeMatch(pybind11::handle type, std::string description);
  bool check(PyObject* value) const override;
  std::string mismatch(PyObject* value) const override;
  std::string explain_failure(PyObject* value, const std::string& source)
      const override;

 private:
  pybind11::object type_;
};

// ID_MATCH: `value is obj`. With `weak` (the object supports weak references)
// it holds no reference: the tree watches the object's lifetime instead
// (RootGuardManager::watch_lifetime) and fails every check once it died, so a
// reused id never passes; a compiled frame then does not keep the user's
// model alive. Otherwise it holds a strong reference, so the id stays unique.
class IdMatch : public LeafGuard {
 public:
  IdMatch(pybind11::handle obj, std::string description, bool weak = false);
  bool check(PyObject* value) const override;
  std::string mismatch(PyObject* value) const override;
  std::string explain_failure(PyObject* value, const std::string& source)
      const override;

 private:
  PyObject* ptr_; // the object; owned by obj_ unless weak
  pybind11::object obj_; // empty when weak
};

// EQUALS_MATCH: `type(value) is type(expected) and value == expected`.
class EqualsMatch : public LeafGuard {
 public:
  EqualsMatch(pybind11::handle expected, std::string description);
  bool check(PyObject* value) const override;
  std::string mismatch(PyObject* value) const override;
  std::string explain_failure(PyObject* value, const std::string& source)
      const override;

 private:
  pybind11::object expected_;
};

// LEN_MATCH: `len(value) == n`.
class LenMatch : public LeafGuard {
 public:
  LenMatch(Py_ssize_t n, std::string description);
  bool check(PyObject* value) const override;
  std::string mismatch(PyObject* value) const override;
  std::string explain_failure(PyObject* value, const std::string& source)
      const override;

 private:
  Py_ssize_t n_;
};

// DICT_KEYS_MATCH: value is a dict whose keys equal `keys`, in order.
class DictKeysMatch : public LeafGuard {
 public:
  DictKeysMatch(std::vector<pybind11::object> keys, std::string description);
  bool check(PyObject* value) const override;
  std::string mismatch(PyObject* value) const override;

 private:
  std::vector<pybind11::object> keys_;
};

// NOT_IN_DICT: value is a dict without the key `key` (an object's instance
// __dict__ that does not shadow the class attribute the captured code used).
class NotInDict : public LeafGuard {
 public:
  NotInDict(pybind11::object key, std::string description);
  bool check(PyObject* value) const override;
  std::string mismatch(PyObject* value) const override;

 private:
  pybind11::object key_;
};

// EMPTY_ATTR_DICTS: each named entry of the value's instance __dict__ is
// absent or an empty container. An nn.Module's hook dicts
// (`_forward_hooks`, `_forward_pre_hooks`, ...): one check for all of them, so
// a hook registered after capture sends the call to a new capture.
class EmptyAttrDicts : public LeafGuard {
 public:
  EmptyAttrDicts(std::vector<std::string> names, std::string description);
  bool check(PyObject* value) const override;
  std::string mismatch(PyObject* value) const override;

 private:
  // Index in names_ of the first entry that is neither absent nor empty (or
  // cannot be read), -1 when there is none, names_.size() when the value has
  // no instance __dict__. Shared by check (allocation-free) and mismatch.
  Py_ssize_t first_nonempty(PyObject* value) const;
  std::vector<pybind11::object> names_;
};

// Marks a size or stride TensorMatch does not check (a dynamic dimension,
// checked by the entry's ShapeGuards instead).
constexpr int64_t kAnySize = INT64_MIN;

// TENSOR_MATCH: value is a tensor with the example's Python type, dispatch key
// set (with this thread's TLS include/exclude modifiers applied, as when the
// example was recorded), dtype, device, requires_grad, sizes and (optionally,
// strided layouts only) strides. Sizes and strides flagged dynamic are not
// compared (only the number of dimensions is); the shape guards
// (shape_guards.h) hold the relations they must satisfy.
class TensorMatch : public LeafGuard {
 public:
  // `dynamic_sizes[i]` / `dynamic_strides[i]`: skip size / stride i (missing
  // entries mean false). Throws pybind11::type_error when `example` is not a
  // tensor, and pybind11::value_error when its sizes are symbolic or there are
  // more flags than dimensions.
  TensorMatch(
      pybind11::handle example,
      std::string description,
      bool check_strides,
      const std::vector<bool>& dynamic_sizes = {},
      const std::vector<bool>& dynamic_strides = {});
  bool check(PyObject* value) const override;
  std::string mismatch(PyObject* value) const override;
  std::string explain_failure(PyObject* value, const std::string& source)
      const override;

 private:
  pybind11::object type_;
  c10::DispatchKeySet dispatch_keys_;
  c10::ScalarType dtype_;
  c10::Device device_;
  bool requires_grad_;
  c10::Layout layout_;
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_; // empty unless strides are checked
  bool check_strides_;
};

// The global (process or thread) state that changes what a captured graph
// computes. Every field is read from C++ without calling Python.
struct GlobalState {
  // One entry per field; kNames[i] is how Python spells field i.
  static constexpr int kNumFields = 17;
  static const char* const kNames[kNumFields];

  int64_t fields[kNumFields] = {};

  // The state now, on this thread.
  static GlobalState current();
  bool operator==(const GlobalState& other) const;
  bool operator!=(const GlobalState& other) const {
    return !(*this == other);
  }
  // Index of the first field that differs from `other`, or -1.
  int first_difference(const GlobalState& other) const;
  // Field `i`'s value as Python prints it ("True", "torch.float16", "'high'").
  std::string field_text(int i) const;
};

// GLOBAL_STATE: the global state equals the state when the guard was made:
// grad mode; autocast enabled and dtype for CPU and CUDA; the default dtype;
// deterministic algorithms (and warn-only); torch.backends.cudnn enabled,
// benchmark, deterministic and allow_tf32; torch.backends.cuda.matmul
// allow_tf32 and the fp16/bf16 reduced-precision reductions; the float32
// matmul precision; torch.backends.cuda.matmul.allow_fp16_accumulation.
//
// While a lookup evaluates several entries of one code object, the current
// state is read once and shared (GlobalStateMatch::Memo).
class GlobalStateMatch : public LeafGuard {
 public:
  explicit GlobalStateMatch(std::string description);
  bool check(PyObject* value) const override;
  std::string mismatch(PyObject* value) const override;
  std::string explain_failure(PyObject* value, const std::string& source)
      const override;
  bool needs_value() const override {
    return false;
  }
  const GlobalState& expected() const {
    return expected_;
  }

  // While a Memo lives on this thread, check() reads the current state once
  // (shared by every GlobalStateMatch checked meanwhile). Nestable.
  class Memo {
   public:
    Memo();
    ~Memo();
    Memo(const Memo&) = delete;
    Memo& operator=(const Memo&) = delete;
  };

 private:
  GlobalState expected_;
};

// Text for messages: repr(obj) cut to `limit` characters, or a placeholder when
// repr raises (the error is cleared). Borrowed `obj`.
std::string repr_for_message(PyObject* obj, size_t limit = 80);

// "torch.Tensor", "int": the type's module-qualified name (no module for
// builtins).
std::string type_name_for_message(PyTypeObject* type);

// "ValueError: bad value" for the exception currently set, which is cleared; ""
// when none is set.
std::string take_error_for_message();
// "expected <what><expected>, got <got>".
std::string expected_got(
    const std::string& what,
    const std::string& expected,
    const std::string& got);

} // namespace torch_plugin::capture
