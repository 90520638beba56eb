// test_library_patterns.cpp: unit tests of the library_patterns pass
// (csrc/compiler/passes/library_patterns.cpp, conv_patterns.cpp) on small
// hand-built IR graphs: convolutions and matrix products with constant weights
// become oneDNN library nodes with their epilogues (checked against eager ATen
// on fresh random inputs), non-constant weights stay, and each rule's firings
// and rejections are logged (PassOptions::log_patterns) and recorded for the
// compile trace (PassOptions::pattern_events).
#include "pass_test_helpers.h"

#include <algorithm>

namespace torch_plugin::compiler {
namespace {

using namespace pass_test;

TEST_F(Passes, LibraryPatternsConvWithResidualAndRelu) {
  at::Tensor w = at::randn({4, 4, 3, 3}), b = at::randn({4});
  Graph g;
  Value* x = input(g, {1, 4, 5, 5});
  Value* r = input(g, {1, 4, 5, 5});
  Value* y = conv(g, x, g.add_constant(w), g.add_constant(b))->outputs[0];
  Value* s =
      node(g, "aten::add", "Tensor", {y, r}, {int64_t{1}}, {{1, 4, 5, 5}})
          ->outputs[0];
  Value* o =
      node(g, "aten::relu", "default", {s}, {}, {{1, 4, 5, 5}})->outputs[0];
  g.set_outputs({o});

  PassOptions off = frozen();
  off.library_patterns = false;
  EXPECT_FALSE(run("library_patterns", g, off));
  EXPECT_TRUE(run("library_patterns", g));
  ASSERT_EQ(ops(g), (std::vector<std::string>{"torch_plugin::conv_pointwise"}));
  Node* lib = g.nodes()[0];
  EXPECT_EQ(lib->tensor_arg(0), x);
  EXPECT_EQ(lib->tensor_arg(3), r); // residual
  EXPECT_EQ(std::get<std::string>(lib->const_arg(8)), "relu");
  // conv_pointwise writes channels_last.
  EXPECT_EQ(lib->outputs[0]->strides, (std::vector<int64_t>{100, 1, 20, 4}));

  at::Tensor xi = at::randn({1, 4, 5, 5}), ri = at::randn({1, 4, 5, 5});
  at::Tensor expected = at::relu(conv_ref(xi, w, b) + ri);
  at::Tensor got = Executor(g).run({xi, ri})[0];
  EXPECT_TRUE(at::allclose(got, expected, 1e-4, 1e-4))
      << (got - expected).abs().max();
}

TEST_F(Passes, LibraryPatternsAddmmBecomesLinearWithTransposedWeight) {
  at::Tensor wt = at::randn({5, 7}), b = at::randn({7}); // addmm(b, x, W^T)
  Graph g;
  Value* x = input(g, {3, 5});
  Node* mm = node(
      g,
      "aten::addmm",
      "default",
      {g.add_constant(b), x, g.add_constant(wt)},
      {int64_t{1}, int64_t{1}},
      {{3, 7}});
  Value* y = node(
                 g,
                 "aten::gelu",
                 "default",
                 {mm->outputs[0]},
                 {std::string("none")},
                 {{3, 7}})
                 ->outputs[0];
  g.set_outputs({y});

  EXPECT_TRUE(run("library_patterns", g));
  ASSERT_EQ(
      ops(g), (std::vector<std::string>{"torch_plugin::linear_pointwise"}));
  Node* lib = g.nodes()[0];
  EXPECT_TRUE(at::equal(lib->tensor_arg(1)->constant, wt.t())); // [N, K]
  EXPECT_EQ(std::get<std::string>(lib->const_arg(4)), "gelu");

  at::Tensor xi = at::randn({3, 5});
  at::Tensor expected = at::gelu(at::addmm(b, xi, wt));
  EXPECT_TRUE(at::allclose(Executor(g).run({xi})[0], expected, 1e-4, 1e-4));
}

TEST_F(Passes, LibraryPatternsLeavesNonConstantWeights) {
  Graph g;
  Value* x = input(g, {1, 3, 5, 5});
  Value* w = input(g, {4, 3, 3, 3}); // a graph input, not frozen
  g.set_outputs({conv(g, x, w, nullptr)->outputs[0]});
  EXPECT_FALSE(run("library_patterns", g));
  EXPECT_EQ(ops(g), (std::vector<std::string>{"aten::convolution"}));
}

// PassOptions::log_patterns (TORCH_PLUGIN_LOGS=patterns): each rule row that
// fires or is rejected is logged with its name, its source line and, for a
// rejection, the constraint that failed.
TEST_F(Passes, LibraryPatternsLogRuleFiringsAndRejections) {
  PassOptions o = frozen();
  o.log_patterns = true;
  Graph g;
  Value* x = input(g, {1, 3, 5, 5});
  Value* w = input(g, {4, 3, 3, 3}); // a graph input, not frozen
  g.set_outputs({conv(g, x, w, nullptr)->outputs[0]});
  testing::internal::CaptureStderr();
  EXPECT_FALSE(run("library_patterns", g, o));
  std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(
      log.find("rule conv_to_library (csrc/compiler/passes/conv_patterns.cpp:"),
      std::string::npos)
      << log;
  EXPECT_NE(log.find("rejected at aten::convolution (%"), std::string::npos)
      << log;
  EXPECT_NE(log.find(": not a constant weight"), std::string::npos) << log;

  Graph f;
  Value* fx = input(f, {1, 3, 5, 5});
  Value* fw = f.add_constant(at::randn({4, 3, 3, 3}));
  f.set_outputs({conv(f, fx, fw, nullptr)->outputs[0]});
  testing::internal::CaptureStderr();
  EXPECT_TRUE(run("library_patterns", f, o));
  log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("rule conv_to_library ("), std::string::npos) << log;
  EXPECT_NE(log.find(") fired at aten::convolution (%"), std::string::npos)
      << log;
}

// PassOptions::pattern_events (the compile trace, TORCH_PLUGIN_TRACE): the
// same decisions as the log, recorded with the rule, its row, the node, the
// device and the failed constraint; nothing is recorded without it.
TEST_F(Passes, LibraryPatternsRecordRuleFiringsAndRejections) {
  std::vector<PatternEvent> events;
  PassOptions o = frozen();
  o.pattern_events = &events;
  Graph g;
  Value* x = input(g, {1, 3, 5, 5});
  Value* w = input(g, {4, 3, 3, 3}); // a graph input, not frozen
  g.set_outputs({conv(g, x, w, nullptr)->outputs[0]});
  EXPECT_FALSE(run("library_patterns", g, o));
  auto conv_to_library = [](const PatternEvent& e) {
    return e.rule == "conv_to_library";
  };
  auto rejected = std::find_if(events.begin(), events.end(), conv_to_library);
  ASSERT_NE(rejected, events.end());
  EXPECT_EQ(rejected->pass, "library_patterns");
  EXPECT_EQ(rejected->outcome, "rejected");
  EXPECT_EQ(rejected->reason, "not a constant weight");
  EXPECT_EQ(rejected->device, "cpu");
  EXPECT_EQ(rejected->node.rfind("aten::convolution (%", 0), 0u)
      << rejected->node;
  EXPECT_EQ(
      rejected->source.rfind("csrc/compiler/passes/conv_patterns.cpp:", 0), 0u)
      << rejected->source;

  events.clear();
  Graph f;
  Value* fx = input(f, {1, 3, 5, 5});
  Value* fw = f.add_constant(at::randn({4, 3, 3, 3}));
  f.set_outputs({conv(f, fx, fw, nullptr)->outputs[0]});
  EXPECT_TRUE(run("library_patterns", f, o));
  auto fired = std::find_if(events.begin(), events.end(), conv_to_library);
  ASSERT_NE(fired, events.end());
  EXPECT_EQ(fired->outcome, "fired");
  EXPECT_EQ(fired->reason, "");

  events.clear();
  PassOptions quiet = frozen(); // no recorder: nothing recorded
  Graph h;
  Value* hx = input(h, {1, 3, 5, 5});
  h.set_outputs({conv(h, hx, h.add_constant(at::randn({4, 3, 3, 3})), nullptr)
                     ->outputs[0]});
  EXPECT_TRUE(run("library_patterns", h, quiet));
  EXPECT_TRUE(events.empty());
}

} // namespace
} // namespace torch_plugin::compiler
