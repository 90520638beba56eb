// step_registry.h: the executor's native steps, registered per (device, step
// kind) by each device's own translation units (runtime/cpu, runtime/cuda), so
// that the device-neutral executor never names a device.
//
// Owns: the registry and the two lookups the executor makes per node
// (make_library_step, make_kernel_step in step.h), the kernel preloaders (a
// device compiles all of a graph's kernels at once before its steps are
// built), and the libraries a device's steps use (whether they load here: the
// Python module's has_onednn). Registrations are static constructors of the
// device's files, kept in the module because those files are built as CMake
// OBJECT libraries; lookups only read the registry afterwards. No Python
// objects.
#pragma once

#include "runtime/step.h"

#include <c10/core/DeviceType.h>

#include <memory>
#include <string>
#include <vector>

namespace torch_plugin::runtime {

// The kinds of native step. A library step (torch_plugin::conv_pointwise,
// linear_pointwise: a vendor library's primitive) is costly to build and
// independent of the others: the executor builds them on a few threads. A
// kernel step runs a fusion group's generated kernel (torch_plugin::fused).
enum class StepKind { kLibrary, kKernel };

// Builds the step of `node` on its device, or nullptr when the device's steps
// do not take this node (the executor then calls the node's op through the
// dispatcher). May throw c10::Error for a node it takes but cannot run.
using StepFactory =
    std::unique_ptr<Step> (*)(const ir::Node& node, const SlotMap& slots);

// Compiles the kernels of the fusion groups among `nodes` that are its
// device's, or builds its library plans (cuDNN's), before the steps are built
// (every node of the graph is passed). A device may register several; they
// run in registration order.
using KernelPreloader = void (*)(const std::vector<const ir::Node*>& nodes);

// Whether a library a device's steps use loads in this process; false with
// the reason in *why (when given) otherwise.
using LibraryProbe = bool (*)(std::string* why);

// Static registration, one object per registered piece, in the device's file:
//   const StepRegistration kCpuKernel(c10::kCPU, StepKind::kKernel, make_step);
struct StepRegistration {
  StepRegistration(c10::DeviceType device, StepKind kind, StepFactory factory);
};
// `background`: the preloader runs on a thread of its own while the others
// run on the calling thread (cuDNN's plans while NVRTC compiles the generated
// kernels); it must not throw and should not warn (a warning from that thread
// reaches stderr, not Python's warnings). preload_kernels returns when all
// are done.
struct KernelPreloaderRegistration {
  KernelPreloaderRegistration(
      c10::DeviceType device,
      KernelPreloader preload,
      bool background = false);
};
struct LibraryRegistration {
  LibraryRegistration(const char* name, LibraryProbe probe);
};

// The device whose step a node gets: its first output's (CPU without outputs).
c10::DeviceType step_device(const ir::Node& node);

// Runs every registered preloader on `nodes`: the background ones on threads
// of their own, the others on the calling thread in device and registration
// order; returns when all are done (rethrowing the first error of a
// foreground one).
void preload_kernels(const std::vector<const ir::Node*>& nodes);

// Whether library `name` ("onednn") is usable here: false with *why empty when
// no step of this build uses it.
bool library_available(const std::string& name, std::string* why = nullptr);

} // namespace torch_plugin::runtime
