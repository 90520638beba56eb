// bindings_passes.cpp: the passes' and pipeline's part of
// torch_plugin._C._compiler: Graph.run_pass(name, options),
// Graph.run_pipeline(options) (the pipeline of the graph's device) and
// pass_names(device="cpu"). `options` is a dict of PassOptions fields
// (compiler/passes/pass.h) plus "cache_dir", the kernel cache's directory.
// GIL: held (passes do not release it).
#include "compiler/bindings_graph.h"

#include "compiler/passes/pipeline.h"
#include "runtime/kernel_cache.h"

#include <pybind11/stl.h>

namespace py = pybind11;

namespace torch_plugin::compiler {
namespace {

PassOptions to_options(const py::dict& d) {
  PassOptions o;
  if (d.contains("freeze"))
    o.freeze = d["freeze"].cast<bool>();
  if (d.contains("library_patterns"))
    o.library_patterns = d["library_patterns"].cast<bool>();
  if (d.contains("fusion"))
    o.fusion = d["fusion"].cast<bool>();
  if (d.contains("codegen"))
    o.codegen = d["codegen"].cast<bool>();
  if (d.contains("verify"))
    o.verify = d["verify"].cast<bool>();
  if (d.contains("dump_dir"))
    o.dump_dir = d["dump_dir"].cast<std::string>();
  if (d.contains("log_kernels"))
    o.log_kernels = d["log_kernels"].cast<bool>();
  if (d.contains("log_patterns"))
    o.log_patterns = d["log_patterns"].cast<bool>();
  if (d.contains("memory_planning"))
    o.memory_planning = d["memory_planning"].cast<bool>();
  if (d.contains("cache_dir"))
    runtime::set_kernel_cache_dir(d["cache_dir"].cast<std::string>());
  return o;
}

} // namespace

void init_pass_bindings(py::module_& m) {
  graph_class(m)
      .def(
          "run_pass",
          [](GraphBuilder& b, const std::string& name, py::dict options) {
            return run_pass(find_pass(name), *b.graph, to_options(options));
          })
      .def("run_pipeline", [](GraphBuilder& b, py::dict options) {
        run_pipeline(*b.graph, to_options(options));
      });
  m.def(
      "pass_names",
      [](const std::string& device) {
        std::vector<std::string> names;
        for (const PassInfo* p : pipeline(parse_device(device).type()))
          names.push_back(p->name);
        return names;
      },
      py::arg("device") = "cpu");
}

} // namespace torch_plugin::compiler
