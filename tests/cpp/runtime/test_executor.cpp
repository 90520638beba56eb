// test_executor.cpp: unit tests of the executor's structured accessors
// (csrc/runtime/executor.h): steps() as (kind, op, device) data, and the frozen
// arguments' check (set_frozen, frozen_unchanged: same TensorImpl, same
// version counter). CPU only.
#include "runtime/executor.h"

#include <ATen/ops/allclose.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <gtest/gtest.h>

namespace torch_plugin::runtime {
namespace {

using ir::Arg;
using ir::Graph;
using ir::Node;
using ir::Value;

const c10::Device kCpu(c10::kCPU);

// out = x + w (aten::add.Tensor, alpha 1) over [4]: w is a constant.
std::unique_ptr<Graph> add_graph(const at::Tensor& w) {
  auto g = std::make_unique<Graph>();
  Value* x = g->add_input(c10::ScalarType::Float, {4}, {1}, kCpu);
  Value* c = g->add_constant(w);
  Node* n = g->create_node(
      "aten::add",
      "Tensor",
      {x, c},
      {Arg::tensor(0), Arg::tensor(1), Arg::constant(int64_t{1})},
      1);
  Graph::set_type(n->outputs[0], c10::ScalarType::Float, {4}, {1}, kCpu);
  g->set_outputs({n->outputs[0]});
  return g;
}

TEST(Executor, StepsAreData) {
  at::Tensor w = at::ones({4});
  auto g = add_graph(w);
  Executor e(*g);
  ASSERT_EQ(e.steps().size(), 1u);
  EXPECT_EQ(e.steps()[0].kind, "fallback");
  EXPECT_EQ(e.steps()[0].op, "aten::add.Tensor");
  EXPECT_EQ(e.steps()[0].device, kCpu);
  EXPECT_NE(e.describe().find("fallback aten::add.Tensor"), std::string::npos);
  at::Tensor x = at::randn({4});
  EXPECT_TRUE(at::allclose(e.run({x})[0], x.add(w)));
}

TEST(Executor, FrozenArgumentsAreCheckedByIdentityAndVersion) {
  at::Tensor w = at::ones({4});
  auto g = add_graph(w);
  Executor e(*g);
  e.set_frozen({w});
  ASSERT_EQ(e.num_frozen(), 1u);
  EXPECT_TRUE(e.frozen_unchanged(0, w));
  at::Tensor alias = w; // the same TensorImpl
  EXPECT_TRUE(e.frozen_unchanged(0, alias));
  EXPECT_FALSE(e.frozen_unchanged(0, at::ones({4}))); // another tensor
  EXPECT_FALSE(e.frozen_unchanged(0, w.view({4}))); // a view is another tensor
  w.add_(1); // in place: the version counter moves
  EXPECT_FALSE(e.frozen_unchanged(0, w));
  e.set_frozen({w});
  EXPECT_TRUE(e.frozen_unchanged(0, w));
}

} // namespace
} // namespace torch_plugin::runtime
