// eval_frame.cpp: the PEP 523 hook (see eval_frame.h for what it owns); the
// Python objects it exchanges with the callback and its Python types are in
// eval_frame_objects.cpp.
//
// Ownership on the hook path: the frame, its code object, function, globals,
// builtins, closure and argument slots are BORROWED from CPython for the whole
// call (the frame holds them). Cache entries are read through `ExtraState`;
// anything taken out of an entry to be used across a call into Python is first
// given a local STRONG reference, because Python code (guards, the callback,
// transformed code) may change or drop the entry list meanwhile.
// GIL: held throughout, except while waiting for the compile lock (a
// PyThread lock, acquired without the GIL so the compiling thread can finish);
// the per-thread state is a C++ thread_local. RUN_ONLY is a STRONG, immortal
// builtin-function object compared by address.
//
// CPython facts: frame layout and the per-version frame cleanup are in
// frame_compat.h; PyObject_Vectorcall on a Python function goes straight to
// `_PyEval_Vector`, which calls the interpreter's eval function for the new
// frame (3.11 and 3.12) with no Python code in between.
#include "capture/eval_frame.h"

#include <pythread.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "capture/eval_frame_objects.h"
#include "capture/extra_state.h"
#include "capture/frame_compat.h"
#include "capture/guards.h"

namespace py = pybind11;

namespace torch_plugin::capture {
namespace {

struct ThreadCaptureState {
  PyObject* callback = nullptr; // STRONG; nullptr means None
  // > 0 while the callback runs, guards are checked, or inside disable_wrapper:
  // frames started then run unmodified.
  int busy = 0;
  // The next frame of this code object runs unmodified: it is the transformed
  // code the hook itself is about to call. BORROWED, compared by address only.
  PyCodeObject* run_unmodified = nullptr;
  // The frame this thread's hook is passing to the previous evaluator. When the
  // chain of evaluators leads back to the hook with the same frame (another
  // PEP 523 tool, e.g. torch.compile's, installed below and above ours), the
  // hook runs it with CPython's own evaluator instead of forwarding again.
  compat::Frame* forwarding = nullptr;
  bool watching_exit = false; // a thread-exit capsule is in the thread dict
};

thread_local ThreadCaptureState tls_state;

int threads_with_callback = 0;
bool hook_installed = false;
compat::EvalFrameFn previous_eval = nullptr; // chained evaluator
PyObject* cleanup_placeholder = nullptr; // STRONG, lives for the process
PyTypeObject* disabled_callable_type = nullptr; // STRONG
// The RUN_ONLY sentinel (a builtin function returning None), STRONG.
PyObject* run_only_sentinel = nullptr;
// The RUN_UNCAPTURED marker (a builtin function returning None), STRONG.
PyObject* run_uncaptured_sentinel = nullptr;
// Held by the thread whose callback is compiling (one compile at a time, so
// two threads never translate the same frame at once and the second one
// finds the first one's entry). Waited for with the GIL released.
PyThread_type_lock compile_lock = nullptr;

class BusyScope {
 public:
  explicit BusyScope(ThreadCaptureState& state) : state_(state) {
    ++state_.busy;
  }
  ~BusyScope() {
    --state_.busy;
  }
  BusyScope(const BusyScope&) = delete;
  BusyScope& operator=(const BusyScope&) = delete;

 private:
  ThreadCaptureState& state_;
};

PyObject* eval_frame_hook(
    PyThreadState* tstate,
    compat::Frame* frame,
    int throwflag);

PyObject* run_unmodified(
    PyThreadState* tstate,
    compat::Frame* frame,
    int throwflag) {
  compat::EvalFrameFn next = previous_eval;
  if (next == compat::default_eval_frame_function()) {
    return next(tstate, frame, throwflag);
  }
  // Another evaluator is chained: remember the frame so a chain that leads
  // back here (ours -> theirs -> ours) ends in CPython's evaluator.
  ThreadCaptureState& state = tls_state;
  compat::Frame* outer = state.forwarding;
  state.forwarding = frame;
  PyObject* result = next(tstate, frame, throwflag);
  state.forwarding = outer;
  return result;
}

void update_hook();

// Runs the frame unmodified with this thread's callback suspended, so neither
// the frame nor the frames it starts are captured, and restores the callback
// afterwards. The thread still counts as having a callback (the hook stays
// installed). A callback set meanwhile and not restored is dropped.
PyObject* run_uncaptured(
    PyThreadState* tstate,
    compat::Frame* frame,
    int throwflag,
    ThreadCaptureState& state);

// Releases the frame that transformed code (or a failed callback) replaced and
// passes `result` (NEW reference, or nullptr with an exception set) through.
PyObject* finish_frame(
    PyThreadState* tstate,
    compat::Frame* frame,
    PyObject* result) {
  return compat::finish_unrun_frame(tstate, frame, result, cleanup_placeholder);
}

// --- running an entry
// -------------------------------------------------------------

// A function object for transformed `code` that looks like `original`: same
// globals, closure, name and qualname. NEW reference, or nullptr with an error.
PyObject* make_function(PyObject* code, PyObject* original) {
  auto* orig = reinterpret_cast<PyFunctionObject*>(original);
  PyObject* fn =
      PyFunction_NewWithQualName(code, orig->func_globals, orig->func_qualname);
  if (fn == nullptr) {
    return nullptr;
  }
  if ((orig->func_closure != nullptr &&
       PyFunction_SetClosure(fn, orig->func_closure) < 0) ||
      PyObject_SetAttrString(fn, "__name__", orig->func_name) < 0) {
    Py_DECREF(fn);
    return nullptr;
  }
  return fn;
}

// Calls the entry's transformed code with the frame's argument slots, then
// releases the frame. The cached function is rebuilt when the original
// function's globals or closure object changed (a new closure per def run).
PyObject* run_entry(
    PyThreadState* tstate,
    compat::Frame* frame,
    CacheEntry& entry,
    PyObject* original,
    const FrameValues& values) {
  PyObject* fn = entry.function.ptr();
  if (fn == nullptr || PyFunction_GET_GLOBALS(fn) != values.globals ||
      PyFunction_GET_CLOSURE(fn) != values.closure) {
    PyObject* fresh = make_function(entry.code.ptr(), original);
    if (fresh == nullptr) {
      return finish_frame(tstate, frame, nullptr);
    }
    fn = Py_NewRef(fresh);
    // Last use of `entry`: dropping the old function may run arbitrary code.
    entry.function = py::reinterpret_steal<py::object>(fresh);
  } else {
    Py_INCREF(fn);
  }
  ThreadCaptureState& state = tls_state;
  state.run_unmodified =
      reinterpret_cast<PyCodeObject*>(PyFunction_GET_CODE(fn));
  PyObject* result = PyObject_Vectorcall(
      fn, values.args, static_cast<size_t>(values.nargs), nullptr);
  state.run_unmodified = nullptr;
  Py_DECREF(fn);
  return finish_frame(tstate, frame, result);
}

// --- cache lookup
// -------------------------------------------------------------------

// Index of the first entry made by `callback` (any callback when nullptr)
// whose guards pass, or -1. An entry list changed by code the guards ran counts
// as a miss (never a stale hit). The global state is read once for all
// entries.
Py_ssize_t lookup(
    ExtraState& extra,
    PyObject* callback,
    const FrameValues& values) {
  GlobalStateMatch::Memo shared_global_state;
  for (size_t i = 0; i < extra.entries.size(); ++i) {
    const CacheEntry& entry = extra.entries[i];
    if (callback != nullptr && entry.callback.ptr() != callback) {
      continue;
    }
    RootGuardManager* root = entry.root;
    PyObject* guard = Py_NewRef(entry.guard.ptr()); // keeps `root` alive
    bool pass = root->check(values);
    bool unchanged =
        i < extra.entries.size() && extra.entries[i].guard.ptr() == guard;
    Py_DECREF(guard);
    if (!unchanged) {
      return -1;
    }
    if (pass) {
      return static_cast<Py_ssize_t>(i);
    }
  }
  return -1;
}

// --- calling the callback
// ---------------------------------------------------------

// Cache miss: asks the callback, then runs the frame unmodified (None) or the
// new entry. The callback runs with the hook busy on this thread.
PyObject* compile_frame(
    PyThreadState* tstate,
    compat::Frame* frame,
    PyCodeObject* code,
    PyObject* function,
    const FrameValues& values,
    ThreadCaptureState& state) {
  PyObject* callback = Py_NewRef(state.callback);
  PyObject* result = nullptr;
  bool found_after_wait = false; // another thread's entry or mark applies
  Py_ssize_t hit = -1;
  {
    BusyScope busy(state);
    if (!PyThread_acquire_lock(compile_lock, NOWAIT_LOCK)) {
      // Another thread is compiling: wait, then look again, since it may
      // have just made the entry this frame needs (or marked the code).
      Py_BEGIN_ALLOW_THREADS;
      PyThread_acquire_lock(compile_lock, WAIT_LOCK);
      Py_END_ALLOW_THREADS;
      ExtraState* extra = get_extra_state(code);
      if (extra != nullptr && !extra->skip && !extra->entries.empty()) {
        hit = lookup(*extra, callback, values);
      }
      found_after_wait =
          extra != nullptr && (extra->skip || extra->run_only || hit >= 0);
    }
    if (!found_after_wait) {
      PyObject* info = make_frame_info(code, function, values);
      if (info != nullptr) {
        result = PyObject_CallOneArg(callback, info);
        Py_DECREF(info);
      }
    }
    PyThread_release_lock(compile_lock);
  }
  if (found_after_wait) {
    Py_DECREF(callback);
    ExtraState* extra = get_extra_state(code);
    if (extra != nullptr && extra->uncaptured) {
      return run_uncaptured(tstate, frame, 0, state);
    }
    if (hit < 0 || extra == nullptr ||
        static_cast<size_t>(hit) >= extra->entries.size()) {
      return run_unmodified(tstate, frame, 0);
    }
    move_entry_to_front(*extra, static_cast<size_t>(hit));
    return run_entry(tstate, frame, extra->entries.front(), function, values);
  }
  if (result == nullptr) {
    Py_DECREF(callback);
    return finish_frame(tstate, frame, nullptr);
  }
  ExtraState* extra = nullptr;
  if (result == run_only_sentinel) {
    Py_DECREF(result);
    Py_DECREF(callback);
    extra = get_or_create_extra_state(code);
    if (extra == nullptr) {
      return finish_frame(tstate, frame, nullptr);
    }
    extra->run_only = true;
    return run_unmodified(tstate, frame, 0);
  }
  if (result == Py_None || result == run_uncaptured_sentinel) {
    bool uncaptured = result == run_uncaptured_sentinel;
    Py_DECREF(result);
    Py_DECREF(callback);
    extra = get_or_create_extra_state(code);
    if (extra == nullptr) {
      return finish_frame(tstate, frame, nullptr);
    }
    extra->skip = true;
    if (uncaptured) {
      extra->uncaptured = true;
      return run_uncaptured(tstate, frame, 0, state);
    }
    return run_unmodified(tstate, frame, 0);
  }
  if (!validate_entry(result, code) ||
      (extra = get_or_create_extra_state(code)) == nullptr) {
    Py_DECREF(result);
    Py_DECREF(callback);
    return finish_frame(tstate, frame, nullptr);
  }
  CacheEntry entry;
  entry.code = py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(result, 0));
  entry.guard = py::reinterpret_borrow<py::object>(PyTuple_GET_ITEM(result, 1));
  entry.root = entry.guard.cast<RootGuardManager*>();
  entry.callback = py::reinterpret_steal<py::object>(callback);
  try {
    entry.root->set_owner(reinterpret_cast<PyObject*>(code));
  } catch (py::error_already_set& e) {
    e.restore();
    Py_DECREF(result);
    return finish_frame(tstate, frame, nullptr);
  }
  if (entry.root->invalidated()) {
    // An object the guards compare by identity died during the conversion:
    // the entry could never pass.
    Py_DECREF(result);
    return run_unmodified(tstate, frame, 0);
  }
  Py_DECREF(result); // `entry` holds what it needs
  add_entry_front(*extra, std::move(entry));
  return run_entry(tstate, frame, extra->entries.front(), function, values);
}

PyObject* run_uncaptured(
    PyThreadState* tstate,
    compat::Frame* frame,
    int throwflag,
    ThreadCaptureState& state) {
  PyObject* suspended = state.callback; // STRONG, moved out
  state.callback = nullptr; // threads_with_callback unchanged
  PyObject* result = run_unmodified(tstate, frame, throwflag);
  PyObject* leftover = nullptr;
  if (state.callback != nullptr) { // set inside and never restored
    // Dropped after the callback is restored: its destructor may run Python.
    leftover = state.callback;
    state.callback = nullptr;
    --threads_with_callback;
  }
  state.callback = suspended;
  if (leftover != nullptr) {
    update_hook();
    compat::decref_keeping_error(leftover);
  }
  return result;
}

// --- the hook
// -----------------------------------------------------------------------

PyObject* eval_frame_hook(
    PyThreadState* tstate,
    compat::Frame* frame,
    int throwflag) {
  ThreadCaptureState& state = tls_state;
  if (frame == state.forwarding) { // came back through another evaluator
    return compat::default_eval_frame_function()(tstate, frame, throwflag);
  }
  PyCodeObject* code = compat::frame_code(frame);
  if (code == nullptr) { // 3.13: not a code object's frame
    return run_unmodified(tstate, frame, throwflag);
  }
  if (state.run_unmodified == code) {
    state.run_unmodified = nullptr;
    return run_unmodified(tstate, frame, throwflag);
  }
  if (state.callback == nullptr || state.busy > 0 || throwflag != 0 ||
      (code->co_flags & kUnsupportedCodeFlags) != 0 ||
      (code->co_flags & CO_OPTIMIZED) == 0 ||
      compat::frame_locals_mapping(frame) != nullptr ||
      compat::thread_is_tracing(tstate)) {
    return run_unmodified(tstate, frame, throwflag);
  }
  ExtraState* extra = get_extra_state(code);
  if (extra != nullptr && extra->skip) {
    if (extra->uncaptured) {
      return run_uncaptured(tstate, frame, throwflag, state);
    }
    return run_unmodified(tstate, frame, throwflag);
  }
  PyObject* function = compat::frame_function(frame);
  if (function == nullptr || !PyFunction_Check(function)) {
    return run_unmodified(tstate, frame, throwflag);
  }

  FrameValues values;
  values.args = compat::frame_localsplus(frame);
  values.nargs = compat::code_nargs(code);
  values.globals = compat::frame_globals(frame);
  values.builtins = compat::frame_builtins(frame);
  values.closure = PyFunction_GET_CLOSURE(function); // cells not copied in yet

  // Run-only: entries made by any callback; a miss runs the frame unmodified.
  bool run_only_mode = state.callback == run_only_sentinel;
  if (extra != nullptr && !extra->entries.empty()) {
    Py_ssize_t hit = -1;
    {
      BusyScope busy(state); // guards may run Python (properties, __eq__)
      hit = lookup(*extra, run_only_mode ? nullptr : state.callback, values);
    }
    if (hit >= 0) {
      move_entry_to_front(*extra, static_cast<size_t>(hit));
      return run_entry(tstate, frame, extra->entries.front(), function, values);
    }
    if (state.callback == nullptr) { // a guard's code turned capture off
      return run_unmodified(tstate, frame, throwflag);
    }
  }
  if (run_only_mode || (extra != nullptr && extra->run_only)) {
    return run_unmodified(tstate, frame, throwflag);
  }
  return compile_frame(tstate, frame, code, function, values, state);
}

// --- installing
// -----------------------------------------------------------------------

// Installing while another evaluator is on top puts ours above it, chaining to
// it; that evaluator may itself chain to ours (installed above ours earlier:
// torch.compile's does), which the hook's `forwarding` check turns into one
// extra hop instead of endless recursion. Also re-installs ours when another
// tool removed it while a thread still has a callback (torch.compile's hook,
// when its last region ends, restores whatever it found when it was
// installed).
void update_hook() {
  if (threads_with_callback > 0) {
    compat::EvalFrameFn current = compat::get_eval_frame_function();
    if (current != &eval_frame_hook) {
      previous_eval = current;
      compat::set_eval_frame_function(&eval_frame_hook);
    }
    hook_installed = true;
  } else if (threads_with_callback == 0 && hook_installed) {
    // Someone may have installed their own evaluator on top (chaining to us):
    // leave theirs in place; ours then just forwards.
    if (compat::get_eval_frame_function() == &eval_frame_hook) {
      compat::set_eval_frame_function(previous_eval);
    }
    hook_installed = false;
  }
}

// Replaces this thread's callback (STOLEN `callback`, may be nullptr) and
// returns the old one (NEW reference, may be nullptr).
PyObject* swap_callback(ThreadCaptureState& state, PyObject* callback) {
  PyObject* previous = state.callback;
  state.callback = callback;
  if (previous == nullptr && callback != nullptr) {
    ++threads_with_callback;
  } else if (previous != nullptr && callback == nullptr) {
    --threads_with_callback;
  }
  update_hook();
  return previous;
}

constexpr const char* kThreadExitCapsule = "torch_plugin.capture.thread_state";

// Thread-dict capsule destructor: runs when a thread's Python state is cleared,
// on that thread when it exits. Drops a callback the thread left set.
void on_thread_state_cleared(PyObject* capsule) {
  auto* owner = static_cast<ThreadCaptureState*>(
      PyCapsule_GetPointer(capsule, kThreadExitCapsule));
  if (owner == nullptr) {
    PyErr_Clear();
    return;
  }
  if (owner != &tls_state) {
    return; // cleared by another thread (interpreter shutdown): leave it
  }
  owner->watching_exit = false;
  Py_XDECREF(swap_callback(*owner, nullptr));
}

void watch_thread_exit(ThreadCaptureState& state) {
  if (state.watching_exit) {
    return;
  }
  PyObject* dict = PyThreadState_GetDict(); // borrowed
  PyObject* capsule =
      PyCapsule_New(&state, kThreadExitCapsule, &on_thread_state_cleared);
  if (dict == nullptr || capsule == nullptr ||
      PyDict_SetItemString(dict, kThreadExitCapsule, capsule) < 0) {
    PyErr_Clear(); // best effort: the callback then stays set after thread exit
  } else {
    state.watching_exit = true;
  }
  Py_XDECREF(capsule);
}

// --- disable_wrapper
// ----------------------------------------------------------------

// Runs the wrapped function with this thread's frames uncaptured (busy). When
// this thread is the only one with a callback and ours is the evaluator, the
// hook is also taken out for the call and put back after: while any PEP 523
// evaluator is installed CPython sends every frame through it and inlines no
// Python-to-Python call, which made the Python of compiled code (Inductor's
// wrapper and kernel launchers, FX code) about 1.5x slower per op (issue #11:
// optimize("inductor") against torch.compile, whose disabled regions restore
// CPython's evaluator the same way). Another thread that sets a callback
// meanwhile re-installs the hook (update_hook); so does this one on return.
PyObject* disabled_vectorcall(
    PyObject* self,
    PyObject* const* args,
    size_t nargsf,
    PyObject* kwnames) {
  ThreadCaptureState& state = tls_state;
  BusyScope busy(state);
  const bool lift = hook_installed && state.callback != nullptr &&
      threads_with_callback == 1 &&
      previous_eval == compat::default_eval_frame_function() &&
      compat::get_eval_frame_function() == &eval_frame_hook;
  if (lift) {
    compat::set_eval_frame_function(previous_eval);
  }
  PyObject* result = PyObject_Vectorcall(
      reinterpret_cast<DisabledCallable*>(self)->fn, args, nargsf, kwnames);
  if (lift) {
    update_hook();
  }
  return result;
}

} // namespace

void init_eval_frame() {
  if (compile_lock == nullptr) {
    compile_lock = PyThread_allocate_lock();
    if (compile_lock == nullptr) {
      throw py::error_already_set();
    }
  }
  if (run_only_sentinel == nullptr) {
    run_only_sentinel = new_run_only_sentinel();
    if (run_only_sentinel == nullptr) {
      throw py::error_already_set();
    }
  }
  if (run_uncaptured_sentinel == nullptr) {
    run_uncaptured_sentinel = new_run_uncaptured_sentinel();
    if (run_uncaptured_sentinel == nullptr) {
      throw py::error_already_set();
    }
  }
  if (previous_eval == nullptr) {
    previous_eval = compat::default_eval_frame_function();
  }
  if (cleanup_placeholder == nullptr) {
    cleanup_placeholder = PyObject_CallFunction(
        PyExc_RuntimeError,
        "s",
        "torch_plugin: placeholder for releasing a replaced frame");
    if (cleanup_placeholder == nullptr) {
      throw py::error_already_set();
    }
  }
  if (disabled_callable_type == nullptr) {
    disabled_callable_type = new_disabled_callable_type();
    if (disabled_callable_type == nullptr) {
      throw py::error_already_set();
    }
  }
}

py::object set_eval_frame_callback(py::handle callback) {
  PyObject* fresh = callback.is_none() ? nullptr : callback.ptr();
  if (fresh != nullptr && !PyCallable_Check(fresh)) {
    throw py::type_error(
        std::string(
            "set_eval_frame_callback expects a callable or None, got ") +
        Py_TYPE(fresh)->tp_name);
  }
  ThreadCaptureState& state = tls_state;
  Py_XINCREF(fresh);
  if (fresh != nullptr) {
    watch_thread_exit(state);
  }
  PyObject* previous = swap_callback(state, fresh);
  return previous ? py::reinterpret_steal<py::object>(previous) : py::none();
}

py::object get_eval_frame_callback() {
  PyObject* callback = tls_state.callback;
  return callback ? py::reinterpret_borrow<py::object>(callback) : py::none();
}

py::object run_only_callback() {
  return py::reinterpret_borrow<py::object>(run_only_sentinel);
}

py::object run_uncaptured_marker() {
  return py::reinterpret_borrow<py::object>(run_uncaptured_sentinel);
}

bool is_hook_installed() {
  return compat::get_eval_frame_function() == &eval_frame_hook;
}

py::object disable_wrapper(py::handle fn) {
  if (!PyCallable_Check(fn.ptr())) {
    throw py::type_error(
        std::string("disable_wrapper expects a callable, got ") +
        Py_TYPE(fn.ptr())->tp_name);
  }
  PyTypeObject* type = disabled_callable_type;
  PyObject* self = type->tp_alloc(type, 0);
  if (self == nullptr) {
    throw py::error_already_set();
  }
  auto* wrapper = reinterpret_cast<DisabledCallable*>(self);
  wrapper->fn = Py_NewRef(fn.ptr());
  wrapper->vectorcall = &disabled_vectorcall;
  return py::reinterpret_steal<py::object>(self);
}

int code_nargs(py::handle code) {
  if (!PyCode_Check(code.ptr())) {
    throw py::type_error(
        std::string("code_nargs expects a code object, got ") +
        Py_TYPE(code.ptr())->tp_name);
  }
  return compat::code_nargs(reinterpret_cast<PyCodeObject*>(code.ptr()));
}

} // namespace torch_plugin::capture
