// test_cuda_runtime.cpp: unit tests of csrc/runtime/cuda — NVRTC compile checks
// (no GPU needed) and, on a machine with a GPU, the executor's CUDA kernel step
// on a hand-built graph with one CUDA fusion group (attrs as the codegen stage
// sets them). Built only with the CUDA parts (TORCH_PLUGIN_HAVE_CUDA).
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/executor.h"

#include <ATen/ops/allclose.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/randn.h>
#include <c10/cuda/CUDAFunctions.h>
#include <gtest/gtest.h>

#include <string>

namespace torch_plugin::runtime::cuda {
namespace {

bool have_gpu() {
  try {
    return c10::cuda::device_count() > 0;
  } catch (const std::exception&) {
    return false;
  }
}

constexpr int64_t kRows = 33, kCols = 65;

// out0 = x * 2 + y[col], out1 = x - 1 over [kRows, kCols], contiguous.
const std::string kSource = R"(
extern "C" __global__ void kernel(float* out0, float* out1, const float* x, const float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 33 * 65) {
    out0[i] = x[i] * 2.0f + y[i % 65];
    out1[i] = x[i] - 1.0f;
  }
}
)";

TEST(CudaRuntime, CompileCheckReturnsPtx) {
  std::string ptx = nvrtc_compile_check(kSource, "sm_80");
  EXPECT_NE(ptx.find(".entry kernel"), std::string::npos);
  EXPECT_NE(ptx.find(".target sm_80"), std::string::npos);
}

TEST(CudaRuntime, CompileErrorQuotesTheLine) {
  try {
    nvrtc_compile_check(
        "extern \"C\" __global__ void k(float* o) {\n  o[0] = ;\n}\n",
        "sm_90",
        "fused_7");
    FAIL() << "expected a compile error";
  } catch (const c10::Error& e) {
    std::string m = e.what_without_backtrace();
    EXPECT_NE(
        m.find("NVRTC nvrtcCompileProgram failed (NVRTC_ERROR_COMPILATION) "
               "for kernel fused_7"),
        std::string::npos)
        << m;
    EXPECT_NE(m.find("    2 |   o[0] = ;"), std::string::npos) << m;
  }
}

// One fusion group node on cuda:0 with inputs x [kRows, kCols] (planned
// contiguous) and y [kCols].
std::unique_ptr<ir::Graph> cuda_group_graph() {
  auto g = std::make_unique<ir::Graph>();
  const c10::Device dev(c10::kCUDA, 0);
  auto f32 = c10::ScalarType::Float;
  ir::Value* x = g->add_input(f32, {kRows, kCols}, {kCols, 1}, dev);
  ir::Value* y = g->add_input(f32, {kCols}, {1}, dev);
  ir::Node* n = g->create_node(
      "torch_plugin::fused",
      "",
      {x, y},
      {ir::Arg::tensor(0), ir::Arg::tensor(1)},
      2);
  for (ir::Value* o : n->outputs)
    ir::Graph::set_type(o, f32, {kRows, kCols}, {kCols, 1}, dev);
  n->attrs["name"] = std::string("fused_0");
  n->attrs["target"] = std::string("cuda");
  n->attrs["source"] = kSource;
  n->attrs["entry"] = std::string("kernel");
  n->attrs["grid"] = int64_t{(kRows * kCols + 127) / 128};
  n->attrs["block"] = int64_t{128};
  n->attrs["shared_bytes"] = int64_t{0};
  g->set_outputs({n->outputs[0], n->outputs[1]});
  return g;
}

TEST(CudaRuntime, ExecutorRunsACudaFusionGroup) {
  if (!have_gpu())
    GTEST_SKIP() << "needs a CUDA GPU";
  auto g = cuda_group_graph();
  Executor e(*g);
  EXPECT_NE(e.describe().find("kernel fused_0 (cuda)"), std::string::npos)
      << e.describe();
  auto opts = at::TensorOptions().device(c10::kCUDA, 0);
  at::Tensor x = at::randn({kRows, kCols}, opts);
  at::Tensor y = at::randn({kCols}, opts);
  auto out = e.run({x, y});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(out[0].is_cuda());
  EXPECT_TRUE(at::allclose(out[0], x.mul(2.0).add(y)));
  EXPECT_TRUE(at::allclose(out[1], x.sub(1.0)));
  // An input with other strides (a transpose) is copied to the planned ones.
  at::Tensor xt = at::randn({kCols, kRows}, opts).t();
  out = e.run({xt, y});
  EXPECT_TRUE(at::allclose(out[0], xt.mul(2.0).add(y)));
}

TEST(CudaRuntime, ExecutorRejectsAnInputOnTheCpu) {
  if (!have_gpu())
    GTEST_SKIP() << "needs a CUDA GPU";
  auto g = cuda_group_graph();
  Executor e(*g);
  try {
    e.run({at::randn({kRows, kCols}), at::randn({kCols})});
    FAIL() << "expected an error";
  } catch (const c10::Error& err) {
    std::string m = err.what_without_backtrace();
    EXPECT_NE(m.find("kernel fused_0: input 0 is on cpu"), std::string::npos)
        << m;
  }
}

} // namespace
} // namespace torch_plugin::runtime::cuda
