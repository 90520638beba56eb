// kernel_step.cpp: the CPU device's kernel step, for a fusion group rendered
// as C++ (torch_plugin::fused with attrs["target"] == "cpp", the default):
// calls its generated kernel (runtime/cpu/kernel_cache.h) on its output
// buffers (OutputBuffer: the planned place in the run's arena, or new tensors)
// with the sizes, strides and dtypes the IR planned (args[0..outputs)), then
// the input pointers. Inputs whose runtime strides differ from the planned
// ones (which the kernel bakes in) in a dimension of size > 1 are first copied
// to them. A kernel with random ops (attr "random_streams",
// codegen/random_ops.h) also gets a pointer to {seed, offset}: a seed drawn
// per call from PyTorch's default CPU generator (mt19937: one random64() per
// call, which advances it, as Inductor's CPU seeds), offset 0. Registered for
// (CPU, kernel) with the preloader that compiles all of a graph's C++ kernels
// at once (runtime/step_registry.h).
#include "runtime/cpu/kernel_cache.h"
#include "runtime/kernel_args.h"
#include "runtime/step_registry.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/Exception.h>

namespace torch_plugin::runtime::cpu {
namespace {

struct Operand {
  int slot;
  std::vector<int64_t> sizes, strides;
  c10::ScalarType dtype;
};

class KernelStep final : public Step {
 public:
  KernelStep(const ir::Node& n, const SlotMap& slots, KernelFn fn)
      : name_(n.str_attr("name", "fused")),
        fn_(fn),
        random_(n.int_attr("random_streams", 0) > 0) {
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
    std::vector<void*> args(inputs_.size() + num_out + (random_ ? 1 : 0));
    uint64_t rng[2] = {0, 0}; // seed, offset (codegen/random_ops.h)
    if (random_) {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      rng[0] = gen.get<at::CPUGeneratorImpl>()->random64();
      args.back() = rng;
    }
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
    // "random_kernel": its kind in Executor::steps() (a CUDA graph would
    // replay its seed, cuda_graphs.why_not_capturable).
    return (random_ ? "random_kernel " : "kernel ") + name_;
  }

 private:
  std::string name_;
  KernelFn fn_;
  bool random_;
  std::vector<Operand> inputs_;
  std::vector<int> output_slots_;
  std::vector<OutputBuffer> output_buffers_;
};

std::unique_ptr<Step> make_cpu_kernel_step(
    const ir::Node& node,
    const SlotMap& slots) {
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

// Compiles the graph's C++ kernels at once, in parallel (load_kernels).
void preload_cpu_kernels(const std::vector<const ir::Node*>& nodes) {
  std::vector<std::string> sources;
  for (const ir::Node* n : nodes) {
    if (n->op == "torch_plugin::fused" && n->str_attr("target", "cpp") == "cpp")
      sources.push_back(n->str_attr("source", ""));
  }
  if (!sources.empty())
    load_kernels(sources);
}

const StepRegistration kKernelStep(
    c10::kCPU,
    StepKind::kKernel,
    make_cpu_kernel_step);
const KernelPreloaderRegistration kKernelPreloader(
    c10::kCPU,
    preload_cpu_kernels);

} // namespace

} // namespace torch_plugin::runtime::cpu
