// attention_patterns.cpp: pass "attention_patterns".
//
// The attention that many models still write out op by op,
//   softmax(Q K^T * scale + mask) V        (Q, K, V: [B, H, S, D])
// becomes one call of aten::scaled_dot_product_attention, which the dispatcher
// sends to a fused attention kernel (flash, memory-efficient or cuDNN attention
// on CUDA): the [B, H, S, S] scores are then never written to memory. After
// AOTAutograd (and its decomposition of matmul) the unfused form reads
//   q3 = view(clone?(expand(Q, [B,H,S,D])), [B*H, S, D])
//   k3 = view(clone?(expand(permute(K, [0,1,3,2]), [B,H,D,S])), [B*H, D, S])
//   s  = view(bmm(q3, k3), [B, H, S, S])
//   s  = mul(s, c) | div(s, c)                  (optional; c a constant)
//   s  = add(s, mask)                           (optional; alpha 1)
//   p  = _softmax(s, -1, false)
//   p3 = view(expand?(clone?(p)), [B*H, S, S])
//   v3 = view(clone?(expand(V, [B,H,S,D])), [B*H, S, D])
//   o  = view(bmm(p3, v3), [B, H, S, D])
// and is rewritten to clone(scaled_dot_product_attention(Q, K, V, mask, 0.0,
// false, scale=c or 1/c or 1.0), contiguous) (the fused kernels may return
// another memory layout; the clone keeps o's contiguous layout, which later
// views rely on). Every intermediate must have one use and not be a graph
// output, the expands must not broadcast (no grouped-query heads), the mask
// must have the scores' dtype, and all values must be on one CUDA device with
// float32, bfloat16 or float16 (the CPU pipeline leaves attention to fusion).
// Numerics: the fused kernels compute the same function in another order
// (online softmax); fp32 results differ from the unfused form by rounding.
#include "compiler/passes/pass.h"

#include <c10/util/Logging.h>

#include <optional>

namespace torch_plugin::compiler {
namespace {

bool single_use(const Value* v, const Graph& g) {
  return v->uses.size() == 1 && !g.is_output(v);
}

Node* producer(const Value* v, const char* op) {
  Node* p = v->producer;
  return p && p->op == op ? p : nullptr;
}

// Skips one single-use clone, if any.
Value* through_clone(Value* v, const Graph& g) {
  Node* c = producer(v, "aten::clone");
  if (c && single_use(v, g) && c->inputs.size() == 1)
    return c->inputs[0];
  return v;
}

// The 4-d tensor behind a [B*H, X, Y] bmm operand: view(clone?(expand(t))),
// where the expand does not broadcast; nullptr otherwise.
Value* unbatched(Value* v3, const Graph& g) {
  Node* view = producer(v3, "aten::view");
  if (!view || !single_use(v3, g) || view->inputs.size() != 1)
    return nullptr;
  Value* x = through_clone(view->inputs[0], g);
  if (!single_use(x, g))
    return nullptr;
  Node* expand = producer(x, "aten::expand");
  if (!expand || expand->inputs.size() != 1)
    return nullptr;
  Value* t = expand->inputs[0];
  if (t->sizes != x->sizes || t->sizes.size() != 4)
    return nullptr;
  return t;
}

std::optional<double> number(const Arg& a) {
  if (a.kind != Arg::Kind::kConst)
    return std::nullopt;
  if (auto* d = std::get_if<double>(&a.value))
    return *d;
  if (auto* i = std::get_if<int64_t>(&a.value))
    return static_cast<double>(*i);
  return std::nullopt;
}

bool float_type(c10::ScalarType t) {
  return t == c10::ScalarType::Float || t == c10::ScalarType::BFloat16 ||
      t == c10::ScalarType::Half;
}

// Rewrites the attention ending in `bmm2` (the P V product); returns whether
// it did.
bool rewrite(Graph& g, Node* bmm2) {
  if (bmm2->inputs.size() != 2 || bmm2->outputs.size() != 1)
    return false;
  Value* out3 = bmm2->outputs[0];
  if (!single_use(out3, g) || out3->device.type() != c10::kCUDA ||
      !float_type(out3->dtype))
    return false;
  Node* out_view = out3->uses[0].user;
  if (out_view->op != "aten::view" || out_view->outputs[0]->sizes.size() != 4)
    return false;
  Value* o = out_view->outputs[0];

  // P: view(expand?(clone?(_softmax(s)))).
  Node* pview = producer(bmm2->inputs[0], "aten::view");
  if (!pview || !single_use(bmm2->inputs[0], g))
    return false;
  Value* p = pview->inputs[0];
  if (Node* e = producer(p, "aten::expand")) {
    if (!single_use(p, g) || e->inputs[0]->sizes != p->sizes)
      return false;
    p = e->inputs[0];
  }
  p = through_clone(p, g);
  Node* softmax = producer(p, "aten::_softmax");
  if (!softmax || !single_use(p, g))
    return false;
  const AttrValue& dim = softmax->const_arg(1);
  const AttrValue& half_to_float = softmax->const_arg(2);
  int64_t rank = static_cast<int64_t>(p->sizes.size());
  if (!std::holds_alternative<int64_t>(dim) || rank != 4 ||
      (std::get<int64_t>(dim) != -1 && std::get<int64_t>(dim) != 3) ||
      !std::holds_alternative<bool>(half_to_float) ||
      std::get<bool>(half_to_float))
    return false;

  // Scores: add(mul|div?(view(bmm1)), mask)?.
  Value* s = softmax->inputs[0];
  Value* mask = nullptr;
  double scale = 1.0;
  if (Node* add = producer(s, "aten::add")) {
    if (!single_use(s, g) || add->overload != "Tensor" ||
        add->inputs.size() != 2)
      return false;
    std::optional<double> alpha = add->args.size() > 2
        ? number(add->args[2])
        : std::optional<double>(1.0);
    if (!alpha || *alpha != 1.0)
      return false;
    // The operand made by the scaling or the bmm's view is the scores; the
    // other one is the mask.
    auto is_scores = [](const Value* v) {
      return v->producer &&
          (v->producer->op == "aten::mul" || v->producer->op == "aten::div" ||
           v->producer->op == "aten::view");
    };
    Value* a = add->inputs[0];
    Value* b = add->inputs[1];
    if (is_scores(a) && a->sizes == s->sizes) {
      s = a;
      mask = b;
    } else if (is_scores(b) && b->sizes == s->sizes) {
      s = b;
      mask = a;
    } else {
      return false;
    }
    if (mask->dtype != s->dtype || mask->sizes.size() > 4)
      return false;
  }
  Node* scaling = producer(s, "aten::mul");
  bool divide = false;
  if (!scaling) {
    scaling = producer(s, "aten::div");
    divide = scaling != nullptr;
  }
  if (scaling) {
    if (!single_use(s, g) ||
        (scaling->overload != "Tensor" && scaling->overload != "Scalar") ||
        scaling->inputs.size() != 1 || scaling->args.size() < 2)
      return false;
    std::optional<double> c = number(scaling->args[1]);
    if (!c || *c == 0.0)
      return false;
    scale = divide ? 1.0 / *c : *c;
    s = scaling->inputs[0];
  }
  Node* sview = producer(s, "aten::view");
  if (!sview || !single_use(s, g))
    return false;
  Node* bmm1 = producer(sview->inputs[0], "aten::bmm");
  if (!bmm1 || !single_use(sview->inputs[0], g) || bmm1->inputs.size() != 2)
    return false;

  Value* q = unbatched(bmm1->inputs[0], g);
  Value* kt = unbatched(bmm1->inputs[1], g);
  Value* v = unbatched(bmm2->inputs[1], g);
  if (!q || !kt || !v)
    return false;
  Node* permute = producer(kt, "aten::permute");
  if (!permute || !single_use(kt, g))
    return false;
  const AttrValue& perm = permute->const_arg(1);
  if (!std::holds_alternative<std::vector<int64_t>>(perm) ||
      std::get<std::vector<int64_t>>(perm) != std::vector<int64_t>{0, 1, 3, 2})
    return false;
  Value* k = permute->inputs[0];
  for (const Value* t : {q, k, v}) {
    if (t->dtype != o->dtype || t->device != o->device || t->sizes.size() != 4)
      return false;
  }
  if (q->sizes != o->sizes || k->sizes != v->sizes ||
      k->sizes[3] != q->sizes[3])
    return false;

  // scaled_dot_product_attention(query, key, value, attn_mask, dropout_p,
  // is_causal, *, scale, enable_gqa), then a contiguous copy.
  std::vector<Value*> inputs = {q, k, v};
  std::vector<Arg> args = {Arg::tensor(0), Arg::tensor(1), Arg::tensor(2)};
  if (mask) {
    inputs.push_back(mask);
    args.push_back(Arg::tensor(3));
  } else {
    args.push_back(Arg::constant(std::monostate{}));
  }
  args.push_back(Arg::constant(0.0));
  args.push_back(Arg::constant(false));
  args.push_back(Arg::constant(scale));
  args.push_back(Arg::constant(false));
  Node* sdpa = g.create_node(
      "aten::scaled_dot_product_attention", "", inputs, args, 1, out_view);
  Graph::set_type(sdpa->outputs[0], o->dtype, o->sizes, o->strides, o->device);
  Node* copy = g.create_node(
      "aten::clone",
      "",
      {sdpa->outputs[0]},
      {Arg::tensor(0), Arg::constant(int64_t{0})},
      1,
      out_view);
  Graph::set_type(copy->outputs[0], o->dtype, o->sizes, o->strides, o->device);
  g.replace_all_uses(o, copy->outputs[0]);
  return true;
}

bool run(Graph& g, const PassOptions&) {
  bool changed = false;
  for (Node* n : g.nodes()) {
    if (n->owner == &g && n->op == "aten::bmm" && rewrite(g, n))
      changed = true;
  }
  return changed; // the unfused chain is dead now: dead_code_elimination
}

} // namespace

const PassInfo kAttentionPatterns = {
    "attention_patterns",
    "Rewrites softmax(Q K^T * scale + mask) V, written op by op, into one "
    "aten::scaled_dot_product_attention call (a fused attention kernel) on "
    "CUDA values.",
    run};

} // namespace torch_plugin::compiler
