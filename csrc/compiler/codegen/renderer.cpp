// renderer.cpp: the renderer registry (see renderer.h).
#include "compiler/codegen/renderer.h"

#include <c10/util/Exception.h>

#include <map>

namespace torch_plugin::compiler {
namespace {

std::map<c10::DeviceType, Renderer>& registry() {
  static std::map<c10::DeviceType, Renderer> r;
  return r;
}

} // namespace

bool register_renderer(const Renderer& r) {
  TORCH_CHECK(
      registry().emplace(r.device, r).second,
      "register_renderer: ",
      c10::DeviceTypeName(r.device, true),
      " already has a renderer");
  return true;
}

const Renderer* find_renderer(c10::DeviceType device) {
  auto it = registry().find(device);
  return it == registry().end() ? nullptr : &it->second;
}

std::optional<KernelSource> render_fusion_group(
    const Node& group,
    c10::DeviceType device) {
  const Renderer* r = find_renderer(device);
  if (!r)
    return std::nullopt;
  return r->render(group);
}

bool kernel_dtype_supported(c10::DeviceType device, c10::ScalarType dtype) {
  const Renderer* r = find_renderer(device);
  return r && r->dtype_supported(dtype);
}

} // namespace torch_plugin::compiler

namespace torch_plugin::compiler {

bool reduction_dtype_supported(c10::DeviceType device, c10::ScalarType dtype) {
  const Renderer* r = find_renderer(device);
  return r && r->reduction_dtype_supported(dtype);
}

} // namespace torch_plugin::compiler
