// kernel_step.cpp: the executor step of a fusion group (torch_plugin::fused):
// calls its generated kernel on the input pointers and a new output tensor with
// the sizes and strides the IR planned. Inputs whose runtime strides differ from
// the planned ones (which the kernel bakes in) are first copied to them.
#include "runtime/step.h"

#include "runtime/kernel_cache.h"

#include <ATen/ops/empty_strided.h>

namespace torch_plugin::runtime {
namespace {

struct Operand {
  int slot;
  std::vector<int64_t> sizes, strides;
};

class KernelStep final : public Step {
 public:
  KernelStep(const compiler::Node& n, const SlotMap& slots, KernelFn fn)
      : name_(n.str_attr("name", "fused")), fn_(fn) {
    for (const compiler::Value* in : n.inputs) inputs_.push_back({slots.slot(in), in->sizes, in->strides});
    const compiler::Value* o = n.outputs[0];
    out_ = {slots.slot(o), o->sizes, o->strides};
  }

  void run(Slots& s) const override {
    std::vector<at::Tensor> keep;
    std::vector<void*> args(inputs_.size() + 1);
    at::Tensor out = at::empty_strided(out_.sizes, out_.strides, at::TensorOptions().dtype(at::kFloat));
    args[0] = out.data_ptr();
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const at::Tensor& t = s[inputs_[i].slot];
      if (t.strides() != c10::IntArrayRef(inputs_[i].strides) || t.storage_offset() < 0) {
        at::Tensor fixed = at::empty_strided(inputs_[i].sizes, inputs_[i].strides, t.options());
        fixed.copy_(t);
        keep.push_back(fixed);
        args[i + 1] = fixed.data_ptr();
      } else {
        args[i + 1] = t.data_ptr();
      }
    }
    fn_(args.data());
    s[out_.slot] = std::move(out);
  }

  std::string describe() const override { return "kernel " + name_; }

 private:
  std::string name_;
  KernelFn fn_;
  std::vector<Operand> inputs_;
  Operand out_;
};

}  // namespace

std::unique_ptr<Step> make_kernel_step(const compiler::Node& node, const SlotMap& slots) {
  if (node.op != "torch_plugin::fused") return nullptr;
  KernelFn fn = load_kernels({node.str_attr("source", "")})[0];
  return std::make_unique<KernelStep>(node, slots, fn);
}

}  // namespace torch_plugin::runtime
