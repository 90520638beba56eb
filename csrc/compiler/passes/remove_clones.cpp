// remove_clones.cpp: pass "remove_clones".
//
// `y = aten::clone(x)` becomes `x` wherever y is used, when the copy cannot be
// observed: y has x's dtype, sizes and strides (whatever the memory_format
// argument, the layout is the same), y is not a graph output (the caller could
// then hold two names for one buffer, or an alias of an input), and the graph
// has no in-place node (every op reads its inputs and writes new outputs, so no
// later write to x or y can tell them apart). AOTAutograd leaves such clones
// for dropout in eval mode and for `.contiguous()`/`.clone()` in user code;
// each one is a full copy of an activation (BERT: two per layer, before the
// residual add + LayerNorm). Run before library_patterns, so a residual add
// behind a clone can join a matmul's or convolution's post-ops.
#include "compiler/passes/pass.h"

namespace torch_plugin::compiler {
namespace {

bool run(Graph& g, const PassOptions&) {
  std::vector<Node*> nodes = g.nodes();
  for (const Node* n : nodes) {
    if (n->is_in_place())
      return false;
  }
  bool changed = false;
  for (Node* n : nodes) {
    if (n->op != "aten::clone" || n->inputs.size() != 1 ||
        n->outputs.size() != 1)
      continue;
    Value* x = n->inputs[0];
    Value* y = n->outputs[0];
    if (g.is_output(y) || x->dtype != y->dtype || x->device != y->device ||
        x->sizes != y->sizes || x->strides != y->strides)
      continue;
    g.replace_all_uses(y, x);
    g.erase_node(n);
    changed = true;
  }
  return changed;
}

} // namespace

const PassInfo kRemoveClones = {
    "remove_clones",
    "Replaces aten::clone(x) by x when the copy has x's layout, is not a graph output, and "
    "the graph mutates nothing in place.",
    run};

} // namespace torch_plugin::compiler
