// eval_frame_objects.cpp: the Python objects of the PEP 523 hook (see
// eval_frame_objects.h).
//
// Ownership: the frame's values are BORROWED; what is built here is NEW.
// GIL: held for every call.
#include "capture/eval_frame_objects.h"

#include <structmember.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "capture/eval_frame.h"

namespace py = pybind11;

namespace torch_plugin::capture {
namespace {

int disabled_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  Py_VISIT(reinterpret_cast<DisabledCallable*>(self)->fn);
  return 0;
}

int disabled_clear(PyObject* self) {
  Py_CLEAR(reinterpret_cast<DisabledCallable*>(self)->fn);
  return 0;
}

void disabled_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  PyObject_GC_UnTrack(self);
  disabled_clear(self);
  type->tp_free(self);
  Py_DECREF(type);
}

// Binds like a function: `obj.method` gives a bound method of the wrapper.
PyObject* disabled_descr_get(
    PyObject* self,
    PyObject* obj,
    PyObject* /*type*/) {
  if (obj == nullptr || obj == Py_None) {
    return Py_NewRef(self);
  }
  return PyMethod_New(self, obj);
}

PyObject* disabled_repr(PyObject* self) {
  return PyUnicode_FromFormat(
      "<torch_plugin disable_wrapper of %R>",
      reinterpret_cast<DisabledCallable*>(self)->fn);
}

PyMemberDef disabled_members[] = {
    {"__wrapped__",
     T_OBJECT,
     offsetof(DisabledCallable, fn),
     READONLY,
     "the wrapped callable"},
    {"__vectorcalloffset__",
     T_PYSSIZET,
     offsetof(DisabledCallable, vectorcall),
     READONLY,
     nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot disabled_slots[] = {
    {Py_tp_call, reinterpret_cast<void*>(&PyVectorcall_Call)},
    {Py_tp_traverse, reinterpret_cast<void*>(&disabled_traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(&disabled_clear)},
    {Py_tp_dealloc, reinterpret_cast<void*>(&disabled_dealloc)},
    {Py_tp_descr_get, reinterpret_cast<void*>(&disabled_descr_get)},
    {Py_tp_repr, reinterpret_cast<void*>(&disabled_repr)},
    {Py_tp_members, disabled_members},
    {0, nullptr},
};

PyType_Spec disabled_spec = {
    "torch_plugin._C.DisabledCallable",
    sizeof(DisabledCallable),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    disabled_slots,
};

PyObject* run_only_call(PyObject* /*self*/, PyObject* /*args*/) {
  Py_RETURN_NONE;
}

PyMethodDef run_only_def = {
    "RUN_ONLY",
    reinterpret_cast<PyCFunction>(&run_only_call),
    METH_VARARGS | METH_KEYWORDS,
    "torch_plugin._C.RUN_ONLY: as a thread's eval-frame callback, run cached "
    "entries (made by any callback) and never compile; returned by a callback, "
    "the frame's code object does the same from then on. Calling it returns "
    "None."};

PyMethodDef run_uncaptured_def = {
    "RUN_UNCAPTURED",
    reinterpret_cast<PyCFunction>(&run_only_call),
    METH_VARARGS | METH_KEYWORDS,
    "torch_plugin._C.RUN_UNCAPTURED: returned by a callback, the frame's code "
    "object runs unmodified from then on, and so does every frame it starts: "
    "the thread's callback is suspended while it runs (the entry points of "
    "another frame evaluator's region, e.g. torch.compile's). Calling it "
    "returns None."};


} // namespace

// The FrameInfo for the callback. NEW reference, or nullptr with an error set.
PyObject* make_frame_info(
    PyCodeObject* code,
    PyObject* function,
    const FrameValues& values) {
  try {
    auto borrow = [](PyObject* o) {
      return py::reinterpret_borrow<py::object>(o);
    };
    FrameInfo info;
    info.f_code = borrow(reinterpret_cast<PyObject*>(code));
    info.f_globals = borrow(values.globals);
    info.f_builtins = borrow(values.builtins);
    info.f_func = borrow(function);
    info.closure = values.closure ? borrow(values.closure) : py::none();
    py::list args(static_cast<size_t>(values.nargs));
    for (Py_ssize_t i = 0; i < values.nargs; ++i) {
      PyList_SET_ITEM(args.ptr(), i, Py_NewRef(values.args[i]));
    }
    py::dict locals;
    auto varnames = py::reinterpret_steal<py::tuple>(PyCode_GetVarnames(code));
    if (!varnames) {
      throw py::error_already_set();
    }
    for (Py_ssize_t i = 0; i < values.nargs; ++i) {
      locals[varnames[static_cast<size_t>(i)]] = args[static_cast<size_t>(i)];
    }
    if (values.closure != nullptr) {
      auto freevars =
          py::reinterpret_steal<py::tuple>(PyCode_GetFreevars(code));
      if (!freevars) {
        throw py::error_already_set();
      }
      Py_ssize_t n = std::min(
          PyTuple_GET_SIZE(values.closure), PyTuple_GET_SIZE(freevars.ptr()));
      for (Py_ssize_t i = 0; i < n; ++i) {
        PyObject* cell = PyTuple_GET_ITEM(values.closure, i);
        if (PyCell_Check(cell) && PyCell_GET(cell) != nullptr) {
          locals[freevars[static_cast<size_t>(i)]] = borrow(PyCell_GET(cell));
        }
      }
    }
    info.f_locals = std::move(locals);
    info.arg_values = std::move(args);
    return py::cast(std::move(info)).release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

// Checks a callback's `(code, guard)` result for the frame of `code`. Returns
// false with a TypeError set when it does not fit the contract in _C.pyi.
bool validate_entry(PyObject* result, PyCodeObject* code) {
  const char* prefix = "torch_plugin eval-frame callback";
  if (!PyTuple_Check(result) || PyTuple_GET_SIZE(result) != 2) {
    PyErr_Format(
        PyExc_TypeError,
        "%s must return None or a (code, RootGuardManager) tuple, got %.200s",
        prefix,
        Py_TYPE(result)->tp_name);
    return false;
  }
  PyObject* new_code = PyTuple_GET_ITEM(result, 0);
  PyObject* guard = PyTuple_GET_ITEM(result, 1);
  if (!PyCode_Check(new_code)) {
    PyErr_Format(
        PyExc_TypeError,
        "%s returned a tuple whose first item is %.200s, not a code object",
        prefix,
        Py_TYPE(new_code)->tp_name);
    return false;
  }
  if (!py::isinstance<RootGuardManager>(guard)) {
    PyErr_Format(
        PyExc_TypeError,
        "%s returned a tuple whose second item is %.200s, not a RootGuardManager",
        prefix,
        Py_TYPE(guard)->tp_name);
    return false;
  }
  auto* t = reinterpret_cast<PyCodeObject*>(new_code);
  int nargs = compat::code_nargs(code);
  // Positional-only parameters are fine: every argument is passed by position.
  if (t->co_argcount != nargs || t->co_kwonlyargcount != 0 ||
      (t->co_flags & (CO_VARARGS | CO_VARKEYWORDS)) != 0) {
    PyErr_Format(
        PyExc_TypeError,
        "%s: transformed code for %U must take exactly %d plain positional parameters "
        "(the frame's argument slots); got argcount %d, "
        "kwonlyargcount %d, *args %s, **kwargs %s",
        prefix,
        code->co_qualname,
        nargs,
        t->co_argcount,
        t->co_kwonlyargcount,
        (t->co_flags & CO_VARARGS) ? "yes" : "no",
        (t->co_flags & CO_VARKEYWORDS) ? "yes" : "no");
    return false;
  }
  if ((t->co_flags & kUnsupportedCodeFlags) != 0 ||
      (t->co_flags & CO_OPTIMIZED) == 0) {
    PyErr_Format(
        PyExc_TypeError,
        "%s: transformed code for %U must be a plain function's code (flags 0x%x)",
        prefix,
        code->co_qualname,
        t->co_flags);
    return false;
  }
  auto* original = reinterpret_cast<PyObject*>(code);
  py::object want = py::reinterpret_steal<py::object>(PyCode_GetFreevars(code));
  py::object got = py::reinterpret_steal<py::object>(PyCode_GetFreevars(t));
  if (!want || !got) {
    return false;
  }
  int same = PyObject_RichCompareBool(want.ptr(), got.ptr(), Py_EQ);
  if (same != 1) {
    if (same == 0) {
      PyErr_Format(
          PyExc_TypeError,
          "%s: transformed code for %R must have the free variables %R, got %R",
          prefix,
          original,
          want.ptr(),
          got.ptr());
    }
    return false;
  }
  return true;
}

PyTypeObject* new_disabled_callable_type() {
  return reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&disabled_spec));
}

PyObject* new_run_only_sentinel() {
  return PyCFunction_New(&run_only_def, nullptr);
}

PyObject* new_run_uncaptured_sentinel() {
  return PyCFunction_New(&run_uncaptured_def, nullptr);
}

} // namespace torch_plugin::capture
