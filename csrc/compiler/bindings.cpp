// bindings.cpp: torch_plugin._C._compiler — build an IR graph from Python, run
// the pipeline, and run the resulting Executor.
//
// Python objects: tensors cross as borrowed PyObject* (THPVariable_Unpack copies
// the at::Tensor reference; THPVariable_Wrap returns a new reference). The GIL is
// held everywhere except inside Executor.run's steps, which release it.
#include "compiler/bindings.h"

#include "compiler/bindings_graph_export.h"
#include "compiler/passes/pipeline.h"
#include "ir/ir.h"
#include "ir/verifier.h"
#include "ops/executor_op.h"
#include "ops/library_ops.h"
#include "runtime/executor.h"
#include "runtime/kernel_cache.h"

#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>

namespace py = pybind11;

namespace torch_plugin::compiler {
namespace {

at::Tensor to_tensor(py::handle h) {
  if (!THPVariable_Check(h.ptr()))
    throw py::type_error("expected a torch.Tensor, got " + std::string(py::str(h.get_type())));
  return THPVariable_Unpack(h.ptr());
}

py::object from_tensor(const at::Tensor& t) {
  if (!t.defined()) return py::none();
  return py::reinterpret_steal<py::object>(THPVariable_Wrap(t));
}

AttrValue to_attr(py::handle h) {
  if (h.is_none()) return std::monostate{};
  if (py::isinstance<py::bool_>(h)) return h.cast<bool>();
  if (py::isinstance<py::int_>(h)) return h.cast<int64_t>();
  if (py::isinstance<py::float_>(h)) return h.cast<double>();
  if (py::isinstance<py::str>(h)) return h.cast<std::string>();
  if (py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h)) {
    py::sequence seq = py::reinterpret_borrow<py::sequence>(h);
    bool all_bool = true, all_int = true;
    for (py::handle e : seq) {
      all_bool &= py::isinstance<py::bool_>(e);
      all_int &= py::isinstance<py::int_>(e) && !py::isinstance<py::bool_>(e);
    }
    if (seq.size() > 0 && all_bool) return seq.cast<std::vector<bool>>();
    if (all_int) return seq.cast<std::vector<int64_t>>();
    return seq.cast<std::vector<double>>();
  }
  throw py::type_error("unsupported constant argument of type " +
                       std::string(py::str(h.get_type())));
}

c10::Device parse_device(const std::string& device) {
  try {
    return c10::Device(device);
  } catch (const c10::Error&) {
    throw py::value_error("not a device: '" + device + "'");
  }
}

// Builds a Graph from Python, naming values by the ids this object hands out.
class GraphBuilder {
 public:
  std::shared_ptr<Graph> graph = std::make_shared<Graph>();

  // device: "cpu", "cuda:0", ... (c10::Device's spelling); throws ValueError otherwise.
  int64_t add_input(int dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                    const std::string& device) {
    return keep(graph->add_input(static_cast<c10::ScalarType>(dtype), std::move(sizes),
                                 std::move(strides), parse_device(device)));
  }
  int64_t add_constant(py::handle t) { return keep(graph->add_constant(to_tensor(t))); }

  // args: one (kind, payload) per schema argument: ("c", constant), ("t", value id),
  // ("l", [value id or None, ...]). Returns the ids of the outputs.
  std::vector<int64_t> add_node(const std::string& op, const std::string& overload,
                                py::list args, size_t num_outputs, bool may_alias) {
    std::vector<Value*> inputs;
    std::vector<Arg> node_args;
    for (py::handle a : args) {
      py::tuple t = py::reinterpret_borrow<py::tuple>(a);
      std::string kind = t[0].cast<std::string>();
      if (kind == "c") {
        node_args.push_back(Arg::constant(to_attr(t[1])));
      } else if (kind == "t") {
        inputs.push_back(value(t[1].cast<int64_t>()));
        node_args.push_back(Arg::tensor(static_cast<int64_t>(inputs.size()) - 1));
      } else {
        Arg arg{Arg::Kind::kTensorList, {}, {}};
        for (py::handle e : t[1]) {
          if (e.is_none()) {
            arg.inputs.push_back(-1);
            continue;
          }
          inputs.push_back(value(e.cast<int64_t>()));
          arg.inputs.push_back(static_cast<int64_t>(inputs.size()) - 1);
        }
        node_args.push_back(std::move(arg));
      }
    }
    Node* n = graph->create_node(op, overload, std::move(inputs), std::move(node_args),
                                 num_outputs);
    n->may_alias = may_alias;
    std::vector<int64_t> ids;
    for (Value* out : n->outputs) ids.push_back(keep(out));
    return ids;
  }

  void set_type(int64_t id, int dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides,
                const std::string& device) {
    Graph::set_type(value(id), static_cast<c10::ScalarType>(dtype), std::move(sizes),
                    std::move(strides), parse_device(device));
  }
  void set_outputs(const std::vector<int64_t>& ids) {
    std::vector<Value*> outs;
    for (int64_t id : ids) outs.push_back(value(id));
    graph->set_outputs(std::move(outs));
  }

 private:
  int64_t keep(Value* v) {
    by_id_[v->id] = v;
    return v->id;
  }
  Value* value(int64_t id) {
    auto it = by_id_.find(id);
    if (it == by_id_.end()) throw py::value_error("unknown value id " + std::to_string(id));
    return it->second;
  }
  std::unordered_map<int64_t, Value*> by_id_;
};

PassOptions to_options(const py::dict& d) {
  PassOptions o;
  if (d.contains("freeze")) o.freeze = d["freeze"].cast<bool>();
  if (d.contains("library_patterns")) o.library_patterns = d["library_patterns"].cast<bool>();
  if (d.contains("fusion")) o.fusion = d["fusion"].cast<bool>();
  if (d.contains("verify")) o.verify = d["verify"].cast<bool>();
  if (d.contains("dump_dir")) o.dump_dir = d["dump_dir"].cast<std::string>();
  if (d.contains("log_kernels")) o.log_kernels = d["log_kernels"].cast<bool>();
  if (d.contains("memory_planning")) o.memory_planning = d["memory_planning"].cast<bool>();
  if (d.contains("cache_dir")) runtime::set_kernel_cache_dir(d["cache_dir"].cast<std::string>());
  return o;
}

}  // namespace

void init_compiler(py::module_& parent) {
  ops::link_library_ops();
  ops::link_library_ops_cpu();
  py::module_ m = parent.def_submodule("_compiler", "the 'plugin' compiler: IR, passes, executor");
  py::class_<GraphBuilder>(m, "Graph")
      .def(py::init<>())
      .def("add_input", &GraphBuilder::add_input, py::arg("dtype"), py::arg("sizes"),
           py::arg("strides"), py::arg("device") = "cpu")
      .def("add_constant", &GraphBuilder::add_constant)
      .def("add_node", &GraphBuilder::add_node)
      .def("set_type", &GraphBuilder::set_type, py::arg("id"), py::arg("dtype"), py::arg("sizes"),
           py::arg("strides"), py::arg("device") = "cpu")
      .def("device", [](GraphBuilder& b) { return graph_device(*b.graph).str(); })
      .def("set_outputs", &GraphBuilder::set_outputs)
      .def("verify", [](GraphBuilder& b) { verify(*b.graph); })
      .def("run_pass",
           [](GraphBuilder& b, const std::string& name, py::dict options) {
             return run_pass(find_pass(name), *b.graph, to_options(options));
           })
      .def("run_pipeline",
           [](GraphBuilder& b, py::dict options) { run_pipeline(*b.graph, to_options(options)); })
      .def("num_nodes", [](GraphBuilder& b) { return b.graph->num_nodes(); })
      .def("export", [](GraphBuilder& b) { return export_graph(*b.graph); })
      .def("__str__", [](GraphBuilder& b) { return b.graph->str(); });

  py::class_<runtime::Executor, std::shared_ptr<runtime::Executor>>(m, "Executor")
      .def(py::init([](GraphBuilder& b) { return std::make_shared<runtime::Executor>(*b.graph); }))
      .def("run",
           [](const runtime::Executor& e, py::sequence args) {
             std::vector<at::Tensor> inputs;
             inputs.reserve(args.size());
             for (py::handle a : args) inputs.push_back(to_tensor(a));
             std::vector<at::Tensor> outputs;
             {
               py::gil_scoped_release release;
               outputs = e.run(inputs);
             }
             py::list result(outputs.size());
             for (size_t i = 0; i < outputs.size(); ++i) result[i] = from_tensor(outputs[i]);
             return result;
           })
      .def("script_object",
           [](std::shared_ptr<runtime::Executor> e) {
             // torch.classes.torch_plugin.Executor, the argument of
             // torch.ops.torch_plugin.run_graph (ops/executor_op.h).
             return torch::jit::toPyObject(
                 c10::IValue(c10::make_intrusive<ops::ExecutorObject>(std::move(e))));
           })
      .def("describe", &runtime::Executor::describe)
      .def("step_counts", &runtime::Executor::step_counts)
      .def("num_inputs", &runtime::Executor::num_inputs)
      .def("num_outputs", [](const runtime::Executor& e) { return e.output_specs().size(); })
      .def("arena_bytes", &runtime::Executor::arena_bytes)
      .def("num_planned", &runtime::Executor::num_planned);
#ifdef TORCH_PLUGIN_HAVE_ONEDNN
  m.attr("has_onednn") = true;
#else
  m.attr("has_onednn") = false;
#endif
  m.def("kernel_cache_stats", [] {
    auto s = runtime::kernel_cache_stats();
    return py::dict(py::arg("compiled") = s.compiled, py::arg("disk_hits") = s.disk_hits,
                    py::arg("memory_hits") = s.memory_hits);
  });
  m.def(
      "pass_names",
      [](const std::string& device) {
        std::vector<std::string> names;
        for (const PassInfo* p : pipeline(parse_device(device).type())) names.push_back(p->name);
        return names;
      },
      py::arg("device") = "cpu");
}

}  // namespace torch_plugin::compiler
