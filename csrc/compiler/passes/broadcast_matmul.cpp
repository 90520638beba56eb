// broadcast_matmul.cpp: pass "broadcast_matmul" (CUDA pipeline).
//
// Rule:
//   A  = same-size views of R                       [Bt, M, K] (any strides)
//   Wb = same-size views of expand(Wt, [Bt, K, N])  (Wt [K, N], batch stride 0;
//        or a constant whose batch slices all equal Wt: a folded expand)
//   Y  = bmm(A, Wb)                                 [Bt, M, N] (contiguous)
//   Z  = add(same-size views of Y, c)               (optional: c a constant
//        bias [N] or [1, .., N] of Y's dtype, alpha 1, every value single-use)
//     => P = addmm(c as [N], view(R', [Bt*M, K]), Wt)   (mm without the add)
//        Z (or Y) = view(P, [Bt, M, N])
// where R' = R when R is contiguous, else clone(R) (contiguous); and
//   Z = add(row views of mm(x, Wt), c)    (c, alpha and uses as above)
//     => Z = view(addmm(c as [N], x, Wt), Z.sizes)
// (the same F.linear where ATen's matmul folds the leading dims with a copy:
// clone, view, mm, view, add; the in-projection at batch > 1 in fp32, whose
// parameters require a gradient).
// This is F.linear on a 3-d input whose leading dims do not flatten without
// a copy, as ATen's matmul (aten/src/ATen/native/LinearAlgebra.cpp,
// should_fold; torch/_decomp matmul) writes it when no operand requires a
// gradient: nn.MultiheadAttention's packed in-projection on its transposed
// [L, B, E] query at batch > 1 under autocast (the autocast cast of the weight
// does not require a gradient, so matmul expands the weight over the L batches
// and calls bmm, then adds the bias alone). Here it becomes one product of
// [L*B, E] rows with the bias in cuBLASLt's epilogue (library_patterns makes
// the addmm a linear_pointwise), writing the bmm's own output layout
// ([L, B, N] contiguous is [L*B, N] row-major): every downstream view sees
// the sizes and strides it was traced with, and split_projection can then
// split the product into q, k and v. The copy of R (the query's layout
// change) is a pointwise identity that the fusion pass puts into R's
// producer's kernel (ViT: the autocast _to_copy of the permuted LayerNorm
// output); the bias add and the bmm's separate pass over [L, B, 3E] are gone.
//
// Numerics: each output element is the same dot product (a row of A and a
// column of Wt); the bias is added in fp32 in the product's epilogue and the
// sum rounded once to bf16/fp16, as eager's own batch-1 path (addmm) and its
// fast path do, where eager's bmm path rounds the product before its bias add.
#include "compiler/passes/pattern_rules.h"

#include "ir/op_schema.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace torch_plugin::compiler {
namespace {

namespace add = schema::add;

// A view-like node whose output has its input's sizes (so the same layout):
// view/_unsafe_view/reshape to the same sizes, alias, expand to the same sizes.
bool same_size_view(const Node* n) {
  if (!n || n->inputs.size() != 1 || n->outputs.size() != 1)
    return false;
  static const char* const ops[] = {
      "aten::view",
      "aten::_unsafe_view",
      "aten::reshape",
      "aten::alias",
      "aten::expand"};
  bool listed = false;
  for (const char* op : ops)
    listed |= n->op == op;
  return listed && n->inputs[0]->sizes == n->outputs[0]->sizes &&
      n->inputs[0]->strides == n->outputs[0]->strides;
}

// v, looked at through same-size views (v itself when none).
Value* through_views(Value* v) {
  while (v->producer && same_size_view(v->producer))
    v = v->producer->inputs[0];
  return v;
}

// The [K, N] operand that `b` ([Bt, K, N]) broadcasts over the batch, or
// nullptr: the input of expand(Wt, [Bt, K, N]) behind same-size views of b
// (batch stride 0), or, for a constant b whose batch slices are all equal
// (constant_folding materializes an expand of at most 64 KiB), a constant
// view of its first slice.
Value* broadcast_weight(Graph& g, Value* b) {
  if (b->sizes.size() != 3)
    return nullptr;
  if (is_const(b) && b->constant.defined() && b->constant.dim() == 3 &&
      b->sizes[0] > 0 && b->constant.nbytes() <= (size_t{1} << 20)) {
    const at::Tensor& c = b->constant;
    const at::Tensor first = c.select(0, 0);
    if (!at::equal(c, first.unsqueeze(0).expand_as(c)))
      return nullptr;
    Value* w = g.add_constant(first);
    w->device = b->device;
    return w;
  }
  if (b->strides[0] != 0)
    return nullptr;
  Value* v = b;
  while (v->producer && v->producer->op != "aten::expand" &&
         same_size_view(v->producer))
    v = v->producer->inputs[0];
  const Node* e = v->producer;
  if (!e || e->op != "aten::expand" || e->inputs.size() != 1 ||
      v->sizes != b->sizes)
    return nullptr;
  Value* w = e->inputs[0];
  if (w->sizes.size() != 2 || w->sizes[0] != b->sizes[1] ||
      w->sizes[1] != b->sizes[2])
    return nullptr;
  return w;
}

// A view of a contiguous value to contiguous sizes with the same last dim
// (view/_unsafe_view/reshape: [M, N] -> [L, B, N] and back), or a same-size
// view.
bool row_view(const Node* n) {
  if (same_size_view(n))
    return true;
  if (!n || n->inputs.size() != 1 || n->outputs.size() != 1 ||
      (n->op != "aten::view" && n->op != "aten::_unsafe_view" &&
       n->op != "aten::reshape"))
    return false;
  const Value* in = n->inputs[0];
  const Value* out = n->outputs[0];
  return in->is_contiguous() && out->is_contiguous() && !in->sizes.empty() &&
      !out->sizes.empty() && in->sizes.back() == out->sizes.back() &&
      in->numel() == out->numel();
}

// The add of a bias to `y` [.., N] (contiguous; through row views of
// single-use values), whose output is contiguous: the add node, its bias
// operand in *bias; else nullptr.
Node* bias_add(const Graph& g, Value* y, Value** bias) {
  Value* v = y;
  if (!y->is_contiguous() || y->sizes.empty())
    return nullptr;
  while (single_use(v, g) && row_view(v->uses[0].user))
    v = v->uses[0].user->outputs[0];
  if (!single_use(v, g))
    return nullptr;
  Node* a = v->uses[0].user;
  if (a->qualified_name() != "aten::add.Tensor" || a->outputs.size() != 1 ||
      a->args.size() <= add::kAlpha)
    return nullptr;
  const AttrValue& alpha = a->const_arg(add::kAlpha);
  const bool one = std::holds_alternative<int64_t>(alpha)
      ? std::get<int64_t>(alpha) == 1
      : std::holds_alternative<double>(alpha) && std::get<double>(alpha) == 1.0;
  Value* self = a->tensor_arg(add::kSelf);
  Value* other = a->tensor_arg(add::kOther);
  Value* c = self == v ? other : other == v ? self : nullptr;
  const Value* z = a->outputs[0];
  if (!one || !c || c == v || !is_const(c) || !c->constant.defined() ||
      c->dtype != y->dtype || c->device != y->device || c->sizes.empty() ||
      c->sizes.back() != y->sizes.back() || c->numel() != y->sizes.back() ||
      c->sizes.size() > v->sizes.size() || z->sizes != v->sizes ||
      z->dtype != y->dtype || !z->is_contiguous())
    return nullptr;
  *bias = c;
  return a;
}

Node* make_view(
    Graph& g,
    Value* x,
    const std::vector<int64_t>& sizes,
    Node* before) {
  Node* v = g.create_node(
      "aten::view",
      "default",
      {x},
      {Arg::tensor(0), Arg::constant(sizes)},
      1,
      before);
  v->may_alias = true;
  Graph::set_type(
      v->outputs[0], x->dtype, sizes, contiguous_strides(sizes), x->device);
  return v;
}

// Erases `n` and then, walking up, each producer left without uses.
void erase_dead(Graph& g, Node* n) {
  std::vector<Node*> work = {n};
  while (!work.empty()) {
    Node* m = work.back();
    work.pop_back();
    bool used = false;
    for (const Value* o : m->outputs)
      used |= !o->uses.empty() || g.is_output(o);
    if (used)
      continue;
    std::vector<Node*> producers;
    for (const Value* in : m->inputs)
      if (in->producer)
        producers.push_back(in->producer);
    g.erase_node(m);
    for (Node* p : producers)
      if (std::find(work.begin(), work.end(), p) == work.end())
        work.push_back(p);
  }
}

// addmm(bias, x2d, wt) (mm(x2d, wt) without `adder`) before `n`, viewed as
// the value it replaces: the add's output, else n's output `y`; then the
// replaced nodes (the add, views, n and its dead operands) are erased.
void replace_with_product(
    Graph& g,
    Node* n,
    Value* x2d,
    Value* wt,
    const Value* y,
    Node* adder,
    Value* bias) {
  const int64_t nn = wt->sizes[1];
  Node* product = nullptr;
  if (adder) {
    // cuBLASLt reads the bias as N contiguous elements.
    Value* b1d = bias->sizes.size() == 1 && bias->constant.is_contiguous()
        ? bias
        : g.add_constant(bias->constant.reshape({nn}).contiguous());
    b1d->device = bias->device;
    product = g.create_node(
        "aten::addmm",
        "default",
        {b1d, x2d, wt},
        {Arg::tensor(0),
         Arg::tensor(1),
         Arg::tensor(2),
         Arg::constant(int64_t{1}),
         Arg::constant(int64_t{1})},
        1,
        n);
  } else {
    product = g.create_node(
        "aten::mm",
        "default",
        {x2d, wt},
        {Arg::tensor(0), Arg::tensor(1)},
        1,
        n);
  }
  Graph::set_type(
      product->outputs[0], y->dtype, {x2d->sizes[0], nn}, {nn, 1}, y->device);
  Value* replaced = adder ? adder->outputs[0] : n->outputs[0];
  Value* out =
      make_view(g, product->outputs[0], replaced->sizes, n)->outputs[0];
  g.replace_all_uses(replaced, out);
  erase_dead(g, adder ? adder : n); // the add, views, n, expands
}

bool run(Graph& g, const PassOptions&) {
  // The bmm nodes first: a rewrite erases nodes around its bmm (its views
  // and bias add, never another bmm).
  std::vector<Node*> bmms;
  for (Node* n : g.nodes())
    if (n->qualified_name() == "aten::bmm" && n->inputs.size() == 2 &&
        n->outputs.size() == 1 && n->args.size() == 2)
      bmms.push_back(n);
  bool changed = false;
  for (Node* n : bmms) {
    Value* a = n->tensor_arg(0);
    Value* b = n->tensor_arg(1);
    Value* y = n->outputs[0];
    if (!a || !b || a->sizes.size() != 3 || y->sizes.size() != 3 ||
        g.is_output(y) || !y->is_contiguous() || a->dtype != y->dtype ||
        b->dtype != y->dtype || y->numel() == 0)
      continue;
    Value* r = through_views(a);
    if (r->sizes != a->sizes)
      continue;
    Value* wt = broadcast_weight(g, b);
    if (!wt || wt->dtype != y->dtype)
      continue;
    const int64_t bt = a->sizes[0], m = a->sizes[1], k = a->sizes[2];
    Value* bias = nullptr;
    Node* adder = bias_add(g, y, &bias);
    // The rows of A as one [Bt*M, K] matrix: R itself when contiguous, else
    // its contiguous copy.
    Value* rows = r;
    if (!r->is_contiguous()) {
      Node* copy = g.create_node(
          "aten::clone",
          "default",
          {r},
          {Arg::tensor(0), Arg::constant(int64_t{0})}, // contiguous_format
          1,
          n);
      Graph::set_type(
          copy->outputs[0],
          r->dtype,
          r->sizes,
          contiguous_strides(r->sizes),
          r->device);
      rows = copy->outputs[0];
    }
    Value* x2d = make_view(g, rows, {bt * m, k}, n)->outputs[0];
    replace_with_product(g, n, x2d, wt, y, adder, bias);
    changed = true;
  }
  // mm(x, Wt) [M, N], then a bias add behind row views (F.linear on a 3-d
  // input that ATen's matmul folded with a copy: clone, view, mm, view, add;
  // nn.MultiheadAttention's in-projection at batch > 1 in fp32) => addmm.
  std::vector<Node*> mms;
  for (Node* n : g.nodes())
    if (n->qualified_name() == "aten::mm" && n->inputs.size() == 2 &&
        n->outputs.size() == 1 && n->args.size() == 2)
      mms.push_back(n);
  for (Node* n : mms) {
    Value* y = n->outputs[0];
    Value* x = n->tensor_arg(0);
    Value* wt = n->tensor_arg(1);
    Value* bias = nullptr;
    if (!x || !wt || y->sizes.size() != 2 || g.is_output(y) ||
        x->dtype != y->dtype || wt->dtype != y->dtype)
      continue;
    Node* adder = bias_add(g, y, &bias);
    if (!adder)
      continue;
    replace_with_product(g, n, x, wt, y, adder, bias);
    changed = true;
  }
  return changed;
}

} // namespace

const PassInfo kBroadcastMatmul = {
    "broadcast_matmul",
    "bmm(A [B, M, K], expand(Wt [K, N])) (+ a bias add) becomes one product "
    "addmm(b, A as [B*M, K], Wt) writing the bmm's layout (A copied contiguous "
    "first when its rows do not flatten): F.linear on a transposed 3-d input "
    "(nn.MultiheadAttention's in-projection under autocast); a bias add "
    "behind an mm's views joins it as addmm.",
    run};

} // namespace torch_plugin::compiler
