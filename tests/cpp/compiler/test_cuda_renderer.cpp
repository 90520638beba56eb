// test_cuda_renderer.cpp: unit tests of the CUDA renderer
// (csrc/compiler/codegen/cuda): IR graphs of CUDA values go through the fusion
// pass, each fusion group is rendered with render_cuda, and the source is
// compiled by NVRTC for sm_90 (dlopen'ed: $TORCH_PLUGIN_NVRTC,
// libnvrtc.so.13/12, /usr/local/cuda/lib64, or the pip package
// nvidia-cuda-nvrtc's copy under the embedded interpreter's site-packages; the
// compile checks skip without it). ptxas's report must show no stack frame and
// no spills (register arrays indexed at compile time only). The kernels'
// numerics are tested on a GPU in tests/python/compiler/test_cuda_kernels.py.
#include "compiler/codegen/cuda/cuda_common.h"
#include "compiler/codegen/cuda/cuda_renderer.h"
#include "compiler/codegen/op_semantics.h"
#include "compiler/passes/pass.h"
#include "cuda_graph_builder.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pybind11/embed.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace torch_plugin::compiler {
namespace {

using namespace testing;
namespace py = pybind11;

// ---- NVRTC, loaded at run time
// ------------------------------------------------
struct Nvrtc {
  using Create = int (*)(
      void**,
      const char*,
      const char*,
      int,
      const char* const*,
      const char* const*);
  using Compile = int (*)(void*, int, const char* const*);
  using LogSize = int (*)(void*, size_t*);
  using Log = int (*)(void*, char*);
  using Destroy = int (*)(void**);
  Create create = nullptr;
  Compile compile = nullptr;
  LogSize log_size = nullptr;
  Log log = nullptr;
  Destroy destroy = nullptr;

  static const Nvrtc* get() {
    static const Nvrtc* instance = load();
    return instance;
  }
  static const Nvrtc* load() {
    std::vector<std::string> paths;
    if (const char* env = std::getenv("TORCH_PLUGIN_NVRTC"))
      paths.push_back(env);
    for (const char* p :
         {"libnvrtc.so.13",
          "libnvrtc.so.12",
          "libnvrtc.so",
          "/usr/local/cuda/lib64/libnvrtc.so"})
      paths.push_back(p);
    try {
      py::object site = py::module_::import("site");
      for (auto dir : site.attr("getsitepackages")()) {
        const std::string d = py::str(dir);
        paths.push_back(d + "/nvidia/cu13/lib/libnvrtc.so.13");
        paths.push_back(d + "/nvidia/cuda_nvrtc/lib/libnvrtc.so.12");
      }
    } catch (const std::exception&) {
    }
    for (const std::string& p : paths) {
      void* h = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h)
        continue;
      auto* n = new Nvrtc;
      n->create = reinterpret_cast<Create>(dlsym(h, "nvrtcCreateProgram"));
      n->compile = reinterpret_cast<Compile>(dlsym(h, "nvrtcCompileProgram"));
      n->log_size =
          reinterpret_cast<LogSize>(dlsym(h, "nvrtcGetProgramLogSize"));
      n->log = reinterpret_cast<Log>(dlsym(h, "nvrtcGetProgramLog"));
      n->destroy = reinterpret_cast<Destroy>(dlsym(h, "nvrtcDestroyProgram"));
      if (n->create && n->compile && n->log_size && n->log && n->destroy)
        return n;
      delete n;
    }
    return nullptr;
  }
};

// Compiles for sm_90 with ptxas's resource report; returns {ok, log}.
std::pair<bool, std::string> nvrtc_compile(const std::string& src) {
  const Nvrtc* n = Nvrtc::get();
  void* prog = nullptr;
  EXPECT_EQ(n->create(&prog, src.c_str(), "kernel.cu", 0, nullptr, nullptr), 0);
  const char* opts[] = {"--gpu-architecture=sm_90", "--ptxas-options=-v"};
  const int rc = n->compile(prog, 2, opts);
  size_t size = 0;
  n->log_size(prog, &size);
  std::string log(size, '\0');
  if (size)
    n->log(prog, log.data());
  n->destroy(&prog);
  log.resize(log.find('\0') == std::string::npos ? log.size() : log.find('\0'));
  return {rc == 0, log};
}

#define REQUIRE_NVRTC() \
  if (!Nvrtc::get())    \
  GTEST_SKIP() << "NVRTC not found (set TORCH_PLUGIN_NVRTC)"

// Compiles a rendered kernel and checks the resource report. With
// $TORCH_PLUGIN_TEST_DUMP_DIR set, writes each source and report there.
void expect_compiles(const KernelSource& k) {
  auto [ok, log] = nvrtc_compile(k.source);
  if (const char* dir = std::getenv("TORCH_PLUGIN_TEST_DUMP_DIR")) {
    static int count = 0;
    const std::string name = std::string(dir) + "/" +
        ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
        std::to_string(count++) + ".cu";
    std::ofstream(name) << k.source << "\n/* grid " << k.grid << " block "
                        << k.block << "\n"
                        << log << "*/\n";
  }
  ASSERT_TRUE(ok) << log << "\n----- source -----\n" << k.source;
  EXPECT_NE(
      log.find("0 bytes stack frame, 0 bytes spill stores"), std::string::npos)
      << log << "\n----- source -----\n"
      << k.source;
  EXPECT_EQ(k.target, "cuda");
  // Named for profilers: tp_<kind>_<the body's ops>, the source's entry.
  EXPECT_EQ(k.entry.rfind("tp_", 0), 0u) << k.entry;
  EXPECT_LE(k.entry.size(), 64u) << k.entry;
  EXPECT_NE(k.source.find(") " + k.entry + "("), std::string::npos) << k.entry;
  EXPECT_GE(k.grid, 1);
  EXPECT_GE(k.block, 32);
  EXPECT_LE(k.block, 1024);
  EXPECT_LE(k.grid, 132 * 64);
}

ScalarType dtype_of(int i) {
  return i == 0 ? ScalarType::Float
      : i == 1  ? ScalarType::BFloat16
                : ScalarType::Half;
}

TEST(CudaRenderer, PreambleDefinesEveryTableHelper) {
  const std::string& p = cuda::preamble();
  for (const std::string& name : pointwise_helper_names())
    EXPECT_NE(p.find("float " + name + "("), std::string::npos) << name;
  EXPECT_EQ(p.find("#include"), std::string::npos);
}

// ---- pointwise
// ------------------------------------------------------------------
TEST(CudaRenderer, PointwiseVectorizedChainEveryDtype) {
  REQUIRE_NVRTC();
  for (int d = 0; d < 3; ++d) {
    Builder b;
    const ScalarType dt = dtype_of(d);
    Value* x = b.input({4096, 1024}, dt);
    Value* bias = b.input({1024}, dt);
    Value* h = b.binary("aten::add", x, bias, {4096, 1024}, dt);
    Value* y = b.gelu(h, d == 0 ? "tanh" : "none");
    b.g.set_outputs({y});
    auto ks = render_all(b);
    ASSERT_EQ(ks.size(), 1u);
    const int64_t v = d == 0 ? 4 : 8;
    EXPECT_NE(
        ks[0].source.find(std::to_string(v) + " per vector"),
        std::string::npos);
    EXPECT_NE(ks[0].source.find("uint4"), std::string::npos);
    EXPECT_EQ(ks[0].block, 256);
    EXPECT_EQ(ks[0].grid, std::min<int64_t>(4096 * 1024 / v / 256, 132 * 64));
    if (d == 2)
      EXPECT_NE(ks[0].source.find("tp_st_f16("), std::string::npos);
    expect_compiles(ks[0]);
  }
}

TEST(CudaRenderer, PointwiseOddSizesScalarsAndOneElement) {
  REQUIRE_NVRTC();
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{1000003}}) {
    Builder b;
    Value* x = b.input({n});
    Value* s = b.input({});
    Value* y = b.unary("aten::sigmoid", b.binary("aten::mul", x, s, {n}));
    Value* z = b.unary("aten::exp", y);
    b.g.set_outputs({y, z});
    auto ks = render_all(b);
    ASSERT_EQ(ks.size(), 1u);
    EXPECT_EQ(
        ks[0].grid,
        std::max<int64_t>(
            1, std::min<int64_t>(((n + 3) / 4 + 255) / 256, 132 * 64)));
    expect_compiles(ks[0]);
  }
}

TEST(CudaRenderer, PointwiseBroadcastAndNonContiguous) {
  REQUIRE_NVRTC();
  Builder b;
  Value* x = b.input({7, 13});
  Value* xt = b.input({7, 13}, ScalarType::Float, {1, 7}); // transposed
  Value* y = b.input({13});
  Value* c = b.input({7, 1});
  Value* h =
      b.binary("aten::mul", b.binary("aten::add", x, y, {7, 13}), xt, {7, 13});
  Value* r = b.unary("aten::relu", b.binary("aten::sub", h, c, {7, 13}));
  b.g.set_outputs({r});
  auto ks = render_all(b);
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_NE(ks[0].source.find("1 per vector"), std::string::npos);
  EXPECT_NE(ks[0].source.find("% (int)13"), std::string::npos);
  expect_compiles(ks[0]);
}

TEST(CudaRenderer, PointwiseBroadcastOverLeadingDimsStaysVectorized) {
  REQUIRE_NVRTC();
  Builder b;
  Value* x = b.input({3, 5, 64}, ScalarType::BFloat16);
  Value* w = b.input({64}, ScalarType::BFloat16);
  Value* s = b.input({3, 5, 1}, ScalarType::BFloat16);
  Value* h = b.binary("aten::mul", x, w, {3, 5, 64}, ScalarType::BFloat16);
  Value* y = b.unary(
      "aten::tanh",
      b.binary("aten::div", h, s, {3, 5, 64}, ScalarType::BFloat16));
  b.g.set_outputs({y});
  auto ks = render_all(b);
  ASSERT_EQ(ks.size(), 1u);
  EXPECT_NE(ks[0].source.find("8 per vector"), std::string::npos);
  expect_compiles(ks[0]);
}

// ---- row reductions
// ---------------------------------------------------------------
TEST(CudaRenderer, SoftmaxAndLogSoftmaxRows) {
  REQUIRE_NVRTC();
  for (const char* op : {"aten::_softmax", "aten::_log_softmax"})
    for (int64_t n : {int64_t{7}, int64_t{768}, int64_t{4096}, int64_t{50257}})
      for (int d = 0; d < 3; ++d) {
        Builder b;
        const ScalarType dt = dtype_of(d);
        Value* x = b.input({8, 5, n}, dt);
        Value* scale = b.op("aten::mul", "Scalar", {x}, {0.125}, x->sizes, dt);
        b.g.set_outputs({b.softmax(op, scale, -1)});
        auto ks = render_all(b);
        ASSERT_EQ(ks.size(), 1u) << op << " " << n;
        const KernelSource& k = ks[0];
        if (n <= 1024) {
          EXPECT_EQ(k.block, 256);
        } else {
          EXPECT_GE(k.block, 128);
          EXPECT_EQ(k.grid, 40); // one block per row
        }
        if (n <= 4096)
          EXPECT_NE(k.source.find("row kept in registers"), std::string::npos)
              << k.source;
        expect_compiles(k);
      }
}

TEST(CudaRenderer, LayerNormWithResidualGeluAndStatistics) {
  REQUIRE_NVRTC();
  for (int64_t c : {int64_t{48}, int64_t{768}, int64_t{4096}, int64_t{1001}}) {
    Builder b;
    Value* x = b.input({2, 7, c});
    Value* r = b.input({2, 7, c});
    Value* w = b.input({c});
    Value* bias = b.input({c});
    Value* h = b.binary("aten::add", x, r, {2, 7, c});
    Node* ln = b.layer_norm(h, w, bias, 1e-5);
    Value* g = b.gelu(ln->outputs[0], "none");
    b.g.set_outputs({g, h, ln->outputs[1], ln->outputs[2]});
    auto ks = render_all(b);
    ASSERT_EQ(ks.size(), 1u);
    EXPECT_NE(ks[0].source.find("tp_rsqrt("), std::string::npos);
    expect_compiles(ks[0]);
  }
}

TEST(CudaRenderer, RmsNormDecomposition) {
  REQUIRE_NVRTC();
  for (int d = 0; d < 3; ++d) {
    Builder b;
    const ScalarType dt = dtype_of(d);
    Value* x = b.input({4, 9, 4096}, dt);
    Value* w = b.input({4096}, dt);
    Value* xf = x;
    Value* p =
        b.op("aten::pow", "Tensor_Scalar", {xf}, {int64_t{2}}, x->sizes, dt);
    Value* m = b.op(
        "aten::mean",
        "dim",
        {p},
        {std::vector<int64_t>{2}, true, std::monostate{}},
        {4, 9, 1},
        dt);
    Value* e =
        b.op("aten::add", "Scalar", {m}, {1e-6, int64_t{1}}, {4, 9, 1}, dt);
    Value* rs = b.unary("aten::rsqrt", e);
    Value* y = b.binary(
        "aten::mul",
        b.binary("aten::mul", x, rs, x->sizes, dt),
        w,
        x->sizes,
        dt);
    b.g.set_outputs({y});
    auto ks = render_all(b);
    ASSERT_EQ(ks.size(), 1u);
    expect_compiles(ks[0]);
  }
}

TEST(CudaRenderer, SumMeanAmaxVarOverLastDims) {
  REQUIRE_NVRTC();
  for (int64_t n : {int64_t{7}, int64_t{768}, int64_t{4096}, int64_t{50257}}) {
    Builder b;
    Value* x = b.input({40, n});
    Value* sq = b.binary("aten::mul", x, x, {40, n});
    Value* s = b.reduce("aten::sum", "dim_IntList", sq, {1}, false, {40});
    Value* m = b.reduce("aten::mean", "dim", x, {-1}, true, {40, 1});
    Value* a = b.reduce("aten::amax", "default", x, {1}, false, {40});
    Value* v = b.reduce("aten::var", "correction", x, {1}, false, {40});
    b.g.set_outputs({s, m, a, v});
    auto ks = render_all(b);
    ASSERT_GE(ks.size(), 1u);
    for (const auto& k : ks)
      expect_compiles(k);
  }
  // mean over H, W of contiguous NCHW: rows of H*W.
  Builder b;
  Value* x = b.input({2, 3, 5, 7}, ScalarType::BFloat16);
  Value* m = b.reduce("aten::mean", "dim", x, {2, 3}, true, {2, 3, 1, 1});
  b.g.set_outputs({b.unary("aten::sigmoid", m)});
  auto ks = render_all(b);
  ASSERT_EQ(ks.size(), 1u);
  expect_compiles(ks[0]);
}

TEST(CudaRenderer, ArgmaxMaxDimProdAminLogsumexpRows) {
  // Issue #27's reductions in one group per size (warp mode, block mode with
  // the 64-bit shared partials), fp32 and bf16; then argmax over a whole
  // tensor and over a column.
  REQUIRE_NVRTC();
  for (int64_t n : {int64_t{7}, int64_t{768}, int64_t{4096}})
    for (ScalarType dt : {ScalarType::Float, ScalarType::BFloat16}) {
      Builder b;
      Value* x = b.input({40, n}, dt);
      Value* sq = b.binary("aten::mul", x, x, {40, n}, dt);
      Node* md = b.g.create_node(
          "aten::max",
          "dim",
          {sq},
          {Arg::tensor(0), Arg::constant(int64_t{1}), Arg::constant(false)},
          2);
      Graph::set_type(md->outputs[0], dt, {40}, {1}, kCuda);
      Graph::set_type(md->outputs[1], ScalarType::Long, {40}, {1}, kCuda);
      Value* am = b.op(
          "aten::argmin",
          "default",
          {sq},
          {int64_t{-1}, true},
          {40, 1},
          ScalarType::Long);
      Value* p = b.op(
          "aten::prod",
          "dim_int",
          {sq},
          {int64_t{1}, false, std::monostate{}},
          {40},
          dt);
      Value* mn = b.op(
          "aten::amin",
          "default",
          {sq},
          {std::vector<int64_t>{1}, false},
          {40},
          dt);
      Value* l = b.op(
          "aten::logsumexp",
          "default",
          {sq},
          {std::vector<int64_t>{1}, false},
          {40},
          dt);
      b.g.set_outputs({md->outputs[0], md->outputs[1], am, p, mn, l});
      auto ks = render_all(b);
      ASSERT_EQ(ks.size(), 1u);
      expect_compiles(ks[0]);
    }
  for (std::vector<int64_t> sizes :
       {std::vector<int64_t>{3, 37}, std::vector<int64_t>{64, 33}}) {
    Builder b;
    Value* x = b.input(sizes);
    const bool all = sizes[0] == 3;
    b.g.set_outputs({b.op(
        "aten::argmax",
        "default",
        {x},
        {all ? AttrValue(std::monostate{}) : AttrValue(int64_t{0}), false},
        all ? std::vector<int64_t>{} : std::vector<int64_t>{33},
        ScalarType::Long)});
    auto ks = render_all(b);
    ASSERT_EQ(ks.size(), 1u);
    expect_compiles(ks[0]);
  }
}

TEST(CudaRenderer, CodegenPassStoresCudaKernelsAndUnfusesTheRest) {
  REQUIRE_NVRTC();
  Builder b;
  Value* x = b.input({64, 768}, ScalarType::Half);
  Value* y = b.softmax("aten::_softmax", b.unary("aten::tanh", x), 1);
  Value* t = b.input({100000, 4});
  Value* s = b.reduce("aten::sum", "dim_IntList", t, {0}, false, {4});
  b.g.set_outputs({y, b.unary("aten::relu", s)});
  PassOptions o;
  kFusion.run(b.g, o);
  kCodegen.run(b.g, o);
  int kernels = 0;
  for (Node* n : b.g.nodes()) {
    if (n->op != "torch_plugin::fused")
      continue;
    ++kernels;
    EXPECT_EQ(n->str_attr("target", ""), "cuda");
    KernelSource k;
    k.target = n->str_attr("target", "");
    k.source = n->str_attr("source", "");
    k.entry = n->str_attr("entry", "");
    k.grid = n->int_attr("grid", 0);
    k.block = n->int_attr("block", 0);
    expect_compiles(k);
  }
  EXPECT_EQ(kernels, 1); // the tall column sum went back to ATen ops
  EXPECT_EQ(b.nodes("aten::sum").size(), 1u);
}

TEST(CudaRenderer, ColumnReductions) {
  REQUIRE_NVRTC();
  auto groups = [](Builder& b) {
    PassOptions o;
    kFusion.run(b.g, o);
    std::vector<std::optional<KernelSource>> out;
    for (Node* n : b.g.nodes())
      if (n->op == "torch_plugin::fused")
        out.push_back(render_cuda(*n));
    return out;
  };
  // relu(x.sum(dims)) of an fp32 input of `sizes`: its one group's kernel, or
  // nullopt where the renderer leaves it to ATen.
  auto sum_relu = [&](std::vector<int64_t> sizes,
                      std::vector<int64_t> dims,
                      std::vector<int64_t> out) {
    Builder b;
    Value* x = b.input(sizes);
    Value* s = b.reduce("aten::sum", "dim_IntList", x, dims, false, out);
    b.g.set_outputs({b.unary("aten::relu", s)});
    auto ks = groups(b);
    EXPECT_EQ(ks.size(), 1u);
    return ks.empty() ? std::nullopt : ks[0];
  };
  {
    // sum over the outer dim of a short matrix: 8 warps per column
    auto k = sum_relu({64, 128}, {0}, {128});
    ASSERT_TRUE(k.has_value());
    EXPECT_NE(
        k->source.find("8 warps per column (column split)"), std::string::npos);
    expect_compiles(*k);
  }
  {
    Builder b; // mean over H, W of channels_last NCHW (ResNet's pooling)
    Value* x = b.input(
        {32, 2048, 7, 7}, ScalarType::BFloat16, {2048 * 49, 1, 7 * 2048, 2048});
    Value* m = b.reduce("aten::mean", "dim", x, {2, 3}, true, {32, 2048, 1, 1});
    b.g.set_outputs({b.unary("aten::relu", m)});
    auto ks = groups(b);
    ASSERT_EQ(ks.size(), 1u);
    ASSERT_TRUE(ks[0].has_value());
    // Channels innermost: split across 4 warps, 32 channels per block.
    EXPECT_EQ(ks[0]->grid, 32 * 2048 / 32);
    EXPECT_EQ(ks[0]->block, 128);
    EXPECT_NE(
        ks[0]->source.find("4 warps per column (column split)"),
        std::string::npos);
    expect_compiles(*ks[0]);
  }
  for (auto [c, hw] :
       {std::pair<int64_t, int64_t>{96, 112},
        std::pair<int64_t, int64_t>{240, 28},
        std::pair<int64_t, int64_t>{672, 14}}) {
    // EfficientNet-B0's squeeze-excitation pools at batch 32: the mean over
    // H, W of silu(x * s + t), NHWC, with silu's output stored too. Columns
    // of 12544 elements (32 x 96 of them) were refused (ATen) before the
    // split; now each is split across warps, up to 32.
    Builder b;
    const std::vector<int64_t> sizes = {32, c, hw, hw};
    const std::vector<int64_t> nhwc = {c * hw * hw, 1, hw * c, c};
    auto cl = [&](Value* v) { // channels-last, as after a convolution
      Graph::set_type(v, v->dtype, sizes, nhwc, kCuda);
      return v;
    };
    Value* x = b.input(sizes, ScalarType::Float, nhwc);
    Value* sc = b.input({1, c, 1, 1});
    Value* sh = b.input({1, c, 1, 1});
    Value* y = cl(b.unary(
        "aten::silu",
        cl(b.binary(
            "aten::add", cl(b.binary("aten::mul", x, sc, sizes)), sh, sizes))));
    Value* m = b.reduce("aten::mean", "dim", y, {2, 3}, true, {32, c, 1, 1});
    b.g.set_outputs({y, m});
    auto ks = groups(b);
    ASSERT_EQ(ks.size(), 1u);
    ASSERT_TRUE(ks[0].has_value()) << c;
    EXPECT_EQ(ks[0]->grid, 32 * c / 32) << c;
    EXPECT_GE(ks[0]->block, 128) << c;
    EXPECT_NE(ks[0]->source.find("(column split)"), std::string::npos) << c;
    expect_compiles(*ks[0]);
  }
  // A tall matrix's column sums: few, long columns.
  EXPECT_FALSE(sum_relu({100000, 4}, {0}, {4}).has_value());
  // A few long rows: x.sum() of a large tensor.
  EXPECT_FALSE(sum_relu({1 << 20}, {0}, {}).has_value());
  // A bias gradient, x.sum(0) of [4096, 768]: split it would get 24 blocks of
  // 1024 threads (a fifth of the SMs): ATen's reduction.
  EXPECT_FALSE(sum_relu({4096, 768}, {0}, {768}).has_value());
  // Many kept indices but none contiguous (NCHW statistics over N, H, W of
  // 9000 channels, 400 elements each): no split, too few for one thread per
  // column: ATen's reduction.
  EXPECT_FALSE(sum_relu({4, 9000, 10, 10}, {0, 2, 3}, {9000}).has_value());
  {
    // The MLP bias gradient of [4096, 3072]: 96 blocks, split.
    auto k = sum_relu({4096, 3072}, {0}, {3072});
    ASSERT_TRUE(k.has_value());
    EXPECT_EQ(k->grid, 3072 / 32);
    expect_compiles(*k);
  }
  {
    Builder b; // BatchNorm statistics: over N, H, W
    Value* x = b.input({8, 16, 56, 56});
    Value* s = b.reduce("aten::mean", "dim", x, {0, 2, 3}, true, {1, 16, 1, 1});
    b.g.set_outputs({b.unary("aten::relu", s)});
    auto ks = groups(b);
    ASSERT_EQ(ks.size(), 1u);
    EXPECT_FALSE(ks[0].has_value());
  }
}

TEST(CudaRenderer, ScansAndAnyAllCompile) {
  // cuda_scan.cpp: rows (one block per row, several chunks) and columns, fp32
  // and bf16, an epilogue; any/all over bool, int64 and double inputs.
  REQUIRE_NVRTC();
  for (int64_t dim : {int64_t{1}, int64_t{0}})
    for (ScalarType dt : {ScalarType::Float, ScalarType::BFloat16}) {
      Builder b;
      Value* x = b.input({40, 3000}, dt);
      Value* c = b.op(
          dim ? "aten::cumsum" : "aten::cumprod",
          "default",
          {x},
          {dim, std::monostate{}},
          {40, 3000},
          dt);
      b.g.set_outputs({b.binary("aten::mul", c, x, {40, 3000}, dt)});
      auto ks = render_all(b);
      ASSERT_EQ(ks.size(), 1u);
      expect_compiles(ks[0]);
    }
  for (ScalarType dt : {ScalarType::Bool, ScalarType::Long, ScalarType::Double})
    for (bool any : {true, false}) {
      Builder b;
      Value* x = b.input({40, 3000}, dt);
      b.g.set_outputs({b.op(
          any ? "aten::any" : "aten::all",
          any ? "dim" : "dims",
          {x},
          {any ? AttrValue(int64_t{1}) : AttrValue(std::vector<int64_t>{1}),
           !any},
          any ? std::vector<int64_t>{40} : std::vector<int64_t>{40, 1},
          ScalarType::Bool)});
      auto ks = render_all(b);
      ASSERT_EQ(ks.size(), 1u);
      expect_compiles(ks[0]);
    }
}

} // namespace
} // namespace torch_plugin::compiler
