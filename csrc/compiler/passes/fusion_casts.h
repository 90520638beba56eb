// fusion_casts.h: the fusion pass's dtype conversions behind views
// (passes/fusion.cpp runs it before grouping). Under autocast a linear layer's
// input is cast where the product needs it, after the reshape that flattens
// it: layer_norm -> view [B*S, C] -> _to_copy(bf16) -> mm (GPT-2's Conv1D,
// F.linear of a 3-d input). A fusion group never takes a view, so that cast
// was a lone pointwise op, an ATen copy kernel of its own (GPT-2 bf16 on an
// H100: 25 copies per call). Converting before the view instead lets the cast
// join the kernel that produced its input (the layer norm then stores bf16,
// and fp32 only where something else reads it).
#pragma once

#include "ir/ir.h"

namespace torch_plugin::compiler {

// Rewrites _to_copy(view(x)) into view(_to_copy(x)) where that is the same
// value: the _to_copy a pure dtype conversion the kernels compute
// (codegen/op_semantics.h, is_fusible_pointwise), the view one of
// aten::view, _unsafe_view, reshape, unsqueeze, squeeze, permute, t,
// transpose with x as its one tensor input, x contiguous and produced by a
// node (a cast of a graph input or constant gains nothing), and the cast's
// output strides those of the view's output (so the new view of the
// contiguous converted x has exactly the old cast's layout). The old view
// stays where something else reads it. Returns the number of casts moved.
int sink_casts_below_views(ir::Graph& g);

} // namespace torch_plugin::compiler
