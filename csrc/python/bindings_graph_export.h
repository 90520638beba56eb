// bindings_graph_export.h: the compiled IR graph as Python data, for building
// the compiled artifact's FX graph (torch_plugin/compiler/fx_artifact.py).
// Reached as torch_plugin._C._compiler.Graph.export() (registered by
// init_graph_export_bindings, bindings_graph.h).
#pragma once

#include "ir/ir.h"

#include <pybind11/pybind11.h>

namespace torch_plugin::python {

// The graph IR (csrc/ir) that passes and codegen read and rewrite.
using namespace ::torch_plugin::ir;

// `g` as a dict of plain Python values (the GIL must be held):
//   "values":    {value id: (dtype, sizes, strides)}  dtype as its
//   c10::ScalarType
//                                                     value, sizes/strides in
//                                                     elements
//   "inputs":    [value id, ...]                      the graph's inputs, in
//   order "constants": [(value id, tensor), ...]            frozen/folded
//   constants (shared,
//                                                     not copied)
//   "nodes":     [{"op": "aten::add", "overload": "Tensor",
//                  "args": [(kind, payload), ...],    schema order: ("c",
//                  constant),
//                                                     ("t", value id) or
//                                                     ("l", [value id or None,
//                                                     ...])
//                  "outputs": [value id, ...],
//                  "attrs": {name: constant},         e.g. a fusion group's
//                  "name"
//                                                     and "source"
//                  "body": str or None}, ...]         a fusion group's ops,
//                  printed
//   "outputs":   [value id, ...]
// Constants use the IR's encoding (dtype, layout and memory format as their c10
// enum value, a device as its string; see ir.h, AttrValue).
pybind11::dict export_graph(const Graph& g);

} // namespace torch_plugin::python
