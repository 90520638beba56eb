// cpp_renderer.h: the C++/OpenMP renderer's entry point (codegen/renderer.h
// chooses it for CPU fusion groups).
#pragma once

#include "compiler/codegen/renderer.h"

#include <optional>

namespace torch_plugin::compiler {

// The C++ kernel of fusion group `group`: a reduction group (attrs
// "reduce_dims") through generate_reduction_kernel (reduction_kernel.h), a
// pointwise group through generate_pointwise_kernel (cpp_kernel.h); target
// "cpp", entry "kernel", ABI `extern "C" void kernel(void** args)` (outputs,
// then inputs), no launch configuration. nullopt when a group input or output
// has a dtype the C++ kernels cannot load or store (other than float32 and
// bfloat16). Throws c10::Error for a body the generators do not handle (the
// fusion pass builds only ones they do).
std::optional<KernelSource> render_cpp(const Node& group);

} // namespace torch_plugin::compiler
