// bindings_graph.h: the IR graph builder's part of torch_plugin._C._compiler
// (class Graph: add_input, add_constant, add_node, set_type, set_outputs,
// verify, device, num_nodes, __str__), and the conversions between Python and
// the IR that the other parts' bindings (bindings_passes.cpp,
// bindings_runtime.cpp, bindings_graph_export.cpp) share. Each part adds its
// own methods to the Graph class it registers here.
//
// Python objects: tensors cross as borrowed PyObject* (THPVariable_Unpack
// copies the at::Tensor reference; THPVariable_Wrap returns a new reference).
// GIL: held.
#pragma once

#include "ir/ir.h"

#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch_plugin::python {

// The graph IR (csrc/ir) that passes and codegen read and rewrite.
using namespace ::torch_plugin::ir;

// A Python tensor's at::Tensor; TypeError for anything else.
at::Tensor to_tensor(pybind11::handle h);
// None for an undefined tensor.
pybind11::object from_tensor(const at::Tensor& t);
// A constant argument (None, bool, int, float, str or a list of them).
AttrValue to_attr(pybind11::handle h);
// "cpu", "cuda:0", ... as a c10::Device; ValueError for anything else.
c10::Device parse_device(const std::string& device);

// Builds a Graph from Python, naming values by the ids this object hands out
// (Python class torch_plugin._C._compiler.Graph).
class GraphBuilder {
 public:
  std::shared_ptr<Graph> graph = std::make_shared<Graph>();

  int64_t add_input(
      int dtype,
      std::vector<int64_t> sizes,
      std::vector<int64_t> strides,
      const std::string& device);
  int64_t add_constant(pybind11::handle t);
  // args: one (kind, payload) per schema argument: ("c", constant),
  // ("t", value id), ("l", [value id or None, ...]). Returns the ids of the
  // outputs.
  std::vector<int64_t> add_node(
      const std::string& op,
      const std::string& overload,
      pybind11::list args,
      size_t num_outputs,
      bool may_alias);
  void set_type(
      int64_t id,
      int dtype,
      std::vector<int64_t> sizes,
      std::vector<int64_t> strides,
      const std::string& device);
  void set_outputs(const std::vector<int64_t>& ids);

 private:
  int64_t keep(Value* v);
  Value* value(int64_t id);
  std::unordered_map<int64_t, Value*> by_id_;
};

// Registers class Graph in `m` (the _compiler submodule).
void init_graph_bindings(pybind11::module_& m);
// The Graph class registered by init_graph_bindings, to add methods to.
pybind11::class_<GraphBuilder> graph_class(pybind11::module_& m);

// The other parts, each in its own file (called by init_compiler in this
// order, after init_graph_bindings):
// passes and pipeline (bindings_passes.cpp): Graph.run_pass, run_pipeline,
// pass_names.
void init_pass_bindings(pybind11::module_& m);
// executor and runtime (bindings_runtime.cpp): class Executor, has_onednn,
// kernel_cache_stats.
void init_runtime_bindings(pybind11::module_& m);
// the runtime's options (bindings_runtime.cpp): submodule _runtime of the
// extension module `m`, its configure(options) and options().
void init_runtime_options_bindings(pybind11::module_& m);
// graph export (bindings_graph_export.cpp): Graph.export.
void init_graph_export_bindings(pybind11::module_& m);

} // namespace torch_plugin::python
