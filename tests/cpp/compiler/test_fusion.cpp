// test_fusion.cpp: unit tests of the "fusion" pass
// (csrc/compiler/passes/fusion.cpp) on small IR graphs built by hand: which
// nodes end up in which fusion group, the group's domain, levels and outputs,
// and the generated source's shape. The kernels' numerics are tested against
// eager in tests/python/compiler.
#include "compiler/passes/pass.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace torch_plugin::compiler {
namespace {

using c10::ScalarType;

struct Builder {
  Graph g;

  Value* input(
      std::vector<int64_t> sizes,
      ScalarType dtype = ScalarType::Float) {
    return g.add_input(
        dtype, sizes, contiguous_strides(sizes), c10::Device(c10::kCPU));
  }
  // A node with tensor inputs first (as schema args 0..n) then constant args.
  Value* op(
      const std::string& name,
      const std::string& overload,
      std::vector<Value*> ins,
      std::vector<AttrValue> consts,
      std::vector<int64_t> sizes,
      ScalarType dtype = ScalarType::Float,
      size_t outputs = 1) {
    std::vector<Arg> args;
    for (size_t i = 0; i < ins.size(); ++i)
      args.push_back(Arg::tensor(static_cast<int64_t>(i)));
    for (auto& c : consts)
      args.push_back(Arg::constant(c));
    Node* n = g.create_node(name, overload, ins, args, outputs);
    for (Value* o : n->outputs)
      Graph::set_type(
          o, dtype, sizes, contiguous_strides(sizes), c10::Device(c10::kCPU));
    return n->outputs[0];
  }
  Value* mul(Value* a, Value* b) {
    return op("aten::mul", "Tensor", {a, b}, {}, a->sizes);
  }
  Value* mul_scalar(Value* a, double s) {
    return op("aten::mul", "Scalar", {a}, {s}, a->sizes);
  }
  Value* add(Value* a, Value* b, std::vector<int64_t> sizes) {
    return op("aten::add", "Tensor", {a, b}, {int64_t{1}}, sizes);
  }
  Value* unary(const std::string& name, Value* a) {
    return op(name, "default", {a}, {}, a->sizes);
  }
  Value* sum(
      Value* a,
      std::vector<int64_t> dims,
      bool keepdim,
      std::vector<int64_t> sizes) {
    return op(
        "aten::sum",
        "dim_IntList",
        {a},
        {dims, keepdim, std::monostate{}},
        sizes);
  }

  // The fusion pass, then the codegen pass that renders its groups' kernels.
  bool run() {
    PassOptions o;
    bool changed = kFusion.run(g, o);
    kCodegen.run(g, o);
    return changed;
  }
  std::vector<Node*> nodes(const std::string& op) const {
    std::vector<Node*> out;
    for (Node* n : g.nodes())
      if (n->op == op)
        out.push_back(n);
    return out;
  }
};

std::vector<std::string> body_ops(const Node* n) {
  std::vector<std::string> ops;
  for (const auto& b : n->body->node_list())
    ops.push_back(b->op);
  return ops;
}

TEST(Fusion, PointwiseChainBecomesOneGroup) {
  Builder b;
  Value* x = b.input({7, 13});
  Value* y = b.input({13});
  Value* r = b.unary("aten::relu", b.add(b.mul(x, x), y, {7, 13}));
  b.g.set_outputs({r});
  EXPECT_TRUE(b.run());
  auto fused = b.nodes("torch_plugin::fused");
  ASSERT_EQ(fused.size(), 1u);
  EXPECT_EQ(b.g.num_nodes(), 1u);
  EXPECT_EQ(
      body_ops(fused[0]),
      (std::vector<std::string>{"aten::mul", "aten::add", "aten::relu"}));
  EXPECT_EQ(fused[0]->inputs.size(), 2u); // x once, y
  EXPECT_EQ(fused[0]->attrs.count("reduce_dims"), 0u);
  EXPECT_NE(
      fused[0]->str_attr("source", "").find("#pragma omp simd"),
      std::string::npos);
}

// A lone pointwise op stays an ATen call; int64 ops fuse (typed kernels);
// complex values (no compute type) stay ATen calls.
TEST(Fusion, LonePointwiseOpAndOtherDtypesStayAtenCalls) {
  Builder b;
  Value* x = b.input({8});
  Value* i = b.input({8}, ScalarType::Long);
  Value* c = b.input({8}, ScalarType::ComplexFloat);
  Value* r = b.unary("aten::relu", x);
  Value* n = b.op("aten::neg", "default", {i}, {}, {8}, ScalarType::Long);
  Value* a = b.op("aten::abs", "default", {n}, {}, {8}, ScalarType::Long);
  Value* cn =
      b.op("aten::neg", "default", {c}, {}, {8}, ScalarType::ComplexFloat);
  Value* cm =
      b.op("aten::neg", "default", {cn}, {}, {8}, ScalarType::ComplexFloat);
  b.g.set_outputs({r, a, cm});
  EXPECT_TRUE(b.run());
  auto fused = b.nodes("torch_plugin::fused");
  ASSERT_EQ(fused.size(), 1u);
  EXPECT_EQ(fused[0]->inputs.at(0), i);
}

TEST(Fusion, ReductionTakesPrologueAndEpilogue) {
  Builder b;
  Value* x = b.input({7, 13, 33});
  Value* y = b.input({7, 13, 33});
  Value* s = b.sum(b.mul(x, y), {-1}, false, {7, 13});
  Value* out = b.mul_scalar(s, 2.0);
  b.g.set_outputs({out});
  EXPECT_TRUE(b.run());
  auto fused = b.nodes("torch_plugin::fused");
  ASSERT_EQ(fused.size(), 1u);
  EXPECT_EQ(b.g.num_nodes(), 1u);
  const Node* f = fused[0];
  EXPECT_EQ(
      body_ops(f),
      (std::vector<std::string>{"aten::mul", "aten::sum", "aten::mul"}));
  EXPECT_EQ(
      std::get<std::vector<int64_t>>(f->attrs.at("domain")),
      (std::vector<int64_t>{7, 13, 33}));
  EXPECT_EQ(
      std::get<std::vector<int64_t>>(f->attrs.at("reduce_dims")),
      (std::vector<int64_t>{2}));
  std::vector<std::string> levels;
  for (const auto& n : f->body->node_list())
    levels.push_back(n->str_attr("level", ""));
  EXPECT_EQ(levels, (std::vector<std::string>{"full", "outer", "outer"}));
  EXPECT_EQ(f->outputs[0]->sizes, (std::vector<int64_t>{7, 13}));
  // Innermost dim reduced: the reduction loop is the vectorized one.
  EXPECT_NE(f->str_attr("source", "").find("reduction(+:"), std::string::npos);
}

TEST(Fusion, RmsNormDecompositionIsOneGroup) {
  Builder b;
  Value* x = b.input({4, 9, 32});
  Value* w = b.input({32});
  Value* p = b.op("aten::pow", "Tensor_Scalar", {x}, {int64_t{2}}, {4, 9, 32});
  Value* m = b.op(
      "aten::mean",
      "dim",
      {p},
      {std::vector<int64_t>{2}, true, std::monostate{}},
      {4, 9, 1});
  Value* e = b.op("aten::add", "Scalar", {m}, {1e-6, int64_t{1}}, {4, 9, 1});
  Value* r = b.unary("aten::rsqrt", e);
  Value* y = b.mul(b.op("aten::mul", "Tensor", {x, r}, {}, {4, 9, 32}), w);
  b.g.set_outputs({y});
  EXPECT_TRUE(b.run());
  ASSERT_EQ(b.g.num_nodes(), 1u);
  const Node* f = b.nodes("torch_plugin::fused").at(0);
  EXPECT_EQ(f->body->num_nodes(), 6u);
  std::vector<std::string> levels;
  for (const auto& n : f->body->node_list())
    levels.push_back(n->str_attr("level", ""));
  EXPECT_EQ(
      levels,
      (std::vector<std::string>{
          "full", "outer_keep", "outer_keep", "outer_keep", "full", "full"}));
}

TEST(Fusion, SqueezedReductionBroadcastAgainstKeptDimIsNotFused) {
  // s = x.sum(1) has sizes [8], indexed by dim 0; x * s broadcasts s along dim
  // 1 (right-aligned), so the product must not join the reduction's group.
  Builder b;
  Value* x = b.input({8, 8});
  Value* s = b.sum(x, {1}, false, {8});
  Value* y = b.mul(x, s);
  b.g.set_outputs({y});
  b.run();
  auto fused = b.nodes("torch_plugin::fused");
  ASSERT_EQ(fused.size(), 1u);
  EXPECT_EQ(body_ops(fused[0]), (std::vector<std::string>{"aten::sum"}));
  EXPECT_EQ(b.nodes("aten::mul").size(), 1u);
}

TEST(Fusion, SqueezedReductionOverLeadingDimBroadcastsIntoDomain) {
  Builder b;
  Value* x = b.input({8, 5});
  Value* s = b.sum(x, {0}, false, {5});
  Value* y = b.mul(x, s);
  b.g.set_outputs({y});
  b.run();
  ASSERT_EQ(b.g.num_nodes(), 1u);
  EXPECT_EQ(
      body_ops(b.nodes("torch_plugin::fused").at(0)),
      (std::vector<std::string>{"aten::sum", "aten::mul"}));
}

TEST(Fusion, NodeUsedBeforeJoinBlocksTheJoin) {
  // a2 is used by flip (not fusible, visited before the add): the add joining
  // a2's group would need flip's output inside the group that feeds it.
  Builder b;
  Value* x = b.input({16});
  Value* a2 = b.unary("aten::relu", b.mul(x, x));
  Value* c =
      b.op("aten::flip", "default", {a2}, {std::vector<int64_t>{0}}, {16});
  Value* out = b.add(a2, c, {16});
  b.g.set_outputs({out});
  b.run();
  auto fused = b.nodes("torch_plugin::fused");
  ASSERT_EQ(fused.size(), 1u);
  EXPECT_EQ(
      body_ops(fused[0]),
      (std::vector<std::string>{"aten::mul", "aten::relu"}));
  EXPECT_EQ(b.nodes("aten::add").size(), 1u);
  // Topological order is kept: fused, flip, add.
  auto all = b.g.nodes();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0]->op, "torch_plugin::fused");
  EXPECT_EQ(all[2]->op, "aten::add");
}

TEST(Fusion, LayerNormWithResidualHasTwoOutputs) {
  Builder b;
  Value* x = b.input({2, 7, 48});
  Value* y = b.input({2, 7, 48});
  Value* w = b.input({48});
  Value* h = b.add(x, y, {2, 7, 48});
  std::vector<Arg> args = {
      Arg::tensor(0),
      Arg::constant(std::vector<int64_t>{48}),
      Arg::tensor(1),
      Arg::tensor(1),
      Arg::constant(1e-5)};
  Node* ln =
      b.g.create_node("aten::native_layer_norm", "default", {h, w}, args, 3);
  Graph::set_type(
      ln->outputs[0], ScalarType::Float, {2, 7, 48}, {336, 48, 1}, c10::kCPU);
  Graph::set_type(
      ln->outputs[1], ScalarType::Float, {2, 7, 1}, {7, 1, 1}, c10::kCPU);
  Graph::set_type(
      ln->outputs[2], ScalarType::Float, {2, 7, 1}, {7, 1, 1}, c10::kCPU);
  Value* g = b.unary("aten::gelu", ln->outputs[0]);
  b.g.set_outputs({g, h});
  // gelu's approximate argument
  g->producer->args.push_back(Arg::constant(std::string("none")));
  b.run();
  ASSERT_EQ(b.g.num_nodes(), 1u);
  const Node* f = b.nodes("torch_plugin::fused").at(0);
  EXPECT_EQ(
      body_ops(f),
      (std::vector<std::string>{
          "aten::add", "aten::native_layer_norm", "aten::gelu"}));
  EXPECT_EQ(f->outputs.size(), 2u); // gelu's output and the residual h
  EXPECT_EQ(b.g.outputs()[0], f->outputs[1]);
  EXPECT_EQ(b.g.outputs()[1], f->outputs[0]);
}

TEST(Fusion, DifferentReducedDimsMakeTwoGroups) {
  Builder b;
  Value* x = b.input({6, 10, 12});
  Value* p = b.mul(x, x);
  Value* s = b.sum(p, {2}, true, {6, 10, 1});
  Value* m = b.op(
      "aten::amax", "default", {p}, {std::vector<int64_t>{1}, false}, {6, 12});
  b.g.set_outputs({s, m});
  b.run();
  auto fused = b.nodes("torch_plugin::fused");
  ASSERT_EQ(fused.size(), 2u);
  EXPECT_EQ(
      body_ops(fused[0]), (std::vector<std::string>{"aten::mul", "aten::sum"}));
  EXPECT_EQ(fused[0]->outputs.size(), 2u); // the product feeds the amax group
  EXPECT_EQ(body_ops(fused[1]), (std::vector<std::string>{"aten::amax"}));
  EXPECT_EQ(fused[1]->inputs.at(0), fused[0]->outputs.at(0));
}

TEST(Fusion, Bf16GroupLoadsAndStoresBf16) {
  Builder b;
  Value* x = b.input({5, 17}, ScalarType::BFloat16);
  Value* p =
      b.op("aten::mul", "Tensor", {x, x}, {}, {5, 17}, ScalarType::BFloat16);
  Value* s = b.op(
      "aten::sum",
      "dim_IntList",
      {p},
      {std::vector<int64_t>{1}, false, std::monostate{}},
      {5},
      ScalarType::BFloat16);
  b.g.set_outputs({s});
  b.run();
  ASSERT_EQ(b.g.num_nodes(), 1u);
  const std::string src =
      b.nodes("torch_plugin::fused").at(0)->str_attr("source", "");
  EXPECT_NE(src.find("const uint16_t* __restrict in0"), std::string::npos);
  EXPECT_NE(src.find("tp_store_bf16("), std::string::npos);
}

TEST(Fusion, DisabledByOption) {
  Builder b;
  Value* x = b.input({4});
  b.g.set_outputs({b.unary("aten::relu", b.mul(x, x))});
  PassOptions o;
  o.fusion = false;
  EXPECT_FALSE(kFusion.run(b.g, o));
  EXPECT_EQ(b.g.num_nodes(), 2u);
}

} // namespace
} // namespace torch_plugin::compiler
