// fusion_share.cpp: see fusion_share.h.
#include "compiler/passes/fusion_share.h"

#include "ir/op_table.h"

#include <algorithm>
#include <unordered_set>

namespace torch_plugin::compiler {
namespace {

int64_t numel(const Value* v) {
  int64_t n = 1;
  for (int64_t s : v->sizes)
    n *= s;
  return n;
}

} // namespace

bool cheap_to_recompute(const Node& n) {
  const OpInfo* op = find_op(n);
  if (!op || op->category != OpCategory::kPointwise)
    return false;
  return op->typed_expression != nullptr || n.op == "aten::relu";
}

bool shareable_members(const Graph& g, const std::vector<Node*>& members) {
  if (members.empty() || members.size() > kMaxSharedOps)
    return false;
  std::unordered_set<const Node*> in(members.begin(), members.end());
  std::vector<const Value*> inputs;
  for (const Node* m : members) {
    if (!cheap_to_recompute(*m) || m->outputs.size() != 1)
      return false;
    for (const Value* v : m->inputs)
      if (!(v->producer && in.count(v->producer)) &&
          std::find(inputs.begin(), inputs.end(), v) == inputs.end())
        inputs.push_back(v);
  }
  if (inputs.size() > kMaxSharedInputs)
    return false;
  for (const Node* m : members) {
    const Value* out = m->outputs[0];
    if (g.is_output(out))
      return false; // stored anyway: recomputing saves no store
    bool handed_out = false;
    for (const Use& use : out->uses)
      handed_out |= !in.count(use.user);
    if (!handed_out)
      continue;
    for (const Value* v : inputs)
      if (numel(out) < numel(v))
        return false; // storing the smaller result is cheaper
  }
  return true;
}

std::vector<Node*> clone_members(
    Graph& g,
    const std::vector<Node*>& members,
    Node* before,
    std::unordered_map<const Value*, Value*>& copy_of) {
  std::vector<Node*> clones;
  for (const Node* m : members) {
    std::vector<Value*> ins;
    for (Value* v : m->inputs) {
      auto it = copy_of.find(v);
      ins.push_back(it == copy_of.end() ? v : it->second);
    }
    Node* c = g.create_node(
        m->op, m->overload, ins, m->args, m->outputs.size(), before);
    c->attrs = m->attrs;
    c->may_alias = m->may_alias;
    for (size_t i = 0; i < m->outputs.size(); ++i) {
      const Value* o = m->outputs[i];
      Graph::set_type(c->outputs[i], o->dtype, o->sizes, o->strides, o->device);
      copy_of[o] = c->outputs[i];
    }
    clones.push_back(c);
  }
  return clones;
}

} // namespace torch_plugin::compiler
