// extra_state.h: the per-code-object cache that hangs off `co_extra`.
//
// Owns: ExtraState (a code object's cache entries and skip mark), the co_extra
// slot index, and the entries' lifetime. Does not own the guard tree (guards.h)
// or the hook (eval_frame.h), which reads and updates entries.
//
// Layout: one co_extra slot per code object, requested once per process from
// CPython, holds an `ExtraState*` (NULL until the hook or skip_code first needs
// it). The ExtraState is freed by CPython's co_extra free function when the
// code object dies, never earlier: reset_code empties it but keeps it, so a
// pointer read on the hook path stays valid while the frame runs (the frame
// holds the code object).
//
// Ownership: each CacheEntry holds STRONG references (py::object) to the
// transformed code, the RootGuardManager, the callback object that made it, and
// the function object cached to run it. Functions taking PyCodeObject* borrow
// it. GIL: held for everything here.
//
// CPython facts: co_extra via frame_compat.h (`_PyCode_GetExtra` on 3.11,
// `PyUnstable_Code_GetExtra` on 3.12); the free function runs from code_dealloc
// with the GIL held.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <vector>

namespace torch_plugin::capture {

class RootGuardManager;

// One compiled version of a code object: run `code` when `guard` passes and the
// thread's callback is `callback`.
struct CacheEntry {
  pybind11::object code; // transformed code object
  pybind11::object guard; // RootGuardManager
  RootGuardManager* root = nullptr; // borrowed from `guard`
  pybind11::object callback; // the callback that returned this entry
  // Function made from `code` to run it, built on first use and rebuilt when
  // the original function's globals or closure object differ from its own.
  pybind11::object function;
};

struct ExtraState {
  std::vector<CacheEntry> entries; // most recently used first
  bool skip = false; // run every frame of this code object unmodified
  // Use the entries, never compile: a miss runs the frame unmodified without
  // calling the callback (set when the callback returns RUN_ONLY, e.g. at
  // config.cache_size_limit).
  bool run_only = false;
  // With `skip`: frames of this code object, and every frame they start, run
  // with the thread's callback suspended (set when the callback returns
  // RUN_UNCAPTURED: another frame evaluator's region, e.g. torch.compile's).
  bool uncaptured = false;
};

// Requests the co_extra slot; call once from module init. Throws on failure.
void init_extra_state_index();

// The code object's ExtraState, or nullptr when it has none (one co_extra
// read).
ExtraState* get_extra_state(PyCodeObject* code);

// Like get_extra_state, creating an empty ExtraState when there is none.
// Returns nullptr with a Python exception set on failure.
ExtraState* get_or_create_extra_state(PyCodeObject* code);

// Puts `entry` first. May run arbitrary Python (dropping references).
void add_entry_front(ExtraState& extra, CacheEntry entry);

// Moves entries[index] to the front (most recently used).
void move_entry_to_front(ExtraState& extra, size_t index);

// Drops the entry whose guard tree is `root`, if the code object has one. The
// entry is destroyed after the list is updated (its decrefs may run Python
// code that reads the list), and the run-only mark is cleared (it stood for a
// full cache). Called when an object the tree watches dies.
void remove_entry(PyCodeObject* code, const RootGuardManager* root);

// Drops the entries and the skip, run-only and uncaptured marks. Entries are
// destroyed after the state is updated, so code run by their destructors sees a
// consistent (empty) state.
void reset_extra_state(PyCodeObject* code);

} // namespace torch_plugin::capture
