// fused_kernel_cuda.cpp: the CUDA kernel of torch_plugin::fused (see
// ops/fused_op.h; the CPU kernel is ops/cpu/fused_kernel.cpp).
//
// Runs the generated CUDA kernel named by its source and entry on the inputs'
// device: outputs are new tensors from PyTorch's caching allocator with the
// planned sizes, strides and dtypes; an input whose strides differ from the
// planned ones is copied into them first; the launch (runtime/cuda) uses the
// op's grid, block and shared_bytes on the current stream. Loaded kernels are
// kept in a process-wide map from (device, entry, source) to function, so a
// call costs one hash of the source and one lookup; the first call with a
// source goes to runtime/cuda's cache (memory, disk, else NVRTC). Thread-safe.
#include "ops/fused_op.h"

#include "runtime/cuda/cuda_kernels.h"
#include "runtime/kernel_args.h"

#include <ATen/ops/empty_strided.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <map>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace torch_plugin::ops {
namespace {

std::shared_mutex kernels_mu;
// (device, entry) -> source -> loaded function
std::map<
    std::pair<int, std::string>,
    std::unordered_map<std::string, runtime::cuda::CudaFunction>>
    kernels;

const runtime::cuda::CudaFunction& kernel_for(
    int device,
    const std::string& entry,
    const std::string& source,
    const std::string& name) {
  const std::pair<int, std::string> where{device, entry};
  {
    std::shared_lock<std::shared_mutex> lock(kernels_mu);
    auto it = kernels.find(where);
    if (it != kernels.end()) {
      auto f = it->second.find(source);
      if (f != it->second.end())
        return f->second; // map nodes are stable: the reference stays valid
    }
  }
  // Outside the lock: compiling may take a while; the loader is thread-safe.
  runtime::cuda::CudaFunction fn =
      runtime::cuda::load_cuda_kernel(source, entry, device, name);
  std::unique_lock<std::shared_mutex> lock(kernels_mu);
  return kernels[where].emplace(source, std::move(fn)).first->second;
}

void fused_cuda(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  FusedCall call = read_fused_call(*stack);
  const std::string& name = *call.name;
  TORCH_CHECK(
      *call.target == "cuda",
      "torch_plugin::fused (",
      name,
      "): the kernel was generated for target '",
      *call.target,
      "' (the CPU), but its inputs are on CUDA");
  TORCH_CHECK(
      !call.inputs.empty(),
      "torch_plugin::fused (",
      name,
      "): a CUDA kernel needs at least one input to tell its device");
  const c10::Device device = call.inputs[0].device();
  c10::cuda::CUDAGuard guard(device);
  const size_t n_out = call.output_types.size();
  std::vector<void*> args(n_out + call.inputs.size());
  std::vector<at::Tensor> outputs;
  outputs.reserve(n_out);
  bool any_elements = false;
  for (const auto i : c10::irange(n_out)) {
    const FusedOperand& o = call.output_types[i];
    outputs.push_back(at::empty_strided(
        o.sizes, o.strides, at::TensorOptions().dtype(o.dtype).device(device)));
    any_elements |= outputs.back().numel() > 0;
    args[i] = outputs.back().data_ptr();
  }
  std::vector<at::Tensor> copies; // inputs moved to their planned strides
  for (const auto i : c10::irange(call.inputs.size())) {
    const at::Tensor& t = call.inputs[i];
    TORCH_CHECK(
        t.device() == device,
        "torch_plugin::fused (",
        name,
        "): input ",
        i,
        " is on ",
        t.device(),
        ", input 0 on ",
        device,
        "; the kernel runs on one device");
    const FusedOperand& want = call.input_types[i];
    if (runtime::has_kernel_strides(t, want.strides)) {
      args[n_out + i] = t.data_ptr();
    } else {
      copies.push_back(
          at::empty_strided(want.sizes, want.strides, t.options()));
      copies.back().copy_(t);
      args[n_out + i] = copies.back().data_ptr();
    }
  }
  if (any_elements) {
    const runtime::cuda::CudaFunction& fn =
        kernel_for(device.index(), *call.entry, *call.source, name);
    runtime::cuda::launch_cuda_kernel(
        fn, call.grid, call.block, call.shared_bytes, args);
  }
  torch::jit::drop(*stack, kFusedNumArguments);
  torch::jit::push(*stack, c10::IValue(std::move(outputs)));
}

} // namespace


} // namespace torch_plugin::ops

TORCH_LIBRARY_IMPL(torch_plugin, CUDA, m) {
  m.impl(
      "fused",
      torch::CppFunction::makeFromBoxedFunction<
          &torch_plugin::ops::fused_cuda>());
}
