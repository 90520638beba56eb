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
  // Reduction kernels compute in fp32 (float32, bfloat16); pointwise kernels
  // load, compute and store every dtype with a compute type.
  const bool reduction = group.attrs.count("reduce_dims") > 0;
  // Reduction groups may also load other dtypes (any/all's inputs) and store
  // bool (any/all's outputs): the plan's check_terms (reduction_plan.h) says
  // which values may have them.
  auto ok = [&](const Value* v) {
    return pointwise_kernel_dtype(v->dtype);
  };
  for (const Value* v : group.inputs)
    if (!ok(v))
      return std::nullopt;
  for (const Value* v : group.outputs)
    if (!ok(v) &&
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
const bool registered = register_renderer(
    {c10::DeviceType::CPU,
     "cpp",
     render_cpp,
     pointwise_kernel_dtype,
     kernel_dtype});
} // namespace

} // namespace torch_plugin::compiler
