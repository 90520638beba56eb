// fallback_step.cpp: the executor step of any ATen op of the IR: the node's
// ir::AtenCall (csrc/ir/aten_call.h, a boxed call through the PyTorch
// dispatcher) on the executor's slots.
#include "ir/aten_call.h"
#include "runtime/step.h"

namespace torch_plugin::runtime {
namespace {

class FallbackStep final : public Step {
 public:
  FallbackStep(const ir::Node& node, const SlotMap& slots)
      : call_(node, [&](const ir::Value* v) { return slots.slot(v); }) {}

  void run(Slots& slots) const override {
    call_.run(slots);
  }

  std::string describe() const override {
    return "fallback " + call_.name();
  }

 private:
  ir::AtenCall call_;
};

} // namespace

std::unique_ptr<Step> make_fallback_step(
    const ir::Node& node,
    const SlotMap& slots) {
  return std::make_unique<FallbackStep>(node, slots);
}

} // namespace torch_plugin::runtime
