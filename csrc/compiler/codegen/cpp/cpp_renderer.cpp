// cpp_renderer.cpp: render_cpp (see cpp_renderer.h), registered as the CPU
// renderer.
#include "compiler/codegen/cpp/cpp_renderer.h"

#include "compiler/codegen/cpp/cpp_emit.h"
#include "compiler/codegen/cpp/cpp_kernel.h"
#include "compiler/codegen/cpp/reduction_kernel.h"

namespace torch_plugin::compiler {

std::optional<KernelSource> render_cpp(const Node& group) {
  if (!group.body)
    return std::nullopt;
  for (const Value* v : group.inputs)
    if (!kernel_dtype(v->dtype))
      return std::nullopt;
  const bool reduction = group.attrs.count("reduce_dims") > 0;
  for (const Value* v : group.outputs)
    if (!kernel_dtype(v->dtype) &&
        !(reduction && v->dtype == c10::ScalarType::Long)) // argmax indices
      return std::nullopt;
  KernelSource k;
  k.target = "cpp";
  k.entry = "kernel";
  k.source = reduction ? generate_reduction_kernel(group, k.entry)
                       : generate_pointwise_kernel(group, k.entry);
  if (k.source.empty()) // a reduction body the plan cannot express
    return std::nullopt;
  return k;
}

namespace {
const bool registered =
    register_renderer({c10::DeviceType::CPU, "cpp", render_cpp, kernel_dtype});
} // namespace

} // namespace torch_plugin::compiler
