// test_cublaslt_step.cpp: the executor's cuBLASLt step
// (csrc/runtime/cuda/cublaslt_step.cpp) on hand-built IR graphs of one
// torch_plugin::linear_pointwise node on the GPU, against ATen: fused bias,
// residual (cuBLASLt's C) and relu / tanh-GELU epilogues, fp32 / bf16, a
// 3-d input, and a TF32 switch after the executor was built. Needs a GPU:
// skipped without one (and without the CUDA toolkit).
#include "ir/ir.h"
#include "runtime/executor.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gtest/gtest.h>

namespace torch_plugin::runtime {
namespace {

#ifdef TORCH_PLUGIN_HAVE_CUDA

using ir::Arg;
using ir::Graph;
using ir::Value;

struct Case {
  std::vector<int64_t> x_sizes;
  int64_t n;
  bool bias, residual;
  std::string activation;
  c10::ScalarType dtype;
};

// One linear_pointwise node over graph inputs x, w [, b] [, r].
std::unique_ptr<Graph> linear_graph(const Case& c) {
  auto g = std::make_unique<Graph>();
  const c10::Device dev(c10::kCUDA, 0);
  const int64_t k = c.x_sizes.back();
  std::vector<int64_t> out = c.x_sizes;
  out.back() = c.n;
  auto in = [&](std::vector<int64_t> sizes) {
    return g->add_input(c.dtype, sizes, ir::contiguous_strides(sizes), dev);
  };
  std::vector<Value*> inputs = {in(c.x_sizes), in({c.n, k})};
  std::vector<Arg> args = {Arg::tensor(0), Arg::tensor(1)};
  auto optional_input = [&](bool present, std::vector<int64_t> sizes) {
    if (!present) {
      args.push_back(Arg::constant(std::monostate{}));
      return;
    }
    inputs.push_back(in(std::move(sizes)));
    args.push_back(Arg::tensor(static_cast<int64_t>(inputs.size()) - 1));
  };
  optional_input(c.bias, {c.n});
  optional_input(c.residual, out);
  args.push_back(Arg::constant(c.activation));
  args.push_back(Arg::constant(0.0));
  args.push_back(Arg::constant(0.0));
  ir::Node* n = g->create_node(
      "torch_plugin::linear_pointwise", "default", inputs, args, 1);
  Graph::set_type(
      n->outputs[0], c.dtype, out, ir::contiguous_strides(out), dev);
  g->set_outputs({n->outputs[0]});
  return g;
}

at::Tensor reference(const std::vector<at::Tensor>& in, const Case& c) {
  std::vector<at::Tensor> d;
  for (const at::Tensor& t : in)
    d.push_back(t.to(at::kDouble));
  at::Tensor y = at::linear(d[0], d[1], c.bias ? d[2] : at::Tensor());
  if (c.residual)
    y = y + d.back();
  if (c.activation == "relu")
    y = at::relu(y);
  else if (c.activation == "gelu_tanh")
    y = at::gelu(y, "tanh");
  return y;
}

class CublasLtStep : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!at::hasCUDA())
      GTEST_SKIP() << "needs a CUDA GPU";
    tf32_ = at::globalContext().allowTF32CuBLAS();
    at::globalContext().setAllowTF32CuBLAS(false);
  }
  void TearDown() override {
    if (at::hasCUDA())
      at::globalContext().setAllowTF32CuBLAS(tf32_);
  }
  bool tf32_ = false;
};

void check(const Case& c, double tol) {
  std::unique_ptr<Graph> g = linear_graph(c);
  Executor e(*g);
  EXPECT_NE(e.describe().find("cublaslt linear_pointwise"), std::string::npos)
      << e.describe();
  std::vector<at::Tensor> in;
  for (const Value* v : g->inputs())
    in.push_back(
        at::randn(v->sizes, at::TensorOptions().device(at::kCUDA)).to(c.dtype));
  for (int run = 0; run < 2; ++run) {
    at::Tensor got = e.run(in)[0];
    at::Tensor want = reference(in, c);
    double scale = std::max(want.abs().max().item<double>(), 1e-3);
    EXPECT_TRUE(at::allclose(got.to(at::kDouble), want, tol, tol * scale))
        << e.describe() << "\nmax error "
        << (got.to(at::kDouble) - want).abs().max().item<double>();
  }
}

TEST_F(CublasLtStep, Fp32Epilogues) {
  for (bool bias : {false, true}) {
    for (bool residual : {false, true}) {
      for (const char* act : {"", "relu", "gelu_tanh"})
        check({{7, 33}, 65, bias, residual, act, at::kFloat}, 1e-4);
    }
  }
}

TEST_F(CublasLtStep, Bf16AndThreeDimensionalInput) {
  check({{2, 5, 64}, 96, true, true, "gelu_tanh", at::kBFloat16}, 2e-2);
  check({{1, 768}, 3072, true, false, "relu", at::kHalf}, 5e-3);
}

// The TF32 setting is read at each run: switched on after the executor was
// built, the step takes a TF32 plan; switched off again, full fp32 is back.
TEST_F(CublasLtStep, Tf32SwitchAfterBuild) {
  Case c{{256, 4096}, 512, false, false, "", at::kFloat};
  std::unique_ptr<Graph> g = linear_graph(c);
  Executor e(*g);
  std::vector<at::Tensor> in = {
      at::randn({256, 4096}, at::TensorOptions().device(at::kCUDA)),
      at::randn({512, 4096}, at::TensorOptions().device(at::kCUDA)) / 64};
  at::Tensor want = reference(in, c);
  double scale = want.abs().max().item<double>();
  auto error = [&] {
    return (e.run(in)[0].to(at::kDouble) - want).abs().max().item<double>() /
        scale;
  };
  EXPECT_LT(error(), 1e-4);
  at::globalContext().setAllowTF32CuBLAS(true);
  EXPECT_LT(error(), 5e-3);
  at::globalContext().setAllowTF32CuBLAS(false);
  EXPECT_LT(error(), 1e-4);
}

#endif

} // namespace
} // namespace torch_plugin::runtime
