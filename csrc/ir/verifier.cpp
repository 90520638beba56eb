// verifier.cpp: the IR verifier (see verifier.h).
#include "ir/verifier.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <unordered_set>

namespace torch_plugin::ir {
namespace {

void verify_type(const Value* v) {
  TORCH_CHECK(
      v->sizes.size() == v->strides.size(),
      "verifier: %",
      v->id,
      " has ",
      v->sizes.size(),
      " sizes but ",
      v->strides.size(),
      " strides");
  for (int64_t s : v->sizes)
    TORCH_CHECK(s >= 0, "verifier: %", v->id, " has a negative size");
}

bool has_use(const Value* v, const Node* n, size_t i) {
  return std::any_of(v->uses.begin(), v->uses.end(), [&](const Use& u) {
    return u.user == n && u.input_index == i;
  });
}

} // namespace

void verify(const Graph& g) {
  std::unordered_set<const Value*> defined;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const Value* v = g.inputs()[i];
    TORCH_CHECK(
        v->kind == ValueKind::kInput &&
            v->input_index == static_cast<int64_t>(i),
        "verifier: graph input ",
        i,
        " (%",
        v->id,
        ") is not marked as input ",
        i);
    verify_type(v);
    defined.insert(v);
  }
  for (const auto& owned : g.node_list()) {
    const Node* n = owned.get();
    const std::string name = n->qualified_name();
    TORCH_CHECK(
        n->owner == &g, "verifier: ", name, " belongs to another graph");
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      const Value* v = n->inputs[i];
      TORCH_CHECK(
          v->kind == ValueKind::kConstant || defined.count(v),
          "verifier: ",
          name,
          " uses %",
          v->id,
          " (input ",
          i,
          ") before it is defined");
      TORCH_CHECK(
          has_use(v, n, i),
          "verifier: %",
          v->id,
          " has no use entry for input ",
          i,
          " of ",
          name);
      if (v->kind == ValueKind::kConstant)
        verify_type(v);
    }
    for (const Arg& a : n->args) {
      for (int64_t idx : a.inputs) {
        TORCH_CHECK(
            idx >= -1 && idx < static_cast<int64_t>(n->inputs.size()) &&
                (idx >= 0 || a.kind == Arg::Kind::kTensorList),
            "verifier: ",
            name,
            " has an argument referring to input ",
            idx,
            " of ",
            n->inputs.size());
      }
    }
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      const Value* v = n->outputs[i];
      TORCH_CHECK(
          v->producer == n && v->output_index == i,
          "verifier: output ",
          i,
          " of ",
          name,
          " (%",
          v->id,
          ") names another producer");
      verify_type(v);
      for (const Use& u : v->uses) {
        TORCH_CHECK(
            u.user->owner == &g && u.input_index < u.user->inputs.size() &&
                u.user->inputs[u.input_index] == v,
            "verifier: %",
            v->id,
            " has a stale use");
      }
      defined.insert(v);
    }
    if (n->body) {
      verify(*n->body);
      TORCH_CHECK(
          n->body->inputs().size() == n->inputs.size() &&
              n->body->outputs().size() == n->outputs.size(),
          "verifier: fusion group ",
          name,
          " has ",
          n->inputs.size(),
          " inputs and ",
          n->outputs.size(),
          " outputs but its body has ",
          n->body->inputs().size(),
          " and ",
          n->body->outputs().size());
    }
  }
  for (const Value* v : g.outputs()) {
    TORCH_CHECK(
        v->kind == ValueKind::kConstant || defined.count(v),
        "verifier: graph output %",
        v->id,
        " is never defined");
  }
}

} // namespace torch_plugin::ir
