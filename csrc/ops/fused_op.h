// fused_op.h: torch_plugin::fused — one generated kernel (a fusion group) as
// an op of the PyTorch dispatcher, so that a compiled graph can be an FX graph
// of torch.ops.torch_plugin.* calls (torch_plugin/compiler/fx_artifact.py).
//
// Schema (registered in library_ops.cpp):
//   fused(Tensor[] inputs, str source, int[][] input_sizes,
//         int[][] input_strides, ScalarType[] input_dtypes,
//         int[][] output_sizes, int[][] output_strides,
//         ScalarType[] output_dtypes, str name="fused", str target="cpp",
//         str entry="kernel", int grid=0, int block=0,
//         int shared_bytes=0) -> Tensor[]
//
// `target` says which renderer generated the source: "cpp" (C++ compiled by
// the system compiler, run by the CPU kernel) or "cuda" (CUDA C++ compiled by
// NVRTC, run by the CUDA kernel, cuda/fused_kernel_cuda.cpp, which launches
// `entry` 1-d with `grid` blocks of `block` threads and `shared_bytes` of
// dynamic shared memory on the current stream). A kernel called with inputs
// on a device its target does not run on raises an error. The last five
// arguments were added after the first nine, with defaults, so graphs saved
// before them still load (as C++ kernels).
//
// The kernel's identity is its generated C++ source: a saved graph carries the
// source, and the CPU kernel finds the compiled library in the kernel cache
// (runtime/cpu/kernel_cache.h: memory, then the kernel cache folder on disk, keyed
// by a hash of source, flags and CPU) or rebuilds it from the source. The
// sizes, strides and dtypes are the kernel's signature: the generated code
// bakes in every operand's sizes and strides, so the op checks each input's
// sizes and dtype against it (a mismatch is an error naming the input), copies
// an input whose strides differ into the planned strides, and allocates each
// output with the planned sizes, strides and dtype (which is all the Meta
// kernel needs). `name` is the fusion group's name, for messages only.
//
// Kernel ABI (what codegen must produce): for "cpp", `extern "C" void
// kernel(void** args)` with args = the output data pointers in order, then the
// input data pointers in order; for "cuda", `extern "C" __global__ void
// <entry>(T0* out0, ..., const Ti* in0, ...)`, the same pointers as parameters.
// Generic over what the kernel computes (pointwise, reductions, norms; any
// dtype): the op never looks inside the source.
//
// Autograd: none. Compiled graphs with these ops come after AOTAutograd (the
// backward is its own compiled graph), so the ops never see inputs that
// require grad there; for a direct call with such inputs the Autograd key has
// PyTorch's "not implemented" kernel (library_ops.cpp): the forward runs and a
// backward through it raises an error naming the op.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>

#include <string>
#include <vector>

namespace torch_plugin::ops {

// The planned type of one operand of a fused kernel.
struct FusedOperand {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  c10::ScalarType dtype = c10::ScalarType::Float;
};

// One call of torch_plugin::fused, read from its boxed stack (the stack is
// left as it is; `source` and `name` point into it).
struct FusedCall {
  std::vector<at::Tensor> inputs;
  const std::string* source = nullptr;
  std::vector<FusedOperand> input_types;
  std::vector<FusedOperand> output_types;
  const std::string* name = nullptr;
  const std::string* target = nullptr; // "cpp" or "cuda"
  const std::string* entry = nullptr;
  int64_t grid = 0, block = 0, shared_bytes = 0;
};

// Reads and checks the arguments: list lengths agree, each input has its
// planned rank, sizes and dtype (compared as SymInts, so FakeTensors with
// symbolic sizes are guarded to the planned ones). Raises c10::Error naming
// the fusion group and the operand on a mismatch.
FusedCall read_fused_call(const torch::jit::Stack& stack);

// The number of arguments in the schema above.
constexpr size_t kFusedNumArguments = 14;

} // namespace torch_plugin::ops
