// kernel_step_cuda.cpp: the executor step of a CUDA fusion group (see
// kernel_step_cuda.h; the CPU counterpart is runtime/cpu/kernel_step.cpp).
// Registered for (CUDA, kernel) with its preloader (runtime/step_registry.h).
#include "runtime/cuda/kernel_step_cuda.h"

#include "runtime/cuda/cuda_kernels.h"
#include "runtime/kernel_args.h"
#include "runtime/step_registry.h"

#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <ATen/ops/empty_strided.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstring>
#include <map>

namespace torch_plugin::runtime::cuda {
namespace {

struct Operand {
  int slot;
  std::vector<int64_t> sizes, strides;
};

int device_of(const ir::Node& n) {
  TORCH_CHECK(
      !n.outputs.empty(),
      "torch_plugin: CUDA fusion group ",
      n.str_attr("name", "fused"),
      " has no outputs");
  const c10::Device d = n.outputs[0]->device;
  TORCH_CHECK(
      d.is_cuda(),
      "torch_plugin: fusion group ",
      n.str_attr("name", "fused"),
      " has a CUDA kernel but its outputs are on ",
      d);
  return d.has_index() ? d.index() : c10::cuda::current_device();
}

CudaKernelSource kernel_source_of(const ir::Node& n) {
  CudaKernelSource k;
  k.source = n.str_attr("source", "");
  k.entry = n.str_attr("entry", "kernel");
  k.name = n.str_attr("name", "fused");
  TORCH_CHECK(
      !k.source.empty(),
      "torch_plugin: CUDA fusion group ",
      k.name,
      " has no generated source");
  return k;
}

class CudaKernelStep final : public Step {
 public:
  CudaKernelStep(const ir::Node& n, const SlotMap& slots)
      : name_(n.str_attr("name", "fused")),
        device_(device_of(n)),
        grid_(n.int_attr("grid", 0)),
        block_(n.int_attr("block", 0)),
        shared_bytes_(n.int_attr("shared_bytes", 0)),
        random_streams_(n.int_attr("random_streams", 0)) {
    CudaKernelSource k = kernel_source_of(n);
    function_ = load_cuda_kernel(k.source, k.entry, device_, k.name);
    for (const ir::Value* in : n.inputs)
      inputs_.push_back({slots.slot(in), in->sizes, in->strides});
    for (const ir::Value* o : n.outputs) {
      output_slots_.push_back(slots.slot(o));
      output_buffers_.emplace_back(*o, slots);
      any_elements_ |= o->numel() > 0;
    }
  }

  void run(Slots& s) const override {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
    const size_t num_out = output_slots_.size();
    std::vector<void*> args(num_out + inputs_.size());
    std::vector<at::Tensor> outs;
    outs.reserve(num_out);
    for (size_t i = 0; i < num_out; ++i) {
      outs.push_back(output_buffers_[i].get(s));
      TORCH_CHECK(
          outs.back().is_cuda() && outs.back().get_device() == device_,
          "torch_plugin: kernel ",
          name_,
          ": output ",
          i,
          " buffer is on ",
          outs.back().device(),
          ", the kernel runs on cuda:",
          device_);
      args[i] = outs.back().data_ptr();
    }
    std::vector<at::Tensor> keep; // inputs copied to their planned strides
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const at::Tensor& t = s[inputs_[i].slot];
      TORCH_CHECK(
          t.is_cuda() && t.get_device() == device_,
          "torch_plugin: kernel ",
          name_,
          ": input ",
          i,
          " is on ",
          t.device(),
          ", the kernel runs on cuda:",
          device_);
      if (has_kernel_strides(t, inputs_[i].strides)) {
        args[num_out + i] = t.data_ptr();
      } else {
        keep.push_back(at::empty_strided(
            inputs_[i].sizes, inputs_[i].strides, t.options()));
        keep.back().copy_(t);
        count_layout_copy(
            "cuda kernel input: " + name_ + " #" + std::to_string(i) +
            " planned " + c10::str(c10::IntArrayRef(inputs_[i].strides)) +
            " got " + c10::str(t.strides()) + " sizes " + c10::str(t.sizes()));
        args[num_out + i] = keep.back().data_ptr();
      }
    }
    // The copies above and the kernel run on the same (current) stream, so
    // freeing `keep` after the launch is safe with the caching allocator.
    if (random_streams_ > 0)
      append_seed_and_offset(args);
    if (any_elements_)
      launch_cuda_kernel(function_, grid_, block_, shared_bytes_, args);
    for (size_t i = 0; i < num_out; ++i)
      s[output_slots_[i]] = std::move(outs[i]);
  }

  std::string describe() const override {
    // "random_kernel": its kind in Executor::steps() (a CUDA graph runner
    // keeps the generator's state as one uncaptured call would,
    // cuda_graphs.CudaGraphRunner).
    return (random_streams_ > 0 ? "random_kernel " : "kernel ") + name_ +
        " (cuda)";
  }

 private:
  // The kernel's Philox state (codegen/random_ops.h, codegen/cuda/
  // cuda_pointwise.cpp) from the device's default CUDA generator, whose
  // Philox offset advances by 4 per random op (one 128-bit block of each
  // subsequence), as ATen's kernels advance it: (seed, offset, null, null)
  // outside a CUDA graph capture; inside one, (0, offset within the graph,
  // seed pointer, offset pointer) as at::cuda::philox::unpack reads them:
  // torch's graph-safe generator state writes the generator's seed and
  // offset there before each replay and advances the offset by the graph's
  // whole increment, so a replay draws what an uncaptured call would. Values
  // are passed as parameters: the launcher hands each `args` entry's address
  // to cuLaunchKernel, and an unsigned long long parameter reads those 8
  // bytes.
  void append_seed_and_offset(std::vector<void*>& args) const {
    static_assert(sizeof(void*) == sizeof(uint64_t));
    at::Generator gen = at::cuda::detail::getDefaultCUDAGenerator(
        static_cast<c10::DeviceIndex>(device_));
    at::PhiloxCudaState state;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      state = gen.get<at::CUDAGeneratorImpl>()->philox_cuda_state(
          4 * static_cast<uint64_t>(random_streams_));
    }
    auto as_arg = [](uint64_t x) {
      void* p = nullptr;
      std::memcpy(&p, &x, sizeof(p));
      return p;
    };
    if (state.captured_) {
      args.push_back(as_arg(0));
      args.push_back(as_arg(static_cast<uint64_t>(state.offset_intragraph_)));
      args.push_back(static_cast<void*>(state.seed_.ptr));
      args.push_back(static_cast<void*>(state.offset_.ptr));
    } else {
      args.push_back(as_arg(state.seed_.val));
      args.push_back(as_arg(state.offset_.val));
      args.push_back(nullptr);
      args.push_back(nullptr);
    }
  }

  std::string name_;
  int device_;
  int64_t grid_, block_, shared_bytes_;
  int64_t random_streams_;
  CudaFunction function_;
  std::vector<Operand> inputs_;
  std::vector<int> output_slots_;
  std::vector<OutputBuffer> output_buffers_;
  bool any_elements_ = false;
};

} // namespace

bool is_cuda_kernel_node(const ir::Node& node) {
  return node.op == "torch_plugin::fused" &&
      node.str_attr("target", "cpp") == "cuda";
}

void preload_cuda_kernels(const std::vector<const ir::Node*>& nodes) {
  std::map<int, std::vector<CudaKernelSource>> by_device;
  for (const ir::Node* n : nodes) {
    if (is_cuda_kernel_node(*n))
      by_device[device_of(*n)].push_back(kernel_source_of(*n));
  }
  for (const auto& [device, kernels] : by_device)
    load_cuda_kernels(kernels, device);
}

std::unique_ptr<Step> make_cuda_kernel_step(
    const ir::Node& node,
    const SlotMap& slots) {
  if (!is_cuda_kernel_node(node))
    return nullptr;
  return std::make_unique<CudaKernelStep>(node, slots);
}

namespace {

const StepRegistration kKernelStep(
    c10::kCUDA,
    StepKind::kKernel,
    make_cuda_kernel_step);
const KernelPreloaderRegistration kKernelPreloader(
    c10::kCUDA,
    preload_cuda_kernels);

} // namespace

} // namespace torch_plugin::runtime::cuda
