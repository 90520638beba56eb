// split_projection.cpp: pass "split_projection" (CPU and CUDA pipelines).
//
// Rule:
//   L = linear_pointwise(x, W [N, K], b?, None, act...)        [M, N]
//   C = views of L (view, unsqueeze, permute, squeeze, ...)     [G, ..., w]
//   Y = clone(C)                    (contiguous: the heads' copy)
//   y_j = select(Y, 0, j)           (every use of Y)
// where w = N / G and C's element [j, i..., e] is L[m(i...), j * w + e], with
// m(i...) the row-major index of i... over M rows
//     => y_j = view(linear_pointwise(x, W[j*w : (j+1)*w], b[j*w : ...], ...),
//                   C.sizes[1:])
// This is nn.MultiheadAttention's packed in-projection as
// F.multi_head_attention_forward writes it for self-attention (torchvision's
// ViT): `proj.unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2)
// .squeeze(-2).contiguous()`, then q, k, v = proj[0], proj[1], proj[2]. The
// clone copies the whole [M, 3E] product once more (ViT-B/16 batch 8: 14.5 MB
// read and written per layer); G products with a row block of W each write q,
// k and v where the clone would have put them. W's row blocks are views of W
// (no copy of a weight: W must be contiguous), b's are copied (as a bias always
// is by the oneDNN step).
//
// On CUDA the linear nodes are cuBLASLt's (runtime/cuda/cublaslt_step.cpp),
// fp32, bf16 or fp16: a row block j*w of W [N, K] (contiguous) is a valid
// cuBLASLt operand at any offset (the step derives the pointer alignment at
// each run), and is taken only where every block starts 16-byte aligned
// (w * K * element size a multiple of 16), the alignment cuBLASLt's fast
// kernels want; the bias blocks are fresh copies; and only for a packed
// product of at least 2^21 elements (measured below: smaller products are
// latency-bound, and G of them cost more than one and the copy). At batch > 1
// under autocast the product comes from broadcast_matmul (a bmm over the
// transposed query made one product).
//
// Why it is exact: each output element is the same dot product of a row of x
// and a row of W (plus the same bias element and activation); only which
// primitive computes it changes (oneDNN's blocking may differ between the N
// sizes, as between any two shapes: results equal up to the summation order of
// the product, as for any oneDNN call against ATen).
#include "compiler/passes/pass.h"

#include "ir/op_schema.h"

#include <ATen/ATen.h>

namespace torch_plugin::compiler {
namespace {

namespace linear = schema::linear_pointwise;

bool single_use(const Value* v, const Graph& g) {
  return v->uses.size() == 1 && !g.is_output(v);
}

// Views that keep their input's storage offset (select and slice do not).
bool is_offsetless_view(const Node* n) {
  static const char* const ops[] = {
      "aten::view",
      "aten::_unsafe_view",
      "aten::unsqueeze",
      "aten::squeeze",
      "aten::permute",
      "aten::t",
      "aten::transpose"};
  for (const char* op : ops)
    if (n->op == op)
      return n->inputs.size() == 1;
  return false;
}

std::vector<int64_t> contiguous(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size(), 1);
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * sizes[i + 1];
  return s;
}

// The constant integer argument i of n, or -1.
int64_t int_arg(const Node* n, size_t i) {
  if (i >= n->args.size() || n->args[i].kind != Arg::Kind::kConst)
    return -1;
  const auto* v = std::get_if<int64_t>(&n->args[i].value);
  return v ? *v : -1;
}

// The linear node behind the clone `y`, with the chain of views between them
// (`views`, clone side first), when the rule's layout holds; else nullptr.
Node* projection(const Graph& g, Node* clone, std::vector<Node*>& views) {
  Value* c = clone->inputs[0];
  Value* v = c;
  while (v->producer && is_offsetless_view(v->producer)) {
    if (!single_use(v, g))
      return nullptr;
    views.push_back(v->producer);
    v = v->producer->inputs[0];
  }
  Node* lin = v->producer;
  if (views.empty() || !lin || lin->op != "torch_plugin::linear_pointwise" ||
      !single_use(v, g) || lin->tensor_arg(linear::kResidual) ||
      v->sizes.size() != 2 || v->strides != contiguous(v->sizes) ||
      !(v->dtype == at::kFloat ||
        (v->device.is_cuda() &&
         (v->dtype == at::kBFloat16 || v->dtype == at::kHalf))))
    return nullptr;
  const Value* x = lin->tensor_arg(linear::kX);
  const Value* w = lin->tensor_arg(linear::kW);
  const Value* b = lin->tensor_arg(linear::kBias);
  if (!x || x->sizes.size() != 2 || !w || w->kind != ValueKind::kConstant ||
      !w->constant.defined() || !w->constant.is_contiguous() ||
      (b && (b->kind != ValueKind::kConstant || !b->constant.defined())))
    return nullptr;
  const int64_t m = v->sizes[0], n = v->sizes[1];
  // cuBLASLt: each row block of W must start 16 bytes aligned, as W does
  // (else the part products run an align1/align2 kernel: slower than one
  // product and the copy).
  if (v->device.is_cuda() &&
      c->sizes.back() * w->sizes[1] *
              static_cast<int64_t>(c10::elementSize(w->dtype)) % 16 !=
          0)
    return nullptr;
  // cuBLASLt: G products are faster than one product and the copy only when
  // the packed product fills about one wave of 128x128 tiles on an H100 (132
  // SMs: 2^21 output elements); below, each part is latency-bound (H100,
  // ViT-B/16 bf16: batch 32, M = 6304, three products 52 us against one 38
  // us + the copy 40 us; batch 1, M = 197, 51 us against 17 + 18 us).
  if (v->device.is_cuda() && m * n < (int64_t{1} << 21))
    return nullptr;
  const std::vector<int64_t>& s = c->sizes;
  const std::vector<int64_t>& t = c->strides;
  const size_t r = s.size();
  if (r < 3 || t[r - 1] != 1 || s[0] < 2 || s[0] * s[r - 1] != n ||
      t[0] != s[r - 1])
    return nullptr;
  int64_t rows = 1; // rows of L that dims r-2 .. i+1 span
  for (size_t i = r - 2; i >= 1; --i) {
    if (s[i] != 1 && t[i] != n * rows)
      return nullptr;
    rows *= s[i];
  }
  return rows == m ? lin : nullptr;
}

bool run(Graph& g, const PassOptions&) {
  // The clones first: a rewrite erases nodes after its clone (never a clone).
  std::vector<Node*> clones;
  for (Node* n : g.nodes())
    if (n->op == "aten::clone" && n->inputs.size() == 1 &&
        n->outputs.size() == 1)
      clones.push_back(n);
  bool changed = false;
  for (Node* clone : clones) {
    Value* y = clone->outputs[0];
    if (g.is_output(y) || y->uses.empty() || y->strides != contiguous(y->sizes))
      continue;
    bool selects = true;
    for (const Use& u : y->uses) {
      const Node* s = u.user;
      selects &= s->op == "aten::select" && s->inputs.size() == 1 &&
          int_arg(s, 1) == 0 && int_arg(s, 2) >= 0 &&
          int_arg(s, 2) < y->sizes[0] && !g.is_output(s->outputs[0]);
    }
    std::vector<Node*> views;
    Node* lin = selects ? projection(g, clone, views) : nullptr;
    if (!lin)
      continue;
    const Value* c = clone->inputs[0];
    const int64_t w = c->sizes.back();
    const std::vector<int64_t> head(c->sizes.begin() + 1, c->sizes.end());
    const at::Tensor& weight = lin->tensor_arg(linear::kW)->constant;
    const Value* bias = lin->tensor_arg(linear::kBias);
    std::vector<Node*> users;
    for (const Use& u : y->uses)
      users.push_back(u.user);
    for (Node* s : users) {
      const int64_t j = int_arg(s, 2);
      std::vector<Value*> inputs = {
          lin->tensor_arg(linear::kX),
          g.add_constant(weight.narrow(0, j * w, w))};
      std::vector<Arg> args = lin->args;
      args[linear::kX] = Arg::tensor(0);
      args[linear::kW] = Arg::tensor(1);
      if (bias) {
        inputs.push_back(
            g.add_constant(bias->constant.narrow(0, j * w, w).contiguous()));
        args[linear::kBias] = Arg::tensor(2);
      }
      Node* part =
          g.create_node(lin->op, lin->overload, inputs, args, 1, clone);
      const Value* x = lin->tensor_arg(linear::kX);
      Graph::set_type(
          part->outputs[0],
          c->dtype,
          {x->sizes[0], w},
          {w, 1},
          lin->outputs[0]->device);
      Node* view = g.create_node(
          "aten::view",
          "default",
          {part->outputs[0]},
          {Arg::tensor(0), Arg::constant(head)},
          1,
          clone);
      view->may_alias = true;
      Value* out = s->outputs[0];
      Graph::set_type(
          view->outputs[0], out->dtype, head, contiguous(head), out->device);
      g.replace_all_uses(out, view->outputs[0]);
      g.erase_node(s);
    }
    g.erase_node(clone);
    for (Node* v : views)
      g.erase_node(v);
    g.erase_node(lin);
    changed = true;
  }
  return changed;
}

} // namespace

const PassInfo kSplitProjection = {
    "split_projection",
    "A packed projection whose output is copied into heads (clone of a view, then "
    "select(0, j)) becomes one product per head with a row block of the weight, "
    "writing each head where the copy would have: no copy (nn.MultiheadAttention's "
    "in-projection).",
    run};

} // namespace torch_plugin::compiler
