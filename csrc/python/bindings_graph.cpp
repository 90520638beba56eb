// bindings_graph.cpp: the IR graph builder's bindings (see bindings_graph.h).
#include "python/bindings_graph.h"

#include "ir/verifier.h"

#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>

namespace py = pybind11;

namespace torch_plugin::python {

at::Tensor to_tensor(py::handle h) {
  if (!THPVariable_Check(h.ptr()))
    throw py::type_error(
        "expected a torch.Tensor, got " + std::string(py::str(h.get_type())));
  return THPVariable_Unpack(h.ptr());
}

py::object from_tensor(const at::Tensor& t) {
  if (!t.defined())
    return py::none();
  return py::reinterpret_steal<py::object>(THPVariable_Wrap(t));
}

AttrValue to_attr(py::handle h) {
  if (h.is_none())
    return std::monostate{};
  if (py::isinstance<py::bool_>(h))
    return h.cast<bool>();
  if (py::isinstance<py::int_>(h))
    return h.cast<int64_t>();
  if (py::isinstance<py::float_>(h))
    return h.cast<double>();
  if (py::isinstance<py::str>(h))
    return h.cast<std::string>();
  if (py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h)) {
    py::sequence seq = py::reinterpret_borrow<py::sequence>(h);
    bool all_bool = true, all_int = true;
    for (py::handle e : seq) {
      all_bool &= py::isinstance<py::bool_>(e);
      all_int &= py::isinstance<py::int_>(e) && !py::isinstance<py::bool_>(e);
    }
    if (seq.size() > 0 && all_bool)
      return seq.cast<std::vector<bool>>();
    if (all_int)
      return seq.cast<std::vector<int64_t>>();
    return seq.cast<std::vector<double>>();
  }
  throw py::type_error(
      "unsupported constant argument of type " +
      std::string(py::str(h.get_type())));
}

c10::Device parse_device(const std::string& device) {
  try {
    return c10::Device(device);
  } catch (const c10::Error&) {
    throw py::value_error("not a device: '" + device + "'");
  }
}

int64_t GraphBuilder::add_input(
    int dtype,
    std::vector<int64_t> sizes,
    std::vector<int64_t> strides,
    const std::string& device) {
  return keep(graph->add_input(
      static_cast<c10::ScalarType>(dtype),
      std::move(sizes),
      std::move(strides),
      parse_device(device)));
}

int64_t GraphBuilder::add_constant(py::handle t) {
  return keep(graph->add_constant(to_tensor(t)));
}

std::vector<int64_t> GraphBuilder::add_node(
    const std::string& op,
    const std::string& overload,
    py::list args,
    size_t num_outputs,
    bool may_alias) {
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
  Node* n = graph->create_node(
      op, overload, std::move(inputs), std::move(node_args), num_outputs);
  n->may_alias = may_alias;
  std::vector<int64_t> ids;
  for (Value* out : n->outputs)
    ids.push_back(keep(out));
  return ids;
}

void GraphBuilder::set_type(
    int64_t id,
    int dtype,
    std::vector<int64_t> sizes,
    std::vector<int64_t> strides,
    const std::string& device) {
  Graph::set_type(
      value(id),
      static_cast<c10::ScalarType>(dtype),
      std::move(sizes),
      std::move(strides),
      parse_device(device));
}

void GraphBuilder::set_outputs(const std::vector<int64_t>& ids) {
  std::vector<Value*> outs;
  for (int64_t id : ids)
    outs.push_back(value(id));
  graph->set_outputs(std::move(outs));
}

int64_t GraphBuilder::keep(Value* v) {
  by_id_[v->id] = v;
  return v->id;
}

Value* GraphBuilder::value(int64_t id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end())
    throw py::value_error("unknown value id " + std::to_string(id));
  return it->second;
}

py::class_<GraphBuilder> graph_class(py::module_& m) {
  return py::reinterpret_borrow<py::class_<GraphBuilder>>(m.attr("Graph"));
}

void init_graph_bindings(py::module_& m) {
  py::class_<GraphBuilder>(m, "Graph")
      .def(py::init<>())
      .def(
          "add_input",
          &GraphBuilder::add_input,
          py::arg("dtype"),
          py::arg("sizes"),
          py::arg("strides"),
          py::arg("device") = "cpu")
      .def("add_constant", &GraphBuilder::add_constant)
      .def("add_node", &GraphBuilder::add_node)
      .def(
          "set_type",
          &GraphBuilder::set_type,
          py::arg("id"),
          py::arg("dtype"),
          py::arg("sizes"),
          py::arg("strides"),
          py::arg("device") = "cpu")
      .def("set_outputs", &GraphBuilder::set_outputs)
      .def(
          "device",
          [](GraphBuilder& b) { return graph_device(*b.graph).str(); })
      .def("verify", [](GraphBuilder& b) { verify(*b.graph); })
      .def("num_nodes", [](GraphBuilder& b) { return b.graph->num_nodes(); })
      .def("__str__", [](GraphBuilder& b) { return b.graph->str(); });
}

} // namespace torch_plugin::python
