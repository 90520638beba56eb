// fusion_group.cpp: make_fused_node, the fusion pass's group as one node, and
// unfuse_group, its inverse (codegen puts back a group no renderer takes); see
// fusion_group.h.
#include "compiler/passes/fusion_group.h"

#include <c10/util/Exception.h>

#include <memory>
#include <unordered_map>
#include <unordered_set>

namespace torch_plugin::compiler {

std::unordered_set<const Node*> observable_views(const Graph& g) {
  std::unordered_set<const Node*> observable;
  bool in_place = false;
  for (const auto& n : g.node_list())
    in_place |= n->is_in_place();
  std::unordered_set<const Value*> outputs(
      g.outputs().begin(), g.outputs().end());
  auto root_of = [&](const Value* v) {
    while (v->kind == ValueKind::kIntermediate && v->producer &&
           v->producer->may_alias && !v->producer->inputs.empty() &&
           !outputs.count(v))
      v = v->producer->inputs[0];
    return v;
  };
  std::unordered_set<const Value*> escapes = outputs;
  std::vector<std::pair<const Node*, const Value*>> escaping; // view, root
  std::unordered_map<const Value*, int> views_of_root;
  std::vector<Node*> nodes = g.nodes();
  for (size_t i = nodes.size(); i-- > 0;) {
    const Node* n = nodes[i];
    if (!n->may_alias || n->inputs.empty())
      continue;
    if (in_place)
      observable.insert(n);
    bool escapes_here = false;
    for (const Value* out : n->outputs)
      escapes_here |= escapes.count(out) > 0;
    if (!escapes_here)
      continue;
    escapes.insert(n->inputs.begin(), n->inputs.end());
    const Value* root = root_of(n->inputs[0]);
    escaping.emplace_back(n, root);
    bool returned = false; // the end of a chain of views the user gets
    for (const Value* out : n->outputs)
      returned |= outputs.count(out) > 0;
    views_of_root[root] += returned;
  }
  for (const auto& [n, root] : escaping) {
    if (root->kind != ValueKind::kIntermediate || outputs.count(root) ||
        views_of_root[root] > 1)
      observable.insert(n);
  }
  return observable;
}

Node* make_fused_node(
    Graph& g,
    const std::vector<Node*>& members,
    const std::vector<std::string>& levels,
    const std::vector<int64_t>& domain_sizes,
    const std::vector<int64_t>& reduce_dims,
    int index) {
  std::unordered_set<const Node*> in_group(members.begin(), members.end());
  std::vector<Value*> inputs;
  std::unordered_map<const Value*, Value*> inner; // outer value -> body value
  auto body = std::make_shared<Graph>();
  for (Node* m : members) {
    for (Value* in : m->inputs) {
      if ((in->producer && in_group.count(in->producer)) || inner.count(in))
        continue;
      inputs.push_back(in);
      inner[in] =
          body->add_input(in->dtype, in->sizes, in->strides, in->device);
    }
  }
  std::vector<Value*> outputs;
  std::vector<Value*> body_outputs;
  for (size_t k = 0; k < members.size(); ++k) {
    Node* m = members[k];
    std::vector<Value*> ins;
    for (Value* in : m->inputs)
      ins.push_back(inner.at(in));
    Node* c =
        body->create_node(m->op, m->overload, ins, m->args, m->outputs.size());
    c->attrs["level"] = levels.at(k);
    for (size_t i = 0; i < m->outputs.size(); ++i) {
      const Value* o = m->outputs[i];
      Graph::set_type(c->outputs[i], o->dtype, o->sizes, o->strides, o->device);
      inner[o] = c->outputs[i];
      bool external = g.is_output(o);
      for (const Use& use : o->uses)
        external |= !in_group.count(use.user);
      if (external) {
        outputs.push_back(m->outputs[i]);
        body_outputs.push_back(c->outputs[i]);
      }
    }
  }
  body->set_outputs(body_outputs);
  std::vector<Arg> args;
  for (size_t i = 0; i < inputs.size(); ++i)
    args.push_back(Arg::tensor(static_cast<int64_t>(i)));
  Node* node = g.create_node(
      "torch_plugin::fused",
      "default",
      inputs,
      args,
      outputs.size(),
      members.back());
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Value* o = outputs[i];
    Graph::set_type(
        node->outputs[i], o->dtype, o->sizes, o->strides, o->device);
  }
  node->body = body;
  node->attrs["name"] = std::string("fused_") + std::to_string(index);
  if (!reduce_dims.empty()) {
    node->attrs["domain"] = domain_sizes;
    node->attrs["reduce_dims"] = reduce_dims;
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    g.replace_all_uses(outputs[i], node->outputs[i]);
  for (auto it = members.rbegin(); it != members.rend(); ++it)
    g.erase_node(*it);
  return node;
}

void unfuse_group(Graph& g, Node* group) {
  TORCH_CHECK(
      group && group->owner == &g && group->op == "torch_plugin::fused" &&
          group->body,
      "unfuse_group: not a fusion group of this graph");
  const Graph& body = *group->body;
  TORCH_CHECK(
      body.inputs().size() == group->inputs.size() &&
          body.outputs().size() == group->outputs.size(),
      "unfuse_group: ",
      group->str_attr("name", "fused"),
      ": body and node disagree on inputs or outputs");
  std::unordered_map<const Value*, Value*> outer; // body value -> graph value
  for (size_t i = 0; i < body.inputs().size(); ++i)
    outer[body.inputs()[i]] = group->inputs[i];
  for (const auto& owned : body.node_list()) {
    const Node& b = *owned;
    std::vector<Value*> ins;
    for (const Value* in : b.inputs)
      ins.push_back(outer.at(in));
    Node* n = g.create_node(
        b.op, b.overload, std::move(ins), b.args, b.outputs.size(), group);
    n->may_alias = b.may_alias;
    for (const auto& [name, value] : b.attrs) {
      if (name != "level")
        n->attrs[name] = value;
    }
    for (size_t i = 0; i < b.outputs.size(); ++i) {
      const Value* o = b.outputs[i];
      Graph::set_type(n->outputs[i], o->dtype, o->sizes, o->strides, o->device);
      outer[o] = n->outputs[i];
    }
  }
  for (size_t i = 0; i < group->outputs.size(); ++i)
    g.replace_all_uses(group->outputs[i], outer.at(body.outputs()[i]));
  g.erase_node(group);
}

} // namespace torch_plugin::compiler
