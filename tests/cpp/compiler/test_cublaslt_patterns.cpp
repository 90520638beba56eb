// test_cublaslt_patterns.cpp: the CUDA rules of the library_patterns pass
// (kCudaRules in csrc/compiler/passes/library_patterns.cpp) on hand-built IR
// graphs of CUDA values: mm/addmm (with the permute of the weight that
// AOTAutograd emits for F.linear) become torch_plugin::linear_pointwise with
// the bias, a following relu / tanh-GELU joins as the cuBLASLt epilogue, the
// exact GELU does not, and CPU values are left to the oneDNN rules. IR only:
// no GPU is needed (nothing is run). Built with the CUDA toolkit only.
#include "compiler/passes/pipeline.h"
#include "ir/ir.h"
#include "ir/verifier.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace torch_plugin::compiler {
namespace {

#ifdef TORCH_PLUGIN_HAVE_CUDA

const c10::Device kCuda(c10::kCUDA, 0);
const c10::Device kCpu(c10::kCPU);

Value* input(
    Graph& g,
    std::vector<int64_t> sizes,
    c10::ScalarType dtype,
    c10::Device device) {
  return g.add_input(dtype, sizes, contiguous_strides(sizes), device);
}

// A node whose tensor arguments come first, then `consts`; one output.
Value* node(
    Graph& g,
    const std::string& op,
    std::vector<Value*> ins,
    std::vector<AttrValue> consts,
    std::vector<int64_t> sizes,
    std::vector<int64_t> strides = {},
    bool may_alias = false) {
  std::vector<Arg> args;
  for (size_t i = 0; i < ins.size(); ++i)
    args.push_back(Arg::tensor(static_cast<int64_t>(i)));
  for (AttrValue& c : consts)
    args.push_back(Arg::constant(std::move(c)));
  Node* n = g.create_node(op, "default", ins, args, 1);
  n->may_alias = may_alias;
  if (strides.empty())
    strides = contiguous_strides(sizes);
  Graph::set_type(n->outputs[0], ins[0]->dtype, sizes, strides, ins[0]->device);
  return n->outputs[0];
}

// permute(w, [1, 0]) of a [N, K] weight, as AOTAutograd emits for F.linear.
Value* transpose(Graph& g, Value* w) {
  return node(
      g,
      "aten::permute",
      {w},
      {std::vector<int64_t>{1, 0}},
      {w->sizes[1], w->sizes[0]},
      {w->strides[1], w->strides[0]},
      true);
}

int count(const Graph& g, const std::string& op) {
  int c = 0;
  for (const auto& n : g.node_list())
    c += n->op == op;
  return c;
}

const Node* the_node(const Graph& g, const std::string& op) {
  for (const auto& n : g.node_list()) {
    if (n->op == op)
      return n.get();
  }
  return nullptr;
}

bool run_patterns(Graph& g) {
  PassOptions options;
  options.verify = true;
  bool changed = run_pass(find_pass("library_patterns"), g, options);
  verify(g);
  return changed;
}

// Linear(16, 32) + ReLU on a [4, 16] bf16 input, as AOTAutograd lowers it.
TEST(CublasLtPatterns, AddmmWithPermutedWeightAndReluBecomesOneNode) {
  Graph g;
  Value* x = input(g, {4, 16}, at::kBFloat16, kCuda);
  Value* w = input(g, {32, 16}, at::kBFloat16, kCuda);
  Value* b = input(g, {32}, at::kBFloat16, kCuda);
  Value* wt = transpose(g, w);
  Value* y =
      node(g, "aten::addmm", {b, x, wt}, {int64_t{1}, int64_t{1}}, {4, 32});
  Value* r = node(g, "aten::relu", {y}, {}, {4, 32});
  g.set_outputs({r});
  ASSERT_TRUE(run_patterns(g));
  EXPECT_EQ(count(g, "aten::addmm"), 0);
  EXPECT_EQ(count(g, "aten::relu"), 0);
  const Node* lib = the_node(g, "torch_plugin::linear_pointwise");
  ASSERT_NE(lib, nullptr);
  EXPECT_EQ(lib->tensor_arg(0), x);
  EXPECT_EQ(lib->tensor_arg(1), w); // the weight itself, [N, K]
  EXPECT_EQ(lib->tensor_arg(2), b);
  EXPECT_EQ(lib->tensor_arg(3), nullptr);
  EXPECT_EQ(std::get<std::string>(lib->const_arg(4)), "relu");
  EXPECT_EQ(g.outputs()[0], lib->outputs[0]);
  EXPECT_TRUE(g.outputs()[0]->device.is_cuda());
}

// A 3-d input: view, addmm, view, gelu(tanh) joins through the view.
TEST(CublasLtPatterns, TanhGeluJoinsThroughAView) {
  Graph g;
  Value* x = input(g, {2, 3, 16}, at::kFloat, kCuda);
  Value* w = input(g, {8, 16}, at::kFloat, kCuda);
  Value* b = input(g, {8}, at::kFloat, kCuda);
  Value* x2 = node(
      g, "aten::view", {x}, {std::vector<int64_t>{6, 16}}, {6, 16}, {}, true);
  Value* y = node(
      g,
      "aten::addmm",
      {b, x2, transpose(g, w)},
      {int64_t{1}, int64_t{1}},
      {6, 8});
  Value* y3 = node(
      g,
      "aten::view",
      {y},
      {std::vector<int64_t>{2, 3, 8}},
      {2, 3, 8},
      {},
      true);
  Value* out = node(g, "aten::gelu", {y3}, {std::string("tanh")}, {2, 3, 8});
  g.set_outputs({out});
  ASSERT_TRUE(run_patterns(g));
  EXPECT_EQ(count(g, "aten::gelu"), 0);
  const Node* lib = the_node(g, "torch_plugin::linear_pointwise");
  ASSERT_NE(lib, nullptr);
  EXPECT_EQ(std::get<std::string>(lib->const_arg(4)), "gelu_tanh");
  EXPECT_EQ(g.outputs()[0]->producer->op, "aten::view");
}

// The exact (erf) GELU has no cuBLASLt epilogue: it stays an op.
TEST(CublasLtPatterns, ExactGeluIsNotFused) {
  Graph g;
  Value* x = input(g, {4, 16}, at::kHalf, kCuda);
  Value* w = input(g, {8, 16}, at::kHalf, kCuda);
  Value* y = node(g, "aten::mm", {x, transpose(g, w)}, {}, {4, 8});
  Value* out = node(g, "aten::gelu", {y}, {std::string("none")}, {4, 8});
  g.set_outputs({out});
  ASSERT_TRUE(run_patterns(g));
  const Node* lib = the_node(g, "torch_plugin::linear_pointwise");
  ASSERT_NE(lib, nullptr);
  EXPECT_EQ(lib->tensor_arg(2), nullptr);
  // Only kCudaRules decide the activation of a CUDA node.
  EXPECT_NE(std::get<std::string>(lib->const_arg(4)), "gelu_tanh");
}

// mm(x, B) of a right operand that is no transposition: linear_pointwise
// takes B^T as a permute view; a used-twice result keeps its relu.
TEST(CublasLtPatterns, PlainMmGetsATransposedView) {
  Graph g;
  Value* x = input(g, {5, 7}, at::kFloat, kCuda);
  Value* bm = input(g, {7, 3}, at::kFloat, kCuda);
  Value* y = node(g, "aten::mm", {x, bm}, {}, {5, 3});
  Value* r = node(g, "aten::relu", {y}, {}, {5, 3});
  g.set_outputs({r, y});
  ASSERT_TRUE(run_patterns(g));
  EXPECT_EQ(count(g, "aten::relu"), 1); // y is also an output
  const Node* lib = the_node(g, "torch_plugin::linear_pointwise");
  ASSERT_NE(lib, nullptr);
  const Value* w = lib->tensor_arg(1);
  EXPECT_EQ(w->producer->op, "aten::permute");
  EXPECT_EQ(w->producer->inputs[0], bm);
  EXPECT_EQ(w->sizes, (std::vector<int64_t>{3, 7}));
  EXPECT_EQ(w->strides, (std::vector<int64_t>{1, 3}));
  EXPECT_TRUE(w->producer->may_alias);
}

// Constant CUDA weights (frozen inference graphs) go the CUDA way too: the
// weight is used through its permute, not copied into a new constant.
TEST(CublasLtPatterns, ConstantCudaWeightIsNotRepacked) {
  Graph g;
  Value* x = input(g, {4, 16}, at::kFloat, kCuda);
  Value* w = g.add_constant(at::randn({32, 16}));
  w->device = kCuda; // IR only: nothing runs
  Value* y = node(g, "aten::mm", {x, transpose(g, w)}, {}, {4, 32});
  g.set_outputs({y});
  const size_t constants = g.constants().size();
  ASSERT_TRUE(run_patterns(g));
  const Node* lib = the_node(g, "torch_plugin::linear_pointwise");
  ASSERT_NE(lib, nullptr);
  EXPECT_EQ(lib->tensor_arg(1), w);
  EXPECT_EQ(g.constants().size(), constants);
}

// A constant right operand (freezing folded the weight's permute): w is a
// constant viewing it transposed, sharing its storage.
TEST(CublasLtPatterns, ConstantRightOperandIsViewedTransposed) {
  Graph g;
  Value* x = input(g, {4, 16}, at::kFloat, kCuda);
  at::Tensor wt_tensor = at::randn({16, 32});
  Value* wt = g.add_constant(wt_tensor);
  wt->device = kCuda; // IR only: nothing runs
  Value* y = node(g, "aten::mm", {x, wt}, {}, {4, 32});
  g.set_outputs({y});
  ASSERT_TRUE(run_patterns(g));
  const Node* lib = the_node(g, "torch_plugin::linear_pointwise");
  ASSERT_NE(lib, nullptr);
  const Value* w = lib->tensor_arg(1);
  ASSERT_EQ(w->kind, ValueKind::kConstant);
  EXPECT_EQ(w->sizes, (std::vector<int64_t>{32, 16}));
  EXPECT_EQ(w->strides, (std::vector<int64_t>{1, 32}));
  EXPECT_TRUE(w->constant.is_alias_of(wt_tensor));
}

// CPU values: the CUDA rules never fire (the oneDNN rules need a constant
// weight; here it is an input, so nothing changes).
TEST(CublasLtPatterns, CpuValuesAreLeftAlone) {
  Graph g;
  Value* x = input(g, {4, 16}, at::kFloat, kCpu);
  Value* w = input(g, {32, 16}, at::kFloat, kCpu);
  Value* b = input(g, {32}, at::kFloat, kCpu);
  Value* y = node(
      g,
      "aten::addmm",
      {b, x, transpose(g, w)},
      {int64_t{1}, int64_t{1}},
      {4, 32});
  Value* r = node(g, "aten::relu", {y}, {}, {4, 32});
  g.set_outputs({r});
  EXPECT_FALSE(run_patterns(g));
  EXPECT_EQ(count(g, "torch_plugin::linear_pointwise"), 0);
}

// Mixed dtypes, scaled addmm and [1, N] addends stay ATen ops.
TEST(CublasLtPatterns, UnsupportedAddmmsStayAten) {
  Graph g;
  Value* x = input(g, {4, 16}, at::kFloat, kCuda);
  Value* w = input(g, {32, 16}, at::kFloat, kCuda);
  Value* b = input(g, {32}, at::kFloat, kCuda);
  Value* b2 = input(g, {1, 32}, at::kFloat, kCuda);
  Value* scaled = node(
      g, "aten::addmm", {b, x, transpose(g, w)}, {int64_t{1}, 0.5}, {4, 32});
  Value* row = node(
      g,
      "aten::addmm",
      {b2, x, transpose(g, w)},
      {int64_t{1}, int64_t{1}},
      {4, 32});
  Value* xi = input(g, {4, 16}, at::kInt, kCuda);
  Value* wi = input(g, {16, 32}, at::kInt, kCuda);
  Value* ints = node(g, "aten::mm", {xi, wi}, {}, {4, 32});
  g.set_outputs({scaled, row, ints});
  EXPECT_FALSE(run_patterns(g));
  EXPECT_EQ(count(g, "aten::addmm"), 2);
  EXPECT_EQ(count(g, "aten::mm"), 1);
}

#else

TEST(CublasLtPatterns, SkippedWithoutCudaToolkit) {
  GTEST_SKIP() << "built without the CUDA toolkit: no CUDA rules";
}

#endif

} // namespace
} // namespace torch_plugin::compiler
