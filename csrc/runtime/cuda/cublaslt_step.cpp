// cublaslt_step.cpp: the executor's cuBLASLt step for CUDA
// torch_plugin::linear_pointwise nodes (see cublaslt_step.h).
//
// Built once per compiled graph: the node's shapes are static, so the
// cuBLASLt descriptor (libs::cublaslt::MatmulDesc) is derived from the IR
// values' sizes and strides and its plan — the algorithm from
// cublasLtMatmulAlgoGetHeuristic — is fetched from (or put into) the
// process-wide plan cache here, at executor build time. Each run derives the
// descriptor again from the actual tensors and torch's current settings, a
// few integer compares: when it equals the prebuilt one (the usual case) the
// prebuilt plan runs; when something differs (torch's TF32 setting changed
// after compilation, a less aligned pointer, other strides) the plan of the
// new descriptor comes from the cache, so a setting change is honoured at the
// next run and never runs a stale plan.
#include "runtime/cuda/cublaslt_step.h"

#include "ir/op_schema.h"
#include "ir/op_table.h"
#include "libs/cublaslt.h"
#include "runtime/options.h"
#include "runtime/step_registry.h"

#include <ATen/ATen.h>

namespace torch_plugin::runtime::cuda {

namespace {

namespace lt = libs::cublaslt;
using ir::Node;
using ir::Value;

class CublasLtLinearStep final : public Step {
 public:
  CublasLtLinearStep(
      const Node& n,
      const SlotMap& slots,
      lt::Epilogue epilogue,
      std::shared_ptr<const lt::MatmulPlan> plan,
      int64_t m,
      bool padded,
      bool split)
      : x_(slots.slot(n.tensor_arg(0))),
        w_(slots.slot(n.tensor_arg(1))),
        b_(n.tensor_arg(2) ? slots.slot(n.tensor_arg(2)) : -1),
        r_(n.tensor_arg(3) ? slots.slot(n.tensor_arg(3)) : -1),
        out_(slots.slot(n.outputs[0])),
        m_(m),
        n_(n.tensor_arg(1)->sizes[0]),
        k_(n.tensor_arg(1)->sizes[1]),
        activation_(std::get<std::string>(
            n.const_arg(ir::schema::linear_pointwise::kActivation))),
        epilogue_(epilogue),
        padded_(padded),
        split_(split),
        plan_(std::move(plan)),
        buffer_(*n.outputs[0], slots),
        sizes_(n.outputs[0]->sizes),
        strides_(n.outputs[0]->strides),
        options_(at::TensorOptions()
                     .dtype(n.outputs[0]->dtype)
                     .device(n.outputs[0]->device)) {}

  void run(Slots& s) const override {
    const at::Tensor& x = s[x_];
    const at::Tensor& w = s[w_];
    at::Tensor y;
    if (buffer_.planned())
      y = buffer_.get(s);
    // An arena on another device than the node's (the executor's arena is
    // host memory until the CUDA runtime plans device arenas): own buffer.
    if (!y.defined() || y.device() != options_.device())
      y = at::empty_strided(sizes_, strides_, options_);
    at::Tensor y2d = y.view({m_, n_});
    at::Tensor x2d = x.dim() == 2 ? x : x.reshape({m_, k_});
    at::Tensor bias = b_ >= 0 ? s[b_] : at::Tensor();
    at::Tensor c2d = r_ >= 0 ? s[r_].reshape({m_, n_}) : at::Tensor();
    if (!lt::run_linear(x2d, w, bias, c2d, epilogue_, y2d, plan_.get())) {
      // No algorithm for this run's descriptor (see the file comment): the
      // reference of ops/cpu/library_ops_kernel.cpp, on this device.
      at::Tensor ref =
          at::linear(x, w, b_ >= 0 ? std::optional(bias) : std::nullopt);
      if (r_ >= 0)
        ref = ref + s[r_];
      y.copy_(ir::apply_epilogue(ref, activation_, 0.0, 0.0));
    }
    s[out_] = std::move(y);
  }

  std::string describe() const override {
    std::string s = "cublaslt linear_pointwise " + plan_->describe();
    if (padded_) // the plan is one chunk's or class's (libs/cublaslt.h)
      s += " padded rows=" + std::to_string(plan_->desc().m) +
          " ld=" + std::to_string(plan_->desc().ldd) +
          " of m=" + std::to_string(m_) + (split_ ? " in place" : "");
    return s;
  }

 private:
  int x_, w_, b_, r_, out_;
  int64_t m_, n_, k_;
  std::string activation_;
  lt::Epilogue epilogue_;
  bool padded_, split_;
  std::shared_ptr<const lt::MatmulPlan> plan_;
  OutputBuffer buffer_;
  std::vector<int64_t> sizes_, strides_;
  at::TensorOptions options_;
};

// The 2-d strides of v as the run will see it: collapsed to [M, K] when the
// leading dimensions allow, else contiguous (run_linear copies).
std::vector<int64_t> strides_2d(const Value& v) {
  if (auto s = lt::flatten_to_2d_strides(v.sizes, v.strides)) {
    if (lt::matrix_layout({v.numel() / v.sizes.back(), v.sizes.back()}, *s))
      return *s;
  }
  return {v.sizes.back(), 1};
}

} // namespace

std::unique_ptr<Step> make_cublaslt_step(
    const ir::Node& node,
    const SlotMap& slots) {
  if (node.op != "torch_plugin::linear_pointwise" || node.outputs.size() != 1)
    return nullptr;
  const Value* x = node.tensor_arg(0);
  const Value* w = node.tensor_arg(1);
  const Value* b = node.tensor_arg(2);
  const Value* r = node.tensor_arg(3);
  const Value* out = node.outputs[0];
  if (!x || !w || !out->device.is_cuda() || !out->is_contiguous() ||
      x->sizes.empty() || w->sizes.size() != 2 || !lt::dtype_of(out->dtype))
    return nullptr;
  for (const Value* v : {x, w, b, r}) {
    if (v && (v->dtype != out->dtype || v->device != out->device))
      return nullptr;
  }
  const int64_t k = w->sizes[1], n = w->sizes[0];
  if (x->sizes.back() != k || k <= 0 || n <= 0 || out->numel() == 0)
    return nullptr;
  if (b && b->sizes != std::vector<int64_t>{n})
    return nullptr;
  if (r && r->sizes != out->sizes)
    return nullptr;
  const std::string& act = std::get<std::string>(
      node.const_arg(ir::schema::linear_pointwise::kActivation));
  const std::optional<lt::Epilogue> fused = lt::epilogue_for(act, b != nullptr);
  if (!fused)
    return nullptr; // the op's kernel applies it after the product
  const lt::Epilogue epilogue = *fused;

  const int64_t m = x->numel() / k;
  std::vector<int64_t> x_strides = strides_2d(*x);
  std::vector<int64_t> w_strides = w->strides;
  if (!lt::matrix_layout(w->sizes, w_strides))
    w_strides = {k, 1};
  std::optional<int64_t> ldc;
  if (r) {
    std::vector<int64_t> rs = strides_2d(*r);
    auto layout = lt::matrix_layout({m, n}, rs);
    ldc = layout && !layout->transposed ? layout->ld : n;
  }
  std::optional<lt::MatmulDesc> desc = lt::linear_desc(
      {m, k},
      x_strides,
      w->sizes,
      w_strides,
      n,
      ldc,
      out->dtype,
      epilogue,
      out->device.index());
  if (!desc)
    return nullptr;
  // Inputs come from torch's caching allocator (aligned far beyond 256
  // bytes); a planned output sits at its arena offset.
  if (out->arena_offset > 0)
    desc->align_d = lt::alignment_of(reinterpret_cast<const void*>(
        static_cast<uintptr_t>(out->arena_offset)));
  // Tuning reads this weight itself (no scratch copy) and flushes the L2 by
  // reading the graph's other weights on this device (no flush buffer): see
  // libs::cublaslt::TuneResources.
  const void* w_ptr = w->kind == ir::ValueKind::kConstant &&
          w->constant.defined() && w->constant.device() == out->device &&
          w->constant.strides() == c10::IntArrayRef(w_strides) &&
          w->constant.sizes() == c10::IntArrayRef(w->sizes)
      ? w->constant.const_data_ptr()
      : nullptr;
  std::vector<std::pair<const void*, size_t>> flush_from;
  if (node.owner) {
    for (const Value* c : node.owner->constants()) {
      const at::Tensor& t = c->constant;
      if (c != w && t.defined() && t.device() == out->device && t.numel() > 0)
        flush_from.emplace_back(t.const_data_ptr(), t.nbytes());
    }
  }
  // An output whose rows are not 16-byte aligned (GPT-2's LM head, N =
  // 50257): computed in place by row classes where it can be (every class's
  // plan, the head's and the tail's tuned now, the first class's pinned:
  // run_linear finds the others cached; libs/cublaslt.h, padded_split), else in
  // padded chunks (the chunk's plan pinned; padded_chunk_desc).
  const std::optional<lt::PaddedSplit> split = lt::padded_split(*desc);
  if (split) {
    const char* w0 = static_cast<const char*>(w_ptr);
    const int64_t elem = lt::element_size(desc->dtype);
    std::shared_ptr<const lt::MatmulPlan> first;
    for (const lt::PaddedSplit::Part& part : split->parts) {
      auto plan = lt::plan_on_torch_handle(
          part.desc,
          w0 ? w0 + part.col0 * desc->ldb * elem : nullptr,
          flush_from);
      if (!plan)
        return nullptr;
      if (!first)
        first = std::move(plan);
    }
    if (!first || !lt::plan_on_torch_handle(split->head, w_ptr, flush_from))
      return nullptr;
    if (split->tail.n > 0 &&
        !lt::plan_on_torch_handle(
            split->tail,
            w0 ? w0 + split->tail_col0 * desc->ldb * elem : nullptr,
            flush_from))
      return nullptr;
    return std::make_unique<CublasLtLinearStep>(
        node, slots, epilogue, std::move(first), m, true, true);
  }
  const std::optional<lt::MatmulDesc> chunk = lt::padded_chunk_desc(*desc);
  std::shared_ptr<const lt::MatmulPlan> plan =
      lt::plan_on_torch_handle(chunk ? *chunk : *desc, w_ptr, flush_from);
  if (!plan)
    return nullptr;
  if (chunk) { // the tail's plan, tuned now too (run_linear finds it cached)
    const int64_t rows_left = m % chunk->m;
    for (int64_t rows : {chunk->m, rows_left}) {
      if (rows == 0)
        continue;
      lt::MatmulDesc head = *chunk;
      head.m = rows;
      if (!lt::plan_on_torch_handle(head, w_ptr, flush_from) ||
          !lt::plan_on_torch_handle(
              lt::padded_tail_desc(*desc, head, rows), nullptr, flush_from))
        return nullptr;
    }
  }
  return std::make_unique<CublasLtLinearStep>(
      node, slots, epilogue, std::move(plan), m, chunk.has_value(), false);
}

namespace {

// cuBLASLt's tuning settings come from the runtime options (libs knows
// nothing of the runtime).
void hand_options_to_cublaslt(const RuntimeOptions& options) {
  libs::cublaslt::set_tuning(
      options.cublaslt_tuning, options.cublaslt_candidates);
}

const StepRegistration kLibraryStep(
    c10::kCUDA,
    StepKind::kLibrary,
    make_cublaslt_step);
const OptionsListenerRegistration kOptionsListener(hand_options_to_cublaslt);

} // namespace

} // namespace torch_plugin::runtime::cuda
