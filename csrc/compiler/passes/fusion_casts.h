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
// node fusion may group (a pointwise, reduction or row-wise op), and the
// cast's output strides those of the view's output (so the new view of the
// contiguous converted x has exactly the old cast's layout); the new cast is
// placed right after x's producer. The old view stays where something else
// reads it. A cast whose input comes (through views) from a node fusion does
// not group (a cuBLASLt product's bf16 output upcast for GPT-2's fp32 GELU,
// a graph input) instead moves past the views that are its one use,
// view(cast(y)) => cast(view(y)), next to the consumer kernel it can join.
// Returns the number of casts moved.
int sink_casts_below_views(ir::Graph& g);

} // namespace torch_plugin::compiler
