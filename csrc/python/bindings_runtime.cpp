// bindings_runtime.cpp: the executor's and runtime's part of
// torch_plugin._C._compiler: class Executor (built from a Graph that has been
// through the pipeline; run, script_object, describe, steps, step_counts,
// set_frozen, ...), class GraphCall (a compiled graph's call on the hot path:
// frozen-argument check and run, in C++), has_onednn and onednn_error (read on
// first access, after the runtime was configured: the oneDNN library's path is
// a runtime option) and kernel_cache_stats, and _runtime.configure, the
// runtime options (runtime/options.h). GIL: held, except inside the executor's
// steps, which release them.
#include "python/bindings_graph.h"

#include "ops/executor_op.h"
#include "python/gil_release.h"
#include "runtime/cache_file.h"
#include "runtime/cpu/kernel_cache.h"
#include "runtime/executor.h"
#include "runtime/options.h"
#include "runtime/step_registry.h"

#include <ATen/autocast_mode.h>
#include <c10/core/GradMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <optional>

namespace py = pybind11;

namespace torch_plugin::python {
namespace {

// The options of _runtime.configure, in the order of RuntimeOptions.
constexpr const char* kOptionKeys[] = {
    "cache_dir",
    "cxx",
    "onednn_library",
    "onednn_weights",
    "cublaslt_tuning",
    "cublaslt_candidates",
    "cudnn_threads"};

std::string* option_field(runtime::RuntimeOptions& o, const std::string& key) {
  if (key == "cache_dir")
    return &o.cache_dir;
  if (key == "cxx")
    return &o.cxx;
  if (key == "onednn_library")
    return &o.onednn_library;
  if (key == "onednn_weights")
    return &o.onednn_weights;
  if (key == "cublaslt_tuning")
    return &o.cublaslt_tuning;
  if (key == "cublaslt_candidates")
    return &o.cublaslt_candidates;
  if (key == "cudnn_threads")
    return &o.cudnn_threads;
  return nullptr;
}

// _compiler.has_onednn / onednn_error, computed when first read (module
// __getattr__, PEP 562), so that the runtime's onednn_library option set at
// import (torch_plugin/__init__.py) is the one loaded.
py::object compiler_attribute(py::module_ m, const std::string& name) {
  if (name != "has_onednn" && name != "onednn_error")
    throw py::attribute_error(
        "module 'torch_plugin._C._compiler' has no attribute '" + name + "'");
  std::string why;
  const bool available = runtime::library_available("onednn", &why);
  m.attr("has_onednn") = available;
  m.attr("onednn_error") = why.empty() ? py::none() : py::object(py::str(why));
  return m.attr(name.c_str());
}

// A compiled graph's call, the one object between the caller and the executor
// on the hot path. Called boxed (`call(args)`, AOTAutograd's convention:
// frozen arguments first, then the inputs) or flat (`call.flat(*inputs)`: the
// leading arguments given at construction, then `inputs`). The executor's
// frozen arguments (Executor::set_frozen) are checked here, by TensorImpl and
// version; when one changed, `on_frozen_changed(args)` (Python: rebuild, then
// run) gives the result instead. `run_override`, when not None, runs the
// inputs instead of the executor (Python: the CUDA-graph decision on the first
// call, then a CUDA graph runner). `no_grad` and `disable_autocast` are
// AOTAutograd's inference wrapper's modes (grad off; autocast off when it was
// on at compile time: the traced graph has autocast's casts written out).
//
// `leading` is held as Python objects (a tuple the garbage collector
// traverses), not as at::Tensor: a TensorImpl held from C++ keeps its Python
// object alive where the collector cannot see it, and a parameter's Python
// object can reach the model (FSDP2), which the compiled frame would then
// keep alive for ever.
struct GraphCall {
  std::shared_ptr<runtime::Executor> executor;
  py::tuple leading;
  py::object on_frozen_changed;
  py::object run_override = py::none();
  bool no_grad = false;
  bool disable_autocast = false;
  bool as_tuple = false;

  py::object finish(py::object outputs) const {
    if (as_tuple && !py::isinstance<py::tuple>(outputs))
      return py::tuple(outputs);
    return outputs;
  }

  py::object run_inputs(std::vector<at::Tensor>& inputs) const {
    std::vector<at::Tensor> outputs;
    {
      python::GilRelease release; // parks at interpreter exit
      c10::AutoGradMode grad(!no_grad && c10::GradMode::is_enabled());
      std::optional<c10::impl::ExcludeDispatchKeyGuard> no_autocast;
      if (disable_autocast)
        no_autocast.emplace(c10::autocast_dispatch_keyset);
      outputs = executor->run(inputs);
    }
    if (as_tuple) {
      py::tuple result(outputs.size());
      for (size_t i = 0; i < outputs.size(); ++i)
        result[i] = from_tensor(outputs[i]);
      return result;
    }
    py::list result(outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i)
      result[i] = from_tensor(outputs[i]);
    return result;
  }

  py::object run_override_with(std::vector<at::Tensor>& inputs) const {
    std::optional<c10::AutoGradMode> grad;
    if (no_grad)
      grad.emplace(false);
    std::optional<c10::impl::ExcludeDispatchKeyGuard> no_autocast;
    if (disable_autocast)
      no_autocast.emplace(c10::autocast_dispatch_keyset);
    py::list args(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i)
      args[i] = from_tensor(inputs[i]);
    return finish(run_override(args));
  }

  // Boxed: `args` holds the frozen arguments, then the inputs.
  py::object call(const py::sequence& args) const {
    const runtime::Executor& e = *executor;
    size_t n = e.num_frozen(), size = args.size();
    if (size < n)
      return changed(py::list(args));
    for (size_t i = 0; i < n; ++i) {
      py::object a = args[i];
      if (!THPVariable_Check(a.ptr()) ||
          !e.frozen_unchanged(i, THPVariable_Unpack(a.ptr())))
        return changed(py::list(args));
    }
    std::vector<at::Tensor> inputs;
    inputs.reserve(size - n);
    for (size_t i = n; i < size; ++i)
      inputs.push_back(to_tensor(args[i]));
    return run_override.is_none() ? run_inputs(inputs)
                                  : run_override_with(inputs);
  }

  // Flat: the leading arguments, then `args`.
  py::object flat(const py::args& args) const {
    const runtime::Executor& e = *executor;
    size_t n = e.num_frozen();
    size_t size = leading.size();
    bool unchanged = n <= size;
    for (size_t i = 0; unchanged && i < n; ++i)
      unchanged = e.frozen_unchanged(i, THPVariable_Unpack(leading[i].ptr()));
    if (!unchanged) {
      py::list boxed;
      for (py::handle t : leading)
        boxed.append(t);
      for (py::handle a : args)
        boxed.append(a);
      return changed(boxed);
    }
    std::vector<at::Tensor> inputs;
    inputs.reserve(size - n + args.size());
    for (size_t i = n; i < size; ++i)
      inputs.push_back(THPVariable_Unpack(leading[i].ptr()));
    for (py::handle a : args)
      inputs.push_back(to_tensor(a));
    return run_override.is_none() ? run_inputs(inputs)
                                  : run_override_with(inputs);
  }

  py::object changed(py::list args) const {
    return finish(on_frozen_changed(args));
  }
};

} // namespace

void init_runtime_bindings(py::module_& m) {
  py::class_<runtime::Executor, std::shared_ptr<runtime::Executor>>(
      m, "Executor")
      .def(
          py::init([](GraphBuilder& b, bool release_owned_constants) {
            // release_owned_constants: the graph's constants that the steps
            // hold copies of are released from it (runtime/executor.h); the
            // graph cannot be run or exported again.
            if (release_owned_constants)
              return std::make_shared<runtime::Executor>(
                  *b.graph, runtime::Executor::ReleaseOwnedConstants::kYes);
            return std::make_shared<runtime::Executor>(*b.graph);
          }),
          py::arg("graph"),
          py::arg("release_owned_constants") = false)
      .def(
          "run",
          [](const runtime::Executor& e, py::sequence args) {
            std::vector<at::Tensor> inputs;
            inputs.reserve(args.size());
            for (py::handle a : args)
              inputs.push_back(to_tensor(a));
            std::vector<at::Tensor> outputs;
            {
              python::GilRelease release; // parks at interpreter exit
              outputs = e.run(inputs);
            }
            py::list result(outputs.size());
            for (size_t i = 0; i < outputs.size(); ++i)
              result[i] = from_tensor(outputs[i]);
            return result;
          })
      .def(
          "run_prefix",
          [](const runtime::Executor& e, py::sequence args, int k) {
            // Steps [0, k); returns the values the rest needs (executor.h).
            std::vector<at::Tensor> inputs;
            inputs.reserve(args.size());
            for (py::handle a : args)
              inputs.push_back(to_tensor(a));
            std::vector<at::Tensor> carried;
            {
              python::GilRelease release;
              carried = e.run_prefix(inputs, k);
            }
            py::list result(carried.size());
            for (size_t i = 0; i < carried.size(); ++i)
              result[i] = from_tensor(carried[i]);
            return result;
          },
          py::arg("inputs"),
          py::arg("k"))
      .def(
          "run_suffix",
          [](const runtime::Executor& e,
             py::sequence args,
             py::sequence carried_values,
             int k) {
            // Steps [k, n) on run_prefix's values; the graph's outputs.
            std::vector<at::Tensor> inputs, carried;
            inputs.reserve(args.size());
            for (py::handle a : args)
              inputs.push_back(to_tensor(a));
            for (py::handle a : carried_values)
              carried.push_back(to_tensor(a));
            std::vector<at::Tensor> outputs;
            {
              python::GilRelease release;
              outputs = e.run_suffix(inputs, carried, k);
            }
            py::list result(outputs.size());
            for (size_t i = 0; i < outputs.size(); ++i)
              result[i] = from_tensor(outputs[i]);
            return result;
          },
          py::arg("inputs"),
          py::arg("carried"),
          py::arg("k"))
      .def(
          "split_point",
          &runtime::Executor::split_point,
          py::arg("max_carried_bytes"),
          py::arg("max_tail"))
      .def("output_bytes", &runtime::Executor::output_bytes)
      .def(
          "script_object",
          [](std::shared_ptr<runtime::Executor> e) {
            // torch.classes.torch_plugin.Executor, the argument of
            // torch.ops.torch_plugin.run_graph (ops/executor_op.h).
            return torch::jit::toPyObject(c10::IValue(
                c10::make_intrusive<ops::ExecutorObject>(std::move(e))));
          })
      .def("describe", &runtime::Executor::describe)
      .def(
          "steps",
          [](const runtime::Executor& e) {
            // [(kind, op, device)]: "fallback", "aten::add.Tensor", "cpu".
            py::list out;
            for (const runtime::StepInfo& s : e.steps())
              out.append(py::make_tuple(s.kind, s.op, s.device.str()));
            return out;
          })
      .def(
          "set_frozen",
          [](runtime::Executor& e, py::sequence frozen) {
            std::vector<at::Tensor> tensors;
            for (py::handle t : frozen)
              tensors.push_back(to_tensor(t));
            e.set_frozen(std::move(tensors));
          })
      .def("num_frozen", &runtime::Executor::num_frozen)
      .def("step_counts", &runtime::Executor::step_counts)
      .def("constants", &runtime::Executor::constants)
      .def("num_inputs", &runtime::Executor::num_inputs)
      .def(
          "num_outputs",
          [](const runtime::Executor& e) { return e.output_specs().size(); })
      .def("arena_bytes", &runtime::Executor::arena_bytes)
      .def("num_planned", &runtime::Executor::num_planned)
      .def("device", [](const runtime::Executor& e) {
        return e.device().str();
      });
  // GraphCall holds Python callables that may hold it (a compiled graph's
  // bound methods): it takes part in Python's garbage collection.
  py::class_<GraphCall>(
      m, "GraphCall", py::custom_type_setup([](PyHeapTypeObject* heap_type) {
        PyTypeObject* type = &heap_type->ht_type;
        type->tp_flags |= Py_TPFLAGS_HAVE_GC;
        type->tp_traverse = [](PyObject* self, visitproc visit, void* arg) {
          auto& c = py::cast<GraphCall&>(py::handle(self));
          Py_VISIT(c.on_frozen_changed.ptr());
          Py_VISIT(c.run_override.ptr());
          Py_VISIT(c.leading.ptr());
          Py_VISIT(Py_TYPE(self));
          return 0;
        };
        type->tp_clear = [](PyObject* self) {
          auto& c = py::cast<GraphCall&>(py::handle(self));
          c.on_frozen_changed = py::none();
          c.run_override = py::none();
          c.leading = py::tuple();
          return 0;
        };
      }))
      .def(
          py::init([](std::shared_ptr<runtime::Executor> e,
                      py::object on_frozen_changed,
                      py::sequence leading,
                      bool no_grad,
                      bool disable_autocast,
                      bool as_tuple) {
            GraphCall c;
            c.executor = std::move(e);
            c.on_frozen_changed = std::move(on_frozen_changed);
            for (py::handle t : leading)
              (void)to_tensor(t); // raises for a non-tensor
            c.leading = py::tuple(leading);
            c.no_grad = no_grad;
            c.disable_autocast = disable_autocast;
            c.as_tuple = as_tuple;
            return c;
          }),
          py::arg("executor"),
          py::arg("on_frozen_changed"),
          py::arg("leading") = py::list(),
          py::arg("no_grad") = false,
          py::arg("disable_autocast") = false,
          py::arg("as_tuple") = false)
      .def("__call__", &GraphCall::call)
      .def("flat", &GraphCall::flat)
      .def_property(
          "executor",
          [](const GraphCall& c) { return c.executor; },
          [](GraphCall& c, std::shared_ptr<runtime::Executor> e) {
            c.executor = std::move(e);
          })
      .def_readwrite("run_override", &GraphCall::run_override)
      .def_property_readonly(
          "leading", [](const GraphCall& c) { return py::list(c.leading); })
      .def_readonly("no_grad", &GraphCall::no_grad)
      .def_readonly("disable_autocast", &GraphCall::disable_autocast);
  m.attr("GraphCall").attr("_boxed_call") = true;
  // Built with oneDNN: usable when torch_plugin/_onednn.so (and libdnnl) loads.
  m.def("__getattr__", [m](const std::string& name) {
    return compiler_attribute(m, name);
  });
  m.def("kernel_cache_stats", [] {
    auto s = runtime::cpu::kernel_cache_stats();
    return py::dict(
        py::arg("compiled") = s.compiled,
        py::arg("disk_hits") = s.disk_hits,
        py::arg("memory_hits") = s.memory_hits,
        py::arg("disk_rejected") = s.disk_rejected);
  });
  m.def(
      "forget_loaded_kernels",
      &runtime::cpu::forget_loaded_kernels,
      "Forget the kernels loaded in this process (they stay mapped): the next "
      "compile reads the disk cache again. For tests.");
  m.def(
      "layout_copies",
      [] { return runtime::layout_copies(); },
      "{what: count}: copies the executor's steps made because a tensor's "
      "real layout differed from the planned one (runtime/step.h).");
  m.def(
      "reset_layout_copies",
      &runtime::reset_layout_copies,
      "Sets the layout-copy counts to none.");
  m.def(
      "sha256_hex",
      [](const py::bytes& data) { return runtime::sha256_hex(data); },
      "SHA-256 of bytes as 64 hex digits (the kernel caches' hash; FIPS 180-4).");
}

void init_runtime_options_bindings(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "_runtime", "the C++ runtime's options (csrc/runtime/options.h)");
  m.def(
      "configure",
      [](const py::dict& options) {
        runtime::RuntimeOptions o = runtime::runtime_options();
        for (auto item : options) {
          const std::string key = py::str(item.first);
          std::string* field = option_field(o, key);
          if (!field)
            throw py::value_error(
                "_runtime.configure: unknown option '" + key +
                "'; expected cache_dir, cxx, onednn_library, onednn_weights, "
                "cublaslt_tuning, cublaslt_candidates or cudnn_threads");
          if (!py::isinstance<py::str>(item.second))
            throw py::type_error(
                "_runtime.configure: option '" + key + "' must be a str");
          *field = item.second.cast<std::string>();
        }
        runtime::configure(o);
      },
      py::arg("options"),
      "Sets the runtime's options from a dict of str: cache_dir, cxx, "
      "onednn_library, onednn_weights, cublaslt_tuning, cublaslt_candidates, "
      "cudnn_threads (\"\" = the default; a key left out keeps its value). See "
      "csrc/runtime/options.h.");
  m.def(
      "options",
      [] {
        runtime::RuntimeOptions o = runtime::runtime_options();
        py::dict d;
        for (const char* key : kOptionKeys)
          d[key] = *option_field(o, key);
        return d;
      },
      "The runtime's options now in effect, as configure takes them.");
}

} // namespace torch_plugin::python
