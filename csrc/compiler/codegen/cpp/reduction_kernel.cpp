// reduction_kernel.cpp: the C++ code generator for reduction fusion groups (see
// reduction_kernel.h).
//
// The body's terms come from the device-neutral plan (codegen/reduction_plan.h:
// loads, fp32 expressions and the primitive reductions, each "outer" or "full"
// with a stage); softmax is exp(x - max) * (1 / sum), as ATen's vectorized CPU
// softmax. This file lays out the loops and spells them: per index of K, pass
// s accumulates the reductions of stage s, the outer terms of stage s follow,
// and a last pass stores the full-level outputs.
#include "compiler/codegen/cpp/reduction_kernel.h"

#include "compiler/codegen/cpp/cpp_emit.h"
#include "compiler/codegen/reduction_plan.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <unordered_map>

namespace torch_plugin::compiler {
namespace {

using Kind = TermKind;

std::string flit(double v) {
  return float_literal(AttrValue(v));
}

// A constant schema argument of a pointwise op: None and strings (e.g. an
// approximation's name) as 0.
std::string constant(const AttrValue& v) {
  if (std::holds_alternative<std::monostate>(v) ||
      std::holds_alternative<std::string>(v))
    return "0.0f";
  return float_literal(v);
}

std::string round_to(c10::ScalarType t, const std::string& e) {
  return t == c10::ScalarType::BFloat16
      ? "tp_load_bf16(tp_store_bf16(" + e + "))"
      : "tp_load_f16(tp_store_f16(" + e + "))";
}

// A load term's value: the element in fp32, or for any/all's nonzero loads
// 1.0f / 0.0f, tested in the element's own type.
std::string load_value(
    const Term& t,
    const Operand& o,
    const std::string& off) {
  const std::string v = load_expr(o.dtype, o.ptr, off);
  return t.nonzero ? "((" + v + ") != 0 ? 1.0f : 0.0f)" : v;
}

const ReductionDialect kCppDialect = {
    "codegen",
    flit,
    constant,
    /*softmax_by_reciprocal=*/true,
    broadcast_strides,
    round_to};

class Generator : public ReductionTerms {
 public:
  explicit Generator(const Node& group) : ReductionTerms(group, kCppDialect) {}

  std::string generate(const std::string& name) {
    if (!build_terms())
      return "";
    plan_loops();
    return emit(name);
  }

 private:
  // ---- loops -------------------------------------------------------------
  struct LoopDim {
    int64_t size;
    bool reduced;
    std::vector<int64_t> strides; // per operand
  };

  void plan_loops() {
    // Reference order: the first full-level (varying over R) load, else output
    // 0.
    std::vector<int64_t> refst = operands_[0].strides;
    for (const Term& t : terms_) {
      if (t.kind == Kind::kLoad && !t.outer) {
        refst = operands_[t.operand].strides;
        break;
      }
    }
    std::vector<size_t> order(domain_.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return refst[a] > refst[b];
    });
    for (size_t d : order) {
      if (domain_[d] == 1)
        continue;
      if (!dims_.empty() && dims_.back().reduced == reduced_[d]) {
        LoopDim& prev = dims_.back();
        bool merge = true;
        for (size_t k = 0; merge && k < operands_.size(); ++k)
          merge = prev.strides[k] == operands_[k].strides[d] * domain_[d];
        if (merge) {
          prev.size *= domain_[d];
          for (size_t k = 0; k < operands_.size(); ++k)
            prev.strides[k] = operands_[k].strides[d];
          continue;
        }
      }
      LoopDim ld{domain_[d], reduced_[d], {}};
      for (const Operand& o : operands_)
        ld.strides.push_back(o.strides[d]);
      dims_.push_back(std::move(ld));
    }
    // Case B: the innermost loop dim is kept; it becomes the vector dim.
    if (!dims_.empty() && !dims_.back().reduced) {
      vec_ = dims_.back();
      has_vec_ = true;
      dims_.pop_back();
    }
    for (const LoopDim& d : dims_)
      (d.reduced ? rdims_ : kdims_).push_back(d);
  }

  // ---- emission ----------------------------------------------------------
  std::string name_of(int id) const {
    const Term& t = terms_[id];
    if (t.outer)
      return "t" + std::to_string(id) + (has_vec_ ? "[v]" : "");
    return "t" + std::to_string(id);
  }

  std::string offset(int operand, bool in_r_loops) const {
    std::string s = "b" + std::to_string(operand);
    if (in_r_loops) {
      for (size_t d = 0; d < rdims_.size(); ++d) {
        const int64_t st = rdims_[d].strides[operand];
        if (st != 0)
          s += " + r" + std::to_string(d) + " * " + std::to_string(st);
      }
    }
    if (has_vec_ && vec_.strides[operand] != 0)
      s += " + v * " + std::to_string(vec_.strides[operand]);
    return s;
  }

  // Replaces references in `e` by their names, emitting full-level terms into
  // `os`.
  std::string render(
      const std::string& e,
      std::ostream& os,
      std::set<int>& done) {
    std::string out;
    for (size_t i = 0; i < e.size(); ++i) {
      if (e[i] != '\x01') {
        out += e[i];
        continue;
      }
      size_t j = e.find('\x02', i);
      int id = std::stoi(e.substr(i + 1, j - i - 1));
      i = j;
      if (!terms_[id].outer)
        emit_full(id, os, done);
      out += name_of(id);
    }
    return out;
  }

  // One full-level term (and the ones it needs) inside a loop over R.
  void emit_full(int id, std::ostream& os, std::set<int>& done) {
    if (done.count(id))
      return;
    done.insert(id);
    const Term& t = terms_[id];
    std::string value;
    if (t.kind == Kind::kLoad) {
      value = load_value(t, operands_[t.operand], offset(t.operand, true));
      if (t.integer)
        value = "(int64_t)(" + value + ")";
    } else if (is_scan(t.kind)) {
      // The running sum/product in double (ATen's CPU cumsum/cumprod
      // accumulate fp32 in double too), in R order (the store pass); integer
      // scans in uint64_t (int64 wrap-around, exact).
      const int x = t.deps[0];
      if (!terms_[x].outer)
        emit_full(x, os, done);
      const std::string q = "q" + std::to_string(id) + (has_vec_ ? "[v]" : "");
      os << "        " << q << (t.kind == Kind::kScanSum ? " += " : " *= ")
         << (t.integer ? "(uint64_t)" : "(double)") << name_of(x) << ";\n";
      value = (t.integer ? "(int64_t)" : "(float)") + q;
    } else {
      TORCH_CHECK(
          t.kind == Kind::kExpr,
          "codegen: reduction used as a full-level value");
      value = render(t.expr, os, done);
    }
    os << "        const " << (t.integer ? "int64_t" : "float") << " t" << id
       << " = " << value << ";\n";
  }

  // Outer terms of `stage` (those needed), in term order: after pass `stage`.
  void emit_outer(int stage, std::ostream& os) {
    std::ostringstream body;
    std::set<int> done;
    for (size_t id = 0; id < terms_.size(); ++id) {
      const Term& t = terms_[id];
      if (!t.outer || t.stage != stage || !needed_.count(static_cast<int>(id)))
        continue;
      std::string value;
      const std::string a = "a" + std::to_string(id) + (has_vec_ ? "[v]" : "");
      if (t.kind == Kind::kLoad) {
        value = load_value(t, operands_[t.operand], offset(t.operand, false));
      } else if (t.kind == Kind::kSum || t.kind == Kind::kProd) {
        value = a;
      } else if (t.kind == Kind::kMax || t.kind == Kind::kMin) {
        value = "(n" + std::to_string(id) + (has_vec_ ? "[v]" : "") +
            " ? NAN : " + a + ")";
      } else if (t.index) {
        value = "a" + std::to_string(id) + "i" + (has_vec_ ? "[v]" : "");
      } else if (t.kind == Kind::kArgValue) {
        value = "a" + std::to_string(t.deps[0]) + (has_vec_ ? "[v]" : "");
      } else {
        value = render(t.expr, body, done);
      }
      if (has_vec_)
        body << "      t" << id << "[v] = " << value << ";\n";
      else
        body << "    const " << (t.index ? "int64_t" : "float") << " t" << id
             << " = " << value << ";\n";
    }
    if (body.str().empty())
      return;
    if (!has_vec_) {
      os << body.str();
      return;
    }
    for (size_t id = 0; id < terms_.size(); ++id) {
      const Term& t = terms_[id];
      if (t.outer && t.stage == stage && needed_.count(static_cast<int>(id)))
        os << "    " << (t.index ? "int64_t" : "float") << " t" << id << "["
           << chunk_ << "];\n";
    }
    os << "    for (int64_t v = 0; v < vn; ++v) {\n" << body.str() << "    }\n";
  }

  // A loop nest over R (and the vector dim) around `inner`; `reductions` name
  // the accumulators for the simd clause (case A).
  // A loop nest over R (and the vector dim) around `inner`. Case A (reduced
  // inner dim): `clauses` are the innermost loop's simd reduction clauses,
  // `pre` and `post` run around each run of the innermost loop (partial sums,
  // added to the row's accumulators), and an innermost loop longer than kBlock
  // runs in blocks of kBlock: a two-level cascade that keeps fp32 sums of long
  // rows accurate (error ~ eps * (sqrt(kBlock) + sqrt(n / kBlock)) instead of
  // eps * sqrt(n)).
  static constexpr int64_t kBlock = 4096;
  void emit_r_loops(
      std::ostream& os,
      const std::string& inner,
      const std::string& clauses,
      const std::string& pre = "",
      const std::string& post = "",
      bool simd = true) {
    std::string indent = "    ";
    if (has_vec_ || rdims_.empty()) {
      for (const LoopDim& d : rdims_) {
        const std::string r = "r" + std::to_string(&d - rdims_.data());
        os << indent << "for (int64_t " << r << " = 0; " << r << " < " << d.size
           << "; ++" << r << ") {\n";
        indent += "  ";
      }
      os << pre;
      if (has_vec_)
        os << "#pragma omp simd\n"
           << indent << "for (int64_t v = 0; v < vn; ++v) {\n";
      else
        os << indent << "{\n";
      os << inner << indent << "}\n" << post;
      for (size_t d = rdims_.size(); d-- > 0;) {
        indent.resize(indent.size() - 2);
        os << indent << "}\n";
      }
      return;
    }
    const size_t last = rdims_.size() - 1;
    for (size_t d = 0; d < last; ++d) {
      os << indent << "for (int64_t r" << d << " = 0; r" << d << " < "
         << rdims_[d].size << "; ++r" << d << ") {\n";
      indent += "  ";
    }
    const int64_t n = rdims_[last].size;
    const std::string r = "r" + std::to_string(last);
    std::string begin = "0", end = std::to_string(n);
    if (n > kBlock) {
      os << indent << "for (int64_t blk = 0; blk < " << n
         << "; blk += " << kBlock << ") {\n";
      indent += "  ";
      begin = "blk";
      end = "std::min<int64_t>(blk + " + std::to_string(kBlock) + ", " +
          std::to_string(n) + ")";
    }
    // Without `simd`: a sequential loop in R order (scans; argmax updates,
    // which no simd reduction clause expresses).
    os << pre << (simd ? "#pragma omp simd" + clauses + "\n" : "") << indent
       << "for (int64_t " << r << " = " << begin << "; " << r << " < " << end
       << "; ++" << r << ") {\n"
       << inner << indent << "}\n"
       << post;
    if (n > kBlock) {
      indent.resize(indent.size() - 2);
      os << indent << "}\n";
    }
    for (size_t d = last; d-- > 0;) {
      indent.resize(indent.size() - 2);
      os << indent << "}\n";
    }
  }

  std::string emit(const std::string& name) {
    mark_needed();
    const int stages = stages_;
    chunk_ = has_vec_ ? std::min<int64_t>(vec_.size, 256) : 1;
    const int64_t nchunks = has_vec_ ? (vec_.size + chunk_ - 1) / chunk_ : 1;
    int64_t rows = 1;
    for (const LoopDim& d : kdims_)
      rows *= d.size;
    int64_t numel = 1;
    for (int64_t s : domain_)
      numel *= s;

    std::ostringstream src;
    src << "// reduction fusion group: " << group_.body->num_nodes()
        << " ops over domain";
    for (int64_t s : domain_)
      src << " " << s;
    src << ", reduced dims";
    for (size_t d = 0; d < domain_.size(); ++d)
      if (reduced_[d])
        src << " " << d;
    src << (has_vec_ ? " (kept inner dim vectorized)"
                     : " (reduced inner dim vectorized)")
        << "\n"
        << kernel_preamble() << "\n";
    src << "extern \"C\" void " << name << "(void** args) {\n";
    for (size_t i = 0; i < group_.outputs.size(); ++i) {
      // int64 outputs: argmax's and max.dim's indices (stored as is).
      const std::string t = group_.outputs[i]->dtype == c10::ScalarType::Long
          ? "int64_t"
          : c_type(group_.outputs[i]->dtype);
      src << "  " << t << "* __restrict out" << i << " = static_cast<" << t
          << "*>(args[" << i << "]);\n";
    }
    const size_t nout = group_.outputs.size();
    for (size_t i = 0; i < group_.inputs.size(); ++i) {
      const std::string t = c_type(group_.inputs[i]->dtype);
      src << "  const " << t << "* __restrict in" << i
          << " = static_cast<const " << t << "*>(args[" << nout + i << "]);\n";
    }
    src << "#pragma omp parallel for if(" << numel << " > 32768)\n";
    src << "  for (int64_t row = 0; row < " << rows * nchunks << "; ++row) {\n";
    src << "    int64_t rest = row;\n";
    if (has_vec_)
      src << "    const int64_t chunk = rest % " << nchunks
          << "; rest /= " << nchunks << ";\n";
    for (size_t k = 0; k < operands_.size(); ++k)
      src << "    int64_t b" << k << " = 0;\n";
    for (size_t d = kdims_.size(); d-- > 0;) {
      src << "    { const int64_t i = rest % " << kdims_[d].size
          << "; rest /= " << kdims_[d].size << ";";
      for (size_t k = 0; k < operands_.size(); ++k)
        if (kdims_[d].strides[k] != 0)
          src << " b" << k << " += i * " << kdims_[d].strides[k] << ";";
      src << " }\n";
    }
    if (has_vec_) {
      for (size_t k = 0; k < operands_.size(); ++k)
        if (vec_.strides[k] != 0)
          src << "    b" << k << " += chunk * " << chunk_ * vec_.strides[k]
              << ";\n";
      src << "    const int64_t vn = std::min<int64_t>(" << chunk_ << ", "
          << vec_.size << " - chunk * " << chunk_ << ");\n";
    }
    emit_outer(0, src);
    // A full-level fp32 output computed from the argument X of a reduction in
    // the last pass (softmax: exp(x - max) * (1 / sum)) stores X into the
    // output in that pass and reads it back in the final pass instead of
    // recomputing it.
    std::map<int, size_t> cached; // term X -> output index
    for (size_t i = 0; i < outputs_.size() && stages > 0; ++i) {
      const auto& [t, full] = outputs_[i];
      if (!full || terms_[t].outer ||
          operands_[i].dtype != c10::ScalarType::Float)
        continue;
      std::set<int> closure;
      std::vector<int> work = {t};
      while (!work.empty()) {
        int id = work.back();
        work.pop_back();
        if (terms_[id].outer || !closure.insert(id).second)
          continue;
        for (int d : terms_[id].deps)
          work.push_back(d);
      }
      for (int id : needed_) {
        const Term& r = terms_[id];
        if (!is_reduction(r.kind) || r.stage != stages)
          continue;
        const int x = r.deps[0];
        if (x != t && closure.count(x) && !cached.count(x)) {
          cached[x] = i;
          break;
        }
      }
    }
    for (int s = 1; s <= stages; ++s) {
      std::ostringstream inner, pre, post;
      std::set<int> done;
      std::string sums, prods, maxes, mins, nans;
      bool sequential = false;
      for (size_t id = 0; id < terms_.size(); ++id) {
        const Term& t = terms_[id];
        if (t.stage != s || !needed_.count(static_cast<int>(id)))
          continue;
        if (!is_reduction(t.kind))
          continue;
        const std::string a = "a" + std::to_string(id);
        const std::string av = a + (has_vec_ ? "[v]" : "");
        std::string x;
        {
          std::ostringstream pre;
          if (!terms_[t.deps[0]].outer)
            emit_full(t.deps[0], pre, done);
          inner << pre.str();
          x = terms_[t.deps[0]].outer ? name_of(t.deps[0])
                                      : "t" + std::to_string(t.deps[0]);
        }
        const std::string init = reduction_identity(t.kind, "INFINITY");
        const bool minmax = t.kind == Kind::kMax || t.kind == Kind::kMin;
        const std::string ai = a + "i", aiv = ai + (has_vec_ ? "[v]" : "");
        if (has_vec_) {
          src << "    float " << a << "[" << chunk_ << "];\n";
          if (minmax)
            src << "    int n" << id << "[" << chunk_ << "];\n";
          if (t.index)
            src << "    int64_t " << ai << "[" << chunk_ << "];\n";
          src << "    for (int64_t v = 0; v < vn; ++v) { " << a
              << "[v] = " << init << ";"
              << (minmax ? " n" + std::to_string(id) + "[v] = 0;" : "")
              << (t.index ? " " + ai + "[v] = INT64_MAX;" : "") << " }\n";
        } else {
          src << "    float " << a << " = " << init << ";\n";
          if (minmax)
            src << "    int n" << id << " = 0;\n";
          if (t.index)
            src << "    int64_t " << ai << " = INT64_MAX;\n";
        }
        if (t.kind == Kind::kSum || t.kind == Kind::kProd) {
          const char* op = t.kind == Kind::kSum ? " += " : " *= ";
          if (has_vec_) {
            inner << "        " << av << op << x << ";\n";
          } else {
            // Partial sum (product) of one run of the innermost loop (see
            // emit_r_loops).
            const std::string ps = "p" + std::to_string(id);
            inner << "        " << ps << op << x << ";\n";
            pre << "    float " << ps << " = " << init << ";\n";
            post << "    " << a << op << ps << ";\n";
            (t.kind == Kind::kSum ? sums : prods) +=
                ((t.kind == Kind::kSum ? sums : prods).empty() ? "" : ",") + ps;
          }
        } else if (minmax) {
          const bool mx = t.kind == Kind::kMax;
          const std::string nv =
              "n" + std::to_string(id) + (has_vec_ ? "[v]" : "");
          // std::min/max's comparison, not the call: GCC (12, 13)
          // miscompiles `a = std::min(a, x)` (a reference to the lane-private
          // accumulator) inside `omp simd reduction(min:a)` for AVX2 and
          // AVX-512 targets, dropping lanes' minima
          // (test_min_max_kernels_right_on_other_cpus). NaN is tracked apart.
          inner << "        " << av << " = (" << (mx ? av : x) << " < "
                << (mx ? x : av) << ") ? " << x << " : " << av << ";\n";
          inner << "        " << nv << " |= (" << x << " != " << x << ");\n";
          (mx ? maxes : mins) += ((mx ? maxes : mins).empty() ? "" : ",") + a;
          nans += (nans.empty() ? "" : ",") + ("n" + std::to_string(id));
        } else {
          // (value, index) pairs: a scalar loop in the reduced-inner layout.
          inner << "        "
                << combine_stmt(
                       t.kind, av, aiv, x, offset(index_operand_, true))
                << "\n";
          sequential = true;
        }
      }
      if (s == stages) {
        for (const auto& [x, i] : cached)
          inner << "        "
                << store_stmt(
                       c10::ScalarType::Float,
                       operands_[i].ptr,
                       offset(static_cast<int>(i), true),
                       "t" + std::to_string(x))
                << "\n";
      }
      std::string clauses;
      if (!sums.empty())
        clauses += " reduction(+:" + sums + ")";
      if (!prods.empty())
        clauses += " reduction(*:" + prods + ")";
      if (!maxes.empty())
        clauses += " reduction(max:" + maxes + ")";
      if (!mins.empty())
        clauses += " reduction(min:" + mins + ")";
      if (!nans.empty())
        clauses += " reduction(|:" + nans + ")";
      emit_r_loops(
          src, inner.str(), clauses, pre.str(), post.str(), !sequential);
      emit_outer(s, src);
    }
    // Final pass: full-level outputs.
    std::ostringstream inner, outer_stores;
    std::set<int> done;
    for (const auto& [x, i] : cached) {
      inner << "        const float t" << x << " = " << operands_[i].ptr << "["
            << offset(static_cast<int>(i), true) << "];\n";
      done.insert(x);
    }
    bool any_full = false, scans = false;
    for (int id : needed_) {
      const Term& t = terms_[id];
      if (!is_scan(t.kind))
        continue;
      scans = true;
      const std::string init = t.kind == Kind::kScanSum
          ? (t.integer ? "0" : "0.0")
          : (t.integer ? "1" : "1.0");
      const char* type = t.integer ? "uint64_t" : "double";
      if (has_vec_)
        src << "    " << type << " q" << id << "[" << chunk_
            << "];\n    for (int64_t v = 0; v < vn; ++v) q" << id
            << "[v] = " << init << ";\n";
      else
        src << "    " << type << " q" << id << " = " << init << ";\n";
    }
    for (size_t i = 0; i < outputs_.size(); ++i) {
      const auto& [t, full] = outputs_[i];
      const Operand& o = operands_[i];
      if (full) {
        any_full = true;
        std::string x = terms_[t].outer
            ? name_of(t)
            : (emit_full(t, inner, done), name_of(t));
        inner << "        "
              << store_stmt(
                     o.dtype, o.ptr, offset(static_cast<int>(i), true), x)
              << "\n";
      } else {
        outer_stores << "      "
                     << store_stmt(
                            o.dtype,
                            o.ptr,
                            offset(static_cast<int>(i), false),
                            name_of(t))
                     << "\n";
      }
    }
    if (any_full)
      emit_r_loops(src, inner.str(), "", "", "", !scans);
    if (!outer_stores.str().empty()) {
      if (has_vec_)
        src << "    for (int64_t v = 0; v < vn; ++v) {\n";
      src << outer_stores.str();
      if (has_vec_)
        src << "    }\n";
    }
    src << "  }\n}\n";
    return src.str();
  }

  std::vector<LoopDim> dims_, kdims_, rdims_;
  LoopDim vec_;
  bool has_vec_ = false;
  int64_t chunk_ = 1;
};

} // namespace

std::string generate_reduction_kernel(
    const Node& group,
    const std::string& name) {
  return Generator(group).generate(name);
}

} // namespace torch_plugin::compiler
