// renderer.h: code generation as a stage after fusion, chosen by device.
//
// Owns: KernelSource (one generated kernel: its target, translation unit, entry
// symbol and, for CUDA, its 1-d launch configuration) and the choice of
// renderer for a fusion group's device. Renderers sit side by side, one per
// target: codegen/cpp (C++/OpenMP, compiled by the system compiler) and
// codegen/cuda (CUDA C++, compiled by NVRTC); each builds its arithmetic from
// the device-neutral op table (codegen/op_semantics.h). The "codegen" pass
// (passes/codegen.cpp) calls render_fusion_group on every group the "fusion"
// pass formed. Does not own: forming the groups (passes/fusion.cpp), compiling
// or launching kernels (csrc/runtime).
#pragma once

#include "ir/ir.h"

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>

namespace torch_plugin::compiler {

// The graph IR (csrc/ir) that passes and codegen read and rewrite.
using namespace ::torch_plugin::ir;

// One generated kernel.
struct KernelSource {
  std::string target; // "cpp" or "cuda"
  std::string source; // the whole translation unit
  std::string entry = "kernel"; // the entry symbol
  int64_t grid = 0, block = 0, shared_bytes = 0; // cuda: 1-d launch
};

// The kernel of fusion group `group` (a torch_plugin::fused node whose body
// holds the fused ops, made by the fusion pass) for `device`: CPU -> render_cpp
// (codegen/cpp/cpp_renderer.h), CUDA -> render_cuda
// (codegen/cuda/cuda_renderer.h). nullopt when the target's renderer does not
// handle this fusion group, or no renderer exists for the device; the codegen
// pass then un-fuses the group. May throw c10::Error for a body its renderer
// should handle but cannot (a bug).
std::optional<KernelSource> render_fusion_group(
    const Node& group,
    c10::DeviceType device);

// Whether kernels generated for `device` can load and store tensors of
// `dtype`: CPU float32 and bfloat16; CUDA float32, bfloat16 and float16;
// nothing on other devices. The fusion pass's per-device dtype check.
bool kernel_dtype_supported(c10::DeviceType device, c10::ScalarType dtype);

} // namespace torch_plugin::compiler
