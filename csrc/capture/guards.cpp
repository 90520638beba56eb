// guards.cpp: guard tree evaluation (see guards.h for ownership: accessors
// return NEW references; FrameValues borrows; GIL held). The accessor kinds
// are in guard_accessors.h.
//
// CPython facts (public cpython/ headers, 3.11 and 3.12): `_PyType_Lookup`
// returns a BORROWED attribute from a type's MRO without raising and without
// creating objects (it uses the type attribute cache); `_PyObject_GetDictPtr`
// returns the address of an instance's __dict__ slot (3.11/3.12 materialize a
// managed dict there on first use, once per object).
#include "capture/guards.h"

#include "capture/extra_state.h"
#include "capture/frame_compat.h"
#include "capture/guard_accessors.h"

#include <utility>

namespace py = pybind11;

namespace torch_plugin::capture {

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
    if (auto* typed = dynamic_cast<A*>(accessor.item.get());
        typed && match(*typed)) {
      return typed->child();
    }
  }
  accessors_.push_back({make(), 0});
  GuardAccessor* accessor = accessors_.back().item.get();
  GuardManager& child = accessor->child();
  child.parent_ = this;
  child.via_ = accessor;
  return child;
}

PyObject* GuardManager::read_value(const FrameValues& frame) const {
  if (via_ == nullptr) {
    return nullptr;
  }
  PyObject* parent_value = nullptr;
  if (parent_->has_value_) {
    parent_value = parent_->read_value(frame);
    if (parent_value == nullptr) {
      return nullptr;
    }
  }
  PyObject* value = via_->access(parent_value, frame);
  Py_XDECREF(parent_value);
  if (value == nullptr) {
    PyErr_Clear();
  }
  return value;
}

namespace {

// The check that failed deepest in the current evaluation on this thread
// (the first one recorded wins); RootGuardManager::check copies it.
thread_local const LeafGuard* tls_failed_leaf = nullptr;
thread_local const GuardManager* tls_failed_read = nullptr;

void record_failure(const LeafGuard* leaf, const GuardManager* unread) {
  if (tls_failed_leaf == nullptr && tls_failed_read == nullptr) {
    tls_failed_leaf = leaf;
    tls_failed_read = unread;
  }
}

// Counts evaluations of one node in progress (see count_failure).
class Evaluating {
 public:
  explicit Evaluating(int& n) : n_(n) {
    ++n_;
  }
  ~Evaluating() {
    --n_;
  }
  Evaluating(const Evaluating&) = delete;
  Evaluating& operator=(const Evaluating&) = delete;

 private:
  int& n_;
};

} // namespace

template <typename T>
void GuardManager::count_failure(std::vector<Counted<T>>& items, size_t i)
    const {
  ++items[i].fails;
  if (evaluating_ != 1) {
    return;
  }
  while (i > 0 && items[i - 1].fails < items[i].fails) {
    std::swap(items[i - 1], items[i]);
    --i;
  }
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
  leaves_.push_back({std::move(guard), 0});
}

bool GuardManager::check(PyObject* value, const FrameValues& frame) const {
  Evaluating evaluating(evaluating_);
  // Indices, not iterators: the vectors are only reordered (never resized)
  // during evaluation, and only by the sole evaluation of this node.
  for (size_t i = 0; i < leaves_.size(); ++i) {
    const LeafGuard* leaf = leaves_[i].item.get();
    if (!leaf->check(value)) {
      record_failure(leaf, nullptr);
      count_failure(leaves_, i);
      return false;
    }
  }
  for (size_t i = 0; i < accessors_.size(); ++i) {
    const GuardAccessor* accessor = accessors_[i].item.get();
    PyObject* child_value = accessor->access(value, frame);
    if (child_value == nullptr) {
      PyErr_Clear();
      record_failure(nullptr, &accessor->child());
      count_failure(accessors_, i);
      return false;
    }
    bool ok = accessor->child().check(child_value, frame);
    Py_DECREF(child_value);
    if (!ok) {
      count_failure(accessors_, i);
      return false;
    }
  }
  return true;
}

std::optional<std::string> GuardManager::failure_reason(
    PyObject* value,
    const FrameValues& frame) const {
  Evaluating evaluating(evaluating_);
  for (size_t i = 0; i < leaves_.size(); ++i) {
    const LeafGuard* leaf = leaves_[i].item.get();
    if (!leaf->check(value)) {
      return leaf->explain_failure(value, source_);
    }
  }
  for (size_t i = 0; i < accessors_.size(); ++i) {
    const GuardAccessor* accessor = accessors_[i].item.get();
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
    n += accessor.item->child().num_checks();
  }
  return n;
}

std::vector<std::string> GuardManager::leaf_order() const {
  std::vector<std::string> out;
  for (const auto& leaf : leaves_) {
    out.push_back(leaf.item->description());
  }
  return out;
}

std::vector<std::string> GuardManager::child_order() const {
  std::vector<std::string> out;
  for (const auto& accessor : accessors_) {
    out.push_back(accessor.item->child().source());
  }
  return out;
}

// --- RootGuardManager
// -----------------------------------------------------------

RootGuardManager::RootGuardManager()
    : GuardManager("<frame>", /*has_value=*/false) {
  lifetime_->root = this;
}

RootGuardManager::~RootGuardManager() {
  // A callback still pending in a garbage-collector batch sees no tree.
  lifetime_->root = nullptr;
}

void RootGuardManager::watch_lifetime(py::handle obj) {
  if (!watched_.insert(obj.ptr()).second) {
    return;
  }
  if (!on_death_) { // one callback for every watched object of this tree
    std::shared_ptr<Lifetime> lifetime = lifetime_;
    on_death_ = py::cpp_function([lifetime](py::handle ref) {
      // Keeps the weak reference alive while the entry (which owns it) is
      // dropped below.
      py::object keep = py::reinterpret_borrow<py::object>(ref);
      on_watched_death(lifetime);
    });
  }
  PyObject* ref = PyWeakref_NewRef(obj.ptr(), on_death_.ptr());
  if (ref == nullptr) {
    watched_.erase(obj.ptr());
    throw py::error_already_set();
  }
  watches_.push_back(py::reinterpret_steal<py::object>(ref));
}

void RootGuardManager::set_owner(PyObject* code) {
  PyObject* ref = PyWeakref_NewRef(code, nullptr);
  if (ref == nullptr) {
    throw py::error_already_set();
  }
  owner_ = py::reinterpret_steal<py::object>(ref);
}

void RootGuardManager::on_watched_death(
    const std::shared_ptr<Lifetime>& lifetime) {
  lifetime->invalidated = true;
  RootGuardManager* root = lifetime->root;
  if (root == nullptr || !root->owner_) {
    return;
  }
  PyObject* code = compat::weakref_target(root->owner_.ptr());
  if (code == nullptr) {
    return;
  }
  // May destroy `root` (the entry owns it); nothing below touches it.
  remove_entry(reinterpret_cast<PyCodeObject*>(code), root);
  Py_DECREF(code);
}

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

namespace {
const std::string kWatchedObjectDied =
    "an object compared by identity (ID_MATCH) was deleted";
} // namespace

bool RootGuardManager::check(const FrameValues& frame) const {
  if (lifetime_->invalidated) {
    last_failed_leaf_ = nullptr;
    last_failed_read_ = nullptr;
    last_failed_shape_ = &kWatchedObjectDied;
    ++failures_;
    return false;
  }
  tls_failed_leaf = nullptr;
  tls_failed_read = nullptr;
  bool pass = GuardManager::check(nullptr, frame);
  last_failed_leaf_ = pass ? nullptr : tls_failed_leaf;
  last_failed_read_ = pass ? nullptr : tls_failed_read;
  last_failed_shape_ = nullptr;
  if (pass && !alias_guards_.empty()) {
    const AliasGuard* failed = check_aliases(frame);
    pass = failed == nullptr;
    last_failed_shape_ = pass ? nullptr : &failed->description;
  }
  if (pass && !shape_guards_.empty()) {
    pass = shape_guards_.check(frame);
    last_failed_shape_ = pass ? nullptr : shape_guards_.last_failure();
  }
  failures_ += pass ? 0 : 1;
  return pass;
}

std::optional<std::string> RootGuardManager::failure_reason(
    const FrameValues& frame) const {
  if (lifetime_->invalidated) {
    return kWatchedObjectDied;
  }
  std::optional<std::string> reason =
      GuardManager::failure_reason(nullptr, frame);
  if (!reason && !alias_guards_.empty()) {
    if (const AliasGuard* failed = check_aliases(frame)) {
      reason = failed->description;
    }
  }
  if (!reason && !shape_guards_.empty()) {
    reason = shape_guards_.failure_reason(frame);
  }
  return reason;
}

void RootGuardManager::add_alias_guard(
    const GuardManager& a,
    const GuardManager& b,
    bool same,
    std::string description) {
  alias_guards_.push_back(AliasGuard{&a, &b, same, std::move(description)});
}

const RootGuardManager::AliasGuard* RootGuardManager::check_aliases(
    const FrameValues& frame) const {
  for (const AliasGuard& guard : alias_guards_) {
    PyObject* a = guard.a->read_value(frame);
    PyObject* b = guard.b->read_value(frame);
    const bool ok = a != nullptr && b != nullptr && ((a == b) == guard.same);
    Py_XDECREF(a);
    Py_XDECREF(b);
    if (!ok) {
      return &guard;
    }
  }
  return nullptr;
}

std::optional<std::string> RootGuardManager::last_failure() const {
  if (last_failed_shape_ != nullptr) {
    return *last_failed_shape_;
  }
  if (last_failed_leaf_ != nullptr) {
    return last_failed_leaf_->description();
  }
  if (last_failed_read_ != nullptr) {
    return last_failed_read_->source() + ": could not be read";
  }
  return std::nullopt;
}

void RootGuardManager::add_global_state_match() {
  add_leaf_guard(std::make_unique<GlobalStateMatch>("global state"));
}

} // namespace torch_plugin::capture
