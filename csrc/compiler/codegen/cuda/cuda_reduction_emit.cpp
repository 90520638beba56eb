// cuda_reduction_emit.cpp: the CUDA source of a row-reduction kernel from the
// terms and plan of cuda_reduction.cpp (algorithm and launch rules there).
//
// Shape of the kernel, per row (rows grid-stride; in warp mode a group of G
// lanes per row, rows past the end clamped to the last row and not stored):
//   row-level (outer) terms of stage 0 (per-row operands, constants);
//   [registers] float c<id>[C*V] filled from the row, once;
//   per pass p = 1..S: accumulate the reductions of stage p over the row,
//     butterfly across the G threads (and shared memory across warps), then
//     the row-level terms of stage p;
//   a last pass computing and storing the full-level outputs; the row-level
//   outputs stored by the row's thread 0.
#include "compiler/codegen/cuda/cuda_row_kernel.h"

#include <c10/util/Exception.h>

#include <functional>
#include <sstream>

namespace torch_plugin::compiler::cuda {

std::string RowKernel::render_expr(const std::string& e) const {
  return spell_refs(e);
}

std::string RowKernel::load_value(const Term& t, const std::string& off) const {
  return load_term(t, operands_[t.operand], off);
}

std::string RowKernel::row_offset(size_t k, const std::string& j) const {
  std::vector<int64_t> sizes, strides;
  for (size_t d : rdims_) {
    sizes.push_back(domain_[d]);
    strides.push_back(operands_[k].strides[d]);
  }
  return offset_expr(sizes, strides, j, index_type(max_index_));
}

// One full-level term (after its full-level dependencies) inside the element
// loop; cached terms read their registers unless `compute_cached`.
void RowKernel::emit_full(
    int id,
    std::ostream& os,
    std::set<int>& done,
    const std::string& ind) const {
  if (done.count(id) || terms_[id].outer)
    return;
  done.insert(id);
  const Term& t = terms_[id];
  const std::string name = "t" + std::to_string(id);
  if (cached_.count(id) && !done.count(-1)) {
    os << ind << "const float " << name << " = c" << id << "[c * " << v_
       << " + v];\n";
    return;
  }
  if (t.kind == Kind::kLoad) {
    os << ind << "const float " << name << " = l" << id << "[v];\n";
    return;
  }
  TORCH_CHECK(
      t.kind == Kind::kExpr,
      "cuda codegen: a reduction used as a full-level value");
  for (int d : t.deps)
    emit_full(d, os, done, ind);
  os << ind << "const float " << name << " = " << render_expr(t.expr) << ";\n";
}

// The loop over this thread's elements of the row computing `roots` and then
// running `tail` per element (with v the element within the vector). With
// `fill_cache`, the roots are the cached terms, computed from memory and kept.
// With `stores`, the full-level outputs are stored.
std::string RowKernel::element_loop(
    const std::set<int>& roots,
    const std::string& tail,
    bool fill_cache,
    bool stores) const {
  const std::string idx = index_type(max_index_);
  // Loads this loop reads from memory.
  std::set<int> loads, seen;
  std::vector<int> work(roots.begin(), roots.end());
  while (!work.empty()) {
    const int id = work.back();
    work.pop_back();
    if (terms_[id].outer || !seen.insert(id).second)
      continue;
    if (cached_.count(id) && !fill_cache)
      continue;
    if (terms_[id].kind == Kind::kLoad)
      loads.insert(id);
    for (int d : terms_[id].deps)
      work.push_back(d);
  }
  std::ostringstream os;
  const bool unroll = !cached_.empty() || chunks_ <= 16;
  os << (unroll ? "#pragma unroll\n" : "#pragma unroll 4\n");
  os << "    for (int c = 0; c < " << chunks_ << "; ++c) {\n"
     << "      const int j0 = (c * " << g_ << " + tid) * " << v_ << ";\n"
     << "      (void)j0;\n";
  std::string ind = "      ";
  const bool guard = count_ % (g_ * v_) != 0;
  if (guard) {
    os << "      if (j0 < " << count_ << ") {\n";
    ind = "        ";
  }
  for (int id : loads) {
    const size_t k = static_cast<size_t>(terms_[id].operand);
    const Operand& o = operands_[k];
    const std::string l = "l" + std::to_string(id);
    const std::string b = "b" + std::to_string(k);
    os << ind << "float " << l << "[" << v_ << "];\n";
    std::ostringstream scalar;
    for (int64_t v = 0; v < v_; ++v)
      scalar << ind << "  " << l << "[" << v << "] = "
             << load_value(
                    terms_[id],
                    b + " + " +
                        row_offset(
                            k, "(" + idx + ")(j0 + " + std::to_string(v) + ")"))
             << ";\n";
    if (vectorized(k) && !terms_[id].nonzero)
      os << ind << "if (vec) {\n"
         << vector_load(o.dtype, o.ptr, b + " + j0", v_, l, ind + "  ") << ind
         << "} else {\n"
         << scalar.str() << ind << "}\n";
    else
      os << ind << "{\n" << scalar.str() << ind << "}\n";
  }
  if (stores)
    for (size_t i = 0; i < outputs_.size(); ++i)
      if (outputs_[i].second)
        os << ind << "float o" << i << "[" << v_ << "];\n";
  os << "#pragma unroll\n"
     << ind << "for (int v = 0; v < " << v_ << "; ++v) {\n";
  std::set<int> done;
  if (fill_cache)
    done.insert(-1); // compute cached terms instead of reading them
  const std::string ind2 = ind + "  ";
  for (int id : roots)
    emit_full(id, os, done, ind2);
  if (fill_cache)
    for (int id : roots)
      os << ind2 << "c" << id << "[c * " << v_ << " + v] = t" << id << ";\n";
  if (stores)
    for (size_t i = 0; i < outputs_.size(); ++i)
      if (outputs_[i].second)
        os << ind2 << "o" << i << "[v] = t" << outputs_[i].first << ";\n";
  os << tail << ind << "}\n";
  if (stores) {
    os << ind << "if (active) {\n";
    for (size_t i = 0; i < outputs_.size(); ++i) {
      if (!outputs_[i].second)
        continue;
      const Operand& o = operands_[i];
      const std::string b = "b" + std::to_string(i);
      const std::string src = "o" + std::to_string(i);
      std::ostringstream scalar;
      for (int64_t v = 0; v < v_; ++v)
        scalar << ind << "    "
               << store(
                      o.dtype,
                      o.ptr,
                      b + " + " +
                          row_offset(
                              i,
                              "(" + idx + ")(j0 + " + std::to_string(v) + ")"),
                      src + "[" + std::to_string(v) + "]")
               << "\n";
      if (vectorized(i))
        os << ind << "  if (vec) {\n"
           << vector_store(o.dtype, o.ptr, b + " + j0", v_, src, ind + "    ")
           << ind << "  } else {\n"
           << scalar.str() << ind << "  }\n";
      else
        os << ind << "  {\n" << scalar.str() << ind << "  }\n";
    }
    os << ind << "}\n";
  }
  if (guard)
    os << "      }\n";
  os << "    }\n";
  return os.str();
}

void RowKernel::emit_outer(int stage, std::ostream& os) const {
  for (int id : needed_) {
    const Term& t = terms_[id];
    if (!t.outer || t.stage != stage)
      continue;
    std::string value;
    if (t.kind == Kind::kLoad) {
      value = load_value(t, "b" + std::to_string(t.operand));
    } else if (t.kind == Kind::kExpr) {
      value = render_expr(t.expr);
    } else if (t.kind == Kind::kArgValue) {
      value = "a" + std::to_string(t.deps[0]);
    } else {
      value = "a" + std::to_string(id) + (t.index ? "i" : "");
    }
    os << "    const " << (t.index ? "long long" : "float") << " t" << id
       << " = " << value << ";\n";
  }
}

std::string RowKernel::emit() const {
  const std::string idx = index_type(max_index_);
  const bool block_mode = rows_per_block_ == 1;
  const bool col_split = split_ > 1; // lanes on columns, warps on parts
  std::vector<int> reductions;
  bool pairs = false; // argmax/argmin: int64 indices beside the values
  for (int id : needed_)
    if (is_reduction(terms_[id].kind)) {
      reductions.push_back(id);
      pairs |= terms_[id].index;
    }

  std::ostringstream src;
  src << "// row-reduction fusion group: " << group_.body->num_nodes()
      << " ops over domain";
  for (int64_t s : domain_)
    src << " " << s;
  src << ", reduced dims";
  for (size_t d = 0; d < domain_.size(); ++d)
    if (reduced_[d])
      src << " " << d;
  src << "; " << m_ << " rows of " << count_ << ", " << g_
      << (col_split ? " warps per column (column split), "
                    : " threads per row, ")
      << chunks_ << " x " << v_ << " elements per thread, " << stages_
      << " pass(es)" << (cached_.empty() ? "" : ", row kept in registers")
      << "\n"
      << preamble();
  src << "extern \"C\" __global__ void __launch_bounds__(" << block_
      << ") kernel(";
  for (size_t i = 0; i < group_.outputs.size(); ++i)
    src << (i ? ", " : "")
        << (group_.outputs[i]->dtype == c10::ScalarType::Long
                ? std::string("long long")
                : element_type(group_.outputs[i]->dtype))
        << "* __restrict__ out" << i;
  for (size_t i = 0; i < group_.inputs.size(); ++i)
    src << ", const " << element_type(group_.inputs[i]->dtype)
        << "* __restrict__ in" << i;
  src << ") {\n";
  // Partials across warps: one per warp (block mode) or per thread (column
  // split: the S warps' partials of each of the block's 32 columns).
  const int64_t partials = col_split ? block_ : 32;
  if (block_mode || col_split)
    src << "  __shared__ float tp_red["
        << std::max<size_t>(1, reductions.size()) << "][" << partials << "];\n";
  if ((block_mode || col_split) && pairs)
    src << "  __shared__ long long tp_redi[" << reductions.size() << "]["
        << partials << "];\n";
  if (col_split)
    src << "  const int tid = threadIdx.x >> 5;\n";
  else
    src << "  const int tid = threadIdx.x % " << g_ << ";\n";
  std::string aligned;
  for (size_t k = 0; k < operands_.size(); ++k) {
    if (!vectorized(k))
      continue;
    const int64_t bytes =
        std::min<int64_t>(16, v_ * element_size(operands_[k].dtype));
    const std::string& p = operands_[k].ptr;
    if (aligned.find(p + ",") == std::string::npos)
      aligned += std::string(aligned.empty() ? "" : " && ") + "tp_aligned(" +
          p + ", " + std::to_string(bytes) + ")";
  }
  src << "  const bool vec = " << (aligned.empty() ? "false" : aligned)
      << ";\n  (void)vec;\n";
  src << "  for (" << idx << " base = (" << idx << ")blockIdx.x * "
      << rows_per_block_ << "; base < (" << idx << ")" << m_ << "; base += ("
      << idx << ")gridDim.x * " << rows_per_block_ << ") {\n";
  if (block_mode) {
    src << "    const " << idx
        << " row = base;\n    const bool active = true;\n";
  } else {
    src << "    const " << idx << " row_raw = base + "
        << (col_split ? std::string("(threadIdx.x & 31)")
                      : "threadIdx.x / " + std::to_string(g_))
        << ";\n    const bool active = row_raw < (" << idx << ")" << m_
        << ";\n    const " << idx << " row = active ? row_raw : (" << idx << ")"
        << m_ - 1 << ";\n";
  }
  src << "    (void)active;\n";
  {
    std::vector<int64_t> ksizes;
    for (size_t d : kdims_)
      ksizes.push_back(domain_[d]);
    for (size_t k = 0; k < operands_.size(); ++k) {
      std::vector<int64_t> kst;
      for (size_t d : kdims_)
        kst.push_back(operands_[k].strides[d]);
      src << "    const " << idx << " b" << k << " = "
          << offset_expr(ksizes, kst, "row", idx) << ";\n";
    }
  }
  emit_outer(0, src);
  if (!cached_.empty()) {
    for (int id : cached_)
      src << "    float c" << id << "[" << chunks_ * v_ << "];\n";
    src << element_loop(cached_, "", true, false);
  }
  auto slot = [&](int id) {
    return std::to_string(
        std::find(reductions.begin(), reductions.end(), id) -
        reductions.begin());
  };
  for (int p = 1; p <= stages_; ++p) {
    std::vector<int> red; // this pass's reductions; a softmax pair by its max
    std::set<int> roots;
    std::ostringstream tail;
    for (int id : reductions) {
      const Term& t = terms_[id];
      if (t.stage != p)
        continue;
      bool folded = false; // a softmax sum computed with its max (pass 1)
      for (const auto& [m, sum] : online_)
        folded |= sum == id;
      if (folded)
        continue;
      red.push_back(id);
      const int arg = t.deps[0];
      if (!terms_[arg].outer)
        roots.insert(arg);
      const std::string a = "a" + std::to_string(id);
      src << "    float " << a << " = " << reduction_identity(t.kind, "TP_INF")
          << ";\n";
      if (t.index)
        src << "    long long " << a << "i = 0x7fffffffffffffffLL;\n";
      const std::string x = "t" + std::to_string(arg);
      if (t.kind != Kind::kSum && t.kind != Kind::kMax) {
        const std::string j = t.index ? "(long long)(" +
                row_offset(static_cast<size_t>(index_operand_),
                           "(" + idx + ")(j0 + v)") +
                ")"
                                      : "";
        tail << "          " << combine_stmt(t.kind, a, a + "i", x, j) << "\n";
      } else if (online_.count(id)) {
        const std::string as = "a" + std::to_string(online_.at(id));
        src << "    float " << as << " = 0.0f;\n";
        tail << "          tp_online_add(" << a << ", " << as << ", " << x
             << ");\n";
      } else if (t.kind == Kind::kSum) {
        tail << "          " << a << " += " << x << ";\n";
      } else {
        tail << "          " << a << " = tp_max_nan(" << a << ", " << x
             << ");\n";
      }
    }
    if (red.empty()) { // every reduction of this pass was folded into pass 1
      emit_outer(p, src);
      continue;
    }
    src << element_loop(roots, tail.str(), false, false);
    // Merges `other` (the partials of reduction `id`, and of its softmax sum
    // `other_sum`) into this thread's.
    auto combine = [&](int id,
                       const std::string& other,
                       const std::string& other_sum) {
      const std::string a = "a" + std::to_string(id);
      if (online_.count(id))
        return "tp_online_merge(" + a + ", a" + std::to_string(online_.at(id)) +
            ", " + other + ", " + other_sum + ");";
      if (terms_[id].kind != Kind::kSum && terms_[id].kind != Kind::kMax)
        return "{ const float b = " + other + "; " +
            combine_stmt(terms_[id].kind, a, a + "i", "b", other_sum) + " }";
      return terms_[id].kind == Kind::kSum
          ? a + " = " + a + " + " + other + ";"
          : a + " = tp_max_nan(" + a + ", " + other + ");";
    };
    auto shfl = [](int id) {
      return "__shfl_xor_sync(0xffffffffu, a" + std::to_string(id) + ", o)";
    };
    // Partials through shared memory: each one stored at `at` (by the threads
    // `who` selects), then every thread reads the `count` partials of its row
    // or column, `from(w)` the w-th, and combines them in that order (the same
    // order in every thread).
    auto exchange = [&](const std::string& who,
                        const std::string& at,
                        int64_t count,
                        const std::function<std::string(int64_t)>& from) {
      const std::string ind = who.empty() ? "    " : "      ";
      if (!who.empty())
        src << "    if (" << who << ") {\n";
      for (int id : red) {
        src << ind << "tp_red[" << slot(id) << "][" << at << "] = a" << id
            << ";\n";
        if (terms_[id].index)
          src << ind << "tp_redi[" << slot(id) << "][" << at << "] = a" << id
              << "i;\n";
        if (online_.count(id))
          src << ind << "tp_red[" << slot(online_.at(id)) << "][" << at
              << "] = a" << online_.at(id) << ";\n";
      }
      src << (who.empty() ? "" : "    }\n") << "    __syncthreads();\n";
      for (int id : red) {
        const std::string at0 = "][" + from(0) + "]";
        src << "    a" << id << " = tp_red[" << slot(id) << at0 << ";\n";
        if (terms_[id].index)
          src << "    a" << id << "i = tp_redi[" << slot(id) << at0 << ";\n";
        if (online_.count(id))
          src << "    a" << online_.at(id) << " = tp_red["
              << slot(online_.at(id)) << at0 << ";\n";
        for (int64_t w = 1; w < count; ++w) {
          const std::string ws = "][" + from(w) + "]";
          src << "    "
              << combine(
                     id,
                     "tp_red[" + slot(id) + ws,
                     online_.count(id)
                         ? "tp_red[" + slot(online_.at(id)) + ws
                         : (terms_[id].index ? "tp_redi[" + slot(id) + ws : ""))
              << "\n";
        }
      }
    };
    if (col_split) {
      // Every thread's partial; a column's S partials are 32 apart.
      exchange("", "threadIdx.x", split_, [](int64_t w) {
        return w == 0 ? std::string("threadIdx.x & 31")
                      : std::to_string(32 * w) + " + (threadIdx.x & 31)";
      });
    } else {
      const int64_t lanes = std::min<int64_t>(g_, 32);
      src << "#pragma unroll\n    for (int o = " << lanes / 2
          << "; o > 0; o >>= 1) {\n";
      for (int id : red) {
        if (online_.count(id))
          src << "      { const float m2 = " << shfl(id)
              << ", s2 = " << shfl(online_.at(id)) << "; "
              << combine(id, "m2", "s2") << " }\n";
        else if (terms_[id].index) // the pair's index: a 64-bit shuffle
          src << "      { const long long i2 = __shfl_xor_sync(0xffffffffu, a"
              << id << "i, o); " << combine(id, shfl(id), "i2") << " }\n";
        else
          src << "      " << combine(id, shfl(id), "") << "\n";
      }
      src << "    }\n";
      if (block_mode && g_ > 32) // lane 0's partial of each warp
        exchange(
            "(threadIdx.x & 31) == 0",
            "threadIdx.x >> 5",
            g_ / 32,
            [](int64_t w) { return std::to_string(w); });
    }
    emit_outer(p, src);
  }
  bool any_full = false;
  for (const auto& [t, full] : outputs_)
    any_full |= full;
  if (any_full) {
    std::set<int> roots;
    for (const auto& [t, full] : outputs_)
      if (full)
        roots.insert(t);
    src << element_loop(roots, "", false, true);
  }
  std::ostringstream outer_stores;
  for (size_t i = 0; i < outputs_.size(); ++i) {
    if (outputs_[i].second)
      continue;
    const Operand& o = operands_[i];
    const std::string t = "t" + std::to_string(outputs_[i].first);
    outer_stores << "      "
                 << (o.dtype == c10::ScalarType::Long // an index, as is
                         ? o.ptr + "[b" + std::to_string(i) + "] = " + t + ";"
                         : store(o.dtype, o.ptr, "b" + std::to_string(i), t))
                 << "\n";
  }
  if (!outer_stores.str().empty())
    src << "    if (tid == 0 && active) {\n" << outer_stores.str() << "    }\n";
  if ((block_mode && g_ > 32) || col_split)
    src << "    __syncthreads(); // tp_red is reused by the next row\n";
  src << "  }\n}\n";
  return src.str();
}

} // namespace torch_plugin::compiler::cuda
