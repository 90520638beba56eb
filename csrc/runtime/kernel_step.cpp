// kernel_step.cpp: the executor step of a fusion group (torch_plugin::fused):
// calls its generated kernel on its output buffers (OutputBuffer: the planned
// place in the run's arena, or new tensors) with the sizes, strides and dtypes
// the IR planned (args[0..outputs)), then the input pointers. Inputs
// whose runtime strides differ from the planned ones (which the kernel bakes
// in) in a dimension of size > 1 are first copied to them. A group generated
// for CUDA (attrs["target"] == "cuda") gets runtime/cuda's step instead.
#include "runtime/step.h"

#include "runtime/kernel_cache.h"
#ifdef TORCH_PLUGIN_HAVE_CUDA
#include "runtime/cuda/kernel_step_cuda.h"
#endif

#include <ATen/ops/empty_strided.h>
#include <c10/util/Exception.h>

namespace torch_plugin::runtime {
namespace {

struct Operand {
  int slot;
  std::vector<int64_t> sizes, strides;
  c10::ScalarType dtype;
};

class KernelStep final : public Step {
 public:
  KernelStep(const ir::Node& n, const SlotMap& slots, KernelFn fn)
      : name_(n.str_attr("name", "fused")), fn_(fn) {
    for (const ir::Value* in : n.inputs)
      inputs_.push_back({slots.slot(in), in->sizes, in->strides, in->dtype});
    for (const ir::Value* o : n.outputs) {
      output_slots_.push_back(slots.slot(o));
      output_buffers_.emplace_back(*o, slots);
    }
  }

  void run(Slots& s) const override {
    std::vector<at::Tensor> keep;
    const size_t num_out = output_slots_.size();
    std::vector<void*> args(inputs_.size() + num_out);
    std::vector<at::Tensor> outs;
    outs.reserve(num_out);
    for (size_t i = 0; i < num_out; ++i) {
      outs.push_back(output_buffers_[i].get(s));
      args[i] = outs.back().data_ptr();
    }
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const at::Tensor& t = s[inputs_[i].slot];
      if (!has_kernel_strides(t, inputs_[i].strides)) {
        at::Tensor fixed = at::empty_strided(
            inputs_[i].sizes, inputs_[i].strides, t.options());
        fixed.copy_(t);
        keep.push_back(fixed);
        args[num_out + i] = fixed.data_ptr();
      } else {
        args[num_out + i] = t.data_ptr();
      }
    }
    fn_(args.data());
    for (size_t i = 0; i < num_out; ++i)
      s[output_slots_[i]] = std::move(outs[i]);
  }

  std::string describe() const override {
    return "kernel " + name_;
  }

 private:
  std::string name_;
  KernelFn fn_;
  std::vector<Operand> inputs_;
  std::vector<int> output_slots_;
  std::vector<OutputBuffer> output_buffers_;
};

} // namespace

std::unique_ptr<Step> make_kernel_step(
    const ir::Node& node,
    const SlotMap& slots) {
  if (node.op != "torch_plugin::fused")
    return nullptr;
  if (node.str_attr("target", "cpp") == "cuda") {
#ifdef TORCH_PLUGIN_HAVE_CUDA
    return cuda::make_cuda_kernel_step(node, slots);
#else
    TORCH_CHECK(
        false,
        "torch_plugin: fusion group ",
        node.str_attr("name", "fused"),
        " has a CUDA kernel, but this build of torch_plugin has no CUDA "
        "support (built with a CPU-only torch, without CUDA headers, or with "
        "-DTORCH_PLUGIN_CUDA=OFF)");
#endif
  }
  const std::string name = node.str_attr("name", "fused");
  TORCH_CHECK(
      node.str_attr("target", "cpp") == "cpp",
      "executor: fusion group ",
      name,
      " has a kernel for target '",
      node.str_attr("target", "cpp"),
      "', which this executor cannot run (no kernel step for it in this "
      "build)");
  for (const ir::Value* v : node.outputs) {
    TORCH_CHECK(
        v->device.is_cpu(),
        "executor: fusion group ",
        name,
        " has a C++ kernel but its outputs are on ",
        v->device);
  }
  KernelFn fn = load_kernels({node.str_attr("source", "")})[0];
  return std::make_unique<KernelStep>(node, slots, fn);
}

} // namespace torch_plugin::runtime
