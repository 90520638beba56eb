// attention_op.cpp: torch_plugin::scaled_dot_product_attention, the attention
// of CUDA inference graphs (issue #11).
//
//   scaled_dot_product_attention(Tensor query, Tensor key, Tensor value,
//       Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, *,
//       float? scale=None, bool enable_gqa=False) -> Tensor
//
// aten::scaled_dot_product_attention with a fixed output layout and no
// dropout. Why: the ATen op is CompositeImplicitAutograd, so AOTAutograd
// traces it into whichever backend op it picks for FakeTensors, and that pick
// is not eager's: fp32 attention became the unfused math path (QK^T, a
// _safe_softmax decomposed into six ops, PV; BERT-base batch 32 on an H100:
// +1.6 ms, 331 kernels against eager's 155), and bf16 attention became
// _scaled_dot_product_cudnn_attention, whose int results the compiler does not
// take (the whole GPT-2 graph then ran unlowered). This op is a leaf in the
// traced graph; at run time it calls the ATen op, which picks the fused
// kernel on real tensors exactly as eager does (flash, memory-efficient or
// cuDNN attention).
//
// Layout: the fused kernels return [B, H, L, Ev] stored as [B, L, H, Ev]
// (flash and memory-efficient attention write the heads innermost), the math
// path contiguously; generated kernels downstream bake the strides the Meta
// kernel reports, so the output always has one layout: for 4-d attention
// [B, H, L, Ev] with strides of a contiguous [B, L, H, Ev] (the layout the
// usual transpose(1, 2).reshape(B, L, H * Ev) after attention reads without a
// copy), otherwise contiguous. A result in another layout is copied into it.
//
// Mask: the fused kernels take a mask only when its last dimension has stride
// 1. A mask built by broadcasting a column (Hugging Face's sdpa_mask: a
// [1, 1, L, 1] comparison expanded to [B, 1, L, S], last-dimension stride 0)
// made ATen pick the math path for BERT under capture, where eager, given no
// mask, ran memory-efficient attention; such a mask is copied contiguously
// first (same values, one small copy). The training backward's recomputation
// (torch_plugin/compiler/attention_training.py, _column_broadcast) applies the
// same rule, so that both passes get the same kernel.
//
// query [..., L, E], key [..., S, E], value [..., S, Ev], all of one float
// dtype and with query's batch dimensions (no broadcasting; with enable_gqa
// key and value may have fewer heads). dropout_p must be 0: the op is pure, so
// a compiled graph may run it again (timing, CUDA graph capture). Raises
// c10::Error for another dropout_p or mismatched batch dimensions. No
// derivative: the "plugin" backend uses it in inference graphs only (see
// library_ops.cpp, Autograd).
#include "ops/library_ops.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/library.h>

#include <vector>

namespace torch_plugin::ops {
namespace {

void check_attention(
    const at::Tensor& q,
    const at::Tensor& k,
    const at::Tensor& v,
    double dropout_p) {
  TORCH_CHECK(
      dropout_p == 0.0,
      "torch_plugin::scaled_dot_product_attention: dropout_p must be 0, got ",
      dropout_p);
  TORCH_CHECK(
      q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(),
      "torch_plugin::scaled_dot_product_attention: query, key and value must "
      "have one rank of at least 2, got ",
      q.dim(),
      ", ",
      k.dim(),
      ", ",
      v.dim());
  // Batch dimensions (all but heads, length and features) must match.
  const int64_t batch_dims = q.dim() >= 4 ? q.dim() - 3 : q.dim() - 2;
  for (int64_t d = 0; d < batch_dims; ++d) {
    TORCH_CHECK(
        k.sym_size(d) == q.sym_size(d) && v.sym_size(d) == q.sym_size(d),
        "torch_plugin::scaled_dot_product_attention: batch dimension ",
        d,
        " differs between query, key and value (no broadcasting)");
  }
}

// An uninitialised tensor of the op's output layout (see the header).
at::Tensor empty_output(const at::Tensor& q, const at::Tensor& v) {
  std::vector<c10::SymInt> sizes = q.sym_sizes().vec();
  sizes.back() = v.sym_size(-1);
  auto options = q.options();
  if (sizes.size() == 4) {
    std::vector<c10::SymInt> blhe = {sizes[0], sizes[2], sizes[1], sizes[3]};
    return at::empty_symint(blhe, options).transpose(1, 2);
  }
  return at::empty_symint(sizes, options);
}

// Whether `out` (sizes already the op's) has the output layout.
bool has_output_layout(const at::Tensor& out) {
  at::IntArrayRef n = out.sizes();
  std::vector<int64_t> expected(n.size());
  if (n.size() == 4) {
    expected = {n[1] * n[2] * n[3], n[3], n[1] * n[3], 1};
  } else {
    int64_t stride = 1;
    for (size_t i = n.size(); i-- > 0;) {
      expected[i] = stride;
      stride *= n[i];
    }
  }
  return out.strides() == at::IntArrayRef(expected);
}

at::Tensor attention_meta(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask,
    double dropout_p,
    bool is_causal,
    std::optional<double> scale,
    bool enable_gqa) {
  check_attention(query, key, value, dropout_p);
  return empty_output(query, value);
}

at::Tensor attention_kernel(
    const at::Tensor& query,
    const at::Tensor& key,
    const at::Tensor& value,
    const std::optional<at::Tensor>& attn_mask,
    double dropout_p,
    bool is_causal,
    std::optional<double> scale,
    bool enable_gqa) {
  check_attention(query, key, value, dropout_p);
  std::optional<at::Tensor> mask = attn_mask;
  if (mask.has_value() && mask->dim() > 0 && mask->stride(-1) != 1 &&
      mask->size(-1) > 1) {
    mask = mask->contiguous();
  }
  at::Tensor out = at::scaled_dot_product_attention(
      query, key, value, mask, 0.0, is_causal, scale, enable_gqa);
  if (has_output_layout(out)) {
    return out;
  }
  return empty_output(query, value).copy_(out);
}

} // namespace


} // namespace torch_plugin::ops

TORCH_LIBRARY_FRAGMENT(torch_plugin, m) {
  m.def(
      "scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, "
      "Tensor? attn_mask=None, float dropout_p=0.0, bool is_causal=False, *, "
      "float? scale=None, bool enable_gqa=False) -> Tensor");
}

TORCH_LIBRARY_IMPL(torch_plugin, CompositeExplicitAutograd, m) {
  m.impl("scaled_dot_product_attention", torch_plugin::ops::attention_kernel);
}

TORCH_LIBRARY_IMPL(torch_plugin, Meta, m) {
  m.impl("scaled_dot_product_attention", torch_plugin::ops::attention_meta);
}
