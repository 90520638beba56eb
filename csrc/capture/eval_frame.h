// eval_frame.h: the PEP 523 frame-evaluation hook and its per-thread callback.
//
// Owns: installing/removing the hook, each thread's callback and "busy" state,
// the skip rules, cache lookup on the hook path, the compile lock (one thread
// runs a callback at a time; the others wait with the GIL released and look
// the cache up again), calling the callback on a miss, run-only mode (the
// RUN_ONLY sentinel), running an entry's transformed code, and
// disable_wrapper. Does not own
// the cache layout (extra_state.h), guard evaluation (guards.h) or CPython's
// frame internals (frame_compat.h).
//
// Ownership: a thread's callback is held as a STRONG reference by that thread's
// state until replaced (also released when the thread exits). Functions here
// take BORROWED handles and return NEW references (pybind11::object).
// GIL: held for everything; per-thread state is C++ thread_local, only touched
// by its own thread while holding the GIL.
//
// CPython facts: see frame_compat.h (frame layout, who clears a frame, the 3.12
// cleanup) and docs/internals/capture_hook.md (the whole design).
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>

namespace torch_plugin::capture {

// What the callback sees of a frame about to run (a snapshot of references).
struct FrameInfo {
  pybind11::object f_code;
  pybind11::object f_globals;
  pybind11::object f_builtins;
  pybind11::object f_func;
  pybind11::object closure; // tuple of cells or None
  pybind11::object f_locals; // dict: argument names, then free-variable names
  pybind11::object arg_values; // list: localsplus[0:nargs]
};

// Creates the types and the preallocated objects the hook uses. Call once from
// module init, after FrameInfo is registered with pybind11.
void init_eval_frame();

// Sets this thread's callback (None disables capture on this thread) and
// returns the previous one (None if none). Installs the hook while at least one
// thread has a callback and removes it when none has. Raises TypeError when
// `callback` is neither None nor callable.
pybind11::object set_eval_frame_callback(pybind11::handle callback);

pybind11::object get_eval_frame_callback();

// The RUN_ONLY sentinel: set as a thread's callback, the hook runs cached
// entries made by any callback and runs a miss unmodified without calling
// Python; returned by a callback for a frame, that code object keeps its
// entries but never compiles again.
pybind11::object run_only_callback();

// The RUN_UNCAPTURED sentinel: returned by a callback for a frame, the code
// object is marked so that its frames, and every frame they start, run
// unmodified with the thread's callback suspended (for the entry points of
// another frame evaluator's region, such as torch.compile's wrapper).
pybind11::object run_uncaptured_marker();

// Whether torch_plugin's function is the interpreter's frame evaluator now.
bool is_hook_installed();

// A callable that calls `fn` with this thread's hook inactive, restoring the
// previous state afterwards (also when fn raises). Binds like a function when
// stored on a class.
pybind11::object disable_wrapper(pybind11::handle fn);

// Positional-parameter count of transformed code for `code`: argcount +
// kwonlyargcount + (*args) + (**kwargs). Raises TypeError for a non-code
// object.
int code_nargs(pybind11::handle code);

} // namespace torch_plugin::capture
