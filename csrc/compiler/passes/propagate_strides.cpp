// propagate_strides.cpp: pass "propagate_strides".
//
// After a pass changed a value's strides (library_patterns makes convolution
// outputs channels_last), the strides recorded for the ATen nodes downstream
// are stale. This pass reruns each ATen node on Meta tensors of its inputs'
// current sizes and strides (through the dispatcher, as the executor would run
// it) and records the output strides the real kernel will produce. Nodes
// without a Meta kernel keep their strides; fused groups and library nodes
// set their own. An aten::view whose input strides no longer allow a view
// becomes aten::reshape (a copy there).
#include "compiler/passes/pass.h"
#include "ir/aten_call.h"

#include <unordered_map>
#include <vector>

#include <ATen/ops/empty_strided.h>

namespace torch_plugin::compiler {
namespace {

bool run(Graph& g, const PassOptions& options) {
  if (!options.library_patterns)
    return false;
  bool changed = false;
  for (Node* n : g.nodes()) {
    if (n->op.rfind("aten::", 0) != 0 || n->body)
      continue;
    bool any_input_changed = false;
    std::unordered_map<int64_t, int> slot_of;
    std::vector<at::Tensor> values;
    // Value id -> index in `values`, the table AtenCall reads and writes.
    auto index_of = [&](const Value* v) {
      return slot_of.at(v->id);
    };
    for (const Value* in : n->inputs) {
      if (!slot_of.emplace(in->id, static_cast<int>(values.size())).second)
        continue;
      values.push_back(at::empty_strided(
          in->sizes,
          in->strides,
          at::TensorOptions().dtype(in->dtype).device(at::kMeta)));
      any_input_changed |= !in->is_contiguous();
    }
    if (!any_input_changed)
      continue;
    for (const Value* out : n->outputs) {
      slot_of[out->id] = static_cast<int>(values.size());
      values.emplace_back();
    }
    try {
      AtenCall(*n, index_of).run(values);
    } catch (const c10::Error&) {
      if (n->op != "aten::view")
        continue; // no Meta kernel
      // A view the new strides cannot express (flatten of a channels_last conv
      // output): reshape is the same op where a view exists and copies where it
      // does not. Inference graphs are functional (AOTAutograd), so nothing
      // mutates through the view.
      n->op = "aten::reshape";
      n->overload = "";
      changed = true;
      try {
        AtenCall(*n, index_of).run(values);
      } catch (const c10::Error&) {
        continue;
      }
    }
    for (Value* out : n->outputs) {
      const at::Tensor& t = values[slot_of.at(out->id)];
      if (!t.defined() || t.sizes().vec() != out->sizes)
        continue;
      if (t.strides().vec() != out->strides) {
        out->strides = t.strides().vec();
        changed = true;
      }
    }
  }
  return changed;
}

} // namespace

const PassInfo kPropagateStrides = {
    "propagate_strides",
    "Recomputes the output strides of ATen nodes whose inputs are no longer contiguous, by "
    "running them on Meta tensors.",
    run};

} // namespace torch_plugin::compiler
