// bindings_capture.cpp: pybind11 declarations for csrc/capture (see
// bindings_capture.h).
//
// Ownership: arguments arrive as BORROWED handles; results are NEW references.
// GuardManager nodes returned by attr/item/local/global_/closure are owned by
// their tree; `reference_internal` keeps the parent (and so the root) alive
// while a Python handle to a node exists.
// GIL: held for every call.
#include "python/bindings_capture.h"

#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "capture/eval_frame.h"
#include "capture/extra_state.h"
#include "capture/guards.h"
#include "capture/leaf_guards.h"

namespace py = pybind11;

namespace torch_plugin::python {

using namespace ::torch_plugin::capture;

namespace {

PyCodeObject* as_code(py::handle code, const char* function) {
  if (!PyCode_Check(code.ptr())) {
    throw py::type_error(
        std::string(function) + " expects a code object, got " +
        type_name_for_message(Py_TYPE(code.ptr())));
  }
  return reinterpret_cast<PyCodeObject*>(code.ptr());
}

// FrameValues for RootGuardManager.check/failure_reason called from Python.
// `keep` receives the tuple of argument values that `args` points into.
FrameValues frame_values_from_python(
    py::handle arg_values,
    py::handle f_globals,
    py::handle f_builtins,
    py::handle closure,
    py::object& keep) {
  keep = py::reinterpret_steal<py::object>(PySequence_Tuple(arg_values.ptr()));
  if (!keep) {
    throw py::error_already_set();
  }
  if (!PyDict_Check(f_globals.ptr()) || !PyDict_Check(f_builtins.ptr())) {
    throw py::type_error("f_globals and f_builtins must be dicts");
  }
  if (!closure.is_none() && !PyTuple_Check(closure.ptr())) {
    throw py::type_error(
        "closure must be a tuple of cells or None, got " +
        type_name_for_message(Py_TYPE(closure.ptr())));
  }
  FrameValues values;
  values.args = PySequence_Fast_ITEMS(keep.ptr());
  values.nargs = PyTuple_GET_SIZE(keep.ptr());
  values.globals = f_globals.ptr();
  values.builtins = f_builtins.ptr();
  values.closure = closure.is_none() ? nullptr : closure.ptr();
  return values;
}

py::list to_list(const std::vector<std::string>& items) {
  py::list out;
  for (const std::string& item : items) {
    out.append(py::str(item));
  }
  return out;
}

void bind_frame_info(py::module_& m) {
  py::class_<FrameInfo>(
      m,
      "FrameInfo",
      "What the callback sees of a frame about to run (a snapshot; holds "
      "references).")
      .def_readonly("f_code", &FrameInfo::f_code)
      .def_readonly("f_globals", &FrameInfo::f_globals)
      .def_readonly("f_builtins", &FrameInfo::f_builtins)
      .def_readonly("f_func", &FrameInfo::f_func)
      .def_readonly("closure", &FrameInfo::closure)
      .def_readonly("f_locals", &FrameInfo::f_locals)
      .def_readonly("arg_values", &FrameInfo::arg_values)
      .def("__repr__", [](const FrameInfo& info) {
        return "<FrameInfo " + py::repr(info.f_code).cast<std::string>() + ">";
      });
}

// set_eval_frame_callback as a METH_O builtin: optimize()'s wrapper calls it
// twice per call, and pybind11's argument handling costs more than the work.
PyObject* set_eval_frame_callback_o(PyObject* /*module*/, PyObject* callback) {
  try {
    return set_eval_frame_callback(callback).release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  }
  return nullptr;
}

PyMethodDef set_eval_frame_callback_def = {
    "set_eval_frame_callback",
    &set_eval_frame_callback_o,
    METH_O,
    "set_eval_frame_callback(callback, /)\n--\n\n"
    "Set this thread's callback (None turns capture off for this thread); "
    "return the previous one."};

void bind_hook(py::module_& m) {
  PyObject* setter = PyCFunction_NewEx(
      &set_eval_frame_callback_def, nullptr, m.attr("__name__").ptr());
  if (setter == nullptr) {
    throw py::error_already_set();
  }
  m.add_object(
      "set_eval_frame_callback", py::reinterpret_steal<py::object>(setter));
  m.def("get_eval_frame_callback", &get_eval_frame_callback);
  m.attr("RUN_ONLY") = run_only_callback();
  m.attr("RUN_UNCAPTURED") = run_uncaptured_marker();
  m.def("is_hook_installed", &is_hook_installed);
  m.def(
      "disable_wrapper",
      &disable_wrapper,
      py::arg("fn"),
      "Return a callable that calls fn with this thread's hook inactive.");
  m.def(
      "code_nargs",
      &code_nargs,
      py::arg("code"),
      "Argument slots of a frame of `code`: co_argcount + co_kwonlyargcount + (*args) + "
      "(**kwargs); the transformed code's positional parameter count.");
}

void bind_cache(py::module_& m) {
  m.def(
      "skip_code",
      [](py::handle code) {
        ExtraState* extra =
            get_or_create_extra_state(as_code(code, "skip_code"));
        if (extra == nullptr) {
          throw py::error_already_set();
        }
        extra->skip = true;
      },
      py::arg("code"),
      "Mark a code object so the hook always runs it unmodified.");
  m.def(
      "reset_code",
      [](py::handle code) { reset_extra_state(as_code(code, "reset_code")); },
      py::arg("code"),
      "Drop a code object's cache entries and its skip, run-only and uncaptured marks.");
  m.def(
      "cache_entries",
      [](py::handle code) {
        py::list out;
        ExtraState* extra = get_extra_state(as_code(code, "cache_entries"));
        if (extra != nullptr) {
          for (const CacheEntry& entry : extra->entries) {
            out.append(py::make_tuple(entry.code, entry.guard));
          }
        }
        return out;
      },
      py::arg("code"),
      "The (transformed code, guard) entries, most recently used first.");
  m.def(
      "is_code_skipped",
      [](py::handle code) {
        ExtraState* extra = get_extra_state(as_code(code, "is_code_skipped"));
        return extra != nullptr && extra->skip;
      },
      py::arg("code"));
  m.def(
      "is_code_run_only",
      [](py::handle code) {
        ExtraState* extra = get_extra_state(as_code(code, "is_code_run_only"));
        return extra != nullptr && extra->run_only;
      },
      py::arg("code"),
      "Whether the code object runs its cache entries only (the callback "
      "returned RUN_ONLY for it).");
  m.def(
      "is_code_uncaptured",
      [](py::handle code) {
        ExtraState* extra =
            get_extra_state(as_code(code, "is_code_uncaptured"));
        return extra != nullptr && extra->uncaptured;
      },
      py::arg("code"),
      "Whether frames of the code object, and the frames they start, run with "
      "the thread's callback suspended (the callback returned RUN_UNCAPTURED).");
}

void bind_guards(py::module_& m) {
  constexpr auto node = py::return_value_policy::reference_internal;
  py::class_<GuardManager>(
      m,
      "GuardManager",
      "A node of a guard tree: a value reached from the frame, its leaf "
      "checks, and child accessors.")
      .def_property_readonly("source", &GuardManager::source)
      .def("attr", &GuardManager::attr, py::arg("name"), node)
      .def("item", &GuardManager::item, py::arg("key"), node)
      .def(
          "add_type_match",
          [](GuardManager& self, py::handle type, std::string description) {
            self.add_leaf_guard(
                std::make_unique<TypeMatch>(type, std::move(description)));
          },
          py::arg("type"),
          py::arg("description"))
      .def(
          "add_id_match",
          [](GuardManager& self, py::handle obj, std::string description) {
            // Objects that support weak references are not owned: the root
            // watches their lifetime (RootGuardManager::watch_lifetime).
            const GuardManager* top = &self;
            while (top->parent() != nullptr) {
              top = top->parent();
            }
            auto* root =
                dynamic_cast<RootGuardManager*>(const_cast<GuardManager*>(top));
            bool weak =
                root != nullptr && PyType_SUPPORTS_WEAKREFS(Py_TYPE(obj.ptr()));
            if (weak) {
              root->watch_lifetime(obj);
            }
            self.add_leaf_guard(
                std::make_unique<IdMatch>(obj, std::move(description), weak));
          },
          py::arg("obj"),
          py::arg("description"),
          "ID_MATCH: the value is `obj`. An object that supports weak "
          "references is not kept alive: when it dies, the tree fails every "
          "check and its cache entry is dropped.")
      .def(
          "add_equals_match",
          [](GuardManager& self, py::handle value, std::string description) {
            self.add_leaf_guard(
                std::make_unique<EqualsMatch>(value, std::move(description)));
          },
          py::arg("value"),
          py::arg("description"))
      .def(
          "add_len_match",
          [](GuardManager& self, Py_ssize_t n, std::string description) {
            self.add_leaf_guard(
                std::make_unique<LenMatch>(n, std::move(description)));
          },
          py::arg("n"),
          py::arg("description"))
      .def(
          "add_dict_keys_match",
          [](GuardManager& self, py::iterable keys, std::string description) {
            std::vector<py::object> key_list;
            for (py::handle key : keys) {
              key_list.push_back(py::reinterpret_borrow<py::object>(key));
            }
            self.add_leaf_guard(
                std::make_unique<DictKeysMatch>(
                    std::move(key_list), std::move(description)));
          },
          py::arg("keys"),
          py::arg("description"))
      .def(
          "add_not_in_dict",
          [](GuardManager& self, py::object key, std::string description) {
            self.add_leaf_guard(
                std::make_unique<NotInDict>(key, std::move(description)));
          },
          py::arg("key"),
          py::arg("description"))
      .def(
          "add_empty_attr_dicts",
          [](GuardManager& self,
             std::vector<std::string> names,
             std::string description) {
            self.add_leaf_guard(
                std::make_unique<EmptyAttrDicts>(
                    std::move(names), std::move(description)));
          },
          py::arg("names"),
          py::arg("description"))
      .def(
          "add_tensor_match",
          [](GuardManager& self,
             py::handle example,
             std::string description,
             bool check_strides,
             std::vector<bool> dynamic_sizes,
             std::vector<bool> dynamic_strides) {
            self.add_leaf_guard(
                std::make_unique<TensorMatch>(
                    example,
                    std::move(description),
                    check_strides,
                    dynamic_sizes,
                    dynamic_strides));
          },
          py::arg("example"),
          py::arg("description"),
          py::arg("check_strides") = true,
          py::arg("dynamic_sizes") = std::vector<bool>{},
          py::arg("dynamic_strides") = std::vector<bool>{})
      .def("num_checks", &GuardManager::num_checks)
      .def(
          "leaf_order",
          [](const GuardManager& self) { return to_list(self.leaf_order()); })
      .def(
          "child_order",
          [](const GuardManager& self) { return to_list(self.child_order()); })
      .def("__repr__", [](const GuardManager& self) {
        return "<GuardManager " + self.source() + ">";
      });

  py::class_<RootGuardManager, GuardManager>(
      m,
      "RootGuardManager",
      "Root of a guard tree. Children are the frame's argument slots, globals and closure "
      "cells.")
      .def(py::init<>())
      .def(
          "local",
          &RootGuardManager::local,
          py::arg("slot"),
          py::arg("name"),
          node)
      .def("global_", &RootGuardManager::global, py::arg("name"), node)
      .def(
          "closure",
          &RootGuardManager::closure,
          py::arg("index"),
          py::arg("name"),
          node)
      .def(
          "object_",
          &RootGuardManager::object,
          py::arg("obj"),
          py::arg("name"),
          node)
      .def("add_global_state_match", &RootGuardManager::add_global_state_match)
      .def(
          "add_alias_guard",
          &RootGuardManager::add_alias_guard,
          py::arg("a"),
          py::arg("b"),
          py::arg("same"),
          py::arg("description"),
          "Relational guard: the values of nodes a and b (of this tree) are the same "
          "object (same=True) or not. Runs after the other checks.")
      .def("num_alias_guards", &RootGuardManager::num_alias_guards)
      .def_property_readonly(
          "invalidated",
          &RootGuardManager::invalidated,
          "Whether an object an ID_MATCH of this tree compares died (every "
          "check fails).")
      .def(
          "add_shape_symbol",
          [](RootGuardManager& self,
             const GuardManager& node,
             const std::string& kind,
             int64_t dim,
             std::string name) {
            return self.shape_guards().add_symbol(
                node, symbol_kind_from_name(kind), dim, std::move(name));
          },
          py::arg("node"),
          py::arg("kind"),
          py::arg("dim"),
          py::arg("name"),
          "Adds a symbol: kind 'size' / 'stride' reads size(dim) / stride(dim) "
          "of the tensor at `node` (a node of this tree), 'int' the int there; "
          "returns its index.")
      .def(
          "add_shape_check",
          [](RootGuardManager& self,
             const std::vector<std::pair<std::string, py::object>>& program,
             std::string description) {
            std::vector<ShapeInstr> instrs;
            instrs.reserve(program.size());
            for (const auto& [op, arg] : program) {
              ShapeInstr instr{shape_op_from_name(op)};
              if (instr.op == ShapeOp::kConstFloat) {
                instr.farg = arg.cast<double>();
              } else {
                instr.arg = arg.cast<int64_t>();
              }
              instrs.push_back(instr);
            }
            self.shape_guards().add_check(
                std::move(instrs), std::move(description));
          },
          py::arg("program"),
          py::arg("description"),
          "Adds a relation between symbols: a program of (op, arg) pairs in "
          "reverse Polish notation (see csrc/capture/shape_guards.h).")
      .def(
          "num_shape_checks",
          [](RootGuardManager& self) {
            return self.shape_guards().num_checks();
          })
      .def(
          "last_failure",
          [](const RootGuardManager& self) -> py::object {
            std::optional<std::string> what = self.last_failure();
            return what ? py::object(py::str(*what)) : py::object(py::none());
          })
      .def("failures", &RootGuardManager::failures)
      .def(
          "check",
          [](const RootGuardManager& self,
             py::handle arg_values,
             py::handle f_globals,
             py::handle f_builtins,
             py::handle closure) {
            py::object keep;
            FrameValues values = frame_values_from_python(
                arg_values, f_globals, f_builtins, closure, keep);
            return self.check(values);
          },
          py::arg("arg_values"),
          py::arg("f_globals"),
          py::arg("f_builtins"),
          py::arg("closure"))
      .def(
          "failure_reason",
          [](const RootGuardManager& self,
             py::handle arg_values,
             py::handle f_globals,
             py::handle f_builtins,
             py::handle closure) -> py::object {
            py::object keep;
            FrameValues values = frame_values_from_python(
                arg_values, f_globals, f_builtins, closure, keep);
            std::optional<std::string> reason = self.failure_reason(values);
            return reason ? py::object(py::str(*reason))
                          : py::object(py::none());
          },
          py::arg("arg_values"),
          py::arg("f_globals"),
          py::arg("f_builtins"),
          py::arg("closure"))
      .def("__repr__", [](const RootGuardManager& self) {
        return "<RootGuardManager with " + std::to_string(self.num_checks()) +
            " checks>";
      });
}

} // namespace

void init_capture(py::module_& m) {
  init_extra_state_index();
  bind_frame_info(m);
  bind_guards(m);
  init_eval_frame();
  bind_hook(m);
  bind_cache(m);
}

} // namespace torch_plugin::python
