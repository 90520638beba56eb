// fusion_casts.cpp: dtype conversions moved before the views they follow
// (see fusion_casts.h).
#include "compiler/passes/fusion_casts.h"

#include "compiler/codegen/op_semantics.h"
#include "ir/op_table.h"

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

// A node the fusion pass may put into a group: a pointwise op of the table,
// a reduction or row-wise op (layer norm, softmax).
bool may_fuse(const Node* n) {
  if (!n)
    return false;
  if (is_fusible_pointwise(*n))
    return true;
  const OpInfo* op = find_op(*n);
  return op && op->category == OpCategory::kReduction;
}

bool is_cast(const Node& n) {
  return n.op == "aten::_to_copy" && n.inputs.size() == 1 &&
      n.outputs.size() == 1 && is_fusible_pointwise(n);
}

// view(cast(y)) => cast(view(y)) where the cast's one use is a rearranging
// view and y has the cast output's layout: the cast moves next to the
// consumers behind the views, whose group it can join as a prologue.
bool cast_after_view(Graph& g, Node* cast) {
  Value* out = cast->outputs[0];
  Value* y = cast->inputs[0];
  if (out->uses.size() != 1 || g.is_output(out) || y->strides != out->strides)
    return false;
  Node* view = out->uses[0].user;
  if (!view || !rearranging_view(*view) || view->inputs.size() != 1 ||
      view->outputs.size() != 1)
    return false;
  Value* viewed = view->outputs[0];
  Node* reviewed =
      g.create_node(view->op, view->overload, {y}, view->args, 1, view);
  reviewed->may_alias = view->may_alias;
  reviewed->attrs = view->attrs;
  Graph::set_type(
      reviewed->outputs[0],
      y->dtype,
      viewed->sizes,
      viewed->strides,
      y->device);
  Node* converted = g.create_node(
      cast->op, cast->overload, {reviewed->outputs[0]}, cast->args, 1, view);
  Graph::set_type(
      converted->outputs[0],
      out->dtype,
      viewed->sizes,
      viewed->strides,
      out->device);
  g.replace_all_uses(viewed, converted->outputs[0]);
  g.erase_node(view);
  g.erase_node(cast);
  return true;
}

} // namespace

int sink_casts_below_views(Graph& g) {
  int moved = 0;
  for (Node* cast : g.nodes()) {
    if (!is_cast(*cast))
      continue;
    Value* viewed = cast->inputs[0];
    Node* view = viewed->producer;
    if (!view || !rearranging_view(*view) || view->inputs.size() != 1 ||
        view->outputs.size() != 1)
      continue;
    Value* x = view->inputs[0];
    Value* out = cast->outputs[0];
    if (!may_fuse(x->producer) || !x->is_contiguous() ||
        x->device != out->device || out->strides != viewed->strides ||
        out->sizes != viewed->sizes)
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
  // Casts whose input no kernel computes (a library product's output, a graph
  // input) move past the views behind them instead, to their consumers.
  for (bool changed = true; changed;) {
    changed = false;
    for (Node* cast : g.nodes()) {
      if (!is_cast(*cast))
        continue;
      const Node* p = cast->inputs[0]->producer;
      while (p && rearranging_view(*p) && p->inputs.size() == 1)
        p = p->inputs[0]->producer;
      if (may_fuse(p) || !cast_after_view(g, cast))
        continue;
      changed = true;
      ++moved;
      break; // the node list changed
    }
  }
  return moved;
}

} // namespace torch_plugin::compiler
