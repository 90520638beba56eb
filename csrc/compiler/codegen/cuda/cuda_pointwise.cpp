// cuda_pointwise.cpp: CUDA kernels for pointwise fusion groups (all outputs of
// one size; inputs broadcast to it).
//
// Operands (outputs, then inputs with broadcast strides) are indexed over the
// output's dims in its memory order, adjacent dims that every operand stores
// contiguously merged (as the C++ renderer does). The element loop is a
// grid-stride loop over that linear index, block kBlock (256) threads, grid
// min(ceil(work items / 256), kMaxBlocks).
//
// Vector path: each thread handles V consecutive elements with one 16-byte
// (or 8/4-byte) load per operand when every operand has unit or zero stride
// in the innermost merged dim, the vectors cannot cross that dim (its size
// and, for unit-stride operands, all outer strides divide by V), and, checked
// at run time, every unit-stride pointer is aligned to its vector's bytes
// (a view's storage offset can break that). V = 16 bytes / the smallest
// element size (4 fp32 elements, 8 bf16/fp16), halved until the sizes allow
// it. The elements past the last whole vector, and every element when a
// pointer is misaligned, take the scalar path, which computes each operand's
// offset from the linear index with the baked sizes and strides (so general
// strided operands work, at scalar speed).
#include "compiler/codegen/cuda/cuda_common.h"

#include "compiler/codegen/op_semantics.h"
#include "compiler/codegen/random_ops.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <numeric>
#include <sstream>
#include <unordered_map>

namespace torch_plugin::compiler::cuda {

std::optional<KernelSource> render_pointwise(const Node& group) {
  const Graph& body = *group.body;
  const Value* out = group.outputs.at(0);
  const size_t nout = group.outputs.size();
  const size_t nk = nout + group.inputs.size();
  std::vector<c10::ScalarType> dtypes;
  std::vector<std::vector<int64_t>> strides;
  for (const Value* o : group.outputs) {
    if (o->sizes != out->sizes || !pointwise_cuda_dtype(o->dtype))
      return std::nullopt;
    dtypes.push_back(o->dtype);
    strides.push_back(o->strides);
  }
  for (const Value* in : group.inputs) {
    if (!pointwise_cuda_dtype(in->dtype) ||
        in->sizes.size() > out->sizes.size())
      return std::nullopt;
    dtypes.push_back(in->dtype);
    strides.push_back(broadcast_strides(in->sizes, in->strides, out->sizes));
  }
  // Random ops (codegen/random_ops.h) read each element's linear index in
  // the result (row-major over its sizes): an extra operand at index nk,
  // contiguous strides, merged with the others but never loaded.
  const int random_streams = count_random_ops(body);
  if (random_streams > 0) {
    strides.push_back(row_major_strides(out->sizes));
  }
  const size_t nm = strides.size(); // operands merged: nk, + the index

  // Dims in the output's memory order, size-1 dims dropped, merged.
  std::vector<size_t> order(out->sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return out->strides[a] > out->strides[b];
  });
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> st(nm);
  for (size_t d : order) {
    if (out->sizes[d] == 1)
      continue;
    bool merge = !sizes.empty();
    for (size_t k = 0; merge && k < nm; ++k)
      merge = st[k].back() == strides[k][d] * out->sizes[d];
    if (merge) {
      sizes.back() *= out->sizes[d];
      for (size_t k = 0; k < nm; ++k)
        st[k].back() = strides[k][d];
      continue;
    }
    sizes.push_back(out->sizes[d]);
    for (size_t k = 0; k < nm; ++k)
      st[k].push_back(strides[k][d]);
  }
  if (sizes.empty()) {
    sizes.push_back(1);
    for (auto& s : st)
      s.push_back(0);
  }
  const size_t D = sizes.size();
  const int64_t numel = std::accumulate(
      sizes.begin(), sizes.end(), int64_t{1}, std::multiplies<>());

  // Vector width.
  int64_t min_es = 8;
  for (size_t k = 0; k < nk; ++k)
    if (st[k].back() != 0)
      min_es = std::min(min_es, element_size(dtypes[k]));
  int64_t V = numel > 1 ? 16 / min_es : 1;
  for (; V > 1; V /= 2) {
    bool ok = true;
    for (size_t k = 0; ok && k < nk; ++k) {
      const int64_t inner = st[k].back();
      if (inner != 0 && inner != 1)
        ok = false;
      else if (D > 1 && inner == 1)
        for (size_t d = 0; ok && d + 1 < D; ++d)
          ok = st[k][d] % V == 0;
      if (k < nout && inner != 1)
        ok = false;
    }
    if (ok && D > 1)
      ok = sizes.back() % V == 0;
    if (ok)
      break;
  }

  // Launch configuration and index type.
  const int64_t items = V > 1 ? (numel + V - 1) / V : numel;
  const int64_t grid = std::max<int64_t>(
      1, std::min<int64_t>((items + kBlock - 1) / kBlock, kMaxBlocks));
  const int64_t block = std::min<int64_t>(kBlock, (items + 31) / 32 * 32);
  int64_t max_index = numel + grid * kBlock * V;
  for (size_t k = 0; k < nk; ++k) {
    int64_t span = 0;
    for (size_t d = 0; d < D; ++d)
      span += (sizes[d] - 1) * std::abs(st[k][d]);
    max_index = std::max(max_index, span);
  }
  const std::string idx = index_type(max_index);

  // The body as a device function of the inputs' values, each in its
  // compute type (typed expressions, codegen/op_semantics.h).
  std::vector<std::string> reg(nk); // compute type name of each operand
  for (size_t k = 0; k < nk; ++k)
    reg[k] = compute_type_name(*compute_type_of(dtypes[k]));
  std::ostringstream fn;
  std::unordered_map<const Value*, TypedExpr> expr;
  std::string params;
  for (size_t i = 0; i < body.inputs().size(); ++i) {
    params += (params.empty() ? "" : ", ") + std::string("const ") +
        reg[nout + i] + " x" + std::to_string(i);
    expr[body.inputs()[i]] =
        TypedExpr{"x" + std::to_string(i), *compute_type_of(dtypes[nout + i])};
  }
  for (size_t i = 0; i < nout; ++i)
    params += (params.empty() ? "" : ", ") + reg[i] + "& y" + std::to_string(i);
  if (random_streams > 0)
    params += std::string(params.empty() ? "" : ", ") +
        "const unsigned long long tp_seed, const unsigned long long tp_offset, "
        "const unsigned long long tp_index";
  fn << "__device__ __forceinline__ void tp_body(" << params << ") {\n";
  int tmp = 0;
  int stream = 0;
  for (const auto& owned : body.node_list()) {
    const Node& n = *owned;
    if (n.outputs.size() != 1)
      return std::nullopt;
    if (auto r = random_op(n)) {
      const std::string t = "t" + std::to_string(tmp++);
      // Rounded to the result dtype as eager's tensor holds it.
      fn << "  const float " << t << " = "
         << round_to_dtype(
                random_expression(*r, stream++, "tp_index"),
                n.outputs[0]->dtype)
         << ";\n";
      expr[n.outputs[0]] = TypedExpr{t, c10::ScalarType::Float};
      continue;
    }
    std::vector<TypedExpr> ins;
    for (const Value* v : n.inputs)
      ins.push_back(expr.at(v));
    auto e = typed_pointwise_expression(n, ins);
    TORCH_CHECK(
        e.has_value(), "cuda codegen: no expression for ", n.qualified_name());
    const std::string t = "t" + std::to_string(tmp++);
    fn << "  const " << compute_type_name(e->type) << " " << t << " = "
       << e->code << ";\n";
    expr[n.outputs[0]] = TypedExpr{t, e->type};
  }
  for (size_t i = 0; i < nout; ++i)
    fn << "  y" << i << " = " << expr.at(body.outputs().at(i)).code << ";\n";
  fn << "}\n";

  std::ostringstream src;
  src << "// pointwise fusion group: " << body.num_nodes() << " ops, " << nout
      << " output(s) of sizes";
  for (int64_t s : out->sizes)
    src << " " << s;
  src << "; " << numel << " elements, " << V << " per vector\n"
      << preamble() << (random_streams > 0 ? random_helpers_source() : "")
      << fn.str();
  src << "extern \"C\" __global__ void __launch_bounds__(" << kBlock
      << ") kernel(";
  for (size_t k = 0; k < nk; ++k) {
    const bool is_out = k < nout;
    src << (k ? ", " : "") << (is_out ? "" : "const ")
        << element_type(dtypes[k]) << "* __restrict__ "
        << (is_out ? "out" + std::to_string(k)
                   : "in" + std::to_string(k - nout));
  }
  // Random kernels take the default generator's Philox state after the
  // pointers, as ATen's kernels take at::PhiloxCudaState
  // (runtime/cuda/kernel_step_cuda.cpp fills it per call): outside a CUDA
  // graph capture, (seed, offset) by value and two null pointers; inside one,
  // pointers to the graph's seed and offset (written before each replay by
  // torch's graph-safe generator state) and the kernel's offset within the
  // graph, so each replay draws new numbers, as an uncaptured call would.
  if (random_streams > 0)
    src << ", const unsigned long long tp_seed_value, "
           "const unsigned long long tp_offset_value, "
           "const unsigned long long* tp_seed_ptr, "
           "const unsigned long long* tp_offset_ptr";
  src << ") {\n";
  if (random_streams > 0)
    src << "  const unsigned long long tp_seed = tp_seed_ptr ? *tp_seed_ptr "
           ": tp_seed_value;\n"
        << "  const unsigned long long tp_offset = tp_offset_ptr ? "
           "*tp_offset_ptr + tp_offset_value : tp_offset_value;\n";
  auto ptr = [&](size_t k) {
    return k < nout ? "out" + std::to_string(k)
                    : "in" + std::to_string(k - nout);
  };
  src << "  const " << idx << " step = (" << idx << ")gridDim.x * blockDim.x;\n"
      << "  const " << idx << " start = (" << idx
      << ")blockIdx.x * blockDim.x + threadIdx.x;\n"
      << "  " << idx << " tail = 0;\n";
  if (V > 1) {
    std::string aligned;
    for (size_t k = 0; k < nk; ++k) {
      if (st[k].back() != 1)
        continue;
      const int64_t bytes = std::min<int64_t>(16, V * element_size(dtypes[k]));
      aligned += std::string(aligned.empty() ? "" : " && ") + "tp_aligned(" +
          ptr(k) + ", " + std::to_string(bytes) + ")";
    }
    const int64_t nv = numel / V;
    src << "  if (" << aligned << ") {\n"
        << "    for (" << idx << " v = start; v < (" << idx << ")" << nv
        << "; v += step) {\n"
        << "      const " << idx << " i = v * " << V << ";\n";
    for (size_t k = nout; k < nk; ++k) {
      const std::string a = "a" + std::to_string(k - nout);
      const std::string off = offset_expr(sizes, st[k], "i", idx);
      src << "      " << reg[k] << " " << a << "[" << V << "];\n";
      if (st[k].back() == 1) {
        src << vector_load(dtypes[k], ptr(k), off, V, a, "      ");
      } else {
        src << "      { const " << reg[k]
            << " s = " << load(dtypes[k], ptr(k), off)
            << ";\n#pragma unroll\n        for (int j = 0; j < " << V
            << "; ++j) " << a << "[j] = s; }\n";
      }
    }
    for (size_t k = 0; k < nout; ++k)
      src << "      " << reg[k] << " r" << k << "[" << V << "];\n";
    src << "#pragma unroll\n      for (int j = 0; j < " << V << "; ++j)\n"
        << "        tp_body(";
    std::string vargs;
    for (size_t i = 0; i < group.inputs.size(); ++i)
      vargs += (vargs.empty() ? "a" : ", a") + std::to_string(i) + "[j]";
    for (size_t k = 0; k < nout; ++k)
      vargs += (vargs.empty() ? "r" : ", r") + std::to_string(k) + "[j]";
    src << vargs;
    if (random_streams > 0)
      src << ", tp_seed, tp_offset, (unsigned long long)("
          << offset_expr(sizes, st[nk], "i", idx) << ") + j * " << st[nk].back()
          << "ull";
    src << ");\n";
    for (size_t k = 0; k < nout; ++k)
      src << vector_store(
          dtypes[k],
          ptr(k),
          offset_expr(sizes, st[k], "i", idx),
          V,
          "r" + std::to_string(k),
          "      ");
    src << "    }\n    tail = (" << idx << ")" << nv * V << ";\n  }\n";
  }
  src << "  for (" << idx << " i = tail + start; i < (" << idx << ")" << numel
      << "; i += step) {\n";
  for (size_t k = 0; k < nout; ++k)
    src << "    " << reg[k] << " r" << k << ";\n";
  std::string args;
  for (size_t k = nout; k < nk; ++k)
    args += (args.empty() ? "" : ", ") +
        load(dtypes[k], ptr(k), offset_expr(sizes, st[k], "i", idx));
  for (size_t k = 0; k < nout; ++k)
    args += (args.empty() ? "" : ", ") + std::string("r") + std::to_string(k);
  if (random_streams > 0)
    args += ", tp_seed, tp_offset, (unsigned long long)(" +
        offset_expr(sizes, st[nk], "i", idx) + ")";
  src << "    tp_body(" << args << ");\n";
  for (size_t k = 0; k < nout; ++k)
    src << "    "
        << store(
               dtypes[k],
               ptr(k),
               offset_expr(sizes, st[k], "i", idx),
               "r" + std::to_string(k))
        << "\n";
  src << "  }\n}\n";

  KernelSource ks;
  ks.target = "cuda";
  ks.source = src.str();
  ks.grid = grid;
  ks.block = block;
  ks.shared_bytes = 0;
  return ks;
}

} // namespace torch_plugin::compiler::cuda
