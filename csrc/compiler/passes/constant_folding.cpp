// constant_folding.cpp: pass "constant_folding".
//
// With freezing on, parameters are constants; a node whose tensor inputs are
// all constants (a weight's transpose, a dtype conversion, a reshape of a bias)
// is run once, now, through the dispatcher, and its outputs become constants.
// Nodes that are not deterministic functions of their inputs (random ops,
// in-place ops, ops with no tensor input such as aten::empty, whose result we
// must not share between calls) and outputs that are graph outputs (the caller
// owns those) are left alone, and so are nodes whose results would hold more
// bytes than their constant inputs (an expand to the batch size).
#include "compiler/passes/pass.h"
#include "ir/aten_call.h"

#include <algorithm>
#include <unordered_map>
#include <vector>

namespace torch_plugin::compiler {
namespace {

bool foldable(const Node* n, const Graph& g) {
  if (n->body || n->inputs.empty() || n->op.rfind("aten::", 0) != 0)
    return false;
  if (n->is_in_place() || n->op.find("rand") != std::string::npos ||
      n->op.find("dropout") != std::string::npos ||
      n->op.find("bernoulli") != std::string::npos)
    return false;
  for (const Value* in : n->inputs) {
    if (in->kind != ValueKind::kConstant)
      return false;
  }
  for (const Value* out : n->outputs) {
    if (g.is_output(out))
      return false;
  }
  // Folding must not grow memory: an op whose results hold more bytes than its
  // constant inputs (an expand of a weight to the batch, a repeat) runs at call
  // time instead, as in eager (ViT-B/16 under autocast at batch 32 folded
  // 8 GB of expanded projection weights). Small results (<= 64 KiB) fold.
  int64_t in_bytes = 0, out_bytes = 0;
  for (const Value* in : n->inputs)
    in_bytes += in->constant.defined()
        ? static_cast<int64_t>(in->constant.storage().nbytes())
        : 0;
  for (const Value* out : n->outputs)
    out_bytes +=
        out->numel() * static_cast<int64_t>(c10::elementSize(out->dtype));
  if (out_bytes > std::max<int64_t>(in_bytes, int64_t{64} << 10))
    return false;
  return true;
}

bool run(Graph& g, const PassOptions& options) {
  if (!options.freeze)
    return false;
  bool changed = false;
  for (Node* n : g.nodes()) {
    if (!foldable(n, g))
      continue;
    std::unordered_map<int64_t, int> slot_of;
    std::vector<at::Tensor> values;
    // Value id -> index in `values`, the table AtenCall reads and writes.
    auto index_of = [&](const Value* v) {
      return slot_of.at(v->id);
    };
    for (const Value* in : n->inputs) {
      if (slot_of.emplace(in->id, static_cast<int>(values.size())).second)
        values.push_back(in->constant);
    }
    for (const Value* out : n->outputs) {
      slot_of[out->id] = static_cast<int>(values.size());
      values.emplace_back();
    }
    AtenCall(*n, index_of).run(values);
    for (const Value* out : n->outputs) {
      const at::Tensor& t = values[slot_of.at(out->id)];
      if (!t.defined())
        continue;
      // A dense view of a constant (a weight's transpose or reshape) stays a
      // view: a copy would hold a second copy of every weight (BERT-base: +327
      // MB). The parameter it views is frozen, and a change to it recompiles
      // (its version is guarded). Other views (expand, a strided slice) become
      // dense tensors of their own, the layout later passes expect of a
      // constant. A fresh dense result (a dtype conversion of a weight under
      // autocast) is kept as it is: cloning it held the constant twice while
      // folding.
      const bool dense = t.is_non_overlapping_and_dense();
      Value* c =
          g.add_constant(dense ? t : t.clone(at::MemoryFormat::Preserve));
      g.replace_all_uses(const_cast<Value*>(out), c);
    }
    g.erase_node(n);
    changed = true;
  }
  return changed;
}

} // namespace

const PassInfo kConstantFolding = {
    "constant_folding",
    "Runs deterministic ATen nodes whose inputs are all constants once at compile time "
    "and replaces their outputs by constants (freezing only).",
    run};

} // namespace torch_plugin::compiler
