// test_fusion_share.cpp: the fusion pass's shared producers
// (csrc/compiler/passes/fusion_share.h): a cheap pointwise group read by
// several pointwise consumers is recomputed inside each consumer's kernel
// instead of stored once; which groups qualify, and that the graph keeps
// computing the same values (the numerics: tests/python/compiler/
// test_fusion_share.py).
#include "compiler/passes/pass.h"
#include "ir/verifier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace torch_plugin::compiler {
namespace {

using c10::ScalarType;

struct Builder {
  Graph g;
  Value* input(std::vector<int64_t> sizes, ScalarType t = ScalarType::Float) {
    return g.add_input(t, sizes, contiguous_strides(sizes), c10::kCPU);
  }
  // A node with tensor inputs first (schema args 0..n) then constants.
  Value* op(
      const std::string& name,
      const std::string& overload,
      std::vector<Value*> ins,
      std::vector<AttrValue> consts,
      std::vector<int64_t> sizes,
      ScalarType t = ScalarType::Float) {
    std::vector<Arg> args;
    for (size_t i = 0; i < ins.size(); ++i)
      args.push_back(Arg::tensor(static_cast<int64_t>(i)));
    for (auto& c : consts)
      args.push_back(Arg::constant(c));
    Node* n = g.create_node(name, overload, ins, args, 1);
    Graph::set_type(
        n->outputs[0], t, sizes, contiguous_strides(sizes), c10::kCPU);
    return n->outputs[0];
  }
  Value* gt(Value* a, double s) {
    return op("aten::gt", "Scalar", {a}, {s}, a->sizes, ScalarType::Bool);
  }
  Value* where(Value* m, Value* a, double s, std::vector<int64_t> sizes) {
    return op("aten::where", "ScalarOther", {m, a}, {s}, sizes);
  }
  Value* mm(Value* a, Value* w) {
    return op("aten::mm", "default", {a, w}, {}, {a->sizes[0], w->sizes[1]});
  }
  Value* mul(Value* a, double s) {
    return op("aten::mul", "Tensor", {a}, {s}, a->sizes);
  }
  void run() {
    PassOptions o;
    kFusion.run(g, o);
  }
  std::vector<Node*> groups() const {
    std::vector<Node*> out;
    for (Node* n : g.nodes())
      if (n->op == "torch_plugin::fused")
        out.push_back(n);
    return out;
  }
  // How many ops of `op` the graph runs outside groups.
  size_t outside(const std::string& op) const {
    size_t k = 0;
    for (Node* n : g.nodes())
      k += n->op == op;
    return k;
  }
};

size_t in_body(const Node* group, const std::string& op) {
  size_t k = 0;
  for (const auto& b : group->body->node_list())
    k += b->op == op;
  return k;
}

// m = x > 0 read by two kernels (a matrix product between them keeps them
// apart): the second computes it too, and m is no group's output.
TEST(FusionShare, MaskReadByTwoKernelsIsRecomputedInEach) {
  Builder b;
  Value* x = b.input({8, 16});
  Value* w = b.input({16, 16});
  Value* m = b.gt(x, 0.0);
  Value* a = b.mul(b.where(m, x, 0.0, {8, 16}), 2.0);
  Value* h = b.mm(a, w);
  Value* c = b.mul(b.where(m, h, 1.0, {8, 16}), 3.0);
  b.g.set_outputs({a, c});
  b.run();
  ir::verify(b.g);
  const auto groups = b.groups();
  ASSERT_EQ(groups.size(), 2u);
  for (const Node* grp : groups) {
    EXPECT_EQ(in_body(grp, "aten::gt"), 1u);
    EXPECT_EQ(grp->outputs.size(), 1u); // a (read by mm and returned), c
  }
  EXPECT_EQ(b.outside("aten::gt"), 0u);
}

// A mask of [B, 1, 1, S] read by two consumers of [B, H, S, S] was a kernel
// of its own (a broadcast producer is inlined into one consumer only): each
// consumer's kernel computes it at its own sizes, and its group is gone.
TEST(FusionShare, BroadcastMaskIsRecomputedInEachConsumer) {
  Builder b;
  Value* mask = b.input({2, 1, 1, 8});
  Value* s1 = b.input({2, 4, 8, 8});
  Value* s2 = b.input({2, 4, 8, 8});
  Value* m = b.gt(mask, 0.5);
  Value* a = b.where(m, s1, -1e9, {2, 4, 8, 8});
  Value* c = b.where(m, s2, 0.0, {2, 4, 8, 8});
  b.g.set_outputs({a, c});
  b.run();
  ir::verify(b.g);
  const auto groups = b.groups();
  ASSERT_EQ(groups.size(), 2u);
  for (const Node* grp : groups)
    EXPECT_EQ(in_body(grp, "aten::gt"), 1u);
  EXPECT_EQ(b.outside("aten::gt"), 0u);
}

// Consumers in one group need no copy: one kernel computes the mask once.
TEST(FusionShare, ConsumersInOneGroupShareTheirMask) {
  Builder b;
  Value* x = b.input({8, 16});
  Value* y = b.input({8, 16});
  Value* m = b.gt(x, 0.0);
  Value* a = b.mul(b.where(m, x, 0.0, {8, 16}), 2.0);
  Value* c = b.mul(b.where(m, y, 1.0, {8, 16}), 3.0);
  b.g.set_outputs({a, c});
  b.run();
  const auto groups = b.groups();
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(in_body(groups[0], "aten::gt"), 1u);
}

// Not shared: the mask is a graph output (stored anyway), a producer that is
// not cheap (exp), a producer longer than kMaxSharedOps, a consumer group
// with a reduction.
TEST(FusionShare, StoredOrCostlyProducersAreNotShared) {
  auto count = [](Builder& b, const std::string& op) {
    size_t k = b.outside(op);
    for (const Node* grp : b.groups())
      k += in_body(grp, op);
    return k;
  };
  {
    Builder b;
    Value* x = b.input({8, 16});
    Value* m = b.gt(x, 0.0);
    Value* a = b.mul(b.where(m, x, 0.0, {8, 16}), 2.0);
    Value* h = b.mm(a, b.input({16, 16}));
    Value* c = b.mul(b.where(m, h, 1.0, {8, 16}), 3.0);
    b.g.set_outputs({a, c, m});
    b.run();
    EXPECT_EQ(count(b, "aten::gt"), 1u);
  }
  {
    Builder b;
    Value* x = b.input({8, 16});
    Value* e = b.op("aten::exp", "default", {x}, {}, {8, 16});
    Value* a = b.mul(b.mul(e, 2.0), 5.0);
    Value* h = b.mm(a, b.input({16, 16}));
    Value* c = b.op("aten::add", "Tensor", {e, h}, {int64_t{1}}, {8, 16});
    b.g.set_outputs({a, b.mul(c, 2.0)});
    b.run();
    EXPECT_EQ(count(b, "aten::exp"), 1u);
  }
  {
    Builder b;
    Value* x = b.input({8, 16});
    Value* p = x;
    for (int i = 0; i < 5; ++i)
      p = b.mul(p, 1.5);
    Value* h = b.mm(b.mul(p, 2.0), b.input({16, 16}));
    Value* c = b.op("aten::add", "Tensor", {p, h}, {int64_t{1}}, {8, 16});
    b.g.set_outputs({b.mul(c, 2.0)});
    b.run();
    EXPECT_EQ(count(b, "aten::mul"), 7u); // 5 + 1 + 1, none twice
  }
  {
    Builder b;
    Value* x = b.input({8, 16});
    Value* w = b.where(b.gt(x, 0.0), x, 0.0, {8, 16});
    Value* h = b.mm(w, b.input({16, 16}));
    Value* prod = b.op("aten::mul", "Tensor", {w, h}, {}, {8, 16});
    Value* s = b.op(
        "aten::sum",
        "dim_IntList",
        {prod},
        {std::vector<int64_t>{1}, false, std::monostate{}},
        {8});
    b.g.set_outputs({s});
    b.run();
    ir::verify(b.g);
    EXPECT_EQ(count(b, "aten::gt"), 1u);
  }
}

} // namespace
} // namespace torch_plugin::compiler
