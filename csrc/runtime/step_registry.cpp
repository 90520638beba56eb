// step_registry.cpp: the registry of native steps and the executor's lookups
// (see step_registry.h and step.h).
#include "runtime/step_registry.h"

#include <c10/util/Exception.h>

#include <functional>
#include <map>
#include <system_error>
#include <thread>
#include <utility>

namespace torch_plugin::runtime {
namespace {

// Function-local statics: registrations run from other files' static
// constructors, in any order relative to this file's. Several factories may
// share a key (CUDA library steps: cuBLASLt's and cuDNN's, each taking only
// its own op): they are tried in registration order until one takes the node.
using Factories =
    std::map<std::pair<c10::DeviceType, StepKind>, std::vector<StepFactory>>;
Factories& factories() {
  static Factories m;
  return m;
}

// Several per device (CUDA: the generated kernels', and cuDNN's plans in the
// background), run in registration order.
struct Preloader {
  KernelPreloader preload;
  bool background;
};
std::map<c10::DeviceType, std::vector<Preloader>>& preloaders() {
  static std::map<c10::DeviceType, std::vector<Preloader>> m;
  return m;
}

std::map<std::string, LibraryProbe>& libraries() {
  static std::map<std::string, LibraryProbe> m;
  return m;
}

std::unique_ptr<Step> make_step(
    c10::DeviceType device,
    StepKind kind,
    const ir::Node& node,
    const SlotMap& slots) {
  auto it = factories().find({device, kind});
  if (it == factories().end())
    return nullptr;
  for (StepFactory make : it->second) {
    if (std::unique_ptr<Step> step = make(node, slots))
      return step;
  }
  return nullptr;
}

} // namespace

StepRegistration::StepRegistration(
    c10::DeviceType device,
    StepKind kind,
    StepFactory factory) {
  factories()[{device, kind}].push_back(factory);
}

KernelPreloaderRegistration::KernelPreloaderRegistration(
    c10::DeviceType device,
    KernelPreloader preload,
    bool background) {
  preloaders()[device].push_back({preload, background});
}

LibraryRegistration::LibraryRegistration(const char* name, LibraryProbe probe) {
  libraries()[name] = probe;
}

c10::DeviceType step_device(const ir::Node& node) {
  return node.outputs.empty() ? c10::kCPU : node.outputs[0]->device.type();
}

void preload_kernels(const std::vector<const ir::Node*>& nodes) {
  std::vector<std::thread> background;
  for (const auto& [device, preloads] : preloaders()) {
    for (const Preloader& p : preloads) {
      if (!p.background)
        continue;
      try {
        background.emplace_back(p.preload, std::cref(nodes));
      } catch (const std::system_error&) {
        p.preload(nodes); // no thread: here, before the others
      }
    }
  }
  // The background threads are joined however the foreground ones end.
  struct Join {
    std::vector<std::thread>& threads;
    ~Join() {
      for (std::thread& t : threads)
        t.join();
    }
  } join{background};
  for (const auto& [device, preloads] : preloaders()) {
    for (const Preloader& p : preloads) {
      if (!p.background)
        p.preload(nodes);
    }
  }
}

bool library_available(const std::string& name, std::string* why) {
  auto it = libraries().find(name);
  if (it == libraries().end())
    return false;
  return it->second(why);
}

std::unique_ptr<Step> make_library_step(
    const ir::Node& node,
    const SlotMap& slots) {
  if (node.outputs.empty())
    return nullptr;
  return make_step(step_device(node), StepKind::kLibrary, node, slots);
}

std::unique_ptr<Step> make_kernel_step(
    const ir::Node& node,
    const SlotMap& slots) {
  if (node.op != "torch_plugin::fused")
    return nullptr;
  const c10::DeviceType device = step_device(node);
  std::unique_ptr<Step> step =
      make_step(device, StepKind::kKernel, node, slots);
  TORCH_CHECK(
      step,
      "torch_plugin: fusion group ",
      node.str_attr("name", "fused"),
      " has a kernel for target '",
      node.str_attr("target", "cpp"),
      "' on ",
      c10::DeviceTypeName(device, /*lower_case=*/true),
      ", but this build of torch_plugin has no kernel step for it (a CUDA "
      "kernel needs a build with CUDA support: a CUDA build of torch, CUDA "
      "headers, and not -DTORCH_PLUGIN_CUDA=OFF)");
  return step;
}

} // namespace torch_plugin::runtime
