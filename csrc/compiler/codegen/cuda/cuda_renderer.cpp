// cuda_renderer.cpp: render_cuda (cuda_renderer.h): picks the kernel kind of a
// fusion group — pointwise (no reduce_dims) or row reduction — and checks
// what both need; registered as the CUDA renderer.
#include "compiler/codegen/cuda/cuda_renderer.h"

#include "compiler/codegen/cuda/cuda_common.h"

namespace torch_plugin::compiler {

std::optional<KernelSource> render_cuda(const Node& group) {
  // A pointwise group may have no inputs (random ops, codegen/random_ops.h).
  if (!group.body || group.outputs.empty() ||
      (group.inputs.empty() && group.attrs.count("reduce_dims")) ||
      group.body->inputs().size() != group.inputs.size() ||
      group.body->outputs().size() != group.outputs.size())
    return std::nullopt;
  for (const Value* v : group.outputs)
    if (v->numel() == 0)
      return std::nullopt;
  if (group.attrs.count("reduce_dims")) {
    if (auto k = cuda::render_row_reduction(group))
      return k;
    return cuda::render_scan(group); // nullopt without a scan
  }
  return cuda::render_pointwise(group);
}

namespace {
const bool registered = register_renderer(
    {c10::DeviceType::CUDA,
     "cuda",
     render_cuda,
     cuda::pointwise_cuda_dtype,
     cuda::cuda_dtype});
} // namespace

} // namespace torch_plugin::compiler
