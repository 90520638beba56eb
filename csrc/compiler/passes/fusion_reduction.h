// fusion_reduction.h: what the "fusion" pass (fusion.cpp) needs to know of a
// reduction, scan or row-wise op of the op table (ir/op_table.h): its domain
// (sizes F and reduced dims R), the level of each output, and which outputs
// are int64 indices (argmax's, max.dim's). Private to passes/.
#pragma once

#include "ir/ir.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace torch_plugin::compiler {

// The graph IR (csrc/ir) that passes and codegen read and rewrite.
using namespace ::torch_plugin::ir;

namespace fusion_detail {

// The level of a group member's value: sizes F, or one value per kept index
// without ("outer") or with ("outer_keep") the reduced dims as size 1.
enum class Level { kFull, kOuter, kOuterKeep };

inline const char* level_name(Level l) {
  return l == Level::kFull ? "full"
                           : (l == Level::kOuter ? "outer" : "outer_keep");
}

// A group's domain: F, and R (empty for a pointwise group).
struct Domain {
  std::vector<int64_t> sizes; // F
  std::vector<int64_t> reduce; // R, sorted; empty for a pointwise group
};

// The domain of a reduction or row-wise op, the levels of its outputs and
// which of them are int64 indices (max.dim's second output, argmax's).
struct ReductionInfo {
  Domain domain;
  std::vector<Level> levels;
  std::vector<bool> index;
  // An integer scan (cumsum/cumprod of bool or integers into int64, as
  // ATen promotes them): exact int64 arithmetic, a group of its own.
  bool integer = false;
};

// nullopt when `n` is not a reduction the kernels compute: not in the op
// table as one, an empty or 0-d input (ATen's identity or error), dtypes the
// device's kernels do not load and store (index outputs must be int64), a
// `dtype` argument other than None / the input's / float32, a non-constant
// dim, softmax's half_to_float, a layer norm with non-tensor weight.
std::optional<ReductionInfo> reduction_info(const Node& n);

} // namespace fusion_detail
} // namespace torch_plugin::compiler
