// fusion.cpp: pass "fusion".
//
// Groups chains of pointwise ATen ops (those in codegen/pointwise_ops.cpp) into
// fusion groups: a node joins the group of an input's producer when that
// producer is fusible, its output has this node as its only user and the same
// sizes. Groups are therefore trees with one output, and merging can never
// create a cycle. Each group of two or more ops becomes one
// torch_plugin::fused node whose body holds the ops and whose "source" attribute
// holds the generated C++ kernel (codegen/cpp_kernel.cpp). fp32 only for now;
// single ops stay ATen calls (already vectorized; nothing to save).
#include "compiler/passes/pass.h"

#include "compiler/codegen/cpp_kernel.h"
#include "compiler/codegen/pointwise_ops.h"

#include <iostream>
#include <unordered_map>

namespace torch_plugin::compiler {
namespace {

bool fusible(const Node* n) {
  if (n->outputs.size() != 1 || !is_fusible_pointwise(*n)) return false;
  if (n->outputs[0]->dtype != c10::ScalarType::Float) return false;
  for (const Value* in : n->inputs) {
    if (in->dtype != c10::ScalarType::Float) return false;
  }
  // Every non-tensor argument must be a number, bool or string (gelu's approximate).
  for (const Arg& a : n->args) {
    if (a.kind == Arg::Kind::kTensorList) return false;
  }
  return true;
}

Node* make_group(Graph& g, const std::vector<Node*>& members, int index) {
  Node* root = members.back();
  std::vector<Value*> inputs;
  std::unordered_map<const Value*, Value*> inner;  // outer value -> body value
  auto body = std::make_shared<Graph>();
  std::unordered_map<const Node*, bool> in_group;
  for (Node* m : members) in_group[m] = true;
  for (Node* m : members) {
    for (Value* in : m->inputs) {
      if ((in->producer && in_group.count(in->producer)) || inner.count(in)) continue;
      inputs.push_back(in);
      inner[in] = body->add_input(in->dtype, in->sizes, in->strides, in->device);
    }
  }
  for (Node* m : members) {
    std::vector<Value*> ins;
    for (Value* in : m->inputs) ins.push_back(inner.at(in));
    Node* c = body->create_node(m->op, m->overload, ins, m->args, 1);
    const Value* o = m->outputs[0];
    Graph::set_type(c->outputs[0], o->dtype, o->sizes, o->strides, o->device);
    inner[o] = c->outputs[0];
  }
  body->set_outputs({inner.at(root->outputs[0])});
  std::vector<Arg> args;
  for (size_t i = 0; i < inputs.size(); ++i) args.push_back(Arg::tensor(static_cast<int64_t>(i)));
  Node* group = g.create_node("torch_plugin::fused", "default", inputs, args, 1, root);
  const Value* o = root->outputs[0];
  Graph::set_type(group->outputs[0], o->dtype, o->sizes, o->strides, o->device);
  group->body = body;
  group->attrs["name"] = std::string("fused_") + std::to_string(index);
  g.replace_all_uses(root->outputs[0], group->outputs[0]);
  for (auto it = members.rbegin(); it != members.rend(); ++it) g.erase_node(*it);
  return group;
}

bool run(Graph& g, const PassOptions& options) {
  if (!options.fusion) return false;
  std::unordered_map<const Node*, int> group_of;
  std::vector<std::vector<Node*>> groups;
  for (Node* n : g.nodes()) {
    if (!fusible(n)) continue;
    int gid = -1;
    for (Value* in : n->inputs) {
      Node* p = in->producer;
      if (!p || !group_of.count(p) || in->uses.size() != 1 || g.is_output(in) ||
          in->sizes != n->outputs[0]->sizes)
        continue;
      int pg = group_of[p];
      if (gid < 0) {
        gid = pg;
        continue;
      }
      if (pg == gid) continue;
      for (Node* m : groups[pg]) group_of[m] = gid;  // merge pg into gid
      groups[gid].insert(groups[gid].end(), groups[pg].begin(), groups[pg].end());
      groups[pg].clear();
    }
    if (gid < 0) {
      gid = static_cast<int>(groups.size());
      groups.emplace_back();
    }
    groups[gid].push_back(n);
    group_of[n] = gid;
  }
  // Members in graph order (merges may have interleaved them).
  std::unordered_map<const Node*, size_t> position;
  size_t pos = 0;
  for (const auto& n : g.node_list()) position[n.get()] = pos++;
  bool changed = false;
  int index = 0;
  for (auto& members : groups) {
    if (members.size() < 2) continue;
    std::sort(members.begin(), members.end(),
              [&](const Node* a, const Node* b) { return position[a] < position[b]; });
    Node* group = make_group(g, members, index++);
    std::string source = generate_pointwise_kernel(*group, "kernel");
    group->attrs["source"] = source;
    if (options.log_kernels) {
      std::cerr << "[torch_plugin kernels] " << std::get<std::string>(group->attrs["name"])
                << ":\n" << group->body->str() << source << std::endl;
    }
    changed = true;
  }
  return changed;
}

}  // namespace

const PassInfo kFusion = {
    "fusion",
    "Groups chains of fp32 pointwise ops into fusion groups with generated C++/OpenMP kernels.",
    run};

}  // namespace torch_plugin::compiler
