// cpp_kernel.cpp: the C++ code generator for pointwise fusion groups (see
// cpp_kernel.h).
#include "compiler/codegen/cpp/cpp_kernel.h"

#include "compiler/codegen/cpp/cpp_emit.h"
#include "compiler/codegen/op_semantics.h"
#include "compiler/codegen/random_ops.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <numeric>
#include <sstream>
#include <unordered_map>

namespace torch_plugin::compiler {
namespace {

// Fewer rows than this (outer iterations) split the inner loop into blocks of
// kInnerBlock elements, so that every thread gets work; 4096 floats (16 KiB
// per operand) keep each block's loop long enough to vectorize well.
constexpr int64_t kMinParallelRows = 64;
constexpr int64_t kInnerBlock = 4096;

} // namespace

std::string generate_pointwise_kernel(
    const Node& group,
    const std::string& name) {
  const Graph& body = *group.body;
  const Value* out = group.outputs[0];
  const size_t rank = out->sizes.size();
  const size_t num_out = group.outputs.size();
  // Operand strides: outputs first, then inputs, aligned to the first output's
  // dims (all outputs of a pointwise group have the same sizes).
  std::vector<std::vector<int64_t>> strides;
  for (const Value* o : group.outputs) {
    TORCH_CHECK(
        o->sizes == out->sizes,
        "codegen: pointwise group outputs differ in sizes");
    strides.push_back(o->strides);
  }
  for (const Value* in : group.inputs)
    strides.push_back(broadcast_strides(in->sizes, in->strides, out->sizes));
  // Random ops (codegen/random_ops.h) read each element's linear index in
  // the result (row-major over its sizes): one more operand, `o<ki>`, with
  // the contiguous strides, merged and walked like the others.
  const int random_streams = count_random_ops(body);
  const size_t ki = strides.size();
  if (random_streams > 0) {
    strides.push_back(row_major_strides(out->sizes));
  }

  // Loop order: the output's memory order (largest stride outermost).
  std::vector<size_t> order(rank);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return out->strides[a] > out->strides[b];
  });
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> st(strides.size());
  for (size_t d : order) {
    if (out->sizes[d] == 1)
      continue;
    bool merge = !sizes.empty();
    for (size_t k = 0; merge && k < strides.size(); ++k)
      merge = st[k].back() == strides[k][d] * out->sizes[d];
    if (merge) {
      sizes.back() *= out->sizes[d];
      for (size_t k = 0; k < strides.size(); ++k)
        st[k].back() = strides[k][d];
      continue;
    }
    sizes.push_back(out->sizes[d]);
    for (size_t k = 0; k < strides.size(); ++k)
      st[k].push_back(strides[k][d]);
  }
  if (sizes.empty()) {
    sizes.push_back(1);
    for (auto& s : st)
      s.push_back(0);
  }
  const size_t loops = sizes.size();
  const int64_t inner = sizes.back();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < loops; ++i)
    rows *= sizes[i];

  // Typed expressions of the body's values (op_semantics.h): each input in
  // its compute type, each node's temporary in its output's.
  std::unordered_map<const Value*, TypedExpr> expr;
  std::ostringstream compute;
  for (size_t i = 0; i < body.inputs().size(); ++i) {
    const size_t k = num_out + i;
    const c10::ScalarType dt = group.inputs[i]->dtype;
    const auto ct = compute_type_of(dt);
    TORCH_CHECK(ct, "codegen: no compute type for ", dt);
    expr[body.inputs()[i]] = TypedExpr{
        load_expr(
            dt,
            "in" + std::to_string(i),
            "o" + std::to_string(k) + " + j * " + std::to_string(st[k].back())),
        *ct};
  }
  int tmp = 0;
  bool fp64 = false; // some value computed in double
  int stream = 0;
  const std::string index = random_streams > 0
      ? "o" + std::to_string(ki) + " + j * " + std::to_string(st[ki].back())
      : "";
  for (const auto& owned : body.node_list()) {
    const Node& n = *owned;
    if (auto r = random_op(n)) {
      const std::string t = "t" + std::to_string(tmp++);
      // Rounded to the result dtype as eager's tensor holds it.
      compute << "      const float " << t << " = "
              << round_to_dtype(
                     random_expression(*r, stream++, index),
                     n.outputs[0]->dtype)
              << ";\n";
      expr[n.outputs[0]] = TypedExpr{t, c10::ScalarType::Float};
      continue;
    }
    std::vector<TypedExpr> operands;
    for (const Value* v : n.inputs)
      operands.push_back(expr.at(v));
    auto e = typed_pointwise_expression(n, operands);
    TORCH_CHECK(
        e.has_value(), "codegen: no expression for ", n.qualified_name());
    std::string t = "t" + std::to_string(tmp++);
    compute << "      const " << compute_type_name(e->type) << " " << t << " = "
            << e->code << ";\n";
    expr[n.outputs[0]] = TypedExpr{t, e->type};
    fp64 |= e->type == c10::ScalarType::Double;
  }

  std::ostringstream src;
  src << "// fusion group: " << body.num_nodes() << " pointwise ops, "
      << num_out << " output(s) of sizes";
  for (int64_t s : out->sizes)
    src << " " << s;
  src << "\n";
  // fp64 as eager: no product and sum contracted into one FMA (GCC's default
  // -ffp-contract=fast rounds a * b + c once where eager's two ops round
  // twice: 1 ulp). For the whole file (helpers included, so that they still
  // inline). Only fp64 kernels: off costs fp32 kernels ~30% (gelu, silu,
  // softmax: their polynomials lose their FMAs; measured on the dev machine).
  if (fp64)
    src << "#pragma GCC optimize(\"fp-contract=off\")\n"
        << "#pragma STDC FP_CONTRACT OFF\n";
  src << kernel_preamble() << "\n";
  if (random_streams > 0)
    src << random_helpers_source() << "\n";
  src << "extern \"C\" void " << name << "(void** args) {\n";
  for (size_t i = 0; i < num_out; ++i) {
    const std::string t = c_type(group.outputs[i]->dtype);
    src << "  " << t << "* __restrict out" << i << " = static_cast<" << t
        << "*>(args[" << i << "]);\n";
  }
  for (size_t i = 0; i < group.inputs.size(); ++i) {
    const std::string t = c_type(group.inputs[i]->dtype);
    src << "  const " << t << "* __restrict in" << i << " = static_cast<const "
        << t << "*>(args[" << num_out + i << "]);\n";
  }
  // Random kernels: args[outputs + inputs] points to {seed, offset}
  // (runtime/cpu/kernel_step.cpp draws them per call).
  if (random_streams > 0)
    src << "  const unsigned long long* tp_rng = static_cast<const unsigned "
           "long long*>(args["
        << num_out + group.inputs.size()
        << "]);\n  const unsigned long long tp_seed = tp_rng[0], tp_offset = "
           "tp_rng[1];\n";
  // Parallel work items: rows, each split into blocks of the inner loop when
  // there are too few rows to share among threads (a contiguous tensor is one
  // coalesced row: without blocks it would run on one thread).
  const int64_t block =
      rows >= kMinParallelRows || inner <= kInnerBlock ? inner : kInnerBlock;
  const int64_t blocks = (inner + block - 1) / block;
  src << "#pragma omp parallel for if(" << rows * inner << " > 32768)\n";
  src << "  for (int64_t r = 0; r < " << rows * blocks << "; ++r) {\n";
  src << "    int64_t rest = r / " << blocks << ";\n";
  src << "    const int64_t j0 = (r % " << blocks << ") * " << block << ";\n";
  src << "    const int64_t j1 = std::min<int64_t>(j0 + " << block << ", "
      << inner << ");\n";
  for (size_t k = 0; k < strides.size(); ++k)
    src << "    int64_t o" << k << " = 0;\n";
  for (size_t d = loops - 1; d-- > 0;) {
    src << "    { const int64_t i = rest % " << sizes[d]
        << "; rest /= " << sizes[d] << ";";
    for (size_t k = 0; k < strides.size(); ++k) {
      if (st[k][d] != 0)
        src << " o" << k << " += i * " << st[k][d] << ";";
    }
    src << " }\n";
  }
  src << "#pragma omp simd\n";
  src << "    for (int64_t j = j0; j < j1; ++j) {\n";
  src << compute.str();
  for (size_t i = 0; i < num_out; ++i) {
    src << "      "
        << store_stmt(
               group.outputs[i]->dtype,
               "out" + std::to_string(i),
               "o" + std::to_string(i) + " + j * " +
                   std::to_string(st[i].back()),
               expr.at(body.outputs()[i]).code)
        << "\n";
  }
  src << "    }\n  }\n}\n";
  return src.str();
}

} // namespace torch_plugin::compiler
