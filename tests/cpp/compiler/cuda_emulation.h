// cuda_emulation.h: the CUDA renderer's kernels run on the CPU against
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
#pragma once

#include "cuda_graph_builder.h"

#include "compiler/codegen/cuda/cuda_common.h"

#include <ATen/ATen.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>

namespace torch_plugin::compiler::emulation {

using namespace testing;

inline const char* kShim = R"SHIM(
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
static inline float __fmul_rn(float a, float b) { volatile float p = a * b; return p; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float erfinvf(float y) {  // CUDA's; absent on the host: bisection on erf
  if (y != y || y < -1.0f || y > 1.0f) return NAN;
  if (y == 0.0f || y == 1.0f || y == -1.0f) return y == 0.0f ? y : copysignf(INFINITY, y);
  double lo = -6, hi = 6;
  for (int i = 0; i < 200; ++i) { const double m = 0.5 * (lo + hi); (erf(m) < y ? lo : hi) = m; }
  return (float)(0.5 * (lo + hi));
}
static inline long long __double_as_longlong(double d) { long long u; memcpy(&u, &d, 8); return u; }
static inline double __longlong_as_double(long long u) { double d; memcpy(&d, &u, 8); return d; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
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
static inline float __shfl_up_sync(unsigned, float v, int o) {
  const unsigned w = threadIdx.x / 32, l = threadIdx.x % 32;
  tp_warp_barrier[w].wait();
  tp_xchg[w][l] = v;
  tp_warp_barrier[w].wait();
  return l >= (unsigned)o ? tp_xchg[w][l - o] : v;
}
static long long tp_xchg64[32][32];
static inline long long __shfl_xor_sync(unsigned, long long v, int o) {
  const unsigned w = threadIdx.x / 32, l = threadIdx.x % 32;
  tp_warp_barrier[w].wait();
  tp_xchg64[w][l] = v;
  tp_warp_barrier[w].wait();
  return tp_xchg64[w][l ^ o];
}
static inline unsigned long long __shfl_up_sync(unsigned, unsigned long long v, int o) {
  const unsigned w = threadIdx.x / 32, l = threadIdx.x % 32;
  tp_warp_barrier[w].wait();
  tp_xchg64[w][l] = (long long)v;
  tp_warp_barrier[w].wait();
  return l >= (unsigned)o ? (unsigned long long)tp_xchg64[w][l - o] : v;
}
)SHIM";

inline const char* kF16 = R"F16(// fp16 (raw bits): emulated with _Float16.
static inline float tp_ld_f16(unsigned int h) {
  const unsigned short b = (unsigned short)h; _Float16 x; memcpy(&x, &b, 2); return (float)x;
}
static inline unsigned short tp_st_f16(float f) {
  const _Float16 x = (_Float16)f; unsigned short b; memcpy(&b, &x, 2); return b;
}
)F16";

inline bool have_compiler() {
  return std::system("c++ --version > /dev/null 2>&1") == 0;
}

inline std::string elem(c10::ScalarType t) {
  return cuda::element_type(t);
}

// Compiles `k` for the CPU; returns the launcher.
using Launch = void (*)(void**, unsigned, unsigned);
inline Launch build(
    const KernelSource& k,
    const Node& group,
    const std::string& tag) {
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
      << "      blockIdx.x = b; threadIdx.x = t;\n      " << k.entry << "(";
  size_t i = 0;
  for (const Value* v : group.outputs)
    launch << (i ? ", " : "") << "(" << elem(v->dtype) << "*)args[" << i++
           << "]";
  for (const Value* v : group.inputs)
    launch << ", (const " << elem(v->dtype) << "*)args[" << i++ << "]";
  if (k.source.find("tp_seed") != std::string::npos) { // random kernels
    for (int r = 0; r < 2; ++r) // seed, offset values: args point to them
      launch << ", *(const unsigned long long*)args[" << i++ << "]";
    for (int r = 0; r < 2; ++r) // seed, offset pointers (CUDA graph capture)
      launch << ", *(const unsigned long long* const*)args[" << i++ << "]";
  }
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

inline at::ScalarType aten(c10::ScalarType t) {
  return t;
}

// A tensor with `v`'s sizes, strides and dtype over fresh storage (random
// normal values, or NaN for outputs).
inline at::Tensor make(const Value* v, bool poison, int64_t offset = 0) {
  const int64_t span = std::max<int64_t>(1, v->storage_span()) + offset;
  const auto opts = at::TensorOptions().dtype(aten(v->dtype));
  at::Tensor base;
  if (!c10::isFloatingType(v->dtype)) // integers, bool: small values, 91
    base = poison
        ? at::full({span}, v->dtype == c10::ScalarType::Long ? -7 : 91).to(opts)
        : at::randint(-50, 50, {span}).to(opts);
  else
    base = poison ? at::full({span}, NAN, opts) : at::randn({span}, opts);
  return base.as_strided(v->sizes, v->strides, offset);
}

using Reference =
    std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// Builds, fuses (exactly one group), renders, runs the kernel emulated with
// at most `max_grid` blocks (inputs `misalign` elements past an aligned
// start: the kernels' scalar fallback), and compares every graph output with
// `reference` (float64 inputs) within tol * max(1, max |ref|).
inline void check(
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

inline double tol_of(ScalarType t) {
  return t == ScalarType::Float ? 1e-5 : 2e-2;
}
inline ScalarType dt_of(int d) {
  return d == 0 ? ScalarType::Float
      : d == 1  ? ScalarType::BFloat16
                : ScalarType::Half;
}
inline const char* dt_name(int d) {
  return d == 0 ? "f32" : d == 1 ? "bf16" : "f16";
}
// Rounds a float64 reference as the kernel's stored dtype does.
inline at::Tensor as_stored(const at::Tensor& t, int d) {
  return d == 0 ? t : t.to(d == 1 ? at::kBFloat16 : at::kHalf).to(at::kDouble);
}

} // namespace torch_plugin::compiler::emulation
