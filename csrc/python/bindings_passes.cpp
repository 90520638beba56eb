// bindings_passes.cpp: the passes' and pipeline's part of
// torch_plugin._C._compiler: Graph.run_pass(name, options),
// Graph.run_pipeline(options) (the pipeline of the graph's device) and
// pass_names(device="cpu"). `options` is a dict of PassOptions fields
// (compiler/passes/pass.h) plus "cache_dir", the kernel cache's directory,
// which is a runtime setting: the binding hands it to the runtime
// (runtime::set_kernel_cache_dir) before the passes run; parsing the options
// has no side effect. With "record_patterns": True, run_pipeline returns the
// pattern rules' decisions (PassOptions::pattern_events) as a list of dicts
// with the PatternEvent fields (the compile trace's "patterns" event); else
// an empty list. GIL: held (passes do not release it).
#include "python/bindings_graph.h"

#include "compiler/passes/pipeline.h"
#include "runtime/options.h"

#include <pybind11/stl.h>

namespace py = pybind11;

namespace torch_plugin::python {

using compiler::PassInfo;
using compiler::PassOptions;

namespace {

// The PassOptions fields of `d` (the others keep their defaults).
PassOptions to_pass_options(const py::dict& d) {
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
  if (d.contains("fallback_random"))
    o.fallback_random = d["fallback_random"].cast<bool>();
  if (d.contains("cuda_conv_channels_last"))
    o.cuda_conv_channels_last = d["cuda_conv_channels_last"].cast<bool>();
  return o;
}

// The runtime setting among the options: the kernel cache folder, where the
// codegen pass's kernels go.
void set_runtime_options(const py::dict& d) {
  if (d.contains("cache_dir"))
    runtime::set_kernel_cache_dir(d["cache_dir"].cast<std::string>());
}

} // namespace

void init_pass_bindings(py::module_& m) {
  graph_class(m)
      .def(
          "run_pass",
          [](GraphBuilder& b, const std::string& name, py::dict options) {
            const PassInfo& pass = compiler::find_pass(name);
            const PassOptions pass_options = to_pass_options(options);
            set_runtime_options(options);
            return compiler::run_pass(pass, *b.graph, pass_options);
          })
      .def("run_pipeline", [](GraphBuilder& b, py::dict options) {
        PassOptions pass_options = to_pass_options(options);
        std::vector<compiler::PatternEvent> events;
        if (options.contains("record_patterns") &&
            options["record_patterns"].cast<bool>())
          pass_options.pattern_events = &events;
        set_runtime_options(options);
        compiler::run_pipeline(*b.graph, pass_options);
        py::list out;
        for (const compiler::PatternEvent& e : events) {
          py::dict d;
          d["pass"] = e.pass;
          d["rule"] = e.rule;
          d["source"] = e.source;
          d["outcome"] = e.outcome;
          d["node"] = e.node;
          d["device"] = e.device;
          d["reason"] = e.reason;
          out.append(d);
        }
        return out;
      });
  m.def(
      "pass_names",
      [](const std::string& device) {
        std::vector<std::string> names;
        for (const PassInfo* p :
             compiler::pipeline(parse_device(device).type()))
          names.push_back(p->name);
        return names;
      },
      py::arg("device") = "cpu");
}

} // namespace torch_plugin::python
