// extra_state.cpp: co_extra slot management for ExtraState (see extra_state.h
// for ownership and layout; frame_compat.h for the CPython calls used).
#include "capture/extra_state.h"

#include <algorithm>
#include <utility>

#include "capture/frame_compat.h"

namespace torch_plugin::capture {
namespace {

constexpr Py_ssize_t kNoIndex = -1;
Py_ssize_t extra_index = kNoIndex;

// co_extra free function: called by code_dealloc (GIL held).
void destroy_extra_state(void* state) {
  delete static_cast<ExtraState*>(state);
}

} // namespace

void init_extra_state_index() {
  if (extra_index != kNoIndex) {
    return;
  }
  extra_index = compat::request_code_extra_index(&destroy_extra_state);
  if (extra_index < 0) {
    extra_index = kNoIndex;
    throw pybind11::error_already_set();
  }
}

ExtraState* get_extra_state(PyCodeObject* code) {
  return static_cast<ExtraState*>(compat::get_code_extra(code, extra_index));
}

ExtraState* get_or_create_extra_state(PyCodeObject* code) {
  if (ExtraState* extra = get_extra_state(code)) {
    return extra;
  }
  auto* extra = new ExtraState();
  if (compat::set_code_extra(code, extra_index, extra) < 0) {
    delete extra;
    return nullptr;
  }
  return extra;
}

void add_entry_front(ExtraState& extra, CacheEntry entry) {
  extra.entries.insert(extra.entries.begin(), std::move(entry));
}

void move_entry_to_front(ExtraState& extra, size_t index) {
  if (index == 0 || index >= extra.entries.size()) {
    return;
  }
  auto begin = extra.entries.begin();
  std::rotate(
      begin,
      begin + static_cast<std::ptrdiff_t>(index),
      begin + static_cast<std::ptrdiff_t>(index) + 1);
}

void remove_entry(PyCodeObject* code, const RootGuardManager* root) {
  ExtraState* extra = get_extra_state(code);
  if (extra == nullptr) {
    return;
  }
  auto it = std::find_if(
      extra->entries.begin(), extra->entries.end(), [&](const CacheEntry& e) {
        return e.root == root;
      });
  if (it == extra->entries.end()) {
    return;
  }
  CacheEntry dropped = std::move(*it);
  extra->entries.erase(it);
  // The run-only mark counts entries against config.cache_size_limit; a
  // dropped entry no longer counts, so the code object may compile again.
  extra->run_only = false;
  // `dropped` dies here.
}

void reset_extra_state(PyCodeObject* code) {
  ExtraState* extra = get_extra_state(code);
  if (extra == nullptr) {
    return;
  }
  std::vector<CacheEntry> dropped;
  dropped.swap(extra->entries);
  extra->skip = false;
  extra->run_only = false;
  extra->uncaptured = false;
  // `dropped` dies here; its decrefs may run Python code that touches `extra`.
}

} // namespace torch_plugin::capture
