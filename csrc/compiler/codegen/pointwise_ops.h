// pointwise_ops.h: the per-op table of the C++ code generator — for each ATen
// pointwise op it fuses, how its IR node becomes a C++ expression on floats.
#pragma once

#include "ir/ir.h"

#include <optional>
#include <string>
#include <vector>

namespace torch_plugin::compiler {

// The graph IR (csrc/ir) that passes and codegen read and rewrite.
using namespace ::torch_plugin::ir;

// The expression of `n` given the expressions of its schema arguments
// (`operands[i]` is the C++ expression for argument i when it is a tensor, or
// its literal when it is a number). nullopt when the op (or this use of it,
// e.g. gelu with an unknown approximation) is not in the table.
std::optional<std::string> pointwise_expression(
    const Node& n,
    const std::vector<std::string>& operands);
// Whether `n` is in the table (cheap pre-check for the fusion pass).
bool is_fusible_pointwise(const Node& n);

} // namespace torch_plugin::compiler
