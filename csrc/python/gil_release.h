// gil_release.h: releasing the GIL around long C++ work, safely at interpreter
// exit.
//
// CPython 3.11-3.13 end a thread that takes the GIL back after finalization
// has begun with pthread_exit. In C++ that is a forced unwind, and crossing a
// noexcept frame (pybind11's gil_scoped_release destructor is one) calls
// std::terminate: a daemon thread still running a compiled graph when the
// program exits aborted the process ("terminate called without an active
// exception"). GilRelease instead parks such a thread for good: the process is
// exiting, and exit() ends it. (CPython 3.14 parks these threads itself.)
#pragma once

#include <Python.h>

#include <unistd.h>

namespace torch_plugin::python {

class GilRelease {
 public:
  GilRelease() : state_(PyEval_SaveThread()) {}
  GilRelease(const GilRelease&) = delete;
  GilRelease& operator=(const GilRelease&) = delete;
  ~GilRelease() {
    if (finalizing()) {
      for (;;)
        pause(); // never returns into an interpreter that is going away
    }
    PyEval_RestoreThread(state_);
  }

 private:
  static bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
  }
  PyThreadState* state_;
};

} // namespace torch_plugin::python
