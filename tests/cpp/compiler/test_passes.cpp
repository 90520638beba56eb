// test_passes.cpp: unit tests of the compiler passes on small hand-built IR
// graphs (csrc/compiler/passes/): dead_code_elimination,
// batch_norm_scale_shift,
// constant_folding, propagate_strides, memory_planning (library_patterns:
// test_library_patterns.cpp). Each
// test builds a graph, runs one pass, and asserts the rewritten graph; where a
// pass changes values, the graph is also run by the Executor against eager ATen
// on fresh random inputs.
#include "compiler/passes/conv_patterns.h"
#include "pass_test_helpers.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

namespace torch_plugin::compiler {
namespace {

using namespace pass_test;

TEST_F(Passes, DeadCodeEliminationErasesUnusedChainsKeepsInPlaceOps) {
  Graph g;
  Value* x = input(g, {4, 5});
  Value* a = node(g, "aten::relu", "default", {x}, {}, {{4, 5}})->outputs[0];
  node(
      g,
      "aten::neg",
      "default",
      {a},
      {},
      {{4, 5}}); // a dead chain: relu -> neg
  Value* y = node(g, "aten::sigmoid", "default", {x}, {}, {{4, 5}})->outputs[0];
  node(
      g,
      "aten::relu_",
      "default",
      {x},
      {},
      {{4, 5}}); // in-place on an input: kept
  g.set_outputs({y});

  EXPECT_TRUE(run("dead_code_elimination", g));
  EXPECT_EQ(ops(g), (std::vector<std::string>{"aten::sigmoid", "aten::relu_"}));
  EXPECT_FALSE(run("dead_code_elimination", g)); // nothing left to erase
}

TEST_F(Passes, ConvBatchNormScaleShiftMatchesEager) {
  at::Tensor w = at::randn({4, 3, 3, 3}), b = at::randn({4});
  at::Tensor gamma = at::rand({4}) + 0.5, beta = at::randn({4});
  at::Tensor mean = at::randn({4}), var = at::rand({4}) + 0.5;
  Graph g;
  Value* x = input(g, {2, 3, 7, 6});
  Value* y = conv(g, x, g.add_constant(w), g.add_constant(b))->outputs[0];
  std::vector<Value*> bn_in = {
      y,
      g.add_constant(gamma),
      g.add_constant(beta),
      g.add_constant(mean),
      g.add_constant(var)};
  Node* bn = node(
      g,
      "aten::_native_batch_norm_legit_no_training",
      "default",
      bn_in,
      {0.1, 1e-5},
      {{2, 4, 7, 6}, {0}, {0}});
  g.set_outputs({bn->outputs[0]});

  PassOptions unfrozen;
  EXPECT_FALSE(run("batch_norm_scale_shift", g, unfrozen)); // not constants
  EXPECT_EQ(g.num_nodes(), 2u);

  // The convolution keeps the weight constant itself (no scaled copy); the
  // batch norm becomes y * s + t.
  at::Tensor w_before = g.nodes()[0]->tensor_arg(1)->constant;
  EXPECT_TRUE(run("batch_norm_scale_shift", g));
  ASSERT_EQ(
      ops(g),
      (std::vector<std::string>{
          "aten::convolution", "aten::mul.Tensor", "aten::add.Tensor"}));
  EXPECT_TRUE(g.nodes()[0]->tensor_arg(1)->constant.is_same(w_before));
  EXPECT_EQ(g.nodes()[0]->tensor_arg(0), x);

  at::Tensor in = at::randn({2, 3, 7, 6});
  at::Tensor expected = at::batch_norm(
      conv_ref(in, w, b), gamma, beta, mean, var, false, 0.1, 1e-5, false);
  at::Tensor got = Executor(g).run({in})[0];
  EXPECT_TRUE(at::allclose(got, expected, 1e-4, 1e-4))
      << (got - expected).abs().max();
}

TEST_F(Passes, ConstantFoldingRunsConstantSubgraphsOnly) {
  at::Tensor w = at::randn({6, 5});
  Graph g;
  Value* x = input(g, {3, 5});
  Value* wc = g.add_constant(w);
  Value* wt = node(g, "aten::t", "default", {wc}, {}, {{5, 6}})->outputs[0];
  wt->strides = {1, 5};
  Value* y = node(g, "aten::mm", "default", {x, wt}, {}, {{3, 6}})->outputs[0];
  // Random: must not be folded even though its only tensor input is a constant.
  Value* r = node(
                 g,
                 "aten::rand_like",
                 "default",
                 {wc},
                 {std::monostate{},
                  std::monostate{},
                  std::monostate{},
                  std::monostate{},
                  std::monostate{}},
                 {{6, 5}})
                 ->outputs[0];
  g.set_outputs({y, r});

  EXPECT_FALSE(run("constant_folding", g, PassOptions{})); // freezing off
  EXPECT_TRUE(run("constant_folding", g));
  EXPECT_EQ(ops(g), (std::vector<std::string>{"aten::mm", "aten::rand_like"}));
  Value* folded = g.nodes()[0]->tensor_arg(1);
  ASSERT_EQ(folded->kind, ValueKind::kConstant);
  EXPECT_TRUE(at::equal(folded->constant, w.t()));
  // A dense view of a constant stays a view (one copy of each weight; a change
  // to a frozen parameter recompiles, CompiledGraph guards its version).
  EXPECT_EQ(folded->constant.data_ptr(), w.data_ptr());

  at::Tensor in = at::randn({3, 5});
  EXPECT_TRUE(
      at::allclose(Executor(g).run({in})[0], at::mm(in, w.t()), 1e-5, 1e-5));
}

TEST_F(Passes, ConstantFoldingCopiesViewsThatAreNotDense) {
  // expand gives a stride-0 view: folded into a dense tensor of its own.
  at::Tensor b = at::randn({6});
  Graph g;
  Value* x = input(g, {4, 6});
  Value* bc = g.add_constant(b);
  Value* be = node(
                  g,
                  "aten::expand",
                  "default",
                  {bc},
                  {std::vector<int64_t>{4, 6}, false},
                  {{4, 6}})
                  ->outputs[0];
  be->strides = {0, 1};
  Value* y = node(g, "aten::add", "Tensor", {x, be}, {1}, {{4, 6}})->outputs[0];
  g.set_outputs({y});
  EXPECT_TRUE(run("constant_folding", g));
  Value* folded = g.nodes()[0]->tensor_arg(1);
  ASSERT_EQ(folded->kind, ValueKind::kConstant);
  EXPECT_TRUE(folded->constant.is_non_overlapping_and_dense());
  EXPECT_NE(folded->constant.data_ptr(), b.data_ptr());
  at::Tensor in = at::randn({4, 6});
  EXPECT_TRUE(at::allclose(Executor(g).run({in})[0], in + b, 1e-6, 1e-6));
}

TEST_F(Passes, PropagateStridesFollowsChannelsLastInputs) {
  Graph g;
  Value* x = input(g, {2, 3, 4, 5}, at::MemoryFormat::ChannelsLast);
  Value* y =
      node(g, "aten::relu", "default", {x}, {}, {{2, 3, 4, 5}})->outputs[0];
  Value* z = node(
                 g,
                 "aten::sum",
                 "dim_IntList",
                 {y},
                 {std::vector<int64_t>{1}, false, std::monostate{}},
                 {{2, 4, 5}})
                 ->outputs[0];
  g.set_outputs({z});
  ASSERT_TRUE(y->is_contiguous()); // as lowered, before the pass

  EXPECT_TRUE(run("propagate_strides", g));
  at::Tensor ref = at::relu(
      at::empty({2, 3, 4, 5}).contiguous(at::MemoryFormat::ChannelsLast));
  EXPECT_EQ(y->strides, ref.strides().vec());
  EXPECT_EQ(z->strides, at::sum(ref, {1}).strides().vec());
  EXPECT_FALSE(run("propagate_strides", g)); // already up to date
}

// A depthwise 3x3 convolution [N, C, H, W] on `device` (IR metadata only: no
// tensor is allocated there), then relu; returns {conv output, relu output}.
std::pair<Value*, Value*> depthwise_then_relu(
    Graph& g,
    c10::Device device,
    at::MemoryFormat x_format,
    c10::ScalarType dtype = c10::ScalarType::Float) {
  const std::vector<int64_t> sizes = {2, 8, 5, 5};
  Value* x = g.add_input(
      dtype,
      sizes,
      at::empty(sizes, at::TensorOptions().memory_format(x_format))
          .strides()
          .vec(),
      device);
  Value* w = g.add_input(dtype, {8, 1, 3, 3}, {9, 9, 3, 1}, device);
  Node* c = conv(g, x, w, nullptr, /*groups=*/8);
  Node* r = g.create_node(
      "aten::relu", "default", {c->outputs[0]}, {Arg::tensor(0)}, 1);
  Graph::set_type(
      r->outputs[0], dtype, sizes, contiguous_strides(sizes), device);
  g.set_outputs({r->outputs[0]});
  return {c->outputs[0], r->outputs[0]};
}

// CUDA's convolution writes channels-last for a channels-last input (cuDNN,
// depthwise included), where the Meta kernel answers contiguous: the pass
// applies CUDA's rule, so the generated kernels after a depthwise convolution
// are planned for the layout they will really read (issue #29: MobileNetV3
// made 29 layout copies per call without it).
TEST_F(Passes, PropagateStridesUsesCudasConvolutionLayout) {
  const c10::Device cuda(c10::kCUDA, 0);
  const auto cl = channels_last_strides({2, 8, 5, 5});
  {
    Graph g;
    auto [conv, relu] =
        depthwise_then_relu(g, cuda, at::MemoryFormat::ChannelsLast);
    EXPECT_TRUE(run("propagate_strides", g));
    EXPECT_EQ(conv->strides, cl);
    EXPECT_EQ(relu->strides, cl);
    EXPECT_FALSE(run("propagate_strides", g));
  }
  {
    // On the CPU the Meta kernel's answer stands (the rule is CUDA's only).
    Graph g;
    auto [conv, relu] =
        depthwise_then_relu(g, kCpuDevice, at::MemoryFormat::ChannelsLast);
    run("propagate_strides", g);
    const auto meta = at::TensorOptions().device(at::kMeta);
    at::Tensor ref = at::convolution(
        at::empty({2, 8, 5, 5}, meta)
            .contiguous(at::MemoryFormat::ChannelsLast),
        at::empty({8, 1, 3, 3}, meta),
        std::nullopt,
        {1, 1},
        {1, 1},
        {1, 1},
        false,
        {0, 0},
        8);
    EXPECT_EQ(conv->strides, ref.strides().vec());
  }
  {
    // double: CUDA never picks channels-last (cudnn_conv_suggest_memory_format)
    Graph g;
    auto [conv, relu] = depthwise_then_relu(
        g, cuda, at::MemoryFormat::ChannelsLast, c10::ScalarType::Double);
    run("propagate_strides", g);
    EXPECT_NE(conv->strides, cl);
  }
}

// stem (an ATen convolution of a 3-channel NCHW input) -> a cuDNN
// conv_pointwise -> output, on CUDA (IR metadata only). restore_output_strides
// gives the stem a channels-last copy of its input, so the stem and the
// conv_pointwise read and write channels-last (no per-call layout copy of the
// stem's output), and the graph output gets eager's strides back.
TEST_F(Passes, CudaStemConvolutionReadsChannelsLast) {
  const c10::Device cuda(c10::kCUDA, 0);
  const auto f32 = c10::ScalarType::Float;
  Graph g;
  Value* x = g.add_input(f32, {2, 3, 8, 8}, {192, 64, 8, 1}, cuda);
  Value* w1 = g.add_input(f32, {16, 3, 3, 3}, {27, 9, 3, 1}, cuda);
  Value* w2 = g.add_input(f32, {16, 16, 3, 3}, {144, 9, 3, 1}, cuda);
  Node* stem = conv(g, x, w1, nullptr);
  const std::vector<int64_t> ys = {2, 16, 8, 8};
  std::vector<Arg> lib_args = {
      Arg::tensor(0),
      Arg::tensor(1),
      Arg::constant(std::monostate{}),
      Arg::constant(std::monostate{}),
      Arg::constant(std::vector<int64_t>{1, 1}),
      Arg::constant(std::vector<int64_t>{1, 1}),
      Arg::constant(std::vector<int64_t>{1, 1}),
      Arg::constant(int64_t{1}),
      Arg::constant(std::string()),
      Arg::constant(0.0),
      Arg::constant(0.0)};
  Node* lib = g.create_node(
      "torch_plugin::conv_pointwise",
      "default",
      {stem->outputs[0], w2},
      lib_args,
      1);
  Graph::set_type(lib->outputs[0], f32, ys, channels_last_strides(ys), cuda);
  g.set_outputs({lib->outputs[0]});

  EXPECT_TRUE(restore_output_strides(g, {contiguous_strides(ys)}, frozen()));
  verify(g);
  Value* read = stem->inputs[0];
  ASSERT_NE(read, x);
  ASSERT_NE(read->producer, nullptr);
  EXPECT_EQ(read->producer->op, "aten::clone");
  EXPECT_EQ(read->strides, channels_last_strides({2, 3, 8, 8}));
  EXPECT_EQ(stem->outputs[0]->strides, channels_last_strides(ys));
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.outputs()[0]->strides, contiguous_strides(ys));
}

// x -> c1 -> c2 -> c3 -> c4 (output), all conv_pointwise; view(c1) read after
// c3.
struct Chain {
  Graph g;
  std::vector<at::Tensor> w, b;
  std::vector<Value*> c;
  Value* view = nullptr;
};

std::unique_ptr<Chain> conv_chain(bool view_of_c1) {
  auto ch = std::make_unique<Chain>();
  Graph& g = ch->g;
  Value* v = input(g, {1, 4, 6, 6});
  for (int i = 0; i < 4; ++i) {
    ch->w.push_back(at::randn({4, 4, 3, 3}) * 0.3);
    ch->b.push_back(at::randn({4}));
    v = conv(g, v, g.add_constant(ch->w[i]), g.add_constant(ch->b[i]))
            ->outputs[0];
    ch->c.push_back(v);
  }
  Value* out = ch->c[3];
  if (view_of_c1) {
    Node* view = node(
        g,
        "aten::view",
        "default",
        {ch->c[0]},
        {std::vector<int64_t>{1, 4, 36}},
        {{1, 4, 36}});
    view->may_alias = true;
    view->outputs[0]->strides = {144, 1, 4};
    ch->view = view->outputs[0];
    Value* s = node(
                   g,
                   "aten::sum",
                   "dim_IntList",
                   {ch->view},
                   {std::vector<int64_t>{2}, true, std::monostate{}},
                   {{1, 4, 1}})
                   ->outputs[0];
    Node* unsqueeze = node(
        g, "aten::unsqueeze", "default", {s}, {int64_t{3}}, {{1, 4, 1, 1}});
    unsqueeze->may_alias = true;
    Value* s4 = unsqueeze->outputs[0];
    out = node(
              g,
              "aten::add",
              "Tensor",
              {ch->c[3], s4},
              {int64_t{1}},
              {{1, 4, 6, 6}})
              ->outputs[0];
  }
  g.set_outputs({out});
  EXPECT_TRUE(run("library_patterns", g));
  run("propagate_strides", g);
  // library_patterns replaced the convolutions: take the new values.
  ch->c.clear();
  for (Node* n : g.nodes()) {
    if (n->op == "torch_plugin::conv_pointwise")
      ch->c.push_back(n->outputs[0]);
  }
  return ch;
}

at::Tensor chain_ref(const Chain& ch, const at::Tensor& x, bool view_of_c1) {
  std::vector<at::Tensor> c;
  at::Tensor v = x;
  for (int i = 0; i < 4; ++i)
    c.push_back(v = conv_ref(v, ch.w[i], ch.b[i]));
  if (!view_of_c1)
    return c[3];
  return c[3] + c[0].view({1, 4, 36}).sum({2}, true).unsqueeze(3);
}

TEST_F(Passes, MemoryPlanningReusesBuffersOfDeadValues) {
  auto ch = conv_chain(false);
  Graph& g = ch->g;
  ASSERT_EQ(ch->c.size(), 4u);
  EXPECT_TRUE(run("memory_planning", g));
  const int64_t bytes = 1 * 4 * 6 * 6 * 4; // 576, a multiple of 64
  // c1 lives over [c1, c2], c2 over [c2, c3], c3 over [c3, c4]; c4 is the
  // output.
  EXPECT_GE(ch->c[0]->arena_offset, 0);
  EXPECT_GE(ch->c[1]->arena_offset, 0);
  EXPECT_GE(ch->c[2]->arena_offset, 0);
  EXPECT_EQ(ch->c[3]->arena_offset, -1); // graph outputs are never planned
  EXPECT_NE(ch->c[0]->arena_offset, ch->c[1]->arena_offset);
  EXPECT_NE(ch->c[1]->arena_offset, ch->c[2]->arena_offset);
  EXPECT_EQ(
      ch->c[0]->arena_offset,
      ch->c[2]->arena_offset); // c1 is dead when c3 is made
  EXPECT_EQ(g.arena_bytes, 2 * bytes);

  PassOptions off = frozen();
  off.memory_planning = false;
  EXPECT_TRUE(run("memory_planning", g, off)); // clears the plan
  EXPECT_EQ(g.arena_bytes, 0);
  EXPECT_EQ(ch->c[0]->arena_offset, -1);
}

TEST_F(Passes, MemoryPlanningViewsExtendLifetimes) {
  auto ch = conv_chain(true);
  Graph& g = ch->g;
  ASSERT_EQ(ch->c.size(), 4u);
  EXPECT_TRUE(run("memory_planning", g));
  // view(c1) is read after c3 and c4 are made: c1 may share with nothing.
  std::set<int64_t> offsets;
  for (int i = 0; i < 4; ++i) {
    EXPECT_GE(ch->c[i]->arena_offset, 0) << i; // c4 is not an output here
    offsets.insert(ch->c[i]->arena_offset);
  }
  EXPECT_NE(ch->c[0]->arena_offset, ch->c[2]->arena_offset);
  EXPECT_NE(ch->c[0]->arena_offset, ch->c[3]->arena_offset);
  EXPECT_EQ(
      ch->c[1]->arena_offset,
      ch->c[3]->arena_offset); // c2 is dead when c4 is made
  EXPECT_EQ(offsets.size(), 3u);
}

TEST_F(Passes, MemoryPlanningNeverPlansWhatAnOutputAliases) {
  Graph g;
  at::Tensor w = at::randn({4, 4, 3, 3});
  Value* x = input(g, {1, 4, 6, 6});
  Value* c1 = conv(g, x, g.add_constant(w), nullptr)->outputs[0];
  Value* c2 = conv(g, c1, g.add_constant(w), nullptr)->outputs[0];
  Node* view = node(
      g,
      "aten::view",
      "default",
      {c1},
      {std::vector<int64_t>{4, 36}},
      {{4, 36}});
  view->may_alias = true;
  g.set_outputs({view->outputs[0], c2});
  ASSERT_TRUE(run("library_patterns", g));
  run("memory_planning", g);
  for (Node* n : g.nodes()) {
    for (Value* out : n->outputs)
      EXPECT_EQ(out->arena_offset, -1) << n->qualified_name();
  }
  EXPECT_EQ(g.arena_bytes, 0);
}

TEST_F(Passes, MemoryPlannedGraphMatchesEagerAndOutputsOutliveRuns) {
  for (bool view_of_c1 : {false, true}) {
    auto ch = conv_chain(view_of_c1);
    ASSERT_TRUE(run("memory_planning", ch->g));
    Executor e(ch->g);
#ifdef TORCH_PLUGIN_HAVE_ONEDNN
    EXPECT_EQ(e.num_planned(), view_of_c1 ? 4 : 3);
#endif
    at::Tensor x1 = at::randn({1, 4, 6, 6}), x2 = at::randn({1, 4, 6, 6});
    at::Tensor y1 = e.run({x1})[0];
    at::Tensor y2 = e.run({x2})[0]; // reuses the arena of the first run
    at::Tensor r1 = chain_ref(*ch, x1, view_of_c1),
               r2 = chain_ref(*ch, x2, view_of_c1);
    EXPECT_TRUE(at::allclose(y1, r1, 1e-4, 1e-4)) << (y1 - r1).abs().max();
    EXPECT_TRUE(at::allclose(y2, r2, 1e-4, 1e-4)) << (y2 - r2).abs().max();
  }
}

} // namespace
} // namespace torch_plugin::compiler
