// cpp_kernel.h: C++/OpenMP source for a pointwise fusion group.
#pragma once

#include "compiler/ir.h"

#include <string>

namespace torch_plugin::compiler {

// The source of one kernel `extern "C" void <name>(void** args)` computing the
// fusion group `group` (a node whose body holds the fused ops): args[0] is the
// output, args[1..] the group's inputs in order, each with the sizes and
// strides its IR value has. The loop nest follows the output's memory order,
// with adjacent dimensions coalesced; the outer loop runs under OpenMP, the
// inner one is contiguous where the operands are, so the compiler vectorizes it.
std::string generate_pointwise_kernel(const Node& group, const std::string& name);

}  // namespace torch_plugin::compiler
