// reduction_plan.h: the device-neutral plan of a reduction fusion group, which
// both renderers (codegen/cpp/reduction_kernel.cpp, codegen/cuda/
// cuda_reduction.cpp) build on and then only render.
//
// A reduction group (made by passes/fusion.cpp) has a domain: sizes F (the
// input sizes of its reductions) and the reduced dims R of F; the kept dims
// are K. Its body holds reductions over R (sum, mean, amax, var: outputs at
// the "outer" level, one value per index of K, keepdim or not), row-wise ops
// over R (softmax, log_softmax, layer_norm: output 0 at the full level F) and
// pointwise ops at the full level (prologues, consumers of reduced values such
// as x * rsqrt(mean(x^2) + eps)) or at the outer level (epilogues). Each body
// node carries attrs["level"] ("full", "outer", "outer_keep"); the group node
// carries attrs["domain"] (F) and attrs["reduce_dims"] (R, sorted).
//
// The plan expands the body into terms: loads, fp32 expressions (the op
// table's templates, ir/op_table.h) and the two primitive reductions over R
// (Combine: sum, NaN-propagating max). Each term is "outer" (one value per
// index of K) or "full" (one per element of F) and has a stage: the number of
// passes over R that must run before it is known. The op table's reduction
// plan says what each reduction op expands into: mean = sum / N; var and
// layer_norm = sum of squared deviations from the mean (stage 2, not E[x^2] -
// E[x]^2); softmax = exp(x - max) / sum(exp(x - max)) (a sum at stage 2 over a
// max at stage 1); log_softmax = x - max - log(sum). A renderer then lays out
// the loops (C++: OpenMP over K, `omp simd` over R; CUDA: a warp or block per
// row) and spells the terms in its language.
#pragma once

#include "ir/ir.h"

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace torch_plugin::compiler {

// The graph IR (csrc/ir) that passes and codegen read and rewrite.
using namespace ::torch_plugin::ir;

// kSum..kArgMin: primitive reductions over R (ir::Combine). kArgMax/kArgMin
// accumulate a (value, index) pair and their term is the int64 index over R
// (row-major over the reduced dims of F, as ATen's argmax/max.dim count);
// kArgValue is the value of that pair (its deps: the kArgMax/kArgMin term),
// max.dim's values. kScanSum/kScanProd: inclusive prefix sum/product along
// the single reduced dim, full-level, known only in the last (store) pass,
// which walks R in order; no reduction may read one (build_terms refuses).
enum class TermKind {
  kLoad,
  kExpr,
  kSum,
  kMax,
  kMin,
  kProd,
  kArgMax,
  kArgMin,
  kArgValue,
  kScanSum,
  kScanProd,
};

// Whether terms of kind `k` accumulate over R (one accumulator per row).
bool is_reduction(TermKind k);
bool is_scan(TermKind k);
// The fp32 identity of a reduction (or scan) as a C expression both
// languages accept: "0.0f", "1.0f", "(-INFINITY)" / "(INFINITY)" spelled with
// `inf` (the target's +infinity expression).
std::string reduction_identity(TermKind k, const std::string& inf);
// The statement folding (`x`, index `j`) into the accumulator (`a`, `ai`) of a
// kMin/kProd/kArgMax/kArgMin term; the same statement merges two partial
// accumulators (x, j := the other's). Device-neutral C: NaN tests as x != x.
// kArgMax: (x, j) wins when x is NaN and a is not, or neither is NaN and
// x > a, or x and a are equal (or both NaN) and j < ai; so the result does not
// depend on the order of combining (ATen: first maximal index, first NaN).
// kMin: a NaN sticks (x != x takes it; once a is NaN, x < a is false).
std::string combine_stmt(
    TermKind k,
    const std::string& a,
    const std::string& ai,
    const std::string& x,
    const std::string& j);

// A value of the group's computation: a load, an fp32 expression or a
// reduction/scan over R. `outer`: one value per index of K (else one per
// element of F); `stage`: the passes over R that must run before it is known;
// `index`: an int64 value (kArgMax/kArgMin), only ever stored.
struct Term {
  TermKind kind;
  bool outer = false;
  int stage = 0;
  int operand = -1; // kLoad
  std::string expr; // kExpr: references "\x01<id>\x02" to other terms
  std::vector<int> deps; // kExpr: referenced terms; reductions: the argument
  bool index = false;
  // kLoad: the element tested against zero in its own dtype, as 1.0f / 0.0f
  // (any/all's argument read from memory: a double 1e-300 or an int64 is
  // nonzero exactly when it is, which a conversion to fp32 first would lose).
  bool nonzero = false;
  // kMax/kMin of any/all: 1.0f / 0.0f, stored into a bool (uint8) output.
  bool boolean = false;
  // An int64 value (integer scans: the load of a bool/integer input and the
  // kScanSum/kScanProd over it, in int64 with wrap-around, as ATen's
  // integer cumsum/cumprod); only read by an integer scan or stored into an
  // int64 output.
  bool integer = false;
};

// A pointer the kernel reads or writes, with its strides over F (0 where
// broadcast). Outputs come first (out0, out1, ...), then the loads.
// `index_space`: not a pointer but the logical index over R (row-major strides
// over the reduced dims, 0 on kept dims; dtype kLong): a renderer computes
// its offset like any operand's and never loads, stores or aligns it.
struct Operand {
  std::string ptr;
  c10::ScalarType dtype;
  std::vector<int64_t> strides;
  bool index_space = false;
};

// What differs between the targets in the plan itself.
struct ReductionDialect {
  const char* name; // in error messages: "codegen", "cuda codegen"
  // A float constant of the plan (N, eps, var's divisor) as a literal.
  std::string (*literal)(double v);
  // A constant schema argument of a pointwise op as an operand of its
  // expression (codegen/op_semantics.h).
  std::string (*constant)(const AttrValue& v);
  // softmax as exp(x - max) * (1 / sum), as ATen's vectorized CPU softmax
  // (else exp(x - max) / sum, as ATen's CUDA softmax).
  bool softmax_by_reciprocal;
  // Strides of a value of `v_sizes`/`v_strides` broadcast to `sizes`.
  std::vector<int64_t> (*broadcast_strides)(
      const std::vector<int64_t>& v_sizes,
      const std::vector<int64_t>& v_strides,
      const std::vector<int64_t>& sizes);
  // The fp32 expression `e` rounded to bfloat16 / float16 `t` and back
  // (any/all test a narrow value of the group against zero as ATen sees it:
  // fp16(1e-8) is 0).
  std::string (*round_to)(c10::ScalarType t, const std::string& e);
};

// The terms of one reduction group; renderers derive from it and read its
// members.
class ReductionTerms {
 public:
  ReductionTerms(const Node& group, const ReductionDialect& dialect);

  // A reference to term `id` inside an expression.
  static std::string ref(int id);

 protected:
  // Expands the body into terms and the group's outputs into operands and
  // outputs_; false when the body holds something the plan cannot express
  // (e.g. a pointwise op with several outputs). Throws c10::Error on a
  // malformed group (a value that is not in it, an op outside the table).
  bool build_terms();
  // needed_: the terms the outputs need; stages_: their last stage.
  void mark_needed();

  int add(Term t);
  int expr(const std::string& e, std::vector<int> deps);
  int reduce(TermKind k, int arg);
  // The index-space operand (created on first use).
  int index_operand();
  // any/all's argument, body value `v`: a group input loaded with `nonzero`,
  // else the in-group fp32 term rounded to v's dtype and compared with 0.
  int nonzero_term(const Value* v);
  // An integer scan's argument, body input `v` (bool or an integer dtype)
  // loaded as an int64 term.
  int integer_load(const Value* v);
  // Checks the plan's typing rules after the body is expanded: index terms
  // only stored into int64 outputs (and every int64 output an index), scans
  // read by no reduction, operands not of an fp32-computed dtype (float32,
  // bfloat16, float16) only loaded as any/all's nonzero tests, outputs of
  // other dtypes only any/all's.
  bool check_terms() const;
  // F-space strides of a value of `sizes`/`strides` used at `level`.
  std::vector<int64_t> map_strides(
      const std::vector<int64_t>& sizes,
      const std::vector<int64_t>& strides,
      const std::string& level,
      const std::vector<int64_t>& level_sizes) const;
  // The group input index of body input `v` (throws when `v` is not one)
  // and its F-space strides when used at `level`: the key of its load.
  std::pair<size_t, std::vector<int64_t>> input_key(
      const Value* v,
      const std::string& level,
      const std::vector<int64_t>& level_sizes) const;
  // Expression `e` with each term reference spelled t<id> (the CUDA
  // renderers' names of term values).
  static std::string spell_refs(const std::string& e);
  // The full-level terms `roots` need, stopping at outer terms (and at scans
  // when `stop_at_scans`: a kernel holds their values).
  std::set<int> full_closure(const std::vector<int>& roots, bool stop_at_scans)
      const;
  // The term of body value `v` used by a node at `level` whose output sizes
  // are `level_sizes`.
  int operand_term(
      const Value* v,
      const std::string& level,
      const std::vector<int64_t>& level_sizes);
  void set(const Node& n, size_t i, int term, const std::string& level);

  const Node& group_;
  const ReductionDialect& dialect_;
  std::vector<int64_t> domain_; // F
  std::vector<bool> reduced_; // per dim of F
  int64_t count_ = 1; // elements reduced per output (N)
  std::vector<Term> terms_;
  std::vector<Operand> operands_; // outputs first, then loads
  std::map<std::pair<size_t, std::vector<int64_t>>, int> loads_;
  std::map<std::pair<size_t, std::vector<int64_t>>, int> nonzero_loads_;
  std::unordered_map<const Value*, int> term_of_;
  std::unordered_map<const Value*, std::string> level_of_;
  std::vector<std::pair<int, bool>> outputs_; // term, full-level
  std::set<int> needed_;
  int stages_ = 0;
  // Softmax's max and sum of exp(x - max) over R, by the max term:
  // max -> {sum, x}.
  std::map<int, std::pair<int, int>> softmax_pairs_;
  int index_operand_ = -1;
  bool has_scan_ = false;
};

} // namespace torch_plugin::compiler
