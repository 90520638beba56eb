// guards.h: the guard tree: RootGuardManager -> GuardAccessor -> GuardManager
// -> leaf guards (leaf_guards.h).
//
// Owns: the tree's structure and its evaluation on a frame. A GuardManager
// stands for one value reached from the frame by a chain of accessors (its
// *source*, printed like `L['self'].layer1[0].weight`); it runs its leaf guards
// on that value, then each child accessor reads a child value and recurses.
// Accessors are the C++ twins of the Python Source kinds: local (argument
// slot), global, closure (cell contents) and object (a fixed object) at the
// root; attr and item below.
//
// Ownership: managers own their leaves and accessors; an accessor owns its
// child manager. FrameValues BORROWS everything it points to. Values read by
// accessors are held as STRONG references while their subtree runs (an
// attribute read can run Python code that would otherwise free them). GIL: held
// for every call.
//
// Errors: `check` never raises and leaves no Python exception set: a read that
// raises, or a leaf that raises, makes the check fail. The tree creates no
// Python objects while checking, except what getattr/getitem on user objects
// return: attribute reads on nn.Modules go to the instance dict and
// `_parameters` / `_buffers` / `_modules` directly, without running
// Module.__getattr__ (see AttrAccessor in guards.cpp). Building the tree
// (attr, item, add_*) throws pybind11 exceptions on misuse.
//
// Order: a node runs its leaves, then its children, each most-failed first: a
// leaf or child that fails is moved ahead of those that failed less often, so
// the check most likely to fail runs first next time (order of addition
// otherwise). The last failing check is remembered (last_failure()).
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "capture/leaf_guards.h"
#include "capture/shape_guards.h"

namespace torch_plugin::capture {

// What the tree reads from a frame (all BORROWED).
struct FrameValues {
  PyObject* const* args = nullptr; // argument slots localsplus[0:nargs]
  Py_ssize_t nargs = 0;
  PyObject* globals = nullptr; // dict
  PyObject* builtins = nullptr; // dict
  PyObject* closure = nullptr; // tuple of cells, or nullptr
};

class GuardManager;

// Reads the value of a child GuardManager from its parent's value (child
// accessors) or from the frame (root accessors).
class GuardAccessor {
 public:
  explicit GuardAccessor(std::string child_source);
  virtual ~GuardAccessor();
  GuardAccessor(const GuardAccessor&) = delete;
  GuardAccessor& operator=(const GuardAccessor&) = delete;

  // NEW reference to the value, or nullptr: with a Python exception set when
  // the read raised, without one when the value is absent (argument slot out of
  // range, empty cell, missing global). `parent` is BORROWED (nullptr at the
  // root).
  virtual PyObject* access(PyObject* parent, const FrameValues& frame)
      const = 0;

  // What is read, for messages: "attribute 'weight'", "argument slot 0".
  virtual std::string what() const = 0;

  GuardManager& child() const {
    return *child_;
  }

 private:
  std::unique_ptr<GuardManager> child_;
};

class GuardManager {
 public:
  explicit GuardManager(std::string source, bool has_value = true);
  virtual ~GuardManager();
  GuardManager(const GuardManager&) = delete;
  GuardManager& operator=(const GuardManager&) = delete;

  // The source this node stands for, e.g. "L['x'].weight".
  const std::string& source() const {
    return source_;
  }

  // Child for getattr(value, name); created once, the same node is returned
  // again.
  GuardManager& attr(const std::string& name);
  // Child for value[key] (tuple/list index, dict key, or any __getitem__).
  GuardManager& item(pybind11::handle key);

  // Appends a leaf guard, run in the order added. Throws pybind11::type_error
  // for a guard that needs a value on the root, which has none.
  void add_leaf_guard(std::unique_ptr<LeafGuard> guard);

  // Runs the leaves on `value` (BORROWED; nullptr at the root), then children.
  bool check(PyObject* value, const FrameValues& frame) const;

  // Description of the first failing check and the value found, or nullopt.
  std::optional<std::string> failure_reason(
      PyObject* value,
      const FrameValues& frame) const;

  // This node's value read afresh from the frame through the accessors from
  // the root (NEW reference), or nullptr (error cleared) when a read fails or
  // this is the root. Used by the shape guards, which read tensors again.
  PyObject* read_value(const FrameValues& frame) const;

  // Leaf guards in this subtree.
  size_t num_checks() const;

  // The node above this one (nullptr at the root).
  const GuardManager* parent() const {
    return parent_;
  }

  // Leaf descriptions in evaluation order (this node only), for tests.
  std::vector<std::string> leaf_order() const;
  // Child sources in evaluation order (this node only), for tests.
  std::vector<std::string> child_order() const;

 protected:
  // The child reached through an accessor of type A for which match(A&) holds;
  // make() creates the accessor when there is none.
  template <typename A, typename Match, typename Make>
  GuardManager& child_for(Match match, Make make);

 private:
  template <typename T>
  struct Counted {
    std::unique_ptr<T> item;
    uint64_t fails = 0;
  };
  // Counts a failure of items[i] and moves it ahead of items that failed less
  // often, unless another evaluation of this node is in progress (a guard's
  // Python code checking the same tree, or another thread while the GIL was
  // released), which is iterating over the same vector.
  template <typename T>
  void count_failure(std::vector<Counted<T>>& items, size_t i) const;

  std::string source_;
  bool has_value_;
  // The parent node and the accessor that reads this node's value from the
  // parent's (both nullptr at the root); set when the child is created.
  const GuardManager* parent_ = nullptr;
  const GuardAccessor* via_ = nullptr;
  // Mutable: evaluation reorders them (most-failed first).
  mutable std::vector<Counted<LeafGuard>> leaves_;
  mutable std::vector<Counted<GuardAccessor>> accessors_;
  mutable int evaluating_ = 0; // evaluations of this node in progress
};

// The root of one cache entry's guard tree. It has no value of its own: its
// children are read from the frame, and its leaves are global-state guards.
class RootGuardManager : public GuardManager {
 public:
  RootGuardManager();
  ~RootGuardManager() override;

  // Child for argument slot `slot` (localsplus[slot], slot < nargs). `name` is
  // the source's printed name (e.g. "L['x']"), used verbatim in messages.
  GuardManager& local(int slot, const std::string& name);
  // Child for global `name`: frame globals, then builtins; printed G['name'].
  GuardManager& global(const std::string& name);
  // Child for the contents of closure cell `index` (f_func.__closure__[index]);
  // `name` is the source's printed name (e.g. "C['scale']"), used verbatim.
  GuardManager& closure(int index, const std::string& name);
  // Child for a fixed object (BORROWED here; the accessor keeps a strong
  // reference), e.g. another module's globals dict; `name` is its source name.
  GuardManager& object(pybind11::handle obj, const std::string& name);
  // Records the current global state (grad mode) and passes only while it
  // holds.
  void add_global_state_match();
  // Relational guard between two nodes of this tree: their values are the same
  // object (`same`) or are not. Run after every other check passed (values read
  // afresh through read_value). Capture adds these where it treated two sources
  // as one object (one variable per real object) or as distinct ones (mutated
  // inputs that must not alias). `a` and `b` are nodes of this tree (BORROWED;
  // the tree owns them). `description` is the message of a failure.
  void add_alias_guard(
      const GuardManager& a,
      const GuardManager& b,
      bool same,
      std::string description);
  size_t num_alias_guards() const {
    return alias_guards_.size();
  }
  // Watches the lifetime of `obj` (BORROWED; it must support weak references),
  // which a weak ID_MATCH of this tree compares by address without owning it.
  // When it dies the tree is invalidated: check() fails from then on (its
  // address may be reused) and the cache entry holding this tree, if any, is
  // dropped from its code object's cache, so a compiled frame does not keep the
  // user's objects (a model, its weights, an FSDP2 process group) alive.
  // PyTorch's own guards do the same (torch/_dynamo/guards.py: weakref
  // callbacks on ID_MATCH objects invalidate the cache entry). Throws
  // pybind11::error_already_set when no weak reference can be made.
  void watch_lifetime(pybind11::handle obj);
  // The code object whose cache entry holds this tree (BORROWED; remembered
  // through a weak reference). Set by the hook when it adds the entry.
  void set_owner(PyObject* code);
  // Whether an object watched by watch_lifetime died.
  bool invalidated() const {
    return lifetime_->invalidated;
  }
  // The entry's shape guards (relations between dynamic sizes), run after
  // every other check passed.
  ShapeGuards& shape_guards() {
    return shape_guards_;
  }

  // Evaluates the tree on a frame; remembers the failing check.
  bool check(const FrameValues& frame) const;
  std::optional<std::string> failure_reason(const FrameValues& frame) const;

  // The check that failed in the last failed check() ("L['x'] tensor ..." as
  // given when it was added, or "<source>: could not be read"), or nullopt
  // when the last check passed or none ran.
  std::optional<std::string> last_failure() const;
  // Number of check() calls that failed.
  uint64_t failures() const {
    return failures_;
  }

 private:
  struct AliasGuard {
    const GuardManager* a;
    const GuardManager* b;
    bool same;
    std::string description;
  };
  // The failing alias guard, or nullptr (all pass).
  const AliasGuard* check_aliases(const FrameValues& frame) const;

  // Shared with the weak-reference callbacks, which may outlive the tree (the
  // garbage collector holds a weak reference while it calls the callbacks of a
  // batch): `root` is cleared by the destructor.
  struct Lifetime {
    RootGuardManager* root = nullptr;
    bool invalidated = false;
  };
  // Called by a watched object's weak-reference callback.
  static void on_watched_death(const std::shared_ptr<Lifetime>& lifetime);

  std::shared_ptr<Lifetime> lifetime_ = std::make_shared<Lifetime>();
  std::unordered_set<PyObject*> watched_; // addresses, for deduplication
  std::vector<pybind11::object> watches_; // weak references with callbacks
  pybind11::object on_death_; // their callback (captures lifetime_ only)
  pybind11::object owner_; // weak reference to the owning code object
  ShapeGuards shape_guards_;
  std::vector<AliasGuard> alias_guards_;
  mutable const std::string* last_failed_shape_ = nullptr;
  mutable const LeafGuard* last_failed_leaf_ = nullptr;
  mutable const GuardManager* last_failed_read_ = nullptr;
  mutable uint64_t failures_ = 0;
};

} // namespace torch_plugin::capture
