// test_attention_patterns.cpp: the attention_patterns pass on hand-built IR
// graphs of the unfused attention AOTAutograd produces (see the pass's header
// comment). The graphs live on a CUDA device but are never run: the pass only
// rewrites, so these tests need no GPU. Numerics against eager on a GPU:
// tests/python/compiler/test_cuda_attention.py.
#include "compiler/passes/pipeline.h"
#include "ir/ir.h"
#include "ir/verifier.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace torch_plugin::compiler {
namespace {

const c10::Device kCuda(c10::kCUDA, 0);

Value* typed(Node* n, std::vector<int64_t> sizes, size_t i = 0) {
  Graph::set_type(
      n->outputs[i],
      c10::ScalarType::Float,
      sizes,
      contiguous_strides(sizes),
      kCuda);
  return n->outputs[i];
}

Value* op(
    Graph& g,
    const std::string& name,
    const std::string& overload,
    std::vector<Value*> ins,
    std::vector<AttrValue> consts,
    std::vector<int64_t> sizes) {
  std::vector<Arg> args;
  for (size_t i = 0; i < ins.size(); ++i)
    args.push_back(Arg::tensor(static_cast<int64_t>(i)));
  for (AttrValue& c : consts)
    args.push_back(Arg::constant(std::move(c)));
  return typed(g.create_node(name, overload, ins, args, 1), sizes);
}

Value* input(Graph& g, std::vector<int64_t> sizes) {
  return g.add_input(
      c10::ScalarType::Float, sizes, contiguous_strides(sizes), kCuda);
}

// The bmm operand [B*H, X, Y] of a 4-d tensor: view(clone(expand(t))).
Value* batched(Graph& g, Value* t, int64_t bh) {
  std::vector<int64_t> s = t->sizes;
  Value* e = op(g, "aten::expand", "default", {t}, {s, false}, s);
  Value* c = op(g, "aten::clone", "default", {e}, {int64_t{0}}, s);
  return op(
      g,
      "aten::view",
      "default",
      {c},
      {std::vector<int64_t>{bh, s[2], s[3]}},
      {bh, s[2], s[3]});
}

struct Attention {
  Value* q;
  Value* k;
  Value* v;
  Value* mask;
  Value* out;
};

// B=2, H=4, S=8, D=16: the graph of BERT's eager attention after AOTAutograd.
Attention build(Graph& g, bool with_mask, const char* scaling) {
  const int64_t B = 2, H = 4, S = 8, D = 16;
  Attention a;
  a.q = input(g, {B, H, S, D});
  a.k = input(g, {B, H, S, D});
  a.v = input(g, {B, H, S, D});
  a.mask = with_mask ? input(g, {B, 1, 1, S}) : nullptr;
  Value* kt =
      op(g,
         "aten::permute",
         "default",
         {a.k},
         {std::vector<int64_t>{0, 1, 3, 2}},
         {B, H, D, S});
  Value* s3 =
      op(g,
         "aten::bmm",
         "default",
         {batched(g, a.q, B * H), batched(g, kt, B * H)},
         {},
         {B * H, S, S});
  Value* s =
      op(g,
         "aten::view",
         "default",
         {s3},
         {std::vector<int64_t>{B, H, S, S}},
         {B, H, S, S});
  if (std::string(scaling) == "mul")
    s = op(g, "aten::mul", "Tensor", {s}, {0.25}, {B, H, S, S});
  else if (std::string(scaling) == "div")
    s = op(g, "aten::div", "Tensor", {s}, {4.0}, {B, H, S, S});
  if (with_mask)
    s = op(g, "aten::add", "Tensor", {s, a.mask}, {int64_t{1}}, {B, H, S, S});
  Value* p = op(
      g, "aten::_softmax", "default", {s}, {int64_t{-1}, false}, {B, H, S, S});
  Value* pe =
      op(g,
         "aten::expand",
         "default",
         {p},
         {std::vector<int64_t>{B, H, S, S}, false},
         {B, H, S, S});
  Value* p3 =
      op(g,
         "aten::view",
         "default",
         {pe},
         {std::vector<int64_t>{B * H, S, S}},
         {B * H, S, S});
  Value* o3 =
      op(g,
         "aten::bmm",
         "default",
         {p3, batched(g, a.v, B * H)},
         {},
         {B * H, S, D});
  a.out =
      op(g,
         "aten::view",
         "default",
         {o3},
         {std::vector<int64_t>{B, H, S, D}},
         {B, H, S, D});
  Value* y =
      op(g,
         "aten::permute",
         "default",
         {a.out},
         {std::vector<int64_t>{0, 2, 1, 3}},
         {B, S, H, D});
  g.set_outputs({y});
  return a;
}

std::vector<std::string> ops(const Graph& g) {
  std::vector<std::string> out;
  for (Node* n : g.nodes())
    out.push_back(n->qualified_name());
  return out;
}

bool has(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

Node* only(const Graph& g, const std::string& name) {
  Node* found = nullptr;
  for (Node* n : g.nodes()) {
    if (n->qualified_name() == name) {
      EXPECT_EQ(found, nullptr) << "two " << name;
      found = n;
    }
  }
  EXPECT_NE(found, nullptr) << "no " << name;
  return found;
}

void rewrite(Graph& g) {
  PassOptions o;
  EXPECT_TRUE(run_pass(find_pass("attention_patterns"), g, o));
  run_pass(find_pass("dead_code_elimination"), g, o);
  verify(g);
}

double scale_of(const Node* sdpa) {
  return std::get<double>(sdpa->const_arg(6));
}

TEST(AttentionPatterns, MaskedScaledAttentionBecomesOneCall) {
  Graph g;
  Attention a = build(g, true, "mul");
  rewrite(g);
  auto names = ops(g);
  EXPECT_FALSE(has(names, "aten::bmm"));
  EXPECT_FALSE(has(names, "aten::_softmax"));
  Node* sdpa = only(g, "aten::scaled_dot_product_attention");
  ASSERT_EQ(sdpa->inputs.size(), 4u);
  EXPECT_EQ(sdpa->inputs[0], a.q);
  EXPECT_EQ(sdpa->inputs[1], a.k); // K itself, not its transpose
  EXPECT_EQ(sdpa->inputs[2], a.v);
  EXPECT_EQ(sdpa->inputs[3], a.mask);
  EXPECT_DOUBLE_EQ(scale_of(sdpa), 0.25);
  // The output keeps its contiguous layout through a copy, then the permute.
  Node* clone = sdpa->outputs[0]->uses.at(0).user;
  EXPECT_EQ(clone->op, "aten::clone");
  EXPECT_EQ(clone->outputs[0]->uses.at(0).user->op, "aten::permute");
}

TEST(AttentionPatterns, DivisionAndNoMask) {
  Graph g;
  build(g, false, "div");
  rewrite(g);
  Node* sdpa = only(g, "aten::scaled_dot_product_attention");
  EXPECT_EQ(sdpa->inputs.size(), 3u);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(sdpa->const_arg(3)));
  EXPECT_DOUBLE_EQ(scale_of(sdpa), 0.25);
}

TEST(AttentionPatterns, UnscaledAttentionPassesScaleOne) {
  Graph g;
  build(g, true, "none");
  rewrite(g);
  // SDPA's default scale would be 1/sqrt(D): the unscaled form must say 1.
  EXPECT_DOUBLE_EQ(
      scale_of(only(g, "aten::scaled_dot_product_attention")), 1.0);
}

TEST(AttentionPatterns, ScoresUsedElsewhereAreLeftAlone) {
  Graph g;
  build(g, true, "mul");
  // The attention probabilities are also a graph output (need_weights): the
  // scores must stay materialized, so nothing is rewritten.
  Node* softmax = nullptr;
  for (Node* n : g.nodes())
    if (n->op == "aten::_softmax")
      softmax = n;
  std::vector<Value*> outs = g.outputs();
  outs.push_back(softmax->outputs[0]);
  g.set_outputs(outs);
  PassOptions o;
  EXPECT_FALSE(run_pass(find_pass("attention_patterns"), g, o));
  EXPECT_TRUE(has(ops(g), "aten::bmm"));
}

TEST(AttentionPatterns, CpuGraphsAreLeftToFusion) {
  Graph g;
  const int64_t B = 1, H = 1, S = 4, D = 8;
  auto cpu_input = [&](std::vector<int64_t> s) {
    return g.add_input(
        c10::ScalarType::Float,
        s,
        contiguous_strides(s),
        c10::Device(c10::kCPU));
  };
  Value* q3 = cpu_input({B * H, S, D});
  Value* k3 = cpu_input({B * H, D, S});
  Node* bmm = g.create_node(
      "aten::bmm", "default", {q3, k3}, {Arg::tensor(0), Arg::tensor(1)}, 1);
  Graph::set_type(
      bmm->outputs[0],
      c10::ScalarType::Float,
      {B * H, S, S},
      contiguous_strides({B * H, S, S}),
      c10::Device(c10::kCPU));
  g.set_outputs({bmm->outputs[0]});
  PassOptions o;
  EXPECT_FALSE(run_pass(find_pass("attention_patterns"), g, o));
}

} // namespace
} // namespace torch_plugin::compiler
