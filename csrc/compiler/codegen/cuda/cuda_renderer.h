// cuda_renderer.h: the CUDA renderer's entry point (codegen/renderer.h chooses
// it for CUDA fusion groups). Its sources follow the CUDA kernel ABI of the
// runtime (runtime/cuda): `extern "C" __global__ void kernel(T0* out0, ...,
// const Ti* in0, ...)`, one pointer per group output then per group input;
// float for float32, unsigned short (raw bits) for bfloat16 and float16; sizes
// and strides baked in; compiled by NVRTC with no include files; launched 1-d
// with the KernelSource's grid, block and shared_bytes. Rendering is string
// building only: it builds and runs without a CUDA toolkit.
#pragma once

#include "compiler/codegen/renderer.h"

#include <optional>

namespace torch_plugin::compiler {

// The CUDA kernel of fusion group `group` (target "cuda"), or nullopt when the
// renderer does not handle this group (its ops then run as ATen calls).
std::optional<KernelSource> render_cuda(const Node& group);

} // namespace torch_plugin::compiler
