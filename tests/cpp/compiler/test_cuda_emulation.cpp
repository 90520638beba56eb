// test_cuda_emulation.cpp: the CUDA renderer's kernels run on the CPU against
// ATen (float64) references, so that their indexing, vector paths,
// reductions and launch configurations are checked without a GPU.
//
// Emulation: the generated source is compiled by the host C++ compiler with a
// shim (shim_prefix below) for CUDA's built-ins: threadIdx/blockIdx as
// thread_local, one std::thread per CUDA thread of a block (blocks one after
// the other), __syncthreads a barrier of the block, __shfl_xor_sync an
// exchange through memory between two barriers of the warp (so a lane that
// skips a shuffle hangs the warp: the barrier aborts after 20 s), __shared__
// as static (one block runs at a time). The preamble's fp16 conversions (PTX
// there) become _Float16 casts; everything else in the preamble is compiled
// as generated. Outputs are poisoned with NaN and compared everywhere.
// Skipped when no `c++` compiler is on PATH.
#include "cuda_graph_builder.h"

#include <ATen/ATen.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>

namespace torch_plugin::compiler {
namespace {

using namespace testing;

const char* kShim = R"SHIM(
#include <math.h>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static
struct tp_dim3 { unsigned x = 0, y = 1, z = 1; };
static thread_local tp_dim3 threadIdx, blockIdx;
static tp_dim3 blockDim, gridDim;
struct uint2 { unsigned int x, y; };
struct uint4 { unsigned int x, y, z, w; };
static inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
template <class T> static inline T __ldg(const T* p) { return *p; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
struct tp_barrier {
  std::mutex m; std::condition_variable cv; int n = 0, count = 0; long gen = 0;
  void wait() {
    std::unique_lock<std::mutex> l(m);
    const long g = gen;
    if (++count == n) { count = 0; ++gen; cv.notify_all(); return; }
    if (!cv.wait_for(l, std::chrono::seconds(20), [&] { return gen != g; })) {
      fprintf(stderr, "emulation: barrier timeout (thread %u)\n", threadIdx.x);
      abort();
    }
  }
};
static tp_barrier tp_block_barrier;
static tp_barrier tp_warp_barrier[32];
static float tp_xchg[32][32];
static inline void __syncthreads() { tp_block_barrier.wait(); }
static inline float __shfl_xor_sync(unsigned, float v, int o) {
  const unsigned w = threadIdx.x / 32, l = threadIdx.x % 32;
  tp_warp_barrier[w].wait();
  tp_xchg[w][l] = v;
  tp_warp_barrier[w].wait();
  return tp_xchg[w][l ^ o];
}
static long long tp_xchg64[32][32];
static inline long long __shfl_xor_sync(unsigned, long long v, int o) {
  const unsigned w = threadIdx.x / 32, l = threadIdx.x % 32;
  tp_warp_barrier[w].wait();
  tp_xchg64[w][l] = v;
  tp_warp_barrier[w].wait();
  return tp_xchg64[w][l ^ o];
}
)SHIM";

const char* kF16 = R"F16(// fp16 (raw bits): emulated with _Float16.
static inline float tp_ld_f16(unsigned int h) {
  const unsigned short b = (unsigned short)h; _Float16 x; memcpy(&x, &b, 2); return (float)x;
}
static inline unsigned short tp_st_f16(float f) {
  const _Float16 x = (_Float16)f; unsigned short b; memcpy(&b, &x, 2); return b;
}
)F16";

bool have_compiler() {
  return std::system("c++ --version > /dev/null 2>&1") == 0;
}

std::string elem(c10::ScalarType t) {
  if (t == c10::ScalarType::Long)
    return "long long";
  return t == c10::ScalarType::Float ? "float" : "unsigned short";
}

// Compiles `k` for the CPU; returns the launcher.
using Launch = void (*)(void**, unsigned, unsigned);
Launch build(const KernelSource& k, const Node& group, const std::string& tag) {
  std::string src = k.source;
  const size_t a = src.find("// fp16 (raw bits)");
  const size_t b = src.find("__device__ __forceinline__ float tp_round_bf16");
  EXPECT_TRUE(a != std::string::npos && b != std::string::npos);
  src = std::string(kShim) + src.substr(0, a) + kF16 + src.substr(b);
  std::ostringstream launch;
  launch
      << "extern \"C\" void tp_launch(void** args, unsigned grid, unsigned block) {\n"
      << "  gridDim.x = grid; blockDim.x = block;\n"
      << "  tp_block_barrier.n = block;\n"
      << "  for (unsigned w = 0; w < block / 32; ++w) tp_warp_barrier[w].n = 32;\n"
      << "  for (unsigned b = 0; b < grid; ++b) {\n"
      << "    std::vector<std::thread> ts;\n"
      << "    for (unsigned t = 0; t < block; ++t) ts.emplace_back([=] {\n"
      << "      blockIdx.x = b; threadIdx.x = t;\n      kernel(";
  size_t i = 0;
  for (const Value* v : group.outputs)
    launch << (i ? ", " : "") << "(" << elem(v->dtype) << "*)args[" << i++
           << "]";
  for (const Value* v : group.inputs)
    launch << ", (const " << elem(v->dtype) << "*)args[" << i++ << "]";
  launch << ");\n    });\n    for (auto& t : ts) t.join();\n  }\n}\n";
  src += launch.str();
  static const std::string dir = [] {
    std::string d = "/tmp/tp_cuda_emulation_" + std::to_string(getpid());
    std::system(("mkdir -p " + d).c_str());
    std::atexit([] {
      std::system(("rm -rf /tmp/tp_cuda_emulation_" + std::to_string(getpid()))
                      .c_str());
    });
    return d;
  }();
  const std::string cpp = dir + "/" + tag + ".cpp",
                    so = dir + "/" + tag + ".so";
  std::ofstream(cpp) << src;
  const std::string cmd = "c++ -std=c++17 -O1 -w -shared -fPIC -pthread -o " +
      so + " " + cpp + " 2> " + dir + "/" + tag + ".log";
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream log(dir + "/" + tag + ".log");
    std::stringstream ss;
    ss << log.rdbuf();
    ADD_FAILURE() << "host compile failed:\n" << ss.str().substr(0, 4000);
    return nullptr;
  }
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(h, nullptr) << dlerror();
  return h ? reinterpret_cast<Launch>(dlsym(h, "tp_launch")) : nullptr;
}

at::ScalarType aten(c10::ScalarType t) {
  return t;
}

// A tensor with `v`'s sizes, strides and dtype over fresh storage (random
// normal values, or NaN for outputs).
at::Tensor make(const Value* v, bool poison, int64_t offset = 0) {
  const int64_t span = std::max<int64_t>(1, v->storage_span()) + offset;
  const auto opts = at::TensorOptions().dtype(aten(v->dtype));
  at::Tensor base = poison
      ? (v->dtype == c10::ScalarType::Long ? at::full({span}, -7, opts)
                                           : at::full({span}, NAN, opts))
      : at::randn({span}, opts);
  return base.as_strided(v->sizes, v->strides, offset);
}

using Reference =
    std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// Builds, fuses (exactly one group), renders, runs the kernel emulated with
// at most `max_grid` blocks (inputs `misalign` elements past an aligned
// start: the kernels' scalar fallback), and compares every graph output with
// `reference` (float64 inputs) within tol * max(1, max |ref|).
void check(
    const std::string& tag,
    const std::function<void(Builder&)>& make_graph,
    const Reference& reference,
    double tol,
    int64_t max_grid = 3,
    int64_t misalign = 0,
    const std::function<void(at::Tensor&)>& fill = nullptr) {
  if (!have_compiler())
    GTEST_SKIP() << "no host C++ compiler";
  Builder b;
  make_graph(b);
  std::vector<Value*> graph_inputs = b.g.inputs();
  auto ks = render_all(b);
  ASSERT_EQ(ks.size(), 1u) << tag;
  ASSERT_EQ(b.g.num_nodes(), 1u) << tag << "\n" << b.g.str();
  const Node* group = b.g.nodes()[0];
  Launch launch = build(ks[0], *group, tag);
  ASSERT_NE(launch, nullptr);
  at::manual_seed(0);
  std::vector<at::Tensor> inputs;
  for (const Value* v : graph_inputs)
    inputs.push_back(make(v, false, misalign));
  if (fill)
    for (at::Tensor& t : inputs)
      fill(t);
  std::vector<at::Tensor> outs;
  std::vector<void*> args;
  for (const Value* v : group->outputs) {
    outs.push_back(make(v, true));
    args.push_back(outs.back().data_ptr());
  }
  for (const Value* v : group->inputs)
    args.push_back(inputs.at(v->input_index).data_ptr());
  const int64_t grid = std::min<int64_t>(ks[0].grid, max_grid);
  launch(
      args.data(),
      static_cast<unsigned>(grid),
      static_cast<unsigned>(ks[0].block));
  std::vector<at::Tensor> in64;
  for (const at::Tensor& t : inputs)
    in64.push_back(t.to(at::kDouble));
  std::vector<at::Tensor> expect = reference(in64);
  ASSERT_EQ(expect.size(), b.g.outputs().size());
  for (size_t i = 0; i < expect.size(); ++i) {
    const Value* o = b.g.outputs()[i];
    const size_t j =
        std::find(group->outputs.begin(), group->outputs.end(), o) -
        group->outputs.begin();
    ASSERT_LT(j, outs.size());
    const at::Tensor got = outs[j].to(at::kDouble);
    const at::Tensor ref = expect[i].to(at::kDouble).expand_as(got);
    EXPECT_FALSE((got.isnan() & ~ref.isnan()).any().item<bool>())
        << tag << " output " << i << " has NaN (unwritten?)";
    EXPECT_TRUE(got.isnan().eq(ref.isnan()).all().item<bool>())
        << tag << " output " << i << ": NaN where the reference has none";
    const at::Tensor ok = ~ref.isnan();
    const at::Tensor g = got.masked_select(ok), r = ref.masked_select(ok);
    EXPECT_TRUE(g.isinf().eq(r.isinf()).all().item<bool>()) << tag;
    const at::Tensor fin = ~r.isinf();
    const double scale =
        std::max(1.0, r.masked_select(fin).abs().max().item<double>());
    const double err = (g.masked_select(fin) - r.masked_select(fin))
                           .abs()
                           .max()
                           .item<double>();
    EXPECT_LE(err, tol * scale)
        << tag << " output " << i << " max error " << err << "\n"
        << ks[0].source.substr(0, 200);
  }
}

double tol_of(ScalarType t) {
  return t == ScalarType::Float ? 1e-5 : 2e-2;
}
ScalarType dt_of(int d) {
  return d == 0 ? ScalarType::Float
      : d == 1  ? ScalarType::BFloat16
                : ScalarType::Half;
}
const char* dt_name(int d) {
  return d == 0 ? "f32" : d == 1 ? "bf16" : "f16";
}
// Rounds a float64 reference as the kernel's stored dtype does.
at::Tensor as_stored(const at::Tensor& t, int d) {
  return d == 0 ? t : t.to(d == 1 ? at::kBFloat16 : at::kHalf).to(at::kDouble);
}

TEST(CudaEmulation, PointwiseContiguousBroadcastAndStrided) {
  for (int d = 0; d < 3; ++d)
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{1001}}) {
      const ScalarType dt = dt_of(d);
      check(
          std::string("pw_") + dt_name(d) + "_" + std::to_string(n),
          [&](Builder& b) {
            Value* x = b.input({n, 24}, dt);
            Value* y = b.input({24}, dt);
            Value* s = b.input({}, dt);
            Value* xt = b.input({n, 24}, dt, {1, n}); // transposed
            Value* h = b.binary("aten::add", x, y, {n, 24}, dt);
            Value* g = b.gelu(b.binary("aten::mul", h, s, {n, 24}, dt), "tanh");
            b.g.set_outputs({b.binary("aten::sub", g, xt, {n, 24}, dt), h});
          },
          [&](const std::vector<at::Tensor>& in) {
            at::Tensor h = in[0] + in[1];
            at::Tensor g = at::gelu(h * in[2], "tanh");
            return std::vector<at::Tensor>{
                as_stored(g - in[3], d), as_stored(h, d)};
          },
          tol_of(dt));
    }
}

TEST(CudaEmulation, PointwiseVectorizedOddTail) {
  for (int d = 0; d < 3; ++d) {
    const ScalarType dt = dt_of(d);
    const int64_t n = 8 * 256 * 3 + 5; // grid-stride, then a scalar tail
    check(
        std::string("pwv_") + dt_name(d),
        [&](Builder& b) {
          Value* x = b.input({n}, dt);
          Value* y = b.input({n}, dt);
          b.g.set_outputs(
              {b.unary("aten::sigmoid", b.binary("aten::mul", x, y, {n}, dt))});
        },
        [&](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{
              as_stored(at::sigmoid(in[0] * in[1]), d)};
        },
        tol_of(dt),
        2);
  }
  check(
      "pwv_misaligned",
      [&](Builder& b) {
        Value* x = b.input({4096});
        b.g.set_outputs({b.unary("aten::exp", b.unary("aten::neg", x))});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{at::exp(-in[0])};
      },
      1e-5,
      2,
      1);
}

TEST(CudaEmulation, SoftmaxLogSoftmaxRows) {
  for (const char* op : {"aten::_softmax", "aten::_log_softmax"})
    for (int64_t n : {int64_t{7}, int64_t{768}, int64_t{4096}, int64_t{5003}})
      for (int d = 0; d < 3; ++d) {
        const ScalarType dt = dt_of(d);
        const bool log = std::string(op) == "aten::_log_softmax";
        check(
            std::string(log ? "lsm_" : "sm_") + dt_name(d) + "_" +
                std::to_string(n),
            [&](Builder& b) {
              Value* x = b.input({3, n}, dt);
              Value* s = b.op("aten::mul", "Scalar", {x}, {2.0}, x->sizes, dt);
              b.g.set_outputs({b.softmax(op, s, 1)});
            },
            [&](const std::vector<at::Tensor>& in) {
              at::Tensor s = in[0] * 2.0;
              return std::vector<at::Tensor>{as_stored(
                  log ? at::log_softmax(s, 1) : at::softmax(s, 1), d)};
            },
            tol_of(dt));
      }
}

TEST(CudaEmulation, MaskedAndLongSoftmaxRows) {
  // Rows too long for registers (one pass of max and sum, online), and rows
  // with -inf entries (log(relu(y)): about half the entries), both paths.
  for (const char* op : {"aten::_softmax", "aten::_log_softmax"})
    for (int64_t n : {int64_t{7}, int64_t{768}, int64_t{30011}})
      for (int d = 0; d < 2; ++d) {
        const ScalarType dt = dt_of(d);
        const bool log = std::string(op) == "aten::_log_softmax";
        check(
            std::string(log ? "mlsm_" : "msm_") + dt_name(d) + "_" +
                std::to_string(n),
            [&](Builder& b) {
              Value* x = b.input({2, n}, dt);
              Value* y = b.input({2, n}, dt);
              Value* mask = b.unary("aten::log", b.unary("aten::relu", y));
              Value* h = b.binary("aten::add", x, mask, {2, n}, dt);
              b.g.set_outputs({b.softmax(op, h, 1)});
            },
            [&](const std::vector<at::Tensor>& in) {
              at::Tensor h = in[0] + at::log(at::relu(in[1]));
              return std::vector<at::Tensor>{as_stored(
                  log ? at::log_softmax(h, 1) : at::softmax(h, 1), d)};
            },
            tol_of(dt));
      }
}

TEST(CudaEmulation, LayerNormResidualAndStatistics) {
  for (int64_t c : {int64_t{48}, int64_t{1001}, int64_t{4096}})
    for (int d = 0; d < 2; ++d) {
      const ScalarType dt = dt_of(d);
      check(
          std::string("ln_") + dt_name(d) + "_" + std::to_string(c),
          [&](Builder& b) {
            Value* x = b.input({2, 5, c}, dt);
            Value* r = b.input({2, 5, c}, dt);
            Value* w = b.input({c}, dt);
            Value* bias = b.input({c}, dt);
            Value* h = b.binary("aten::add", x, r, {2, 5, c}, dt);
            Node* ln = b.layer_norm(h, w, bias, 1e-5);
            b.g.set_outputs(
                {b.gelu(ln->outputs[0], "none"),
                 h,
                 ln->outputs[1],
                 ln->outputs[2]});
          },
          [&](const std::vector<at::Tensor>& in) {
            at::Tensor h = in[0] + in[1];
            if (d)
              h = as_stored(
                  h, d); // the stored residual feeds ATen's layer norm
            auto [y, mean, rstd] =
                at::native_layer_norm(h, {c}, in[2], in[3], 1e-5);
            return std::vector<at::Tensor>{
                as_stored(at::gelu(y), d), as_stored(h, d), mean, rstd};
          },
          d == 0 ? 1e-5 : 3e-2);
    }
}

TEST(CudaEmulation, RmsNormAndReductionsOverLastDims) {
  for (int64_t n : {int64_t{7}, int64_t{768}, int64_t{2051}}) {
    check(
        "rms_" + std::to_string(n),
        [&](Builder& b) {
          Value* x = b.input({4, n});
          Value* w = b.input({n});
          Value* p =
              b.op("aten::pow", "Tensor_Scalar", {x}, {int64_t{2}}, x->sizes);
          Value* m = b.op(
              "aten::mean",
              "dim",
              {p},
              {std::vector<int64_t>{1}, true, std::monostate{}},
              {4, 1});
          Value* e =
              b.op("aten::add", "Scalar", {m}, {1e-6, int64_t{1}}, {4, 1});
          Value* rs = b.unary("aten::rsqrt", e);
          b.g.set_outputs({b.binary(
              "aten::mul",
              b.binary("aten::mul", x, rs, x->sizes),
              w,
              x->sizes)});
        },
        [&](const std::vector<at::Tensor>& in) {
          at::Tensor r = at::rsqrt(in[0].pow(2).mean({1}, true) + 1e-6);
          return std::vector<at::Tensor>{in[0] * r * in[1]};
        },
        1e-5);
    using Red = std::function<Value*(Builder&, Value*)>;
    using Ref = std::function<at::Tensor(const at::Tensor&)>;
    const std::vector<std::pair<Red, Ref>> reductions = {
        {[&](Builder& b, Value* x) {
           return b.reduce(
               "aten::sum",
               "dim_IntList",
               b.binary("aten::mul", x, x, {5, n}),
               {1},
               false,
               {5});
         },
         [](const at::Tensor& x) {
           return (x * x).sum({1});
         }},
        {[&](Builder& b, Value* x) {
           return b.reduce("aten::mean", "dim", x, {-1}, true, {5, 1});
         },
         [](const at::Tensor& x) {
           return x.mean({1}, true);
         }},
        {[&](Builder& b, Value* x) {
           return b.reduce("aten::amax", "default", x, {1}, false, {5});
         },
         [](const at::Tensor& x) {
           return x.amax({1});
         }},
        {[&](Builder& b, Value* x) {
           return b.reduce("aten::var", "correction", x, {1}, false, {5});
         },
         [](const at::Tensor& x) {
           return x.var({1});
         }},
    };
    int i = 0;
    for (const auto& [red, ref] : reductions)
      check(
          "red_" + std::to_string(n) + "_" + std::to_string(i++),
          [&](Builder& b) {
            b.g.set_outputs({red(b, b.input({5, n}))});
          },
          [&](const std::vector<at::Tensor>& in) {
            return std::vector<at::Tensor>{ref(in[0])};
          },
          1e-5);
  }
  check(
      "sm_misaligned",
      [&](Builder& b) {
        Value* x = b.input({3, 768}, ScalarType::BFloat16);
        b.g.set_outputs({b.softmax("aten::_softmax", x, 1)});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{as_stored(at::softmax(in[0], 1), 1)};
      },
      2e-2,
      3,
      3);
  // mean over H, W of a contiguous NCHW tensor (rows of H*W), bf16.
  check(
      "mean_hw",
      [&](Builder& b) {
        Value* x = b.input({2, 3, 5, 7}, ScalarType::BFloat16);
        b.g.set_outputs(
            {b.reduce("aten::mean", "dim", x, {2, 3}, true, {2, 3, 1, 1})});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{as_stored(in[0].mean({2, 3}, true), 1)};
      },
      1e-2);
}

TEST(CudaEmulation, ColumnReductions) {
  check(
      "col_sum0",
      [&](Builder& b) {
        Value* x = b.input({64, 33});
        Value* s = b.reduce("aten::sum", "dim_IntList", x, {0}, false, {33});
        b.g.set_outputs({b.unary("aten::relu", s)});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{at::relu(in[0].sum({0}))};
      },
      1e-5);
  check(
      "col_mean_hw_channels_last",
      [&](Builder& b) {
        Value* x = b.input({2, 8, 5, 7}, ScalarType::BFloat16, {280, 1, 56, 8});
        b.g.set_outputs(
            {b.reduce("aten::mean", "dim", x, {2, 3}, true, {2, 8, 1, 1})});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{as_stored(in[0].mean({2, 3}, true), 1)};
      },
      1e-2);
  check(
      "col_softmax0",
      [&](Builder& b) {
        Value* x = b.input({37, 20});
        b.g.set_outputs({b.softmax("aten::_log_softmax", x, 0)});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{at::log_softmax(in[0], 0)};
      },
      1e-5);
  check(
      "col_var_middle",
      [&](Builder& b) {
        Value* x = b.input({6, 50, 9});
        b.g.set_outputs(
            {b.reduce("aten::var", "correction", x, {1}, true, {6, 1, 9})});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{in[0].var({1}, true, true)};
      },
      1e-5);
}

} // namespace
} // namespace torch_plugin::compiler

namespace torch_plugin::compiler {
namespace {

using namespace testing;

// Issue #27's reductions: small integers (index ties), all-equal, NaN and
// -inf rows, a +inf; in place on an input of any layout.
void ties(at::Tensor& t) {
  at::Tensor v = (t * 1.5).round();
  at::Tensor rows = v.reshape({-1, v.size(-1)});
  rows[0].fill_(2.0);
  if (rows.size(0) > 1) {
    rows[1][rows.size(1) / 3] = NAN;
    rows[1][rows.size(1) / 2] = NAN;
  }
  if (rows.size(0) > 2)
    rows[2].fill_(-INFINITY);
  if (rows.size(0) > 3)
    rows[3][1] = INFINITY;
  t.copy_(rows.view(v.sizes()));
}

// A (values, indices) reduction node (max.dim / min.dim).
std::pair<Value*, Value*> max_dim(
    Builder& b,
    const std::string& name,
    Value* x,
    int64_t dim,
    bool keepdim,
    std::vector<int64_t> sizes) {
  Node* n = b.g.create_node(
      name,
      "dim",
      {x},
      {Arg::tensor(0), Arg::constant(dim), Arg::constant(keepdim)},
      2);
  Graph::set_type(
      n->outputs[0], x->dtype, sizes, contiguous_strides(sizes), kCuda);
  Graph::set_type(
      n->outputs[1], ScalarType::Long, sizes, contiguous_strides(sizes), kCuda);
  return {n->outputs[0], n->outputs[1]};
}

Value* arg_reduce(
    Builder& b,
    const std::string& name,
    Value* x,
    AttrValue dim,
    bool keepdim,
    std::vector<int64_t> sizes) {
  return b.op(name, "default", {x}, {dim, keepdim}, sizes, ScalarType::Long);
}

TEST(CudaEmulation, ArgmaxMaxDimMinProdRows) {
  for (int64_t n : {int64_t{7}, int64_t{37}, int64_t{2051}}) {
    const std::string t = std::to_string(n);
    check(
        "maxdim_" + t,
        [&](Builder& b) {
          auto [v, i] = max_dim(b, "aten::max", b.input({5, n}), 1, false, {5});
          b.g.set_outputs({v, i});
        },
        [&](const std::vector<at::Tensor>& in) {
          auto [v, i] = at::max(in[0], 1);
          return std::vector<at::Tensor>{v, i};
        },
        0.0,
        3,
        0,
        ties);
    check(
        "mindim_keep_bf16_" + t,
        [&](Builder& b) {
          auto [v, i] = max_dim(
              b,
              "aten::min",
              b.input({5, n}, ScalarType::BFloat16),
              -1,
              true,
              {5, 1});
          b.g.set_outputs({v, i});
        },
        [&](const std::vector<at::Tensor>& in) {
          auto [v, i] = at::min(in[0], 1, true);
          return std::vector<at::Tensor>{v, i};
        },
        0.0,
        3,
        0,
        ties);
    for (bool mx : {true, false})
      check(
          (mx ? "argmax_" : "argmin_keep_") + t,
          [&](Builder& b) {
            b.g.set_outputs({arg_reduce(
                b,
                mx ? "aten::argmax" : "aten::argmin",
                b.input({5, n}),
                int64_t{mx ? 1 : -1},
                !mx,
                mx ? std::vector<int64_t>{5} : std::vector<int64_t>{5, 1})});
          },
          [&](const std::vector<at::Tensor>& in) {
            return std::vector<at::Tensor>{
                mx ? in[0].argmax(1) : in[0].argmin(1, true)};
          },
          0.0,
          3,
          0,
          ties);
    check(
        "amin_" + t,
        [&](Builder& b) {
          b.g.set_outputs({b.op(
              "aten::amin",
              "default",
              {b.input({5, n})},
              {std::vector<int64_t>{1}, false},
              {5})});
        },
        [&](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{in[0].amin({1})};
        },
        0.0,
        3,
        0,
        ties);
    check(
        "logsumexp_" + t,
        [&](Builder& b) {
          b.g.set_outputs({b.op(
              "aten::logsumexp",
              "default",
              {b.input({5, n})},
              {std::vector<int64_t>{1}, true},
              {5, 1})});
        },
        [&](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{at::logsumexp(in[0], {1}, true)};
        },
        1e-5,
        3,
        0,
        ties);
    check(
        "prod_" + t,
        [&](Builder& b) {
          Value* x = b.input({5, n});
          b.g.set_outputs({b.op(
              "aten::prod",
              "dim_int",
              {x},
              {int64_t{1}, false, std::monostate{}},
              {5})});
        },
        [&](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{in[0].prod(1)};
        },
        1e-5,
        3,
        0,
        [](at::Tensor& t) { t.mul_(0.01).add_(1.0); });
  }
}

TEST(CudaEmulation, ArgmaxFlattenedAndColumns) {
  check(
      "argmax_none",
      [&](Builder& b) {
        b.g.set_outputs({arg_reduce(
            b, "aten::argmax", b.input({3, 37}), std::monostate{}, false, {})});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{in[0].argmax()};
      },
      0.0,
      3,
      0,
      [](at::Tensor& t) { t.copy_((t * 1.5).round()); });
  check(
      "argmin_col0",
      [&](Builder& b) {
        b.g.set_outputs({arg_reduce(
            b, "aten::argmin", b.input({64, 33}), int64_t{0}, true, {1, 33})});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{in[0].argmin(0, true)};
      },
      0.0,
      3,
      0,
      ties);
  check(
      "maxdim_middle",
      [&](Builder& b) {
        auto [v, i] =
            max_dim(b, "aten::max", b.input({6, 50, 9}), 1, false, {6, 9});
        b.g.set_outputs({v, i});
      },
      [&](const std::vector<at::Tensor>& in) {
        auto [v, i] = at::max(in[0], 1);
        return std::vector<at::Tensor>{v, i};
      },
      0.0,
      3,
      0,
      ties);
}

} // namespace
} // namespace torch_plugin::compiler
