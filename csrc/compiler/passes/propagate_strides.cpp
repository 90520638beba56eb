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
//
// Convolutions on CUDA: the Meta kernel of aten::convolution picks a contiguous
// output for a channels-last input (it cannot see the backend), where CUDA
// picks cuDNN and a channels-last output (ATen's _select_conv_backend:
// use_cudnn_depthwise "always use cudnn_depthwise for channels_last format";
// determine_backend_memory_format -> cudnn_conv_suggest_memory_format: channels
// last when the input or the weight suggests it, never for double). The CUDA
// rule is applied here; a node it mispredicts costs a copy at run time (the
// steps copy an operand whose real strides differ from the planned ones), never
// a wrong value.
#include <ATen/Context.h>
#include "compiler/passes/pass.h"
#include "ir/aten_call.h"

#include <unordered_map>
#include <vector>

#include <ATen/ops/empty_strided.h>

namespace torch_plugin::compiler {
namespace {

// Whether CUDA's convolution writes `n`'s output channels-last (see the top).
template <typename IndexOf>
bool cuda_conv_channels_last(
    const Node& n,
    const std::vector<at::Tensor>& values,
    const IndexOf& index_of) {
  if (n.op != "aten::convolution" || n.inputs.size() < 2 ||
      n.outputs.size() != 1 || !n.outputs[0]->device.is_cuda() ||
      !at::globalContext().userEnabledCuDNN())
    return false;
  const at::Tensor& x = values[index_of(n.inputs[0])];
  const at::Tensor& w = values[index_of(n.inputs[1])];
  if (x.scalar_type() == at::kDouble || w.scalar_type() == at::kDouble ||
      x.dim() != w.dim() || (w.dim() != 4 && w.dim() != 5))
    return false;
  const at::MemoryFormat cl = w.dim() == 4 ? at::MemoryFormat::ChannelsLast
                                           : at::MemoryFormat::ChannelsLast3d;
  return x.suggest_memory_format() == cl || w.suggest_memory_format() == cl;
}

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
      std::vector<int64_t> strides = t.strides().vec();
      if (cuda_conv_channels_last(*n, values, index_of))
        strides = channels_last_strides(out->sizes);
      if (strides != out->strides) {
        out->strides = std::move(strides);
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
