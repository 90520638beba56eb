// renderer.cpp: the renderer of each device (see renderer.h).
#include "compiler/codegen/renderer.h"

#include "compiler/codegen/cpp/cpp_renderer.h"
#include "compiler/codegen/cuda/cuda_renderer.h"

namespace torch_plugin::compiler {

std::optional<KernelSource> render_fusion_group(
    const Node& group,
    c10::DeviceType device) {
  switch (device) {
    case c10::DeviceType::CPU:
      return render_cpp(group);
    case c10::DeviceType::CUDA:
      return render_cuda(group);
    default:
      return std::nullopt;
  }
}

bool kernel_dtype_supported(c10::DeviceType device, c10::ScalarType dtype) {
  switch (device) {
    case c10::DeviceType::CPU:
      return dtype == c10::ScalarType::Float ||
          dtype == c10::ScalarType::BFloat16;
    case c10::DeviceType::CUDA:
      return dtype == c10::ScalarType::Float ||
          dtype == c10::ScalarType::BFloat16 || dtype == c10::ScalarType::Half;
    default:
      return false;
  }
}

} // namespace torch_plugin::compiler
