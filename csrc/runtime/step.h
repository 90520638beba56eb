// step.h: one step of an Executor's plan and the slot numbering it runs on.
//
// Owns: the Step interface and the factories of each step kind. A step reads
// its input tensors from, and writes its outputs into, the executor's slot
// array (one slot per IR value, numbered by SlotMap). Steps are built once per
// compiled graph and run many times, possibly from several threads: run() must
// not mutate the step. No Python objects; the GIL is not needed.
#pragma once

#include "compiler/ir.h"

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch_plugin::runtime {

using Slots = std::vector<at::Tensor>;

// IR value id -> slot index.
struct SlotMap {
  std::unordered_map<int64_t, int> slot_of;
  int slot(const compiler::Value* v) const { return slot_of.at(v->id); }
};

class Step {
 public:
  virtual ~Step() = default;
  virtual void run(Slots& slots) const = 0;
  // "fallback aten::add.Tensor", "kernel fused_3", "onednn conv_pointwise"
  virtual std::string describe() const = 0;
};

// Any ATen op, called through the PyTorch dispatcher (boxed).
std::unique_ptr<Step> make_fallback_step(const compiler::Node& node, const SlotMap& slots);
// Native steps: nullptr when the node is not one of theirs.
std::unique_ptr<Step> make_library_step(const compiler::Node& node, const SlotMap& slots);
std::unique_ptr<Step> make_kernel_step(const compiler::Node& node, const SlotMap& slots);

}  // namespace torch_plugin::runtime
