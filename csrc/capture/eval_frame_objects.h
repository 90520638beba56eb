// eval_frame_objects.h: the Python objects the PEP 523 hook (eval_frame.cpp)
// exchanges with the eval-frame callback — the FrameInfo it passes, the
// (code, guard) entry it gets back — and the hook's own Python types: the
// disable_wrapper callable and the RUN_ONLY / RUN_UNCAPTURED sentinels.
// Private to csrc/capture. GIL: held for every call.
#pragma once

#include <Python.h>

#include "capture/frame_compat.h"
#include "capture/guards.h"

namespace torch_plugin::capture {

// Frames of such code objects run unmodified: their frames outlive the call.
constexpr int kUnsupportedCodeFlags =
    CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR | CO_ITERABLE_COROUTINE;

// The FrameInfo for the callback. NEW reference, or nullptr with an error set.
PyObject* make_frame_info(
    PyCodeObject* code,
    PyObject* function,
    const FrameValues& values);

// Checks a callback's `(code, guard)` result for the frame of `code`. Returns
// false with a TypeError set when it does not fit the contract in _C.pyi.
bool validate_entry(PyObject* result, PyCodeObject* code);

// An object of the disable_wrapper type: the wrapped callable and the
// vectorcall function that runs it (eval_frame.cpp's, which suspends capture).
struct DisabledCallable {
  PyObject_HEAD PyObject* fn; // STRONG
  vectorcallfunc vectorcall;
};

// The disable_wrapper type (torch_plugin._C.DisabledCallable): calls go
// through each object's vectorcall; binds like a function. NEW reference, or
// nullptr with an error set.
PyTypeObject* new_disabled_callable_type();

// The RUN_ONLY sentinel and the RUN_UNCAPTURED marker (builtin functions
// returning None, compared by address). NEW references, or nullptr with an
// error set.
PyObject* new_run_only_sentinel();
PyObject* new_run_uncaptured_sentinel();

} // namespace torch_plugin::capture
