// renderer.h: the interface between the codegen stage and the per-target
// renderers (codegen/cpp, codegen/cuda): one generated kernel, KernelSource,
// and the function that picks a renderer by device.
//
// Pinned contract 2 of issue #11 (docs: /work/notes/helper_context.md); the
// "codegen" helper owns this file, this copy keeps the CUDA renderer's branch
// building until the branches are merged.
#pragma once

#include "ir/ir.h"

#include <c10/core/DeviceType.h>

#include <cstdint>
#include <optional>
#include <string>

namespace torch_plugin::compiler {

// The graph IR (csrc/ir) that passes and codegen read and rewrite.
using namespace ::torch_plugin::ir;

struct KernelSource { // one generated kernel
  std::string target; // "cpp" or "cuda"
  std::string source; // the whole translation unit
  std::string entry = "kernel"; // the entry symbol
  int64_t grid = 0, block = 0, shared_bytes = 0; // cuda: 1-d launch config
};

// nullopt when the target's renderer does not handle this fusion group.
std::optional<KernelSource> render_fusion_group(
    const Node& group,
    c10::DeviceType device);

} // namespace torch_plugin::compiler
