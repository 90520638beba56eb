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

// m = x > 0 read by two kernels: each computes it; m is no group's output.
TEST(FusionShare, MaskReadByTwoKernelsIsRecomputedInEach) {
  Builder b;
  Value* x = b.input({8, 16});
  Value* y = b.input({8, 16});
  Value* m = b.gt(x, 0.0);
  Value* a = b.mul(b.where(m, x, 0.0, {8, 16}), 2.0);
  Value* c = b.mul(b.where(m, y, 1.0, {8, 16}), 3.0);
  b.g.set_outputs({a, c});
  b.run();
  const auto groups = b.groups();
  ASSERT_EQ(groups.size(), 2u);
  for (const Node* grp : groups) {
    EXPECT_EQ(in_body(grp, "aten::gt"), 1u);
    EXPECT_EQ(grp->outputs.size(), 1u); // its consumer's value only
  }
  EXPECT_EQ(b.outside("aten::gt"), 0u);
}

// A mask of [B, 1, 1, S] read by two consumers of [B, H, S, S]: each
// computes it at its own sizes (the broadcast inlining, once per consumer).
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
  const auto groups = b.groups();
  ASSERT_EQ(groups.size(), 2u);
  for (const Node* grp : groups)
    EXPECT_EQ(in_body(grp, "aten::gt"), 1u);
}

// Not shared: the mask is a graph output (stored anyway), a producer that is
// not cheap (exp), a consumer that is not pointwise (a sum reads m's float).
TEST(FusionShare, StoredOrCostlyProducersAreNotShared) {
  {
    Builder b;
    Value* x = b.input({8, 16});
    Value* m = b.gt(x, 0.0);
    Value* a = b.mul(b.where(m, x, 0.0, {8, 16}), 2.0);
    Value* c = b.mul(b.where(m, x, 1.0, {8, 16}), 3.0);
    b.g.set_outputs({a, c, m});
    b.run();
    size_t gts = 0;
    for (const Node* grp : b.groups())
      gts += in_body(grp, "aten::gt");
    EXPECT_EQ(gts + b.outside("aten::gt"), 1u);
  }
  {
    Builder b;
    Value* x = b.input({8, 16});
    Value* e = b.op("aten::exp", "default", {x}, {}, {8, 16});
    Value* a = b.mul(b.mul(e, 2.0), 5.0);
    Value* c = b.mul(b.mul(e, 3.0), 7.0);
    b.g.set_outputs({a, c});
    b.run();
    size_t exps = 0;
    for (const Node* grp : b.groups())
      exps += in_body(grp, "aten::exp");
    EXPECT_EQ(exps + b.outside("aten::exp"), 1u);
  }
  {
    Builder b;
    Value* x = b.input({8, 16});
    Value* m = b.mul(b.op("aten::relu", "default", {x}, {}, {8, 16}), 2.0);
    Value* a = b.mul(m, 3.0);
    Value* s = b.op(
        "aten::sum",
        "dim_IntList",
        {m},
        {std::vector<int64_t>{1}, false, std::monostate{}},
        {8});
    b.g.set_outputs({a, s});
    b.run();
    size_t relus = 0;
    for (const Node* grp : b.groups())
      relus += in_body(grp, "aten::relu");
    EXPECT_EQ(relus + b.outside("aten::relu"), 1u);
  }
}

// A producer with more ops than kMaxSharedOps is stored once.
TEST(FusionShare, LongProducerIsStoredOnce) {
  Builder b;
  Value* x = b.input({8, 16});
  Value* p = x;
  for (int i = 0; i < 5; ++i)
    p = b.mul(p, 1.5);
  Value* a = b.mul(p, 2.0);
  Value* c = b.op("aten::add", "Tensor", {p, x}, {int64_t{1}}, {8, 16});
  b.g.set_outputs({a, c});
  b.run();
  size_t muls = 0;
  for (const Node* grp : b.groups())
    muls += in_body(grp, "aten::mul");
  EXPECT_EQ(muls + b.outside("aten::mul"), 6u);
}

// A clone that cannot join its consumer's group (the consumer joins a
// reduction group first, which a typed where cannot enter) is undone: the
// consumer reads the stored original, no copy is left, the graph verifies.
TEST(FusionShare, CloneThatCannotJoinIsUndone) {
  Builder b;
  Value* x = b.input({8, 16});
  Value* r = b.op(
      "aten::sum",
      "dim_IntList",
      {x},
      {std::vector<int64_t>{1}, true, std::monostate{}},
      {8, 1});
  Value* w = b.where(b.gt(x, 0.0), x, 0.0, {8, 16});
  Value* n = b.op("aten::mul", "Tensor", {r, w}, {}, {8, 16});
  Value* n2 = b.mul(w, 3.0);
  b.g.set_outputs({n, n2});
  b.run();
  ir::verify(b.g);
  size_t gts = b.outside("aten::gt");
  for (const Node* grp : b.groups())
    gts += in_body(grp, "aten::gt");
  EXPECT_EQ(gts, 1u);
}

} // namespace
} // namespace torch_plugin::compiler
