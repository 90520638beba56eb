// frame_compat.h: the one place that knows CPython's private frame layout.
//
// Owns: every use of CPython internals by torch_plugin. It is the only file
// that includes an internal header (`internal/pycore_frame.h`, with
// Py_BUILD_CORE defined just around it) and the only one that
// names 3.11 / 3.12 / 3.13 differences. Everything else in csrc/capture goes
// through the inline functions below. A new CPython version is added here (and
// in torch_plugin/capture/bytecode_compat.py for its bytecode); the build stops
// with #error on a version nobody has audited.
//
// Ownership: every PyObject* returned here is BORROWED from the frame or code
// object (valid while the frame is alive). The GIL must be held for all of it.
//
// CPython facts relied on (checked against the 3.11.7, 3.12.1 and 3.13.0
// headers):
// - `_PyInterpreterFrame` (internal/pycore_frame.h): 3.11 stores the function
//   as `PyFunctionObject* f_func`, 3.12+ as `PyObject* f_funcobj`; 3.11/3.12
//   have `PyCodeObject* f_code`, 3.13 `PyObject* f_executable` (a code object
//   for every frame the PEP 523 function sees; anything else runs unmodified);
//   all have f_globals, f_builtins, f_locals and `PyObject* localsplus[]`
//   (3.14 turns the slots into `_PyStackRef`: a new branch here).
// - A frame handed to the PEP 523 function has not run yet: its argument slots
//   localsplus[0:nargs] hold the raw argument values (MAKE_CELL has not wrapped
//   cell arguments), free variables are not copied in yet (COPY_FREE_VARS), and
//   `prev_instr` points before the first instruction (`_PyFrame_IsIncomplete`).
// - Who cleans an unrun frame up: on 3.11 the caller (`_PyEval_Vector` calls
//   `_PyEvalFrameClearAndPop` after the eval function returns); on 3.12 and
//   3.13 the callee (the default evaluator clears and pops the frame it ran).
//   3.12 does not export the clear/pop functions, so `finish_unrun_frame` below
//   makes the default evaluator do it there; 3.13 exports
//   `_PyEval_FrameClearAndPop` (PyAPI_FUNC in internal/pycore_ceval.h), which
//   is called directly (see docs/internals/capture_hook.md).
// - Code extras: `_PyEval_RequestCodeExtraIndex`, `_PyCode_GetExtra`,
//   `_PyCode_SetExtra` on 3.11; `PyUnstable_*` names on 3.12 (the old names
//   remain as inline aliases there; the new names are used).
#pragma once

#include <Python.h>

#if PY_VERSION_HEX < 0x030B0000 || PY_VERSION_HEX >= 0x030E0000
#error \
    "torch_plugin's eval-frame hook supports CPython 3.11, 3.12 and 3.13 only; audit frame_compat.h for a new version"
#endif

// A free-threaded CPython (PEP 703, 3.13t: pyconfig.h defines Py_GIL_DISABLED)
// is another ABI, and the hook, the code extras and the guards rely on the GIL
// serializing the frames they see. CMakeLists.txt refuses such an interpreter
// before compiling; torch_plugin/python_versions.py refuses it at import.
#ifdef Py_GIL_DISABLED
#error \
    "torch_plugin does not support free-threaded CPython (Py_GIL_DISABLED, e.g. python3.13t): build it with a default (GIL) CPython 3.11, 3.12 or 3.13"
#endif

#define Py_BUILD_CORE
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE

#if PY_VERSION_HEX >= 0x030D0000
// Exported by 3.13's libpython (PyAPI_FUNC in internal/pycore_ceval.h, which
// drags in most of the interpreter's internal headers): declared here alone.
extern "C" PyAPI_FUNC(void)
    _PyEval_FrameClearAndPop(PyThreadState* tstate, _PyInterpreterFrame* frame);
#endif

namespace torch_plugin::capture::compat {

#if PY_VERSION_HEX >= 0x030C0000
constexpr bool kCalleeClearsFrame = true; // 3.12, 3.13
#else
constexpr bool kCalleeClearsFrame = false; // 3.11
#endif

using Frame = _PyInterpreterFrame;

// The frame's code object, or nullptr when the frame runs something else
// (3.13's `f_executable` may hold another object; such a frame runs
// unmodified).
inline PyCodeObject* frame_code(Frame* frame) {
#if PY_VERSION_HEX >= 0x030D0000
  PyObject* executable = frame->f_executable;
  return PyCode_Check(executable) ? reinterpret_cast<PyCodeObject*>(executable)
                                  : nullptr;
#else
  return frame->f_code;
#endif
}

// The function object the frame was made from (a PyFunctionObject for every
// frame that reaches the PEP 523 function).
inline PyObject* frame_function(Frame* frame) {
#if PY_VERSION_HEX >= 0x030C0000
  return frame->f_funcobj;
#else
  return reinterpret_cast<PyObject*>(frame->f_func);
#endif
}

inline PyObject* frame_globals(Frame* frame) {
  return frame->f_globals;
}

inline PyObject* frame_builtins(Frame* frame) {
  return frame->f_builtins;
}

// Non-NULL for module, class-body and exec() frames, which run with a locals
// mapping; the hook leaves those alone.
inline PyObject* frame_locals_mapping(Frame* frame) {
  return frame->f_locals;
}

// localsplus[0 : code_nargs(code)] are the argument slots (borrowed, non-NULL
// at frame entry).
inline PyObject** frame_localsplus(Frame* frame) {
  return frame->localsplus;
}

// Positional, keyword-only, *args and **kwargs slots: the transformed code's
// positional parameter count. Public PyCodeObject fields only.
inline int code_nargs(PyCodeObject* code) {
  return code->co_argcount + code->co_kwonlyargcount +
      ((code->co_flags & CO_VARARGS) ? 1 : 0) +
      ((code->co_flags & CO_VARKEYWORDS) ? 1 : 0);
}

// True while a trace/profile/monitoring callback runs on this thread.
inline bool thread_is_tracing(PyThreadState* tstate) {
  return tstate->tracing > 0;
}

// --- evaluators -------------------------------------------------------------

using EvalFrameFn = _PyFrameEvalFunction;

inline EvalFrameFn get_eval_frame_function() {
  return _PyInterpreterState_GetEvalFrameFunc(PyInterpreterState_Get());
}

inline void set_eval_frame_function(EvalFrameFn fn) {
  _PyInterpreterState_SetEvalFrameFunc(PyInterpreterState_Get(), fn);
}

// Py_DECREF(obj) with the current exception (if any) kept across it, since
// the destructor may run Python code.
inline void decref_keeping_error(PyObject* obj) {
#if PY_VERSION_HEX >= 0x030C0000
  PyObject* raised = PyErr_GetRaisedException();
  Py_DECREF(obj);
  PyErr_SetRaisedException(raised);
#else
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  Py_DECREF(obj);
  PyErr_Restore(type, value, traceback);
#endif
}

inline EvalFrameFn default_eval_frame_function() {
  return &_PyEval_EvalFrameDefault;
}

// Releases an unrun frame that the hook replaced by a call to transformed code,
// and returns `result` (NEW reference, stolen; NULL means "raised", with the
// exception set) unchanged, with the same exception object if it is NULL.
//
// 3.11: nothing to do: the caller clears and pops the frame when the eval
// function returns.
//
// 3.13: `_PyEval_FrameClearAndPop` (exported) clears and pops the frame, as
// the default evaluator does when a frame returns; the frame was never linked
// into the thread's frame chain (the evaluator links it on entry) and is the
// top of the data stack (the transformed call's frame was popped already). Its
// references are dropped while the call's exception is kept aside (a
// destructor may run Python code). No monitoring event is raised.
//
// 3.12: the default evaluator, entered with throwflag=1 and an exception set,
// goes `resume_with_error` -> `error` (no traceback entry: the frame is
// incomplete) -> no handler at offset -1 -> `exit_unwind`, which clears the
// frame, pops it off the thread's data stack and returns NULL. Monitoring
// events (PY_THROW, RAISE, PY_UNWIND; sys.settrace is built on them in 3.12)
// are suppressed with PyThreadState_EnterTracing so tracers never see this
// non-execution. The exception used is `placeholder` (BORROWED, a preallocated
// instance) so the real outcome is never touched by the cleanup.
inline PyObject* finish_unrun_frame(
    PyThreadState* tstate,
    Frame* frame,
    PyObject* result,
    PyObject* placeholder) {
#if PY_VERSION_HEX >= 0x030D0000
  (void)placeholder;
  PyObject* raised = PyErr_GetRaisedException();
  _PyEval_FrameClearAndPop(tstate, frame);
  if (PyErr_Occurred()) { // cannot happen: clearing drops references only
    PyErr_WriteUnraisable(nullptr);
  }
  PyErr_SetRaisedException(raised);
#elif PY_VERSION_HEX >= 0x030C0000
  PyObject* raised = result == nullptr ? PyErr_GetRaisedException() : nullptr;
  PyErr_SetRaisedException(Py_NewRef(placeholder));
  PyThreadState_EnterTracing(tstate);
  PyObject* cleanup = _PyEval_EvalFrameDefault(tstate, frame, /*exc=*/1);
  PyThreadState_LeaveTracing(tstate);
  // `cleanup` is always NULL; what is set now is the placeholder (or, at the
  // recursion limit, a RecursionError chained to it): drop it.
  Py_XDECREF(cleanup);
  Py_XDECREF(PyErr_GetRaisedException());
  if (raised != nullptr) {
    PyErr_SetRaisedException(raised);
  }
#else
  (void)tstate;
  (void)frame;
  (void)placeholder;
#endif
  return result;
}

// --- per-code-object extra slot ---------------------------------------------

inline Py_ssize_t request_code_extra_index(freefunc free_fn) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyUnstable_Eval_RequestCodeExtraIndex(free_fn);
#else
  return _PyEval_RequestCodeExtraIndex(free_fn);
#endif
}

// Returns the slot's value (NULL when unset); clears any lookup error, which
// can only be a bad index or a non-code object, both excluded by the callers.
inline void* get_code_extra(PyCodeObject* code, Py_ssize_t index) {
  void* extra = nullptr;
  PyObject* obj = reinterpret_cast<PyObject*>(code);
#if PY_VERSION_HEX >= 0x030C0000
  if (PyUnstable_Code_GetExtra(obj, index, &extra) < 0) {
#else
  if (_PyCode_GetExtra(obj, index, &extra) < 0) {
#endif
    PyErr_Clear();
    return nullptr;
  }
  return extra;
}

// Returns 0, or -1 with an exception set.
inline int set_code_extra(PyCodeObject* code, Py_ssize_t index, void* extra) {
  PyObject* obj = reinterpret_cast<PyObject*>(code);
#if PY_VERSION_HEX >= 0x030C0000
  return PyUnstable_Code_SetExtra(obj, index, extra);
#else
  return _PyCode_SetExtra(obj, index, extra);
#endif
}

// The referent of weak reference `ref` as a NEW reference, or nullptr when it
// died (no error set). PyWeakref_GetRef on 3.13 (PyWeakref_GetObject is
// deprecated there), PyWeakref_GetObject before.
inline PyObject* weakref_target(PyObject* ref) {
#if PY_VERSION_HEX >= 0x030D0000
  PyObject* obj = nullptr;
  if (PyWeakref_GetRef(ref, &obj) < 0) {
    PyErr_Clear();
    return nullptr;
  }
  return obj;
#else
  PyObject* obj = PyWeakref_GetObject(ref);
  if (obj == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  return obj == Py_None ? nullptr : Py_NewRef(obj);
#endif
}

} // namespace torch_plugin::capture::compat
