// cuda_row_kernel.h: the row-reduction kernel generator shared by
// cuda_reduction.cpp (the body as terms, the launch plan) and
// cuda_reduction_emit.cpp (the CUDA source). Private to codegen/cuda; the
// algorithm is described in cuda_reduction.cpp.
#pragma once

#include "compiler/codegen/cuda/cuda_common.h"

#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace torch_plugin::compiler::cuda {

enum class Kind { kLoad, kExpr, kSum, kMax };

// A value of the group's computation: a load, an fp32 expression or a sum/max
// over the row. `outer`: one value per row (else one per element); `stage`:
// the passes over the row that must run before it is known.
struct Term {
  Kind kind;
  bool outer = false;
  int stage = 0;
  int operand = -1; // kLoad
  std::string expr; // kExpr: references "\x01<id>\x02"
  std::vector<int> deps; // kExpr: referenced terms; kSum/kMax: the argument
};

struct Operand {
  std::string ptr;
  c10::ScalarType dtype;
  std::vector<int64_t> strides; // over the domain F (0 where broadcast)
};

class RowKernel {
 public:
  explicit RowKernel(const Node& group);
  // nullopt when the group is not a row reduction this kernel handles.
  std::optional<KernelSource> render();

 private:
  // cuda_reduction.cpp: terms and plan.
  int add(Term t);
  int expr(const std::string& e, std::vector<int> deps);
  int reduce(Kind k, int arg);
  std::vector<int64_t> map_strides(
      const std::vector<int64_t>& sizes,
      const std::vector<int64_t>& strides,
      const std::string& level,
      const std::vector<int64_t>& level_sizes);
  int operand_term(
      const Value* v,
      const std::string& level,
      const std::vector<int64_t>& level_sizes);
  void set(const Node& n, size_t i, int term, const std::string& level);
  bool build_terms();
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

  const Node& group_;
  std::vector<int64_t> domain_;
  std::vector<bool> reduced_;
  int64_t n_ = 1, m_ = 1; // row length, rows
  std::vector<Term> terms_;
  std::vector<Operand> operands_; // outputs first, then loads
  std::map<std::pair<size_t, std::vector<int64_t>>, int> loads_;
  std::unordered_map<const Value*, int> term_of_;
  std::unordered_map<const Value*, std::string> level_of_;
  std::vector<std::pair<int, bool>> outputs_; // term, full-level
  std::set<int> needed_, cached_;
  // Softmax's max and sum of exp(x - max) over a row of full-level x, by the
  // max term: candidates (max -> {sum, x}); online_ (max -> sum): the pairs
  // computed together in pass 1 (rows read again per pass only: with the row
  // in registers the extra pass costs no memory traffic).
  std::map<int, std::pair<int, int>> softmax_pairs_;
  std::map<int, int> online_;
  int stages_ = 0;
  std::vector<size_t> rdims_, kdims_; // outermost first
  int64_t v_ = 1; // elements per vector
  int64_t g_ = 32; // threads per row
  int64_t rows_per_block_ = 1, block_ = kBlock, chunks_ = 1, grid_ = 1;
  int64_t max_index_ = 0;
};

} // namespace torch_plugin::compiler::cuda
