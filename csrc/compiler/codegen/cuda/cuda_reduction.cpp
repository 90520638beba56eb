// cuda_reduction.cpp: CUDA kernels for reduction fusion groups whose reduced
// dims R form contiguous rows (see cuda_renderer.h for the group format).
//
// Handled: groups of sum.dim_IntList, mean.dim, amax, var.correction,
// _softmax, _log_softmax, native_layer_norm and their pointwise neighbours
// (rms_norm's decomposition x * rsqrt(mean(x^2) + eps) included). Rows: R,
// in the memory of the reference operand (the first input read at the full
// level), is one contiguous block of N elements. Columns (any other R: over
// the outer dims, over H, W of a channels_last tensor): where the innermost
// kept dim is contiguous in the reference operand (lanes of a warp read
// consecutive kept indices: channels of an NHWC tensor), each column is split
// across S = 2..32 warps ("column split": 32 columns per block of 32 S
// threads, warp w walking the column's elements w, w + S, ...; the S partials
// combined through shared memory in warp order), S doubled while there are
// fewer than kColumnSplitThreads threads and each thread would still walk at
// least kColumnMinPerThread elements; without a contiguous kept dim (or with
// fewer than 32 kept indices), one thread per kept index walks its column.
// Taken with >= kColumnMinRows kept indices or columns of <= kColumnMaxShort
// elements, and, split, also with >= kColumnMinThreads threads in >=
// kColumnMinBlocks blocks. Other column reductions (BatchNorm statistics of an
// NCHW tensor, x.sum(0) of a tall matrix: a bias gradient) get nullopt, as do
// fewer than kFewRows rows of more than kLongRow elements (x.sum() of a large
// tensor): ATen splits those across blocks. The squeeze-excitation pools of
// EfficientNet-B0 at batch 32 (NHWC means over 112 x 112 .. 7 x 7 of 32 x 96 ..
// 32 x 1152 channels) took 0.63 ms in 11 kernels of one thread per column on an
// H200 (Inductor 0.07), and the ones refused ran as ATen's mean beside unfused
// pointwise ops.
//
// The body's terms come from the device-neutral plan shared with the C++
// renderer (codegen/reduction_plan.h: loads, fp32 expressions and the two
// primitive reductions: sum, NaN-propagating max and min, product, and the
// (value, int64 index) pairs of argmax/argmin and max.dim/min.dim, each
// "outer" (one value per row) or "full" with a stage); softmax there is
// exp(x - max) / sum, as ATen's CUDA softmax. A pair's index is the element's
// logical index over R (the plan's index-space operand, mapped from j like
// any operand); pairs combine by reduction_plan.h's combine_stmt in every
// thread and across the butterfly (value and index shuffled together), which
// gives ATen's first maximal index whatever the order. Scans (cumsum,
// cumprod) get nullopt here: cuda_scan.cpp renders them. any/all: max/min of
// x != 0 (1.0f/0.0f) over the row, x tested in its own dtype (the plan's
// nonzero loads, never vectorized), stored into a bool output. This file plans
// the launch; cuda_reduction_emit.cpp spells the kernel.
//
// Launch of rows: G threads per row, G a power of two. Rows of N <= 1024
// elements: G <= 32 lanes of a warp (the fewest giving each lane <= 4 vectors),
// 256/G rows per 256-thread block, warp shuffles only. Longer rows: one block
// of G = 128..1024 threads per row (the fewest giving each thread <= 16
// elements), warp shuffles then shared memory across warps. Grids stride over
// rows, min(rows / rows per block, kMaxBlocks) blocks. Thread t handles the
// vectors (c * G + t) * V .. + V of the row, c = 0..C-1, V = 16 bytes / the
// smallest element size when N divides by it (else smaller; 1 for odd N), so
// loads and stores are 16-byte and coalesced. Stage-0 full-level terms used
// by two or more passes (the input row, or the residual sum before a layer
// norm) are kept in registers (C*V floats each, compile-time indexed) when
// they fit the register budget, so the row is read from memory once;
// otherwise each pass reads it again (an L2 hit for rows that fit). fp32
// accumulation; each thread sums its elements, then a butterfly
// (__shfl_xor_sync) and, for blocks, a sequential sum of the warps' partials,
// in the same order in every thread.
#include "compiler/codegen/cuda/cuda_row_kernel.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <unordered_map>

namespace torch_plugin::compiler::cuda {
namespace {

// Column reductions (reduced dims not one contiguous block of the reference
// operand) run one thread per kept index when there are at least this many
// kept indices (8 warps on each of 132 SMs) ...
constexpr int64_t kColumnMinRows = 132 * 256;
// ... or when each column has at most this many elements.
constexpr int64_t kColumnMaxShort = 256;
// Split columns: threads wanted (8 warps on each of 132 SMs, times 4), the
// fewest elements a thread is left with, and the fewest threads worth a
// kernel (below them ATen's cross-block reduction wins).
constexpr int64_t kColumnSplitThreads = 132 * 1024;
constexpr int64_t kColumnMinPerThread = 8;
constexpr int64_t kColumnMinThreads = 8192;
constexpr int64_t kColumnMinBlocks = 66; // half of 132 SMs
// Fewer rows than this (a quarter of the SMs), each longer than kLongRow, get
// nullopt: one block per row would leave most of the chip idle, where ATen
// splits each row across blocks.
constexpr int64_t kFewRows = 33;
constexpr int64_t kLongRow = 32768;

// A constant schema argument of a pointwise op (int, float, bool; anything
// else, None and strings included, as 0).
std::string constant(const AttrValue& v) {
  if (std::holds_alternative<int64_t>(v) || std::holds_alternative<double>(v) ||
      std::holds_alternative<bool>(v))
    return literal(v);
  return "0.0f";
}

std::string literal_of(double v) {
  return literal(v);
}

std::string round_to(c10::ScalarType t, const std::string& e) {
  return from_bits(t, to_bits(t, e));
}

} // namespace

const ReductionDialect& cuda_reduction_dialect() {
  static const ReductionDialect d = {
      "cuda codegen",
      literal_of,
      constant,
      /*softmax_by_reciprocal=*/false,
      broadcast_strides,
      round_to};
  return d;
}

std::string load_term(const Term& t, const Operand& o, const std::string& off) {
  const std::string v = load(o.dtype, o.ptr, off);
  return t.nonzero ? "((" + v + ") != 0 ? 1.0f : 0.0f)" : v;
}

RowKernel::RowKernel(const Node& group)
    : ReductionTerms(group, cuda_reduction_dialect()) {}

std::optional<KernelSource> RowKernel::render() {
  // Other dtypes than cuda_dtype's: any/all's inputs and bool outputs, and
  // argmax's int64 indices; the plan's check_terms says which values may
  // have them.
  for (const Value* v : group_.inputs)
    if (!pointwise_cuda_dtype(v->dtype))
      return std::nullopt;
  for (const Value* v : group_.outputs)
    if (!pointwise_cuda_dtype(v->dtype))
      return std::nullopt;
  if (!build_terms() || !plan())
    return std::nullopt;
  KernelSource ks;
  ks.target = "cuda";
  ks.source = emit();
  ks.grid = grid_;
  ks.block = block_;
  ks.shared_bytes = 0; // static shared memory only
  return ks;
}

// ---- layout ----------------------------------------------------------------
bool RowKernel::plan() {
  mark_needed();
  // Scans (cumsum, cumprod): cuda_scan.cpp.
  for (int id : needed_)
    if (is_scan(terms_[id].kind))
      return false;
  // Reference: the first full-level load, else the first full output.
  const std::vector<int64_t>* refst = nullptr;
  for (int id : needed_)
    if (terms_[id].kind == Kind::kLoad && !terms_[id].outer) {
      refst = &operands_[terms_[id].operand].strides;
      break;
    }
  for (size_t i = 0; !refst && i < outputs_.size(); ++i)
    if (outputs_[i].second)
      refst = &operands_[i].strides;
  if (!refst)
    return false;
  std::vector<size_t> order(domain_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return (*refst)[a] > (*refst)[b];
  });
  int64_t expect = 1;
  bool rows = true;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (domain_[*it] == 1)
      continue;
    if (reduced_[*it]) {
      rdims_.insert(rdims_.begin(), *it);
      rows &= (*refst)[*it] == expect; // else R is not one contiguous block
      expect *= domain_[*it];
    } else {
      kdims_.insert(kdims_.begin(), *it);
    }
  }
  for (size_t d : kdims_)
    m_ *= domain_[d];
  // Column reductions: split across warps where the innermost kept dim is
  // contiguous (coalesced lanes); else one thread per kept index, worth it
  // only with enough kept indices to fill the chip or short columns; else
  // nullopt (ATen).
  split_ = 1;
  if (!rows && !kdims_.empty() && (*refst)[kdims_.back()] == 1 && m_ >= 32) {
    while (split_ < 32 && m_ * split_ < kColumnSplitThreads &&
           count_ >= split_ * 2 * kColumnMinPerThread)
      split_ *= 2;
    // Static shared memory: each reduction's partials, 32 S floats (and as
    // many int64 indices for argmax/argmin pairs); kept under 32 KiB.
    int64_t nred = 0;
    for (int id : needed_)
      if (is_reduction(terms_[id].kind))
        nred += terms_[id].index ? 3 : 1;
    while (split_ > 1 && nred * 32 * split_ * 4 > (int64_t{32} << 10))
      split_ /= 2;
  }
  // Where one thread per column would do (many kept indices, short
  // columns), the split does better; elsewhere only a split with enough
  // threads and blocks competes with ATen's reduction across blocks (a block
  // keeps about 16 KiB of loads in flight: a quarter of the SMs reads at about
  // a quarter of the chip's bandwidth; x.sum(0) of a [4096, 768] bias
  // gradient would get 24 blocks).
  const bool one_per_column = m_ >= kColumnMinRows || count_ <= kColumnMaxShort;
  const bool split_pays = split_ > 1 && m_ * split_ >= kColumnMinThreads &&
      (m_ + 31) / 32 >= kColumnMinBlocks;
  if (!rows && !one_per_column && !split_pays)
    return false;
  // A few long rows (x.sum() of a large tensor) would run on a few SMs.
  if (rows && m_ < kFewRows && count_ > kLongRow)
    return false;
  for (const Operand& o : operands_) {
    int64_t span = 0;
    for (size_t d = 0; d < domain_.size(); ++d)
      span += (domain_[d] - 1) * std::abs(o.strides[d]);
    max_index_ = std::max(max_index_, span);
  }
  max_index_ = std::max(max_index_, (m_ + 1024) * 2);
  max_index_ = std::max(max_index_, count_ + 16 * 1024);
  // Vector width: the widest that divides N and some full-level operand's
  // element size allows.
  int64_t min_es = 4;
  for (size_t k = 0; k < operands_.size(); ++k)
    if (row_contiguous(k) && !operands_[k].index_space &&
        cuda_dtype(operands_[k].dtype))
      min_es = std::min(min_es, element_size(operands_[k].dtype));
  v_ = 16 / min_es;
  while (v_ > 1 && count_ % v_ != 0)
    v_ /= 2;
  // Threads per row.
  if (!rows && split_ > 1) {
    v_ = 1;
    g_ = split_;
    rows_per_block_ = 32;
    block_ = 32 * split_;
  } else if (!rows) {
    v_ = 1;
    g_ = 1;
    rows_per_block_ = kBlock;
    block_ = kBlock;
  } else if (count_ <= 1024) {
    g_ = 1;
    while (g_ < 32 && g_ * v_ * 4 < count_)
      g_ *= 2;
    rows_per_block_ = kBlock / g_;
    block_ = kBlock;
  } else {
    g_ = 128;
    while (g_ < 1024 && (count_ + g_ - 1) / g_ > 16)
      g_ *= 2;
    rows_per_block_ = 1;
    block_ = g_;
  }
  chunks_ = (count_ + g_ * v_ - 1) / (g_ * v_);
  grid_ = std::max<int64_t>(
      1,
      std::min<int64_t>(
          (m_ + rows_per_block_ - 1) / rows_per_block_, kMaxBlocks));
  if (rows)
    plan_cache();
  // Re-read rows: softmax's max and sum in one pass over memory (online
  // normalizer, Milakov and Gimelshein 2018, "Online normalizer calculation
  // for softmax"): the running sum is rescaled by exp(old max - new max).
  if (rows && cached_.empty())
    for (const auto& [m, sx] : softmax_pairs_)
      if (needed_.count(m) && needed_.count(sx.first) &&
          !terms_[sx.second].outer && terms_[sx.second].stage == 0)
        online_[m] = sx.first;
  return true;
}

// Whether operand k's row is contiguous (offset j within the row).
bool RowKernel::row_contiguous(size_t k) const {
  int64_t expect = 1;
  for (auto it = rdims_.rbegin(); it != rdims_.rend(); ++it) {
    if (operands_[k].strides[*it] != expect)
      return false;
    expect *= domain_[*it];
  }
  return !rdims_.empty();
}
bool RowKernel::vectorized(size_t k) const {
  if (v_ == 1 || operands_[k].index_space || !row_contiguous(k) ||
      !cuda_dtype(operands_[k].dtype)) // any/all's inputs: scalar loads
    return false;
  for (size_t d : kdims_)
    if (operands_[k].strides[d] % v_ != 0)
      return false;
  return true;
}

// The full-level terms a pass needs for `roots` (stopping at outer terms).
std::set<int> RowKernel::closure(const std::vector<int>& roots) const {
  return full_closure(roots, /*stop_at_scans=*/false);
}
std::vector<int> RowKernel::pass_roots(
    int pass) const { // 1..S; S + 1: the stores
  std::vector<int> roots;
  if (pass > stages_) {
    for (const auto& [t, full] : outputs_)
      if (full)
        roots.push_back(t);
    return roots;
  }
  for (int id : needed_) {
    const Term& t = terms_[id];
    if (is_reduction(t.kind) && t.stage == pass)
      roots.push_back(t.deps[0]);
  }
  return roots;
}

// Registers: stage-0 full terms that two or more passes use, at their
// frontier (the ones read by other terms or reduced or stored).
void RowKernel::plan_cache() {
  std::map<int, int> passes_of;
  std::vector<std::set<int>> closures;
  for (int p = 1; p <= stages_ + 1; ++p) {
    closures.push_back(closure(pass_roots(p)));
    for (int id : closures.back())
      ++passes_of[id];
  }
  std::set<int> multi;
  for (const auto& [id, count] : passes_of)
    if (count >= 2 && terms_[id].stage == 0)
      multi.insert(id);
  std::set<int> frontier;
  for (size_t p = 0; p < closures.size(); ++p) {
    const std::vector<int> roots = pass_roots(static_cast<int>(p) + 1);
    for (int id : closures[p]) {
      if (multi.count(id) &&
          std::find(roots.begin(), roots.end(), id) != roots.end())
        frontier.insert(id);
      if (multi.count(id))
        continue;
      for (int d : terms_[id].deps)
        if (multi.count(d))
          frontier.insert(d);
    }
  }
  const int64_t budget = g_ == 1024 ? 24 : 48;
  if (static_cast<int64_t>(frontier.size()) * chunks_ * v_ <= budget)
    cached_ = frontier;
  else
    cached_.clear();
}

std::optional<KernelSource> render_row_reduction(const Node& group) {
  if (!group.attrs.count("domain") || !group.attrs.count("reduce_dims"))
    return std::nullopt;
  return RowKernel(group).render();
}

} // namespace torch_plugin::compiler::cuda
