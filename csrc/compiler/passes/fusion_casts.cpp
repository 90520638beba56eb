// fusion_casts.cpp: dtype conversions moved before the views they follow
// (see fusion_casts.h).
#include "compiler/passes/fusion_casts.h"

#include "compiler/codegen/op_semantics.h"

#include <array>
#include <iterator>
#include <string_view>

namespace torch_plugin::compiler {

using namespace ::torch_plugin::ir;

namespace {

// Views whose output is a rearrangement of their input's elements (no
// broadcast, no offset): the view of a converted contiguous input is the
// conversion of the view.
bool rearranging_view(const Node& n) {
  static constexpr std::array<std::string_view, 8> kViews = {
      "aten::view",
      "aten::_unsafe_view",
      "aten::reshape",
      "aten::unsqueeze",
      "aten::squeeze",
      "aten::permute",
      "aten::t",
      "aten::transpose"};
  for (std::string_view v : kViews)
    if (n.op == v)
      return true;
  return false;
}

} // namespace

int sink_casts_below_views(Graph& g) {
  int moved = 0;
  for (Node* cast : g.nodes()) {
    if (cast->op != "aten::_to_copy" || cast->inputs.size() != 1 ||
        cast->outputs.size() != 1 || !is_fusible_pointwise(*cast))
      continue;
    Value* viewed = cast->inputs[0];
    Node* view = viewed->producer;
    if (!view || !rearranging_view(*view) || view->inputs.size() != 1 ||
        view->outputs.size() != 1)
      continue;
    Value* x = view->inputs[0];
    Value* out = cast->outputs[0];
    if (!x->producer || !x->is_contiguous() || x->device != out->device ||
        out->strides != viewed->strides || out->sizes != viewed->sizes)
      continue;
    // Right after x's producer: a node between them that reads x (the old
    // view, still read elsewhere) would otherwise keep the cast out of the
    // producer's group (fusion.cpp: no member's output is read by a node
    // visited before the group).
    Node* after_producer = std::next(x->producer->self)->get();
    Node* converted = g.create_node(
        cast->op, cast->overload, {x}, cast->args, 1, after_producer);
    Graph::set_type(
        converted->outputs[0], out->dtype, x->sizes, x->strides, out->device);
    Node* reviewed = g.create_node(
        view->op, view->overload, {converted->outputs[0]}, view->args, 1, cast);
    reviewed->may_alias = view->may_alias;
    reviewed->attrs = view->attrs;
    Graph::set_type(
        reviewed->outputs[0],
        out->dtype,
        out->sizes,
        out->strides,
        out->device);
    g.replace_all_uses(out, reviewed->outputs[0]);
    g.erase_node(cast);
    if (viewed->uses.empty() && !g.is_output(viewed))
      g.erase_node(view);
    ++moved;
  }
  return moved;
}

} // namespace torch_plugin::compiler
