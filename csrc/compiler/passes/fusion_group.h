// fusion_group.h: operations on fusion groups (torch_plugin::fused nodes with a
// body) shared by the passes that make and render them (passes/fusion.cpp,
// passes/codegen.cpp).
#pragma once

#include "ir/ir.h"

#include <string>
#include <unordered_set>
#include <vector>

namespace torch_plugin::compiler {

// The graph IR (csrc/ir) that passes and codegen read and rewrite.
using namespace ::torch_plugin::ir;

// Puts fusion group `group` (a node of `g`) back as the ATen nodes of its body,
// in body order, where the group node was: each body node is recreated with its
// op, arguments and output types (its "level" attr, a fusion-internal note,
// dropped), the body's inputs become the group's inputs and every use of a
// group output (graph outputs included) becomes a use of the matching body
// output; the group node is erased. The inverse of the fusion pass's grouping:
// the graph computes the same values with the same types. Throws c10::Error
// when `group` is not a fusion group of `g`.
void unfuse_group(Graph& g, Node* group);

// The views (may_alias nodes: aten::alias, view.dtype) of `g` whose aliasing a
// user can observe, which the fusion pass keeps out of groups (a group's
// outputs are new buffers): in a graph that writes in place, every view; else
// a view that escapes (a graph output, or read by a view that escapes) over a
// base the user also holds: its root through views is a graph input, a
// constant or a graph output, or the root of another view returned.
// `y = x * 2; return y, y.detach()` must return two names for one buffer, as
// eager does; a lone view of a temporary nobody else holds may become a copy.
std::unordered_set<const Node*> observable_views(const Graph& g);

// The fusion pass's group as one torch_plugin::fused node of `g`: `members`
// (graph order; `levels[i]` is member i's level name, kept as its body node's
// "level" attr) move into the node's body; values the members read from
// outside become the node's inputs, member outputs used outside the group (or
// graph outputs) its outputs, in member order; a reduction group (non-empty
// `reduce_dims`) gets attrs "domain" and "reduce_dims"; attr "name" is
// "fused_<index>". The members are erased.
Node* make_fused_node(
    Graph& g,
    const std::vector<Node*>& members,
    const std::vector<std::string>& levels,
    const std::vector<int64_t>& domain_sizes,
    const std::vector<int64_t>& reduce_dims,
    int index);

} // namespace torch_plugin::compiler
