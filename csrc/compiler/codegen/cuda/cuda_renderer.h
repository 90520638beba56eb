// cuda_renderer.h: the CUDA renderer — a fusion group (passes/fusion.cpp)
// becomes one CUDA C++ kernel for NVRTC (pinned contracts 2 and 3 of issue
// #11).
//
// Input: a torch_plugin::fused node as the fusion pass builds it: `body`, a
// subgraph of the fused ATen ops whose inputs are the group's inputs (in
// order) and whose outputs are the group's outputs; each body node has
// attrs["level"] ("full", "outer", "outer_keep"); a reduction group has
// attrs["domain"] (sizes F) and attrs["reduce_dims"] (R, sorted). Pointwise
// arithmetic comes from the device-neutral op-semantics table
// (pointwise_expression); sizes and strides of every operand are baked in.
//
// Output: `extern "C" __global__ void kernel(T* out0, ..., const T* in0,
// ...)`, T = float (float32) or unsigned short (raw bfloat16 / float16 bits);
// compiled with no include files; launched 1-d with grid/block from the
// KernelSource (shared_bytes is 0: shared memory is static). Every kernel
// computes in fp32.
//
// Kernel kinds: pointwise groups (cuda_pointwise.cpp: 16-byte vectors,
// grid-stride); reduction groups (cuda_reduction.cpp: softmax, log_softmax,
// layer_norm, rms_norm's decomposition, sum/mean/amax/var, with their
// pointwise neighbours): a warp or a block per contiguous row, or one thread
// per column when the reduced dims are not contiguous (e.g. mean over H, W of
// a channels_last tensor) and there are many columns or short ones. nullopt
// for everything else: column reductions with few, long columns (BatchNorm
// statistics, x.sum(0) of a tall matrix), dtypes other than
// float32/bfloat16/float16, body ops with several outputs other than
// native_layer_norm, bodies outside the op-semantics table.
#pragma once

#include "compiler/codegen/renderer.h"

#include <optional>

namespace torch_plugin::compiler {

// The CUDA kernel of fusion group `group`, or nullopt when this renderer does
// not handle it (the codegen stage then un-fuses the group to ATen ops).
// Throws c10::Error on a malformed group (e.g. a body value missing from the
// group's inputs).
std::optional<KernelSource> render_cuda(const Node& group);

} // namespace torch_plugin::compiler
