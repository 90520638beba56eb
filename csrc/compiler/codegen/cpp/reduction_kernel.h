// reduction_kernel.h: C++/OpenMP source for a reduction fusion group.
//
// A reduction group (made by passes/fusion.cpp) has a domain: sizes F (the
// input sizes of its reductions) and the reduced dims R of F; the kept dims are
// K. Its body holds, in order:
//   - reductions over R: aten::sum.dim_IntList, mean.dim, amax, var.correction
//     (outputs at the "outer" level: one value per index of K, keepdim or not);
//   - row-wise ops over R: aten::_softmax, _log_softmax, native_layer_norm
//     (output 0 at the full level F; layer_norm's mean and rstd at the outer
//     level);
//   - pointwise ops at the full level (prologues, and consumers of reduced
//   values
//     such as x * rsqrt(mean(x^2) + eps)) or at the outer level (epilogues).
// Each body node carries attrs["level"]: "full", "outer" (non-keepdim sizes) or
// "outer_keep" (keepdim sizes); the group node carries attrs["domain"] (F) and
// attrs["reduce_dims"] (R, sorted).
//
// Every value is computed in fp32; reductions accumulate in fp32 (var and
// layer_norm in two passes: the mean, then the sum of squared deviations). The
// kernel loops over K under OpenMP; per index of K it makes one pass over R per
// level of dependent reductions (softmax: max, then sum of exp), then a final
// pass storing the full-level outputs. Full-level intermediates are recomputed
// in each pass instead of stored. Loop order follows the first full-level
// input's memory order: when the innermost dim is reduced, the innermost R loop
// is an `omp simd` reduction; when it is kept (e.g. mean over H, W of a
// channels_last tensor), blocks of up to 256 kept elements are reduced side by
// side with the block as the vectorized inner loop.
#pragma once

#include "ir/ir.h"

#include <string>

namespace torch_plugin::compiler {

// The graph IR (csrc/ir) that passes and codegen read and rewrite.
using namespace ::torch_plugin::ir;

// The source of `extern "C" void <name>(void** args)` computing `group`:
// args[0..outputs) are the group's outputs, then its inputs, each with the
// sizes, strides and dtype (float32 or bfloat16; int64 for argmax / max.dim
// indices) of its IR value. "" when the plan cannot express the body (an
// index read by a pointwise op, a reduction of a scan: reduction_plan.h);
// throws c10::Error on a malformed group.
std::string generate_reduction_kernel(
    const Node& group,
    const std::string& name);

} // namespace torch_plugin::compiler
