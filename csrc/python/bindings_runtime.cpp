// bindings_runtime.cpp: the executor's and runtime's part of
// torch_plugin._C._compiler: class Executor (built from a Graph that has been
// through the pipeline; run, script_object, describe, step_counts, ...),
// has_onednn and onednn_error (read on first access, after the runtime was
// configured: the oneDNN library's path is a runtime option) and
// kernel_cache_stats; and torch_plugin._C._runtime.configure, the runtime's
// options (runtime/options.h). GIL: held, except inside Executor.run's steps,
// which release it.
#include "python/bindings_graph.h"

#include "ops/executor_op.h"
#include "python/gil_release.h"
#include "runtime/cache_file.h"
#include "runtime/cpu/kernel_cache.h"
#include "runtime/executor.h"
#include "runtime/options.h"
#include "runtime/step_registry.h"

#include <pybind11/stl.h>
#include <torch/csrc/jit/python/pybind_utils.h>

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
    "cublaslt_candidates"};

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
  m.attr("onednn_error") =
      why.empty() ? py::none() : py::object(py::str(why));
  return m.attr(name.c_str());
}

} // namespace

void init_runtime_bindings(py::module_& m) {
  py::class_<runtime::Executor, std::shared_ptr<runtime::Executor>>(
      m, "Executor")
      .def(py::init([](GraphBuilder& b) {
        return std::make_shared<runtime::Executor>(*b.graph);
      }))
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
          "script_object",
          [](std::shared_ptr<runtime::Executor> e) {
            // torch.classes.torch_plugin.Executor, the argument of
            // torch.ops.torch_plugin.run_graph (ops/executor_op.h).
            return torch::jit::toPyObject(
                c10::IValue(
                    c10::make_intrusive<ops::ExecutorObject>(std::move(e))));
          })
      .def("describe", &runtime::Executor::describe)
      .def("step_counts", &runtime::Executor::step_counts)
      .def("num_inputs", &runtime::Executor::num_inputs)
      .def(
          "num_outputs",
          [](const runtime::Executor& e) { return e.output_specs().size(); })
      .def("arena_bytes", &runtime::Executor::arena_bytes)
      .def("num_planned", &runtime::Executor::num_planned)
      .def("device", [](const runtime::Executor& e) {
        return e.device().str();
      });
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
                "cublaslt_tuning or cublaslt_candidates");
          if (!py::isinstance<py::str>(item.second))
            throw py::type_error(
                "_runtime.configure: option '" + key + "' must be a str");
          *field = item.second.cast<std::string>();
        }
        runtime::configure(o);
      },
      py::arg("options"),
      "Sets the runtime's options from a dict of str: cache_dir, cxx, "
      "onednn_library, onednn_weights, cublaslt_tuning, cublaslt_candidates "
      "(\"\" = the default; a key left out keeps its value). See "
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
