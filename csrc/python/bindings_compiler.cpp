// bindings_compiler.cpp: torch_plugin._C._compiler, the "plugin" compiler's
// Python API, and torch_plugin._C._runtime, the runtime's options.
//
// Owns: the submodule and the order in which each part registers its own
// bindings, one file per part: the IR graph builder (bindings_graph.cpp: class
// Graph), passes and pipeline (bindings_passes.cpp: Graph.run_pass,
// run_pipeline, pass_names), executor and runtime (bindings_runtime.cpp: class
// Executor, has_onednn, kernel_cache_stats) and graph export
// (bindings_graph_export.cpp: Graph.export), then the _runtime submodule
// (bindings_runtime.cpp: configure). These files are the only place where the
// passes and the runtime meet. GIL: held (module init).
#include "python/bindings_compiler.h"

#include "python/bindings_graph.h"

namespace py = pybind11;

namespace torch_plugin::python {

void init_compiler(py::module_& parent) {
  py::module_ m = parent.def_submodule(
      "_compiler", "the 'plugin' compiler: IR, passes, executor");
  init_graph_bindings(m);
  init_pass_bindings(m);
  init_runtime_bindings(m);
  init_graph_export_bindings(m);
  init_runtime_options_bindings(parent);
}

} // namespace torch_plugin::python
