// cuda_renderer.cpp: placeholder of the CUDA renderer (see cuda_renderer.h):
// renders no group yet, so every CUDA fusion group is un-fused by the codegen
// pass and its ops run as ATen calls. Replaced by the CUDA renderer proper.
#include "compiler/codegen/cuda/cuda_renderer.h"

namespace torch_plugin::compiler {

std::optional<KernelSource> render_cuda(const Node& group) {
  return std::nullopt;
}

} // namespace torch_plugin::compiler
