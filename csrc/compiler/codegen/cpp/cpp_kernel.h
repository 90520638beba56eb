// cpp_kernel.h: C++/OpenMP source for a pointwise fusion group.
#pragma once

#include "ir/ir.h"

#include <string>

namespace torch_plugin::compiler {

// The graph IR (csrc/ir) that passes and codegen read and rewrite.
using namespace ::torch_plugin::ir;

// The source of one kernel `extern "C" void <name>(void** args)` computing the
// pointwise fusion group `group` (a node whose body holds the fused ops; its
// outputs all have the same sizes): args[0..outputs) are the outputs, then the
// group's inputs in order, each with the sizes, strides and dtype its IR
// value has (any dtype with a compute type: bool, integers, fp16, bf16, fp32,
// fp64; typed expressions, codegen/op_semantics.h). The loop nest follows the
// output's memory order, with adjacent dimensions coalesced; the outer loop
// runs under OpenMP, the inner one is contiguous where the operands are, so the
// compiler vectorizes it. With few outer iterations (a contiguous tensor
// coalesces into one) the inner loop is split into blocks that OpenMP shares
// out too.
std::string generate_pointwise_kernel(
    const Node& group,
    const std::string& name);

} // namespace torch_plugin::compiler
