// fusion_share.h: the fusion pass's shared producers (passes/fusion.cpp). After
// grouping, a cheap value that one pointwise group hands out to other
// pointwise groups (an attention mask built by comparisons from a small
// input; `x > 0` read by two kernels that a matrix product keeps apart) is
// recomputed inside each consumer's kernel instead of stored once and loaded
// by each: the pass clones the ops it is computed from into each consumer
// group, and drops them from their own group where nothing there reads them.
#pragma once

#include "ir/ir.h"

#include <unordered_map>
#include <vector>

namespace torch_plugin::compiler {

using namespace ::torch_plugin::ir;

// At most this many ops, and this many distinct inputs from outside, in a
// shareable group.
inline constexpr size_t kMaxSharedOps = 4;
inline constexpr size_t kMaxSharedInputs = 2;

// Whether `n` is cheap enough to compute again in every consumer: a row of
// the op table's typed block (comparisons, where, masked_fill, logical and
// bitwise ops, integer-exact arithmetic, clamp, conversions) or relu. No
// transcendental function, no random op, no reduction.
bool cheap_to_recompute(const Node& n);

// Whether recomputing `members` (ops of a pointwise group in graph order) in
// each consumer removes a store and a load: every member cheap, at most
// kMaxSharedOps of them and kMaxSharedInputs inputs from outside, no member
// output a graph output, and each value the group hands out at least as
// large (in elements) as each of its inputs.
bool shareable_members(const Graph& g, const std::vector<Node*>& members);

// Copies of `members` (graph order) inserted before `before`, reading the
// copies of each other; `copy_of` maps each member output to its copy's.
std::vector<Node*> clone_members(
    Graph& g,
    const std::vector<Node*>& members,
    Node* before,
    std::unordered_map<const Value*, Value*>& copy_of);

} // namespace torch_plugin::compiler
