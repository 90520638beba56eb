// renderer.h: code generation as a stage after fusion, chosen by device.
//
// Owns: KernelSource (one generated kernel: its target, translation unit, entry
// symbol and, for CUDA, its 1-d launch configuration) and the renderer
// registry, keyed by device. Renderers sit side by side, one per target, and
// each registers itself from its own translation unit at static
// initialization: codegen/cpp (C++/OpenMP, compiled by the system compiler)
// and codegen/cuda (CUDA C++, compiled by NVRTC); this file includes neither.
// (csrc/CMakeLists.txt builds them into an OBJECT library linked whole, so
// that no linker drops a registration.) Each builds its arithmetic from the
// device-neutral op semantics (codegen/op_semantics.h) and, for reductions,
// the shared plan (codegen/reduction_plan.h). The "codegen" pass
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

// A renderer: what a target registers for its device.
struct Renderer {
  c10::DeviceType device;
  const char* target; // KernelSource::target: "cpp", "cuda"
  // The kernel of a fusion group, or nullopt when it does not handle it.
  std::optional<KernelSource> (*render)(const Node& group);
  // Whether its pointwise kernels can load and store tensors of this dtype
  // (and compute in its compute type, codegen/op_semantics.h).
  bool (*dtype_supported)(c10::ScalarType dtype);
  // Whether its reduction kernels (fp32 compute) can load and store it.
  bool (*reduction_dtype_supported)(c10::ScalarType dtype);
};

// Registers `r` for r.device (called once per renderer, at static
// initialization: `const bool registered = register_renderer({...});`).
// Returns true. Throws c10::Error when the device already has one.
bool register_renderer(const Renderer& r);
// The renderer of `device`, or nullptr.
const Renderer* find_renderer(c10::DeviceType device);

// The kernel of fusion group `group` (a torch_plugin::fused node whose body
// holds the fused ops, made by the fusion pass) for `device`, by the device's
// registered renderer: CPU -> render_cpp (codegen/cpp/cpp_renderer.h), CUDA
// -> render_cuda (codegen/cuda/cuda_renderer.h). nullopt when the target's
// renderer does not handle this fusion group, or no renderer exists for the
// device; the codegen pass then un-fuses the group. May throw c10::Error for a
// body its renderer should handle but cannot (a bug).
std::optional<KernelSource> render_fusion_group(
    const Node& group,
    c10::DeviceType device);

// Whether pointwise kernels generated for `device` can load and store tensors
// of `dtype` (its renderer's dtype_supported: on CPU and CUDA bool, uint8,
// int8, int16, int32, int64, float16, bfloat16, float32, float64); false for
// a device without a renderer. The fusion pass's per-device dtype check.
bool kernel_dtype_supported(c10::DeviceType device, c10::ScalarType dtype);
// The same for reduction groups (fp32 compute: CPU float32 and bfloat16; CUDA
// also float16).
bool reduction_dtype_supported(c10::DeviceType device, c10::ScalarType dtype);

} // namespace torch_plugin::compiler
