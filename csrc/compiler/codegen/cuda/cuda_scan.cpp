// cuda_scan.cpp: CUDA kernels for scan fusion groups (cumsum, cumprod along
// one dim, with their pointwise prologues and epilogues; see
// cuda_renderer.h for the group format).
//
// The body's terms come from the device-neutral plan (codegen/
// reduction_plan.h): loads, fp32 expressions and kScanSum/kScanProd terms,
// all at the full level. A group whose needed terms hold a reduction (a sum
// beside the scan) or a scan reading another scan gets nullopt (ATen runs
// it). Accumulation is fp32 for float32, bfloat16 and float16 (ATen's CUDA
// cumsum/cumprod accumulate in at::acc_type<T, true>, float for all three);
// integer and bool scans (int64 results, the plan's integer terms) run in
// unsigned long long: exact, wrapping as ATen's int64 arithmetic.
//
// Two layouts, by the reference operand (the first full-level load):
//   - rows (the scanned dim is contiguous there): one block of B threads
//     (B a power of two, 32..512) per row, rows grid-stride. The row is
//     walked in chunks of B * kItems elements; thread t takes the kItems
//     consecutive elements t * kItems .. of the chunk and scans them serially,
//     then the threads' totals are scanned within each warp (__shfl_up_sync,
//     Hillis-Steele), the warps' totals by warp 0 through shared memory, and
//     each element becomes carry (+) warp prefix (+) lane prefix (+) its
//     thread-local inclusive value; the chunk's total joins the carry.
//     Summation order, so results differ from ATen's (a decoupled look-back
//     scan of its own) in the last bits of fp32: serial within a thread,
//     a log-step tree across lanes and warps, serial across chunks.
//   - columns (any other dim, e.g. cumsum(x, 0) of a contiguous matrix): one
//     thread per kept index walks its column serially in order (coalesced
//     across threads when a kept dim is innermost), the CPU kernel's order.
#include "compiler/codegen/cuda/cuda_row_kernel.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <functional>
#include <set>
#include <sstream>

namespace torch_plugin::compiler::cuda {
namespace {

// Elements per thread per chunk (rows layout).
constexpr int64_t kItems = 4;
// Most threads per row block.
constexpr int64_t kMaxScanBlock = 512;

class ScanKernel : public ReductionTerms {
 public:
  explicit ScanKernel(const Node& group)
      : ReductionTerms(group, cuda_reduction_dialect()) {}

  std::optional<KernelSource> render() {
    // Float dtypes, and integer scans' bool/integer inputs and int64
    // outputs (the plan's check_terms says which values may have them).
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
    return ks;
  }

 private:
  bool plan() {
    mark_needed();
    for (const auto& [t, full] : outputs_)
      if (!full)
        return false;
    for (int id : needed_) {
      const Term& t = terms_[id];
      if (is_reduction(t.kind) || t.kind == TermKind::kArgValue)
        return false;
      if (is_scan(t.kind)) {
        scans_.push_back(id);
        for (int d : closure({t.deps[0]}))
          if (is_scan(terms_[d].kind))
            return false; // a scan of a scan
      }
    }
    if (scans_.empty())
      return false;
    size_t rd = 0;
    int reduced_count = 0;
    for (size_t d = 0; d < domain_.size(); ++d)
      if (reduced_[d]) {
        rd = d;
        ++reduced_count;
      }
    if (reduced_count != 1)
      return false;
    rdim_ = rd;
    for (size_t d = 0; d < domain_.size(); ++d)
      if (!reduced_[d])
        kdims_.push_back(d);
    for (size_t d : kdims_)
      m_ *= domain_[d];
    const std::vector<int64_t>* refst = nullptr;
    for (int id : needed_)
      if (terms_[id].kind == TermKind::kLoad && !terms_[id].outer) {
        refst = &operands_[terms_[id].operand].strides;
        break;
      }
    if (!refst)
      refst = &operands_[0].strides;
    rows_ = (*refst)[rdim_] == 1;
    if (rows_) {
      block_ = 32;
      while (block_ < kMaxScanBlock && block_ * kItems < count_)
        block_ *= 2;
      grid_ = std::max<int64_t>(1, std::min<int64_t>(m_, kMaxBlocks));
    } else {
      block_ = kBlock;
      grid_ = std::max<int64_t>(
          1, std::min<int64_t>((m_ + kBlock - 1) / kBlock, kMaxBlocks));
    }
    return true;
  }

  // The full-level terms `roots` need (stopping at outer terms and at scans,
  // whose values the kernel holds).
  std::set<int> closure(const std::vector<int>& roots) const {
    return full_closure(roots, /*stop_at_scans=*/true);
  }

  std::string render_expr(const std::string& e) const {
    return spell_refs(e);
  }

  std::string load_value(const Term& t, const std::string& off) const {
    const std::string v = load_term(t, operands_[t.operand], off);
    return t.integer ? "(unsigned long long)(long long)(" + v + ")" : v;
  }
  // The type of term `id`'s value: integer scans run in unsigned long long
  // (int64 wrap-around; stored as long long).
  const char* type_of(int id) const {
    return terms_[id].integer ? "unsigned long long" : "float";
  }

  // Element j's offset in operand k (its row base b<k> added).
  std::string offset(size_t k, const std::string& j) const {
    const int64_t st = operands_[k].strides[rdim_];
    return "b" + std::to_string(k) +
        (st == 0 ? "" : " + " + j + " * " + std::to_string(st) + "LL");
  }

  // Full-level term `id` (after its dependencies) for element `j`; scan
  // terms read `scan_value(id)`.
  void emit_full(
      int id,
      std::ostream& os,
      std::set<int>& done,
      const std::string& ind,
      const std::string& j,
      const std::function<std::string(int)>& scan_value) const {
    if (done.count(id) || terms_[id].outer)
      return;
    done.insert(id);
    const Term& t = terms_[id];
    std::string value;
    if (t.kind == TermKind::kLoad) {
      value = load_value(t, offset(static_cast<size_t>(t.operand), j));
    } else if (is_scan(t.kind)) {
      value = scan_value(id);
    } else {
      TORCH_CHECK(t.kind == TermKind::kExpr, "cuda scan: unexpected term");
      for (int d : t.deps)
        emit_full(d, os, done, ind, j, scan_value);
      value = render_expr(t.expr);
    }
    os << ind << "const " << type_of(id) << " t" << id << " = " << value
       << ";\n";
  }

  // Per-row outer terms (loads broadcast along the scanned dim, constants).
  void emit_outer(std::ostream& os, const std::string& ind) const {
    for (int id : needed_) {
      const Term& t = terms_[id];
      if (!t.outer)
        continue;
      const std::string v = t.kind == TermKind::kLoad
          ? load_value(t, "b" + std::to_string(t.operand))
          : render_expr(t.expr);
      os << ind << "const float t" << id << " = " << v << ";\n";
    }
  }

  // The argument of every scan for element j into x<s>[i], then (stores) the
  // outputs from the scanned values.
  void emit_arguments(
      std::ostream& os,
      const std::string& ind,
      const std::string& j,
      const std::string& slot) const {
    std::set<int> done;
    for (int s : scans_) {
      emit_full(terms_[s].deps[0], os, done, ind, j, nullptr);
      os << ind << "x" << s << slot << " = t" << terms_[s].deps[0] << ";\n";
    }
  }
  void emit_stores(
      std::ostream& os,
      const std::string& ind,
      const std::string& j,
      const std::string& slot) const {
    std::set<int> done;
    auto scanned = [&](int s) {
      return "x" + std::to_string(s) + slot;
    };
    for (size_t i = 0; i < outputs_.size(); ++i) {
      emit_full(outputs_[i].first, os, done, ind, j, scanned);
      const Operand& o = operands_[i];
      os << ind
         << store(
                o.dtype,
                o.ptr,
                offset(i, j),
                "t" + std::to_string(outputs_[i].first))
         << "\n";
    }
  }

  std::string op(int s, const std::string& a, const std::string& b) const {
    return "(" + a + (terms_[s].kind == TermKind::kScanSum ? " + " : " * ") +
        b + ")";
  }
  std::string identity(int s) const {
    if (terms_[s].integer)
      return terms_[s].kind == TermKind::kScanSum ? "0ULL" : "1ULL";
    return terms_[s].kind == TermKind::kScanSum ? "0.0f" : "1.0f";
  }

  std::string emit() const {
    std::ostringstream src;
    src << "// scan fusion group: " << group_.body->num_nodes()
        << " ops over domain";
    for (int64_t s : domain_)
      src << " " << s;
    src << ", scanned dim " << rdim_ << "; " << m_ << " "
        << (rows_ ? "rows" : "columns") << " of " << count_ << ", "
        << (rows_ ? "one block per row" : "one thread per column") << "\n"
        << preamble();
    src << "extern \"C\" __global__ void __launch_bounds__(" << block_
        << ") kernel(";
    for (size_t i = 0; i < group_.outputs.size(); ++i)
      src << (i ? ", " : "") << element_type(group_.outputs[i]->dtype)
          << "* __restrict__ out" << i;
    for (size_t i = 0; i < group_.inputs.size(); ++i)
      src << ", const " << element_type(group_.inputs[i]->dtype)
          << "* __restrict__ in" << i;
    src << ") {\n";
    std::vector<int64_t> ksizes;
    for (size_t d : kdims_)
      ksizes.push_back(domain_[d]);
    auto bases = [&](const std::string& row, const std::string& ind) {
      for (size_t k = 0; k < operands_.size(); ++k) {
        std::vector<int64_t> kst;
        for (size_t d : kdims_)
          kst.push_back(operands_[k].strides[d]);
        src << ind << "const long long b" << k << " = "
            << offset_expr(ksizes, kst, row, "long long") << ";\n";
      }
    };
    if (!rows_) {
      src << "  for (long long row = (long long)blockIdx.x * blockDim.x + "
             "threadIdx.x; row < "
          << m_ << "LL; row += (long long)gridDim.x * blockDim.x) {\n";
      bases("row", "    ");
      emit_outer(src, "    ");
      for (int s : scans_)
        src << "    " << type_of(s) << " cy" << s << " = " << identity(s)
            << ";\n";
      src << "    for (long long j = 0; j < " << count_ << "LL; ++j) {\n";
      for (int s : scans_)
        src << "      " << type_of(s) << " x" << s << ";\n";
      src << "      {\n";
      emit_arguments(src, "        ", "j", "");
      src << "      }\n";
      for (int s : scans_)
        src << "      cy" << s << " = "
            << op(s, "cy" + std::to_string(s), "x" + std::to_string(s))
            << ";\n      x" << s << " = cy" << s << ";\n";
      emit_stores(src, "      ", "j", "");
      src << "    }\n  }\n}\n";
      return src.str();
    }
    const int64_t warps = block_ / 32;
    src << "  __shared__ unsigned long long tp_scan_mem[" << scans_.size()
        << "][32];\n"
        << "  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;\n"
        << "  for (long long row = blockIdx.x; row < " << m_
        << "LL; row += gridDim.x) {\n";
    bases("row", "    ");
    emit_outer(src, "    ");
    for (int s : scans_)
      src << "    " << type_of(s) << " cy" << s << " = " << identity(s)
          << ";\n";
    src << "    for (long long c0 = 0; c0 < " << count_
        << "LL; c0 += " << block_ * kItems << ") {\n"
        << "      const long long j0 = c0 + (long long)tid * " << kItems
        << ";\n";
    for (int s : scans_)
      src << "      " << type_of(s) << " x" << s << "[" << kItems << "];\n";
    src << "#pragma unroll\n      for (int i = 0; i < " << kItems
        << "; ++i) {\n        const long long j = j0 + i;\n"
        << "        if (j < " << count_ << "LL) {\n";
    emit_arguments(src, "          ", "j", "[i]");
    src << "        } else {\n";
    for (int s : scans_)
      src << "          x" << s << "[i] = " << identity(s) << ";\n";
    src << "        }\n      }\n";
    for (size_t si = 0; si < scans_.size(); ++si) {
      const int s = scans_[si];
      const std::string x = "x" + std::to_string(s);
      const std::string ss = std::to_string(s);
      const std::string T = type_of(s);
      // Thread-local inclusive scan, then the warp's scan of the totals
      // (shared memory: 8 bytes a slot, read as this scan's type).
      src << "      {\n        " << T << "* tp_scan = (" << T
          << "*)tp_scan_mem[" << si << "];\n"
          << "#pragma unroll\n        for (int i = 1; i < " << kItems
          << "; ++i) " << x << "[i] = " << op(s, x + "[i - 1]", x + "[i]")
          << ";\n        " << T << " w = " << x << "[" << kItems - 1 << "];\n"
          << "#pragma unroll\n        for (int o = 1; o < 32; o <<= 1) {\n"
          << "          const " << T
          << " y = __shfl_up_sync(0xffffffffu, w, o);\n"
          << "          if (lane >= o) w = " << op(s, "y", "w") << ";\n"
          << "        }\n"
          << "        " << T << " lp = __shfl_up_sync(0xffffffffu, w, 1);\n"
          << "        if (lane == 0) lp = " << identity(s) << ";\n"
          << "        if (lane == 31) tp_scan[warp] = w;\n"
          << "        __syncthreads();\n"
          << "        if (warp == 0) {\n"
          << "          " << T << " v = lane < " << warps
          << " ? tp_scan[lane] : " << identity(s) << ";\n"
          << "#pragma unroll\n          for (int o = 1; o < 32; o <<= 1) {\n"
          << "            const " << T
          << " y = __shfl_up_sync(0xffffffffu, v, o);\n"
          << "            if (lane >= o) v = " << op(s, "y", "v") << ";\n"
          << "          }\n"
          << "          tp_scan[lane] = v;\n"
          << "        }\n"
          << "        __syncthreads();\n"
          << "        const " << T
          << " wp = warp > 0 ? tp_scan[warp - 1] : " << identity(s) << ";\n"
          << "        const " << T
          << " pre = " << op(s, "cy" + ss, op(s, "wp", "lp")) << ";\n"
          << "#pragma unroll\n        for (int i = 0; i < " << kItems
          << "; ++i) " << x << "[i] = " << op(s, "pre", x + "[i]") << ";\n"
          << "        cy" << ss << " = "
          << op(s, "cy" + ss, "tp_scan[" + std::to_string(warps - 1) + "]")
          << ";\n"
          << "        __syncthreads(); // tp_scan is reused next chunk\n"
          << "      }\n";
    }
    src << "#pragma unroll\n      for (int i = 0; i < " << kItems
        << "; ++i) {\n        const long long j = j0 + i;\n"
        << "        if (j < " << count_ << "LL) {\n";
    emit_stores(src, "          ", "j", "[i]");
    src << "        }\n      }\n    }\n  }\n}\n";
    return src.str();
  }

  std::vector<int> scans_;
  size_t rdim_ = 0;
  std::vector<size_t> kdims_;
  int64_t m_ = 1;
  bool rows_ = true;
  int64_t block_ = kBlock, grid_ = 1;
};

} // namespace

std::optional<KernelSource> render_scan(const Node& group) {
  return ScanKernel(group).render();
}

} // namespace torch_plugin::compiler::cuda
