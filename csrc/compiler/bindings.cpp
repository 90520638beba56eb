// bindings.cpp: torch_plugin._C._compiler, the "plugin" compiler's Python API.
//
// Owns: the submodule and the order in which each part registers its own
// bindings, one file per part: the IR graph builder (bindings_graph.cpp: class
// Graph), passes and pipeline (bindings_passes.cpp: Graph.run_pass,
// run_pipeline, pass_names), executor and runtime (bindings_runtime.cpp: class
// Executor, has_onednn, kernel_cache_stats) and graph export
// (bindings_graph_export.cpp: Graph.export). These files are the only place
// where the passes and the runtime meet. GIL: held (module init).
#include "compiler/bindings.h"

#include "compiler/bindings_graph.h"
#include "ops/library_ops.h"

namespace py = pybind11;

namespace torch_plugin::compiler {

void init_compiler(py::module_& parent) {
  ops::link_library_ops();
  ops::link_library_ops_cpu();
  py::module_ m = parent.def_submodule(
      "_compiler", "the 'plugin' compiler: IR, passes, executor");
  init_graph_bindings(m);
  init_pass_bindings(m);
  init_runtime_bindings(m);
  init_graph_export_bindings(m);
}

} // namespace torch_plugin::compiler
