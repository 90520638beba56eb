// step.h: one step of an Executor's plan and the slot numbering it runs on.
//
// Owns: the Step interface and the executor's lookups of each step kind (the
// native steps come from the registry of runtime/step_registry.h). A step reads
// its input tensors from, and writes its outputs into, the executor's slot
// array (one slot per IR value, numbered by SlotMap). Steps are built once per
// compiled graph and run many times, possibly from several threads: run() must
// not mutate the step. No Python objects; the GIL is not needed.
#pragma once

#include "ir/ir.h"

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch_plugin::runtime {

using Slots = std::vector<at::Tensor>;

// IR value id -> slot index.
struct SlotMap {
  std::unordered_map<int64_t, int> slot_of;
  // The slot holding this run's arena (a uint8 tensor of Graph::arena_bytes),
  // or -1 when the graph has no memory plan.
  int arena = -1;
  int slot(const ir::Value* v) const {
    return slot_of.at(v->id);
  }
};

// Where a step writes one output value: its preplanned buffer in the run's
// arena (Value::arena_offset, set by the memory_planning pass), or else a new
// tensor on the value's device. Either way the tensor has the value's dtype,
// sizes, strides and device.
class OutputBuffer {
 public:
  OutputBuffer(const ir::Value& v, const SlotMap& slots);
  // The output tensor of this run; `slots` must hold the arena when planned.
  at::Tensor get(const Slots& slots) const;
  bool planned() const {
    return arena_slot_ >= 0;
  }

 private:
  int arena_slot_ = -1;
  int64_t offset_elements_ = 0;
  c10::ScalarType dtype_;
  c10::Device device_ = c10::Device(c10::kCPU);
  std::vector<int64_t> sizes_, strides_;
};

class Step {
 public:
  virtual ~Step() = default;
  virtual void run(Slots& slots) const = 0;
  // "fallback aten::add.Tensor", "kernel fused_3", "onednn conv_pointwise"
  virtual std::string describe() const = 0;
  // Whether the step keeps its own copy of the constant input `v` (made when
  // it was built: a oneDNN weight reordered into its blocked layout, a bias)
  // and never reads v's slot when it runs. A constant every reader holds a
  // copy of is not held by the executor (Executor: weights held once).
  virtual bool owns_copy_of(const ir::Value& v) const {
    (void)v;
    return false;
  }
};

// A view op with constant arguments, or a cat with one non-empty input
// (view_step.cpp): one unboxed ATen call; nullptr for any other node.
std::unique_ptr<Step> make_view_step(
    const ir::Node& node,
    const SlotMap& slots);
// Any ATen op, called through the PyTorch dispatcher (boxed).
std::unique_ptr<Step> make_fallback_step(
    const ir::Node& node,
    const SlotMap& slots);
// Native steps (step_registry.cpp): the library step registered for the
// node's device (step_device), nullptr when there is none or it does not take
// the node.
std::unique_ptr<Step> make_library_step(
    const ir::Node& node,
    const SlotMap& slots);
// A fusion group (torch_plugin::fused) runs its generated kernel through the
// kernel step registered for its device (attrs "target" "cpp", the default
// when absent, on the CPU: runtime/cpu; "cuda": runtime/cuda). nullptr for any
// other node. Throws c10::Error naming the group, its target and device when
// this build has no kernel step that runs it.
std::unique_ptr<Step> make_kernel_step(
    const ir::Node& node,
    const SlotMap& slots);

// Copies steps make at run time because a tensor's real layout differs from
// the one planned for it (a generated kernel's input, a cuDNN operand, a graph
// output given back eager's strides): process-wide counts by `what` (a short
// description: the step kind and the operand), for diagnostics and tests
// (_C._compiler.layout_copies). Counting costs a lock, on the copy path only.
void count_layout_copy(const std::string& what);
std::map<std::string, int64_t> layout_copies();
void reset_layout_copies();

} // namespace torch_plugin::runtime
