// fused_kernel.cpp: the CPU kernel of torch_plugin::fused (see ops/fused_op.h).
//
// Runs the generated kernel named by its source. Loaded kernels are kept in a
// process-wide map from source to entry point, so a call costs one hash of the
// source and one lookup; only the first call with a given source goes to the
// kernel cache (runtime/cpu/kernel_cache.h), which loads the shared library
// from disk or compiles it. Thread-safe.
#include "ops/fused_op.h"

#include "runtime/cpu/kernel_cache.h"
#include "runtime/kernel_args.h"

#include <ATen/ops/empty_strided.h>
#include <c10/util/irange.h>
#include <torch/library.h>

#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace torch_plugin::ops {
namespace {

std::shared_mutex kernels_mu;
std::unordered_map<std::string, runtime::cpu::KernelFn> kernels; // source -> fn

runtime::cpu::KernelFn kernel_for(const std::string& source) {
  {
    std::shared_lock<std::shared_mutex> lock(kernels_mu);
    auto it = kernels.find(source);
    if (it != kernels.end())
      return it->second;
  }
  // Outside the lock: compiling may take a while; load_kernels is thread-safe.
  runtime::cpu::KernelFn fn = runtime::cpu::load_kernels({source})[0];
  std::unique_lock<std::shared_mutex> lock(kernels_mu);
  return kernels.emplace(source, fn).first->second;
}

void fused_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  FusedCall call = read_fused_call(*stack);
  TORCH_CHECK(
      *call.target == "cpp",
      "torch_plugin::fused (",
      *call.name,
      "): the kernel was generated for target '",
      *call.target,
      "', but its inputs are on the CPU");
  const size_t n_out = call.output_types.size();
  std::vector<void*> args(n_out + call.inputs.size());
  std::vector<at::Tensor> outputs;
  outputs.reserve(n_out);
  for (const auto i : c10::irange(n_out)) {
    const FusedOperand& o = call.output_types[i];
    outputs.push_back(at::empty_strided(
        o.sizes, o.strides, at::TensorOptions().dtype(o.dtype)));
    args[i] = outputs.back().data_ptr();
  }
  std::vector<at::Tensor> copies; // inputs moved to their planned strides
  for (const auto i : c10::irange(call.inputs.size())) {
    const at::Tensor& t = call.inputs[i];
    TORCH_CHECK(
        t.device().is_cpu(),
        "torch_plugin::fused (",
        *call.name,
        "): input ",
        i,
        " is on ",
        t.device(),
        "; the CPU kernel needs CPU tensors");
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
  kernel_for (*call.source)(args.data());
  torch::jit::drop(*stack, kFusedNumArguments);
  torch::jit::push(*stack, c10::IValue(std::move(outputs)));
}

} // namespace

} // namespace torch_plugin::ops

TORCH_LIBRARY_IMPL(torch_plugin, CPU, m) {
  m.impl(
      "fused",
      torch::CppFunction::makeFromBoxedFunction<
          &torch_plugin::ops::fused_cpu>());
}
