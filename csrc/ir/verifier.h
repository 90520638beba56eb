// verifier.h: structural checks of a Graph, run after every pass in tests and
// under TORCH_PLUGIN_VERIFY=1 (see passes/pipeline.cpp).
#pragma once

#include "ir/ir.h"

namespace torch_plugin::ir {

// Throws c10::Error naming the first broken invariant: a node input not defined
// before its use, use lists out of sync with inputs, an output whose producer
// is not its node, sizes/strides of different rank, an Arg index out of range,
// a graph output never defined, a fusion group whose body does not match its
// node.
void verify(const Graph& g);

} // namespace torch_plugin::ir
