// dead_code_elimination.cpp: pass "dead_code_elimination".
//
// Erases nodes none of whose outputs is used (by a node or as a graph output),
// last to first, so chains of dead nodes go in one sweep. Every op in the IR is
// functional (AOTAutograd functionalizes the graph; input mutations kept in the
// graph are copy_ nodes into inputs, which are kept), so a node with no used
// outputs has no effect, except a random op (schema tag
// nondeterministic_seeded: rand, bernoulli, native_dropout...): it advances the
// generator, which eager does whether or not its result is used, so it stays
// (an unused rand of a captured conditional's predicate, issue #31).
#include "compiler/passes/pass.h"

#include <ATen/core/dispatch/Dispatcher.h>

namespace torch_plugin::compiler {
namespace {

// Whether `n` is an ATen op that draws from a random generator.
bool draws_random_numbers(const Node& n) {
  auto handle = c10::Dispatcher::singleton().findOp(
      c10::OperatorName(n.op, n.overload == "default" ? "" : n.overload));
  return handle && handle->hasSchema() &&
      handle->hasTag(at::Tag::nondeterministic_seeded);
}

bool run(Graph& g, const PassOptions&) {
  bool changed = false;
  std::vector<Node*> nodes = g.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node* n = *it;
    if (n->is_in_place() || draws_random_numbers(*n))
      continue;
    bool used = false;
    for (Value* out : n->outputs)
      used |= !out->uses.empty() || g.is_output(out);
    if (used)
      continue;
    g.erase_node(n);
    changed = true;
  }
  return changed;
}

} // namespace

const PassInfo kDeadCodeElimination = {
    "dead_code_elimination",
    "Erases nodes whose outputs are unused; in-place ops (names ending in '_') "
    "and random ops stay.",
    run};

} // namespace torch_plugin::compiler
