// reduction_plan.cpp: a reduction group's body as terms (see
// reduction_plan.h); each reduction op expands as its row of the op table
// (ir/op_table.h, ReductionKind) says.
#include "compiler/codegen/reduction_plan.h"

#include "compiler/codegen/op_semantics.h"
#include "ir/op_schema.h"
#include "ir/op_table.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace torch_plugin::compiler {

bool is_reduction(TermKind k) {
  switch (k) {
    case TermKind::kSum:
    case TermKind::kMax:
    case TermKind::kMin:
    case TermKind::kProd:
    case TermKind::kArgMax:
    case TermKind::kArgMin:
      return true;
    default:
      return false;
  }
}

bool is_scan(TermKind k) {
  return k == TermKind::kScanSum || k == TermKind::kScanProd;
}

std::string reduction_identity(TermKind k, const std::string& inf) {
  switch (k) {
    case TermKind::kSum:
    case TermKind::kScanSum:
      return "0.0f";
    case TermKind::kProd:
    case TermKind::kScanProd:
      return "1.0f";
    case TermKind::kMax:
    case TermKind::kArgMax:
      return "(-" + inf + ")";
    case TermKind::kMin:
    case TermKind::kArgMin:
      return "(" + inf + ")";
    default:
      TORCH_CHECK(false, "reduction_identity: not a reduction");
  }
}

std::string combine_stmt(
    TermKind k,
    const std::string& a,
    const std::string& ai,
    const std::string& x,
    const std::string& j) {
  switch (k) {
    case TermKind::kMin:
      return a + " = (" + x + " < " + a + " || " + x + " != " + x + ") ? " + x +
          " : " + a + ";";
    case TermKind::kProd:
      return a + " *= " + x + ";";
    case TermKind::kArgMax:
    case TermKind::kArgMin: {
      const char* cmp = k == TermKind::kArgMax ? " > " : " < ";
      return "if ((" + x + " != " + x + ") ? (" + a + " == " + a + " || " + j +
          " < " + ai + ") : (" + a + " == " + a + " && (" + x + cmp + a +
          " || (" + x + " == " + a + " && " + j + " < " + ai + ")))) { " + a +
          " = " + x + "; " + ai + " = " + j + "; }";
    }
    default:
      TORCH_CHECK(false, "combine_stmt: no statement for this term kind");
  }
}

ReductionTerms::ReductionTerms(
    const Node& group,
    const ReductionDialect& dialect)
    : group_(group), dialect_(dialect) {
  domain_ = std::get<std::vector<int64_t>>(group.attrs.at("domain"));
  const auto& rd =
      std::get<std::vector<int64_t>>(group.attrs.at("reduce_dims"));
  reduced_.assign(domain_.size(), false);
  for (int64_t d : rd)
    reduced_.at(d) = true;
  for (size_t d = 0; d < domain_.size(); ++d)
    if (reduced_[d])
      count_ *= domain_[d];
}

std::string ReductionTerms::ref(int id) {
  return "\x01" + std::to_string(id) + "\x02";
}

int ReductionTerms::add(Term t) {
  if (t.kind == TermKind::kLoad) {
    const auto& st = operands_[t.operand].strides;
    t.outer = true;
    for (size_t d = 0; d < st.size(); ++d)
      t.outer &= !(reduced_[d] && st[d] != 0 && domain_[d] > 1);
  } else if (t.kind == TermKind::kExpr) {
    t.outer = true;
    for (int d : t.deps) {
      t.outer &= terms_[d].outer;
      t.stage = std::max(t.stage, terms_[d].stage);
    }
  } else if (t.kind == TermKind::kArgValue) {
    t.outer = true;
    t.stage = terms_[t.deps[0]].stage;
  } else if (is_scan(t.kind)) {
    t.outer = false;
    t.stage = terms_[t.deps[0]].stage;
  } else {
    t.outer = true;
    t.stage = terms_[t.deps[0]].stage + 1;
    t.index = t.kind == TermKind::kArgMax || t.kind == TermKind::kArgMin;
  }
  terms_.push_back(std::move(t));
  return static_cast<int>(terms_.size()) - 1;
}

int ReductionTerms::expr(const std::string& e, std::vector<int> deps) {
  Term t{TermKind::kExpr};
  t.expr = e;
  t.deps = std::move(deps);
  return add(std::move(t));
}

int ReductionTerms::reduce(TermKind k, int arg) {
  Term t{k};
  t.deps = {arg};
  return add(std::move(t));
}

int ReductionTerms::index_operand() {
  if (index_operand_ >= 0)
    return index_operand_;
  std::vector<int64_t> st(domain_.size(), 0);
  int64_t stride = 1;
  for (size_t d = domain_.size(); d-- > 0;) {
    if (!reduced_[d])
      continue;
    st[d] = domain_[d] == 1 ? 0 : stride;
    stride *= domain_[d];
  }
  operands_.push_back({"idx", c10::ScalarType::Long, st, true});
  return index_operand_ = static_cast<int>(operands_.size()) - 1;
}

int ReductionTerms::nonzero_term(const Value* v) {
  if (auto it = term_of_.find(v); it != term_of_.end()) {
    std::string e = ref(it->second);
    if (v->dtype == c10::ScalarType::BFloat16 ||
        v->dtype == c10::ScalarType::Half)
      e = dialect_.round_to(v->dtype, e);
    return expr("((" + e + ") != 0.0f ? 1.0f : 0.0f)", {it->second});
  }
  const auto key = input_key(v, "full", domain_);
  if (auto it = nonzero_loads_.find(key); it != nonzero_loads_.end())
    return it->second;
  const auto& [i, st] = key;
  operands_.push_back({"in" + std::to_string(i), group_.inputs[i]->dtype, st});
  Term t{TermKind::kLoad};
  t.operand = static_cast<int>(operands_.size()) - 1;
  t.nonzero = true;
  return nonzero_loads_[key] = add(std::move(t));
}

bool ReductionTerms::check_terms() const {
  auto fp32_computed = [](c10::ScalarType t) {
    return t == c10::ScalarType::Float || t == c10::ScalarType::BFloat16 ||
        t == c10::ScalarType::Half;
  };
  for (const Term& t : terms_)
    for (int d : t.deps)
      if (terms_[d].integer && !(t.integer && is_scan(t.kind)))
        return false; // an int64 value read by anything but an integer scan
  for (const Term& t : terms_)
    if (t.kind == TermKind::kLoad && !t.nonzero && !t.integer &&
        !operands_[t.operand].index_space &&
        !fp32_computed(operands_[t.operand].dtype))
      return false; // e.g. an int64 input read as an fp32 value
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const c10::ScalarType d = group_.outputs[i]->dtype;
    if (d != c10::ScalarType::Long && !fp32_computed(d) &&
        !terms_[outputs_[i].first].boolean)
      return false; // only any/all make bool (uint8) values
  }
  for (const Term& t : terms_)
    for (int d : t.deps)
      if (terms_[d].index && t.kind != TermKind::kArgValue)
        return false; // an int64 index read as an fp32 value
  // No reduction reads a scan (scans are computed in the store pass only).
  for (const Term& t : terms_) {
    if (!is_reduction(t.kind))
      continue;
    std::vector<int> work = {t.deps[0]};
    std::set<int> seen;
    while (!work.empty()) {
      const int id = work.back();
      work.pop_back();
      if (terms_[id].outer || !seen.insert(id).second)
        continue;
      if (is_scan(terms_[id].kind))
        return false;
      for (int d : terms_[id].deps)
        work.push_back(d);
    }
  }
  for (size_t i = 0; i < outputs_.size(); ++i)
    if ((terms_[outputs_[i].first].index ||
         terms_[outputs_[i].first].integer) !=
        (group_.outputs[i]->dtype == c10::ScalarType::Long))
      return false;
  return true;
}

std::vector<int64_t> ReductionTerms::map_strides(
    const std::vector<int64_t>& sizes,
    const std::vector<int64_t>& strides,
    const std::string& level,
    const std::vector<int64_t>& level_sizes) const {
  if (level == "full")
    return dialect_.broadcast_strides(sizes, strides, domain_);
  std::vector<int64_t> st =
      dialect_.broadcast_strides(sizes, strides, level_sizes);
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

std::pair<size_t, std::vector<int64_t>> ReductionTerms::input_key(
    const Value* v,
    const std::string& level,
    const std::vector<int64_t>& level_sizes) const {
  const auto& ins = group_.body->inputs();
  const size_t i = std::find(ins.begin(), ins.end(), v) - ins.begin();
  TORCH_CHECK(
      i < ins.size(),
      dialect_.name,
      ": value %",
      v->id,
      " is not in the group");
  const Value* outer_v = group_.inputs[i];
  return {i, map_strides(outer_v->sizes, outer_v->strides, level, level_sizes)};
}

std::string ReductionTerms::spell_refs(const std::string& e) {
  std::string out;
  for (size_t i = 0; i < e.size(); ++i) {
    if (e[i] != '\x01') {
      out += e[i];
      continue;
    }
    const size_t j = e.find('\x02', i);
    out += "t" + e.substr(i + 1, j - i - 1);
    i = j;
  }
  return out;
}

std::set<int> ReductionTerms::full_closure(
    const std::vector<int>& roots,
    bool stop_at_scans) const {
  std::set<int> out;
  std::vector<int> work = roots;
  while (!work.empty()) {
    const int id = work.back();
    work.pop_back();
    if (terms_[id].outer || !out.insert(id).second)
      continue;
    if (stop_at_scans && is_scan(terms_[id].kind))
      continue;
    for (int d : terms_[id].deps)
      work.push_back(d);
  }
  return out;
}

int ReductionTerms::integer_load(const Value* v) {
  const auto [i, st] = input_key(v, "full", domain_);
  operands_.push_back({"in" + std::to_string(i), group_.inputs[i]->dtype, st});
  Term t{TermKind::kLoad};
  t.operand = static_cast<int>(operands_.size()) - 1;
  t.integer = true;
  return add(std::move(t));
}

int ReductionTerms::operand_term(
    const Value* v,
    const std::string& level,
    const std::vector<int64_t>& level_sizes) {
  if (auto it = term_of_.find(v); it != term_of_.end())
    return it->second;
  const auto key = input_key(v, level, level_sizes);
  if (auto it = loads_.find(key); it != loads_.end())
    return it->second;
  const auto& [i, st] = key;
  operands_.push_back({"in" + std::to_string(i), group_.inputs[i]->dtype, st});
  Term t{TermKind::kLoad};
  t.operand = static_cast<int>(operands_.size()) - 1;
  return loads_[key] = add(std::move(t));
}

void ReductionTerms::set(
    const Node& n,
    size_t i,
    int term,
    const std::string& level) {
  // A bfloat16/float16 output rounded to its dtype, as eager's tensor holds
  // it: a reduction or row-wise op (softmax, layer_norm) computes in fp32 and
  // rounds only its result; pointwise_expression rounds pointwise ops' own.
  const c10::ScalarType dt = n.outputs.at(i)->dtype;
  if ((dt == c10::ScalarType::BFloat16 || dt == c10::ScalarType::Half) &&
      !is_fusible_pointwise(n) && !terms_.at(term).integer &&
      !terms_.at(term).boolean)
    term = expr(dialect_.round_to(dt, ref(term)), {term});
  term_of_[n.outputs.at(i)] = term;
  level_of_[n.outputs.at(i)] = level;
}

bool ReductionTerms::build_terms() {
  const Graph& body = *group_.body;
  // Outputs are the first operands (pointers out0, out1, ...); their strides
  // are set once their levels are known.
  operands_.resize(group_.outputs.size());
  const std::string n_lit = dialect_.literal(static_cast<double>(count_));
  for (const auto& owned : body.node_list()) {
    const Node& n = *owned;
    const std::string level = n.str_attr("level", "full");
    const std::vector<int64_t>& out_sizes = n.outputs[0]->sizes;
    auto in = [&](size_t arg) {
      return operand_term(
          n.inputs.at(n.args.at(arg).inputs.at(0)), "full", domain_);
    };
    // (x - mean(x)) and the sum of its squares: var, layer_norm.
    auto deviations = [&](int x, int* mean, int* dev) {
      const int s = reduce(TermKind::kSum, x);
      *mean = expr("(" + ref(s) + " / " + n_lit + ")", {s});
      *dev = expr("(" + ref(x) + " - " + ref(*mean) + ")", {x, *mean});
      const int sq = expr("(" + ref(*dev) + " * " + ref(*dev) + ")", {*dev});
      return reduce(TermKind::kSum, sq);
    };
    // The level of output 0 (fusion.cpp's: keepdim or not, or "full").
    const std::string& lv = level;
    const ir::OpInfo* op = find_op(n);
    const ReductionKind kind = op && op->category == OpCategory::kReduction
        ? op->reduction.kind
        : ReductionKind::kNone;
    switch (kind) {
      case ReductionKind::kSum:
        set(n, 0, reduce(TermKind::kSum, in(schema::sum::kSelf)), lv);
        break;
      case ReductionKind::kMean: {
        const int s = reduce(TermKind::kSum, in(schema::sum::kSelf));
        set(n, 0, expr("(" + ref(s) + " / " + n_lit + ")", {s}), lv);
        break;
      }
      case ReductionKind::kAmax:
        set(n, 0, reduce(TermKind::kMax, in(schema::amax::kSelf)), lv);
        break;
      case ReductionKind::kAmin:
        set(n, 0, reduce(TermKind::kMin, in(schema::amax::kSelf)), lv);
        break;
      case ReductionKind::kProd:
        set(n, 0, reduce(TermKind::kProd, in(schema::sum::kSelf)), lv);
        break;
      case ReductionKind::kMaxDim:
      case ReductionKind::kMinDim:
      case ReductionKind::kArgMax:
      case ReductionKind::kArgMin: {
        const bool is_max =
            kind == ReductionKind::kMaxDim || kind == ReductionKind::kArgMax;
        index_operand();
        const int a = reduce(
            is_max ? TermKind::kArgMax : TermKind::kArgMin,
            in(schema::amax::kSelf));
        if (kind == ReductionKind::kArgMax || kind == ReductionKind::kArgMin) {
          set(n, 0, a, lv);
        } else {
          Term v{TermKind::kArgValue};
          v.deps = {a};
          set(n, 0, add(std::move(v)), lv);
          set(n, 1, a, lv);
        }
        break;
      }
      case ReductionKind::kLogSumExp: {
        // ATen's logsumexp: m = amax(x), 0 where m is +-inf (so all -inf
        // gives -inf, a +inf gives +inf); log(sum(exp(x - m))) + m.
        const int x = in(schema::amax::kSelf);
        const int m = reduce(TermKind::kMax, x);
        const int mm = expr(
            "((" + ref(m) + " - " + ref(m) + ") == 0.0f ? " + ref(m) +
                " : 0.0f)",
            {m});
        const int d = expr("(" + ref(x) + " - " + ref(mm) + ")", {x, mm});
        const int e = expr("tp_exp(" + ref(d) + ")", {d});
        const int s = reduce(TermKind::kSum, e);
        set(n,
            0,
            expr("(tp_log(" + ref(s) + ") + " + ref(mm) + ")", {s, mm}),
            lv);
        break;
      }
      case ReductionKind::kCumSum:
      case ReductionKind::kCumProd: {
        Term t{
            kind == ReductionKind::kCumSum ? TermKind::kScanSum
                                           : TermKind::kScanProd};
        const Value* x = n.inputs.at(n.args.at(0).inputs.at(0));
        t.integer = n.outputs[0]->dtype == c10::ScalarType::Long;
        t.deps = {t.integer ? integer_load(x) : in(schema::cumsum::kSelf)};
        has_scan_ = true;
        set(n, 0, add(std::move(t)), "full");
        break;
      }
      case ReductionKind::kVar:
      case ReductionKind::kVarMean: {
        const AttrValue& c = n.const_arg(schema::var::kCorrection);
        double correction = 1.0;
        if (auto* i = std::get_if<int64_t>(&c))
          correction = static_cast<double>(*i);
        else if (auto* d = std::get_if<double>(&c))
          correction = *d;
        int mean = 0, dev = 0;
        const int q = deviations(in(schema::var::kSelf), &mean, &dev);
        const double denom =
            std::max(0.0, static_cast<double>(count_) - correction);
        set(n,
            0,
            expr("(" + ref(q) + " / " + dialect_.literal(denom) + ")", {q}),
            lv);
        if (kind == ReductionKind::kVarMean)
          set(n, 1, mean, lv);
        break;
      }
      case ReductionKind::kSoftmax:
      case ReductionKind::kLogSoftmax: {
        const int x = in(schema::softmax::kSelf);
        const int m = reduce(TermKind::kMax, x);
        const int d = expr("(" + ref(x) + " - " + ref(m) + ")", {x, m});
        const int e = expr("tp_exp(" + ref(d) + ")", {d});
        const int s = reduce(TermKind::kSum, e);
        softmax_pairs_[m] = {s, x};
        if (kind == ReductionKind::kSoftmax && dialect_.softmax_by_reciprocal) {
          const int inv = expr("(1.0f / " + ref(s) + ")", {s});
          set(n,
              0,
              expr("(" + ref(e) + " * " + ref(inv) + ")", {e, inv}),
              "full");
        } else if (kind == ReductionKind::kSoftmax) {
          set(n, 0, expr("(" + ref(e) + " / " + ref(s) + ")", {e, s}), "full");
        } else {
          const int ls = expr("tp_log(" + ref(s) + ")", {s});
          set(n,
              0,
              expr("(" + ref(d) + " - " + ref(ls) + ")", {d, ls}),
              "full");
        }
        break;
      }
      case ReductionKind::kLayerNorm: {
        namespace ln = schema::layer_norm;
        int mean = 0, dev = 0;
        const int q = deviations(in(ln::kInput), &mean, &dev);
        const auto* eps = std::get_if<double>(&n.const_arg(ln::kEps));
        if (!eps)
          return false;
        const int rstd = expr(
            "tp_rsqrt(" + ref(q) + " / " + n_lit + " + " +
                dialect_.literal(*eps) + ")",
            {q});
        int y = expr("(" + ref(dev) + " * " + ref(rstd) + ")", {dev, rstd});
        if (n.tensor_arg(ln::kWeight)) {
          const int w = in(ln::kWeight);
          y = expr("(" + ref(y) + " * " + ref(w) + ")", {y, w});
        }
        if (n.tensor_arg(ln::kBias)) {
          const int b = in(ln::kBias);
          y = expr("(" + ref(y) + " + " + ref(b) + ")", {y, b});
        }
        set(n, 0, y, "full");
        set(n, 1, mean, "outer_keep");
        set(n, 2, rstd, "outer_keep");
        break;
      }
      case ReductionKind::kAny:
      case ReductionKind::kAll: {
        const int x = nonzero_term(n.inputs.at(n.args.at(0).inputs.at(0)));
        Term t{kind == ReductionKind::kAny ? TermKind::kMax : TermKind::kMin};
        t.deps = {x};
        t.boolean = true;
        set(n, 0, add(std::move(t)), lv);
        break;
      }
      case ReductionKind::kNone: {
        // A pointwise op: its expression over its operands' terms.
        if (n.outputs.size() != 1)
          return false;
        std::vector<std::string> operands;
        std::vector<int> deps;
        for (const Arg& a : n.args) {
          if (a.kind == Arg::Kind::kTensor) {
            const int t =
                operand_term(n.inputs.at(a.inputs.at(0)), level, out_sizes);
            deps.push_back(t);
            operands.push_back(ref(t));
          } else {
            operands.push_back(dialect_.constant(a.value));
          }
        }
        auto e = pointwise_expression(n, operands);
        TORCH_CHECK(
            e.has_value(),
            dialect_.name,
            ": no expression for ",
            n.qualified_name());
        set(n, 0, expr(*e, deps), level);
        break;
      }
    }
  }
  for (size_t i = 0; i < group_.outputs.size(); ++i) {
    const Value* bv = body.outputs().at(i);
    const Value* o = group_.outputs[i];
    const std::string& level = level_of_.at(bv);
    operands_[i] = {
        "out" + std::to_string(i),
        o->dtype,
        map_strides(o->sizes, o->strides, level, o->sizes)};
    outputs_.push_back({term_of_.at(bv), level == "full"});
  }
  return check_terms();
}

void ReductionTerms::mark_needed() {
  std::vector<int> work;
  for (const auto& [t, full] : outputs_)
    work.push_back(t);
  while (!work.empty()) {
    const int id = work.back();
    work.pop_back();
    if (!needed_.insert(id).second)
      continue;
    for (int d : terms_[id].deps)
      work.push_back(d);
  }
  for (int id : needed_)
    stages_ = std::max(stages_, terms_[id].stage);
}

} // namespace torch_plugin::compiler
