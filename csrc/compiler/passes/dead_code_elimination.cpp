// dead_code_elimination.cpp: pass "dead_code_elimination".
//
// Erases nodes none of whose outputs is used (by a node or as a graph output),
// last to first, so chains of dead nodes go in one sweep. Every op in the IR is
// functional (AOTAutograd functionalizes the graph; input mutations kept in the
// graph are copy_ nodes into inputs, which are kept), so a node with no used
// outputs has no effect.
#include "compiler/passes/pass.h"

namespace torch_plugin::compiler {
namespace {

bool run(Graph& g, const PassOptions&) {
  bool changed = false;
  std::vector<Node*> nodes = g.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node* n = *it;
    if (n->is_in_place()) continue;
    bool used = false;
    for (Value* out : n->outputs) used |= !out->uses.empty() || g.is_output(out);
    if (used) continue;
    g.erase_node(n);
    changed = true;
  }
  return changed;
}

}  // namespace

const PassInfo kDeadCodeElimination = {
    "dead_code_elimination",
    "Erases nodes whose outputs are unused; in-place ops (names ending in '_') stay.", run};

}  // namespace torch_plugin::compiler
