// bindings_runtime.cpp: the executor's and runtime's part of
// torch_plugin._C._compiler: class Executor (built from a Graph that has been
// through the pipeline; run, script_object, describe, step_counts, ...),
// has_onednn and kernel_cache_stats. GIL: held, except inside Executor.run's
// steps, which release it.
#include "compiler/bindings_graph.h"

#include "ops/executor_op.h"
#include "python/gil_release.h"
#ifdef TORCH_PLUGIN_HAVE_ONEDNN
#include "libs/onednn_loader.h"
#endif
#include "runtime/cache_file.h"
#include "runtime/executor.h"
#include "runtime/kernel_cache.h"

#include <pybind11/stl.h>
#include <torch/csrc/jit/python/pybind_utils.h>

namespace py = pybind11;

namespace torch_plugin::compiler {

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
#ifdef TORCH_PLUGIN_HAVE_ONEDNN
  // Built with oneDNN: usable when torch_plugin/_onednn.so (and libdnnl) loads.
  std::string why;
  m.attr("has_onednn") = libs::onednn_available(&why);
  m.attr("onednn_error") = why.empty() ? py::none() : py::object(py::str(why));
#else
  m.attr("has_onednn") = false;
  m.attr("onednn_error") = py::none();
#endif
  m.def("kernel_cache_stats", [] {
    auto s = runtime::kernel_cache_stats();
    return py::dict(
        py::arg("compiled") = s.compiled,
        py::arg("disk_hits") = s.disk_hits,
        py::arg("memory_hits") = s.memory_hits,
        py::arg("disk_rejected") = s.disk_rejected);
  });
  m.def(
      "forget_loaded_kernels",
      &runtime::forget_loaded_kernels,
      "Forget the kernels loaded in this process (they stay mapped): the next "
      "compile reads the disk cache again. For tests.");
  m.def(
      "sha256_hex",
      [](const py::bytes& data) { return runtime::sha256_hex(data); },
      "SHA-256 of bytes as 64 hex digits (the kernel caches' hash; FIPS 180-4).");
}

} // namespace torch_plugin::compiler
