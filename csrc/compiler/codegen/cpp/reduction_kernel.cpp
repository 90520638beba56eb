// reduction_kernel.cpp: the C++ code generator for reduction fusion groups (see
// reduction_kernel.h).
//
// The body is first expanded into terms: loads, fp32 expressions, and two
// primitive reductions over R (kSum, kMax). Each term is "outer" (one value per
// index of the kept dims K) or "full" (one per element of the domain F), and
// has a stage: the number of passes over R that must run before it is known.
// mean = sum / N; var and layer_norm = sum of squared deviations from the mean
// (stage 2); softmax = exp(x - max) / sum(exp(x - max)) (Sum at stage 2 over a
// Max at stage 1). Then the loops are emitted: per index of K, pass s
// accumulates the reductions of stage s, the outer terms of stage s follow, and
// a last pass stores the full-level outputs.
#include "compiler/codegen/cpp/reduction_kernel.h"

#include "compiler/codegen/cpp/cpp_emit.h"
#include "compiler/codegen/op_semantics.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <unordered_map>

namespace torch_plugin::compiler {
namespace {

enum class Kind { kLoad, kExpr, kSum, kMax };

struct Term {
  Kind kind;
  bool outer = false;
  int stage = 0;
  int operand = -1; // kLoad
  std::string expr; // kExpr: C++ with references "\x01<id>\x02"
  std::vector<int> deps; // kExpr: referenced terms; kSum/kMax: the reduced term
};

struct Operand {
  std::string ptr;
  c10::ScalarType dtype;
  std::vector<int64_t> strides; // over the domain F (0 where broadcast)
};

std::string ref(int id) {
  return "\x01" + std::to_string(id) + "\x02";
}

std::string flit(double v) {
  return float_literal(AttrValue(v));
}

class Generator {
 public:
  explicit Generator(const Node& group) : group_(group) {
    domain_ = std::get<std::vector<int64_t>>(group.attrs.at("domain"));
    const auto& rd =
        std::get<std::vector<int64_t>>(group.attrs.at("reduce_dims"));
    reduced_.assign(domain_.size(), false);
    for (int64_t d : rd)
      reduced_.at(d) = true;
    for (size_t d = 0; d < domain_.size(); ++d) {
      if (reduced_[d])
        count_ *= domain_[d];
      else
        kept_sizes_.push_back(domain_[d]);
    }
  }

  std::string generate(const std::string& name) {
    build_terms();
    plan_loops();
    return emit(name);
  }

 private:
  // ---- terms -------------------------------------------------------------
  int add(Term t) {
    if (t.kind == Kind::kLoad) {
      const auto& st = operands_[t.operand].strides;
      t.outer = true;
      for (size_t d = 0; d < st.size(); ++d)
        t.outer &= !(reduced_[d] && st[d] != 0 && domain_[d] > 1);
    } else if (t.kind == Kind::kExpr) {
      t.outer = true;
      for (int d : t.deps) {
        t.outer &= terms_[d].outer;
        t.stage = std::max(t.stage, terms_[d].stage);
      }
    } else {
      t.outer = true;
      t.stage = terms_[t.deps[0]].stage + 1;
    }
    terms_.push_back(std::move(t));
    return static_cast<int>(terms_.size()) - 1;
  }
  int expr(const std::string& e, std::vector<int> deps) {
    Term t{Kind::kExpr};
    t.expr = e;
    t.deps = std::move(deps);
    return add(std::move(t));
  }
  int reduce(Kind k, int arg) {
    Term t{k};
    t.deps = {arg};
    return add(std::move(t));
  }

  // F-space strides of a value of `sizes`/`strides` used at `level`.
  std::vector<int64_t> map_strides(
      const std::vector<int64_t>& sizes,
      const std::vector<int64_t>& strides,
      const std::string& level,
      const std::vector<int64_t>& level_sizes) {
    if (level == "full")
      return broadcast_strides(sizes, strides, domain_);
    std::vector<int64_t> st = broadcast_strides(sizes, strides, level_sizes);
    if (level == "outer_keep") {
      for (size_t d = 0; d < st.size(); ++d)
        if (reduced_[d])
          st[d] = 0;
      return st;
    }
    std::vector<int64_t> out(domain_.size(), 0);
    size_t k = 0;
    for (size_t d = 0; d < domain_.size(); ++d)
      if (!reduced_[d])
        out[d] = st.at(k++);
    return out;
  }

  // The term of body value `v` used by a node at `level` whose output sizes are
  // `level_sizes`.
  int operand_term(
      const Value* v,
      const std::string& level,
      const std::vector<int64_t>& level_sizes) {
    if (auto it = term_of_.find(v); it != term_of_.end())
      return it->second;
    const auto& ins = group_.body->inputs();
    const size_t i = std::find(ins.begin(), ins.end(), v) - ins.begin();
    TORCH_CHECK(
        i < ins.size(), "codegen: value %", v->id, " is not in the group");
    const Value* outer_v = group_.inputs[i];
    std::vector<int64_t> st =
        map_strides(outer_v->sizes, outer_v->strides, level, level_sizes);
    auto key = std::make_pair(i, st);
    if (auto it = loads_.find(key); it != loads_.end())
      return it->second;
    operands_.push_back({"in" + std::to_string(i), outer_v->dtype, st});
    Term t{Kind::kLoad};
    t.operand = static_cast<int>(operands_.size()) - 1;
    return loads_[key] = add(std::move(t));
  }

  void build_terms() {
    const Graph& body = *group_.body;
    // Outputs are the first operands (pointers out0, out1, ...); their strides
    // are set once their levels are known.
    operands_.resize(group_.outputs.size());
    const std::string n_lit = flit(static_cast<double>(count_));
    for (const auto& owned : body.node_list()) {
      const Node& n = *owned;
      const std::string level = n.str_attr("level", "full");
      const std::vector<int64_t>& out_sizes = n.outputs[0]->sizes;
      auto in = [&](size_t arg) {
        return operand_term(
            n.inputs.at(n.args.at(arg).inputs.at(0)), "full", domain_);
      };
      auto keep = [&](size_t arg) {
        return std::get<bool>(n.const_arg(arg));
      };
      const std::string op = n.op;
      if (op == "aten::sum" || op == "aten::mean") {
        int s = reduce(Kind::kSum, in(0));
        set(n,
            0,
            op == "aten::sum" ? s
                              : expr("(" + ref(s) + " / " + n_lit + ")", {s}),
            keep(2) ? "outer_keep" : "outer");
      } else if (op == "aten::amax") {
        set(n, 0, reduce(Kind::kMax, in(0)), keep(2) ? "outer_keep" : "outer");
      } else if (op == "aten::var") {
        const AttrValue& c = n.const_arg(2);
        double correction = 1.0;
        if (auto* i = std::get_if<int64_t>(&c))
          correction = static_cast<double>(*i);
        else if (auto* d = std::get_if<double>(&c))
          correction = *d;
        const int x = in(0);
        const int s1 = reduce(Kind::kSum, x);
        const int mean = expr("(" + ref(s1) + " / " + n_lit + ")", {s1});
        const int dev = expr("(" + ref(x) + " - " + ref(mean) + ")", {x, mean});
        const int sq = expr("(" + ref(dev) + " * " + ref(dev) + ")", {dev});
        const int q = reduce(Kind::kSum, sq);
        const double denom =
            std::max(0.0, static_cast<double>(count_) - correction);
        set(n,
            0,
            expr("(" + ref(q) + " / " + flit(denom) + ")", {q}),
            keep(3) ? "outer_keep" : "outer");
      } else if (op == "aten::_softmax" || op == "aten::_log_softmax") {
        const int x = in(0);
        const int m = reduce(Kind::kMax, x);
        const int d = expr("(" + ref(x) + " - " + ref(m) + ")", {x, m});
        const int e = expr("tp_exp(" + ref(d) + ")", {d});
        const int s = reduce(Kind::kSum, e);
        if (op == "aten::_softmax") {
          // exp(x - max) * (1 / sum), as ATen's vectorized CPU softmax.
          const int inv = expr("(1.0f / " + ref(s) + ")", {s});
          set(n,
              0,
              expr("(" + ref(e) + " * " + ref(inv) + ")", {e, inv}),
              "full");
        } else {
          const int ls = expr("std::log(" + ref(s) + ")", {s});
          set(n,
              0,
              expr("(" + ref(d) + " - " + ref(ls) + ")", {d, ls}),
              "full");
        }
      } else if (op == "aten::native_layer_norm") {
        const int x = in(0);
        const int s = reduce(Kind::kSum, x);
        const int mean = expr("(" + ref(s) + " / " + n_lit + ")", {s});
        const int dev = expr("(" + ref(x) + " - " + ref(mean) + ")", {x, mean});
        const int sq = expr("(" + ref(dev) + " * " + ref(dev) + ")", {dev});
        const int q = reduce(Kind::kSum, sq);
        const double eps = std::get<double>(n.const_arg(4));
        const int rstd = expr(
            "(1.0f / std::sqrt(" + ref(q) + " / " + n_lit + " + " + flit(eps) +
                "))",
            {q});
        int y = expr("(" + ref(dev) + " * " + ref(rstd) + ")", {dev, rstd});
        if (n.tensor_arg(2)) {
          const int w = in(2);
          y = expr("(" + ref(y) + " * " + ref(w) + ")", {y, w});
        }
        if (n.tensor_arg(3)) {
          const int b = in(3);
          y = expr("(" + ref(y) + " + " + ref(b) + ")", {y, b});
        }
        set(n, 0, y, "full");
        set(n, 1, mean, "outer_keep");
        set(n, 2, rstd, "outer_keep");
      } else {
        std::vector<std::string> operands;
        std::vector<int> deps;
        for (const Arg& a : n.args) {
          if (a.kind == Arg::Kind::kTensor) {
            const int t =
                operand_term(n.inputs.at(a.inputs[0]), level, out_sizes);
            deps.push_back(t);
            operands.push_back(ref(t));
          } else if (
              std::holds_alternative<std::monostate>(a.value) ||
              std::holds_alternative<std::string>(a.value)) {
            operands.push_back("0.0f");
          } else {
            operands.push_back(float_literal(a.value));
          }
        }
        auto e = pointwise_expression(n, operands);
        TORCH_CHECK(
            e.has_value(), "codegen: no expression for ", n.qualified_name());
        set(n, 0, expr(*e, deps), level);
      }
    }
    for (size_t i = 0; i < group_.outputs.size(); ++i) {
      const Value* bv = body.outputs()[i];
      const Value* o = group_.outputs[i];
      const std::string& level = level_of_.at(bv);
      operands_[i] = {
          "out" + std::to_string(i),
          o->dtype,
          map_strides(o->sizes, o->strides, level, o->sizes)};
      outputs_.push_back({term_of_.at(bv), level == "full"});
    }
  }

  void set(const Node& n, size_t i, int term, const std::string& level) {
    term_of_[n.outputs.at(i)] = term;
    level_of_[n.outputs.at(i)] = level;
  }

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
      const Operand& o = operands_[t.operand];
      value = load_expr(o.dtype, o.ptr, offset(t.operand, true));
    } else {
      TORCH_CHECK(
          t.kind == Kind::kExpr,
          "codegen: reduction used as a full-level value");
      value = render(t.expr, os, done);
    }
    os << "        const float t" << id << " = " << value << ";\n";
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
        const Operand& o = operands_[t.operand];
        value = load_expr(o.dtype, o.ptr, offset(t.operand, false));
      } else if (t.kind == Kind::kSum) {
        value = a;
      } else if (t.kind == Kind::kMax) {
        value = "(n" + std::to_string(id) + (has_vec_ ? "[v]" : "") +
            " ? NAN : " + a + ")";
      } else {
        value = render(t.expr, body, done);
      }
      if (has_vec_)
        body << "      t" << id << "[v] = " << value << ";\n";
      else
        body << "    const float t" << id << " = " << value << ";\n";
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
        os << "    float t" << id << "[" << chunk_ << "];\n";
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
      const std::string& post = "") {
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
    os << pre << "#pragma omp simd" << clauses << "\n"
       << indent << "for (int64_t " << r << " = " << begin << "; " << r << " < "
       << end << "; ++" << r << ") {\n"
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

  void mark_needed(int id) {
    if (!needed_.insert(id).second)
      return;
    for (int d : terms_[id].deps)
      mark_needed(d);
  }

  std::string emit(const std::string& name) {
    for (const auto& [t, full] : outputs_)
      mark_needed(t);
    int stages = 0;
    for (int id : needed_)
      stages = std::max(stages, terms_[id].stage);
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
      const std::string t = c_type(group_.outputs[i]->dtype);
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
        if ((r.kind != Kind::kSum && r.kind != Kind::kMax) || r.stage != stages)
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
      std::string sums, maxes, nans;
      for (size_t id = 0; id < terms_.size(); ++id) {
        const Term& t = terms_[id];
        if (t.stage != s || !needed_.count(static_cast<int>(id)))
          continue;
        if (t.kind != Kind::kSum && t.kind != Kind::kMax)
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
        const std::string init = t.kind == Kind::kSum ? "0.0f" : "-INFINITY";
        if (has_vec_) {
          src << "    float " << a << "[" << chunk_ << "];\n";
          if (t.kind == Kind::kMax)
            src << "    int n" << id << "[" << chunk_ << "];\n";
          src << "    for (int64_t v = 0; v < vn; ++v) { " << a
              << "[v] = " << init << ";"
              << (t.kind == Kind::kMax ? " n" + std::to_string(id) + "[v] = 0;"
                                       : "")
              << " }\n";
        } else {
          src << "    float " << a << " = " << init << ";\n";
          if (t.kind == Kind::kMax)
            src << "    int n" << id << " = 0;\n";
        }
        if (t.kind == Kind::kSum) {
          if (has_vec_) {
            inner << "        " << av << " += " << x << ";\n";
          } else {
            // Partial sum of one run of the innermost loop (see emit_r_loops).
            const std::string ps = "p" + std::to_string(id);
            inner << "        " << ps << " += " << x << ";\n";
            pre << "    float " << ps << " = 0.0f;\n";
            post << "    " << a << " += " << ps << ";\n";
            sums += (sums.empty() ? "" : ",") + ps;
          }
        } else {
          const std::string nv =
              "n" + std::to_string(id) + (has_vec_ ? "[v]" : "");
          inner << "        " << av << " = std::max(" << av << ", " << x
                << ");\n";
          inner << "        " << nv << " |= (" << x << " != " << x << ");\n";
          maxes += (maxes.empty() ? "" : ",") + a;
          nans += (nans.empty() ? "" : ",") + ("n" + std::to_string(id));
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
      if (!maxes.empty())
        clauses += " reduction(max:" + maxes + ") reduction(|:" + nans + ")";
      emit_r_loops(src, inner.str(), clauses, pre.str(), post.str());
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
    bool any_full = false;
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
      emit_r_loops(src, inner.str(), "");
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

  const Node& group_;
  std::vector<int64_t> domain_;
  std::vector<bool> reduced_;
  std::vector<int64_t> kept_sizes_;
  int64_t count_ = 1; // elements reduced per output
  std::vector<Term> terms_;
  std::vector<Operand> operands_;
  std::map<std::pair<size_t, std::vector<int64_t>>, int> loads_;
  std::unordered_map<const Value*, int> term_of_;
  std::unordered_map<const Value*, std::string> level_of_;
  std::vector<std::pair<int, bool>> outputs_; // term, full-level
  std::set<int> needed_;
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
