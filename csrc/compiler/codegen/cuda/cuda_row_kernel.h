// cuda_row_kernel.h: the row-reduction kernel generator shared by
// cuda_reduction.cpp (the body as terms, the launch plan) and
// cuda_reduction_emit.cpp (the CUDA source). Private to codegen/cuda; the
// algorithm is described in cuda_reduction.cpp.
#pragma once

#include "compiler/codegen/cuda/cuda_common.h"
#include "compiler/codegen/reduction_plan.h"

#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch_plugin::compiler::cuda {

using Kind = TermKind;

// The plan's dialect of the CUDA reduction kernels (row reductions and
// scans): CUDA float literals, softmax as exp(x - max) / sum.
const ReductionDialect& cuda_reduction_dialect();
// A load term's value at element offset `off` of operand `o`: the element in
// its compute type (fp32 for float dtypes), or for any/all's nonzero loads
// 1.0f / 0.0f tested in the element's own type.
std::string load_term(const Term& t, const Operand& o, const std::string& off);

class RowKernel : public ReductionTerms {
 public:
  explicit RowKernel(const Node& group);
  // nullopt when the group is not a row reduction this kernel handles.
  std::optional<KernelSource> render();

 private:
  // cuda_reduction.cpp: the launch plan (the terms: reduction_plan.h).
  bool plan();
  bool row_contiguous(size_t k) const;
  bool vectorized(size_t k) const;
  std::set<int> closure(const std::vector<int>& roots) const;
  std::vector<int> pass_roots(int pass) const;
  void plan_cache();

  // cuda_reduction_emit.cpp: the source.
  std::string emit() const;
  std::string render_expr(const std::string& e) const;
  void emit_full(
      int id,
      std::ostream& os,
      std::set<int>& done,
      const std::string& ind) const;
  std::string element_loop(
      const std::set<int>& roots,
      const std::string& tail,
      bool fill_cache,
      bool stores) const;
  void emit_outer(int stage, std::ostream& os) const;
  std::string row_offset(size_t k, const std::string& j) const;
  // A load term's fp32 value at element offset `off` of its operand (any/
  // all's nonzero loads: 1.0f / 0.0f, tested in the element's own type).
  std::string load_value(const Term& t, const std::string& off) const;

  // count_ (ReductionTerms): the row length.
  int64_t m_ = 1; // rows
  std::set<int> cached_;
  // Softmax's max and sum of exp(x - max) over a row of full-level x (the
  // plan's softmax_pairs_ are the candidates); online_ (max -> sum): the pairs
  // computed together in pass 1 (rows read again per pass only: with the row
  // in registers the extra pass costs no memory traffic).
  std::map<int, int> online_;
  std::vector<size_t> rdims_, kdims_; // outermost first
  int64_t v_ = 1; // elements per vector
  int64_t g_ = 32; // threads per row
  int64_t rows_per_block_ = 1, block_ = kBlock, chunks_ = 1, grid_ = 1;
  // Column split (cuda_reduction.cpp): S warps per column, lane l of warp w
  // on column base + l, elements w, w + S, ...; 1 when not split.
  int64_t split_ = 1;
  int64_t max_index_ = 0;
};

} // namespace torch_plugin::compiler::cuda
