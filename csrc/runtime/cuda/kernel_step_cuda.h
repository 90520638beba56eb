// kernel_step_cuda.h: the executor step of a fusion group generated for CUDA
// (a torch_plugin::fused node with attrs["target"] == "cuda").
//
// Node attrs read (set by the codegen stage, compiler/codegen/cuda):
//   "source" (str): the CUDA C++ translation unit; "entry" (str, default
//   "kernel"): its extern "C" __global__ function; "grid", "block",
//   "shared_bytes" (int): the 1-d launch configuration; "name" (str): the
//   fusion group's name, for messages.
// The device is the one of the group's outputs (IR Value::device; index -1 is
// the current device when the step is built).
#pragma once

#include "runtime/step.h"

#include <memory>
#include <vector>

namespace torch_plugin::runtime::cuda {

// Whether `node` is a fusion group for the CUDA renderer's kernels.
bool is_cuda_kernel_node(const ir::Node& node);

// Compiles (or finds in the kernel cache) every CUDA fusion group among `nodes`
// at once, NVRTC running in parallel (runtime/cuda/cuda_kernels.h), so that the
// steps built afterwards find their kernels loaded. Raises c10::Error naming
// the kernel on a compile error.
void preload_cuda_kernels(const std::vector<const ir::Node*>& nodes);

// The step of a CUDA fusion group: at each run, under a CUDAGuard for its
// device, takes its output buffers (OutputBuffer: planned sizes, strides and
// dtype on the CUDA device), copies an input whose runtime strides differ from
// the planned ones (which the kernel bakes in) into the planned strides, and
// launches the kernel with the output pointers then the input pointers on the
// current CUDA stream. No launch when every output is empty. Raises c10::Error
// for an input on another device (naming the kernel and the input) and for
// launch failures (naming the call, status, kernel and configuration).
std::unique_ptr<Step> make_cuda_kernel_step(
    const ir::Node& node,
    const SlotMap& slots);

} // namespace torch_plugin::runtime::cuda
