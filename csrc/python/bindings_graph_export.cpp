// bindings_graph_export.cpp: the compiled IR graph as Python data (see
// bindings_graph_export.h). Python objects: builds new ones; tensors cross by
// THPVariable_Wrap (a new reference to the same tensor). GIL: held.
#include "python/bindings_graph_export.h"

#include "python/bindings_graph.h"

#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>

namespace py = pybind11;

namespace torch_plugin::python {
namespace {

py::object to_python(const AttrValue& v) {
  return std::visit(
      [](const auto& x) -> py::object {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return py::none();
        } else {
          return py::cast(x);
        }
      },
      v);
}

py::tuple type_of(const Value* v) {
  return py::make_tuple(
      static_cast<int>(v->dtype), py::cast(v->sizes), py::cast(v->strides));
}

py::list args_of(const Node& n) {
  py::list args;
  for (const Arg& a : n.args) {
    switch (a.kind) {
      case Arg::Kind::kConst:
        args.append(py::make_tuple("c", to_python(a.value)));
        break;
      case Arg::Kind::kTensor:
        args.append(py::make_tuple("t", n.inputs.at(a.inputs.at(0))->id));
        break;
      case Arg::Kind::kTensorList: {
        py::list ids;
        for (int64_t i : a.inputs) {
          if (i < 0) {
            ids.append(py::none());
          } else {
            ids.append(n.inputs.at(i)->id);
          }
        }
        args.append(py::make_tuple("l", ids));
        break;
      }
    }
  }
  return args;
}

} // namespace

py::dict export_graph(const Graph& g) {
  py::dict values;
  py::list inputs, constants, nodes, outputs;
  for (const Value* v : g.inputs()) {
    values[py::int_(v->id)] = type_of(v);
    inputs.append(v->id);
  }
  for (const Value* c : g.constants()) {
    values[py::int_(c->id)] = type_of(c);
    constants.append(py::make_tuple(
        c->id,
        py::reinterpret_steal<py::object>(THPVariable_Wrap(c->constant))));
  }
  for (const auto& n : g.node_list()) {
    py::list outs;
    for (const Value* o : n->outputs) {
      values[py::int_(o->id)] = type_of(o);
      outs.append(o->id);
    }
    py::dict attrs;
    for (const auto& [name, value] : n->attrs)
      attrs[py::str(name)] = to_python(value);
    py::dict node;
    node["op"] = n->op;
    node["overload"] = n->overload;
    node["args"] = args_of(*n);
    node["outputs"] = outs;
    node["attrs"] = attrs;
    node["body"] = n->body ? py::object(py::str(n->body->str())) : py::none();
    nodes.append(node);
  }
  for (const Value* v : g.outputs())
    outputs.append(v->id);
  py::dict out;
  out["values"] = values;
  out["inputs"] = inputs;
  out["constants"] = constants;
  out["nodes"] = nodes;
  out["outputs"] = outputs;
  return out;
}

void init_graph_export_bindings(py::module_& m) {
  graph_class(m).def(
      "export", [](GraphBuilder& b) { return export_graph(*b.graph); });
}

} // namespace torch_plugin::python
