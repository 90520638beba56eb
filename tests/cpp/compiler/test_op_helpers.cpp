// test_op_helpers.cpp: the floating-point ops of the op table (issue #27) as
// each renderer spells them — the op's expression (codegen/op_semantics.h)
// over the renderer's preamble helpers — compiled for the host and evaluated
// over special values (nan, +-inf, +-0.0, halves, huge and tiny magnitudes)
// against ATen's float32 CPU kernels. The CUDA preamble runs with a shim
// (CUDA's float math functions are the host libm's of the same name; erfinvf,
// absent on the host, is Newton on erf in double), so its formulas — remainder,
// floor division, digamma, the templates — are checked without a GPU; the
// GPU tests check the device functions themselves. Skipped without `c++`.
#include "cuda_graph_builder.h"

#include "compiler/codegen/cpp/cpp_emit.h"
#include "compiler/codegen/cuda/cuda_common.h"
#include "compiler/codegen/op_semantics.h"

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
using Ref = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;

struct Op {
  std::string name, overload;
  int tensors; // 1 or 2 tensor arguments (x, y), then the constants
  std::vector<AttrValue> consts;
  Ref ref;
  double tol; // relative, and absolute near 0
};

std::vector<Op> ops() {
  using T = const at::Tensor&;
  const double t = 2e-6, loose = 2e-4;
  return {
      {"aten::sin", "default", 1, {}, [](T x, T) { return at::sin(x); }, t},
      {"aten::cos", "default", 1, {}, [](T x, T) { return at::cos(x); }, t},
      {"aten::tan", "default", 1, {}, [](T x, T) { return at::tan(x); }, t},
      {"aten::asin", "default", 1, {}, [](T x, T) { return at::asin(x); }, t},
      {"aten::acos", "default", 1, {}, [](T x, T) { return at::acos(x); }, t},
      {"aten::atan", "default", 1, {}, [](T x, T) { return at::atan(x); }, t},
      {"aten::sinh", "default", 1, {}, [](T x, T) { return at::sinh(x); }, t},
      {"aten::cosh", "default", 1, {}, [](T x, T) { return at::cosh(x); }, t},
      {"aten::asinh", "default", 1, {}, [](T x, T) { return at::asinh(x); }, t},
      {"aten::acosh", "default", 1, {}, [](T x, T) { return at::acosh(x); }, t},
      {"aten::atanh", "default", 1, {}, [](T x, T) { return at::atanh(x); }, t},
      {"aten::floor", "default", 1, {}, [](T x, T) { return at::floor(x); }, 0},
      {"aten::ceil", "default", 1, {}, [](T x, T) { return at::ceil(x); }, 0},
      {"aten::trunc", "default", 1, {}, [](T x, T) { return at::trunc(x); }, 0},
      {"aten::round", "default", 1, {}, [](T x, T) { return at::round(x); }, 0},
      {"aten::round",
       "decimals",
       1,
       {int64_t{2}},
       [](T x, T) { return at::round(x, 2); },
       t},
      {"aten::frac", "default", 1, {}, [](T x, T) { return at::frac(x); }, 0},
      {"aten::sign", "default", 1, {}, [](T x, T) { return at::sign(x); }, 0},
      {"aten::exp2", "default", 1, {}, [](T x, T) { return at::exp2(x); }, t},
      {"aten::expm1", "default", 1, {}, [](T x, T) { return at::expm1(x); }, t},
      {"aten::log1p", "default", 1, {}, [](T x, T) { return at::log1p(x); }, t},
      {"aten::log2", "default", 1, {}, [](T x, T) { return at::log2(x); }, t},
      {"aten::log10", "default", 1, {}, [](T x, T) { return at::log10(x); }, t},
      {"aten::erfc", "default", 1, {}, [](T x, T) { return at::erfc(x); }, t},
      {"aten::erfinv",
       "default",
       1,
       {},
       [](T x, T) { return at::erfinv(x); },
       loose},
      {"aten::lgamma",
       "default",
       1,
       {},
       [](T x, T) { return at::lgamma(x); },
       loose},
      {"aten::digamma",
       "default",
       1,
       {},
       [](T x, T) { return at::digamma(x); },
       loose},
      {"aten::logit",
       "default",
       1,
       {std::monostate{}},
       [](T x, T) { return at::logit(x); },
       t},
      {"aten::leaky_relu",
       "default",
       1,
       {0.1},
       [](T x, T) { return at::leaky_relu(x, 0.1); },
       t},
      {"aten::elu",
       "default",
       1,
       {0.7, 1.2, 0.5},
       [](T x, T) { return at::elu(x, 0.7, 1.2, 0.5); },
       t},
      {"aten::celu",
       "default",
       1,
       {1.3},
       [](T x, T) { return at::celu(x, 1.3); },
       t},
      {"aten::softplus",
       "default",
       1,
       {2.0, 10.0},
       [](T x, T) { return at::softplus(x, 2.0, 10.0); },
       t},
      {"aten::mish",
       "default",
       1,
       {},
       [](T x, T) { return at::mish(x); },
       1e-5},
      {"aten::hardshrink",
       "default",
       1,
       {0.5},
       [](T x, T) { return at::hardshrink(x, 0.5); },
       0},
      {"aten::threshold",
       "default",
       1,
       {0.1, 2.0},
       [](T x, T) { return at::threshold(x, 0.1, 2.0); },
       0},
      {"aten::clamp",
       "default",
       1,
       {-0.5, std::monostate{}},
       [](T x, T) { return at::clamp(x, -0.5); },
       0},
      {"aten::pow",
       "Tensor_Tensor",
       2,
       {},
       [](T x, T y) { return at::pow(x, y); },
       t},
      {"aten::atan2",
       "default",
       2,
       {},
       [](T x, T y) { return at::atan2(x, y); },
       t},
      {"aten::hypot",
       "default",
       2,
       {},
       [](T x, T y) { return at::hypot(x, y); },
       t},
      {"aten::copysign",
       "Tensor",
       2,
       {},
       [](T x, T y) { return at::copysign(x, y); },
       0},
      {"aten::nextafter",
       "default",
       2,
       {},
       [](T x, T y) { return at::nextafter(x, y); },
       0},
      {"aten::fmod",
       "Tensor",
       2,
       {},
       [](T x, T y) { return at::fmod(x, y); },
       0},
      {"aten::remainder",
       "Tensor",
       2,
       {},
       [](T x, T y) { return at::remainder(x, y); },
       0},
      {"aten::div",
       "Tensor_mode",
       2,
       {std::string("floor")},
       [](T x, T y) { return at::div(x, y, "floor"); },
       0},
      {"aten::div",
       "Tensor_mode",
       2,
       {std::string("trunc")},
       [](T x, T y) { return at::div(x, y, "trunc"); },
       0},
      {"aten::xlogy",
       "Tensor",
       2,
       {},
       [](T x, T y) { return at::xlogy(x, y); },
       t},
      {"aten::lerp",
       "Scalar",
       2,
       {0.3},
       [](T x, T y) { return at::lerp(x, y, 0.3); },
       t},
      {"aten::clamp",
       "Tensor",
       2,
       {},
       [](T x, T y) { return at::clamp(x, y, y + 1); },
       0},
  };
}

// Every pair of these (x, y), as float32.
at::Tensor special_values() {
  const float inf = INFINITY;
  return at::tensor({NAN,     inf,    -inf,   0.0f,   -0.0f,  0.5f,    -0.5f,
                     1.5f,    -2.5f,  1.0f,   -1.0f,  0.3f,   -0.7f,   3.0f,
                     -3.25f,  7.5f,   1e30f,  -1e30f, 1e-30f, -1e-30f, 0.999f,
                     -0.999f, 12.75f, -40.0f, 88.0f});
}

// The op's expression over `x` and `y` (clamp.Tensor: min y, max y + 1).
std::string expression_of(const Op& op, bool cuda) {
  Builder b;
  Value* x = b.input({4});
  Value* y = b.input({4});
  std::vector<Value*> ins = {x};
  if (op.tensors == 2)
    ins.push_back(y);
  std::vector<Arg> args;
  std::vector<std::string> operands;
  for (size_t i = 0; i < ins.size(); ++i) {
    args.push_back(Arg::tensor(static_cast<int64_t>(i)));
    operands.push_back(i == 0 ? "x" : "y");
  }
  if (op.name == "aten::clamp" && op.overload == "Tensor") {
    ins.push_back(y);
    args.push_back(Arg::tensor(2));
    operands.push_back("(y + 1.0f)");
  }
  for (const AttrValue& c : op.consts) {
    args.push_back(Arg::constant(c));
    if (std::holds_alternative<std::monostate>(c) ||
        std::holds_alternative<std::string>(c))
      operands.push_back("0.0f");
    else
      operands.push_back(cuda ? cuda::literal(c) : float_literal(c));
  }
  Node* n = b.g.create_node(op.name, op.overload, ins, args, 1);
  Graph::set_type(n->outputs[0], c10::ScalarType::Float, {4}, {1}, kCuda);
  auto e = pointwise_expression(*n, operands);
  EXPECT_TRUE(e.has_value()) << op.name << "." << op.overload;
  return e.value_or("0.0f");
}

const char* kCudaShim = R"(#include <math.h>
#include <string.h>
#define __device__
#define __forceinline__ inline
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __fmul_rn(float a, float b) { volatile float p = a * b; return p; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
// erfinvf: Newton on erf in double from a bisection start.
static inline float erfinvf(float y) {
  if (y != y || y < -1.0f || y > 1.0f) return NAN;
  if (y == 0.0f) return y;
  if (y == 1.0f || y == -1.0f) return copysignf(INFINITY, y);
  double lo = -6, hi = 6;
  for (int i = 0; i < 200; ++i) { double m = 0.5 * (lo + hi); (erf(m) < y ? lo : hi) = m; }
  return (float)(0.5 * (lo + hi));
}
)";

using Fn = float (*)(float, float);

// Compiles one function per op, `f<i>(x, y)`, after `prefix`; nullptr entries
// on failure.
std::vector<Fn> build(
    const std::string& prefix,
    const std::vector<Op>& list,
    bool cuda,
    const std::string& tag) {
  std::ostringstream src;
  src << prefix << "\n";
  for (size_t i = 0; i < list.size(); ++i)
    src << "extern \"C\" float f" << i << "(float x, float y) { return "
        << expression_of(list[i], cuda) << "; }\n";
  const std::string dir = "/tmp/tp_op_helpers_" + std::to_string(getpid());
  std::system(("mkdir -p " + dir).c_str());
  const std::string cpp = dir + "/" + tag + ".cpp",
                    so = dir + "/" + tag + ".so";
  std::ofstream(cpp) << src.str();
  const std::string cmd =
      "c++ -std=c++17 -O2 -w -shared -fPIC -fno-math-errno -o " + so + " " +
      cpp + " 2> " + dir + "/" + tag + ".log";
  std::vector<Fn> out(list.size(), nullptr);
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream log(dir + "/" + tag + ".log");
    std::stringstream ss;
    ss << log.rdbuf();
    ADD_FAILURE() << "host compile failed:\n" << ss.str().substr(0, 4000);
    return out;
  }
  void* h = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(h, nullptr) << dlerror();
  for (size_t i = 0; h && i < list.size(); ++i)
    out[i] = reinterpret_cast<Fn>(dlsym(h, ("f" + std::to_string(i)).c_str()));
  std::system(("rm -rf " + dir).c_str());
  return out;
}

void check_all(
    const std::vector<Fn>& fns,
    const std::vector<Op>& list,
    const char* who) {
  const at::Tensor v = special_values();
  const int64_t n = v.numel();
  const at::Tensor xs = v.repeat_interleave(n), ys = v.repeat({n});
  for (size_t i = 0; i < list.size(); ++i) {
    const Op& op = list[i];
    if (!fns[i])
      continue;
    const at::Tensor x = op.tensors == 1 ? v : xs;
    const at::Tensor y = op.tensors == 1 ? v : ys;
    const at::Tensor want = op.ref(x, y);
    const float* px = x.data_ptr<float>();
    const float* py = y.data_ptr<float>();
    const float* pw = want.data_ptr<float>();
    int bad = 0;
    for (int64_t k = 0; k < x.numel() && bad < 3; ++k) {
      // fmod/remainder of a quotient beyond float's range: ATen's vector
      // kernels give NaN (a - trunc(a / b) * b), its scalar path and libm the
      // exact value; not compared.
      if ((op.name == "aten::fmod" || op.name == "aten::remainder") &&
          std::isinf(px[k] / py[k]) && std::isfinite(px[k]) && py[k] != 0.0f)
        continue;
      const float g = fns[i](px[k], py[k]), w = pw[k];
      bool ok;
      if (std::isnan(w) || std::isnan(g))
        ok = std::isnan(w) && std::isnan(g);
      else if (std::isinf(w) || std::isinf(g))
        ok = g == w;
      else if (w == 0.0f && g == 0.0f)
        ok = std::signbit(w) == std::signbit(g);
      else
        ok = std::fabs(g - w) <= op.tol * std::max(1.0f, std::fabs(w));
      if (!ok) {
        ++bad;
        ADD_FAILURE() << who << " " << op.name << "." << op.overload << "("
                      << px[k] << ", " << py[k] << ") = " << g << ", ATen "
                      << w;
      }
    }
  }
}

bool have_compiler() {
  return std::system("c++ --version > /dev/null 2>&1") == 0;
}

TEST(OpHelpers, CppPreambleMatchesATen) {
  if (!have_compiler())
    GTEST_SKIP() << "no host C++ compiler";
  const auto list = ops();
  check_all(build(kernel_preamble(), list, false, "cpp"), list, "cpp");
}

TEST(OpHelpers, CudaPreambleMatchesATen) {
  if (!have_compiler())
    GTEST_SKIP() << "no host C++ compiler";
  // The helpers: the preamble up to its bf16/fp16 conversions (PTX).
  std::string pre = cuda::preamble();
  pre = pre.substr(0, pre.find("// bf16 (raw bits"));
  const auto list = ops();
  check_all(
      build(std::string(kCudaShim) + pre, list, true, "cuda"), list, "cuda");
}

TEST(OpHelpers, FallbackReasons) {
  Builder b;
  Value* x = b.input({4});
  Node* nan_clamp = b.g.create_node(
      "aten::clamp",
      "default",
      {x},
      {Arg::tensor(0), Arg::constant(double(NAN)), Arg::constant(1.0)},
      1);
  Graph::set_type(
      nan_clamp->outputs[0], c10::ScalarType::Float, {4}, {1}, kCuda);
  EXPECT_FALSE(
      is_fusible_pointwise(*nan_clamp) &&
      pointwise_expression(*nan_clamp, {"x", "0.0f", "1.0f"}).has_value());
  EXPECT_TRUE(pointwise_fallback_reason(*nan_clamp).has_value());
  Node* i0 = b.g.create_node("aten::i0", "default", {x}, {Arg::tensor(0)}, 1);
  EXPECT_TRUE(pointwise_fallback_reason(*i0).has_value());
  Node* sin = b.g.create_node("aten::sin", "default", {x}, {Arg::tensor(0)}, 1);
  Graph::set_type(sin->outputs[0], c10::ScalarType::Float, {4}, {1}, kCuda);
  EXPECT_FALSE(pointwise_fallback_reason(*sin).has_value());
}

// The expression of `op.overload`(x, consts...) with a `dtype` result on
// `device`: scalars ATen rounds to a bf16/fp16 dtype (op_semantics.cpp,
// narrowed_scalar_args; measured against eager on both devices).
std::string narrow_expr(
    const char* op,
    const char* overload,
    std::vector<AttrValue> consts,
    c10::ScalarType dtype,
    const c10::Device& device) {
  Builder b;
  Value* x = b.input({4});
  std::vector<Arg> args = {Arg::tensor(0)};
  std::vector<std::string> operands = {"x"};
  for (const AttrValue& c : consts) {
    args.push_back(Arg::constant(c));
    operands.push_back(float_literal(c));
  }
  Node* n = b.g.create_node(op, overload, {x}, args, 1);
  Graph::set_type(n->outputs[0], dtype, {4}, {1}, device);
  return pointwise_expression(*n, operands).value_or("<none>");
}

TEST(OpHelpers, ScalarsRoundedAsATen) {
  using ST = c10::ScalarType;
  const c10::Device cpu(c10::kCPU);
  const std::string bf16_tenth = "1.000976562e-01f",
                    f32_tenth = "1.000000000e-01f";
  auto has = [](const std::string& e, const std::string& s) {
    return e.find(s) != std::string::npos;
  };
  auto count = [](const std::string& e, const std::string& s) {
    int k = 0;
    for (size_t p = e.find(s); p != std::string::npos; p = e.find(s, p + 1))
      ++k;
    return k;
  };
  for (const c10::Device& d : {cpu, kCuda}) {
    // pow's exponent, fmod's divisor: rounded on both devices.
    auto e = narrow_expr("aten::pow", "Tensor_Scalar", {1.7}, ST::BFloat16, d);
    EXPECT_TRUE(has(e, "1.703125000e+00f")) << e;
    e = narrow_expr("aten::pow", "Tensor_Scalar", {2.001}, ST::BFloat16, d);
    // bf16(2.001) == 2: ATen's x * x, rounded to the output's bf16.
    EXPECT_EQ(e, "tp_round_bf16((x * x))");
    e = narrow_expr("aten::fmod", "Scalar", {0.1}, ST::Half, d);
    EXPECT_TRUE(has(e, "9.997558594e-02f")) << e;
    e = narrow_expr("aten::fmod", "Scalar", {0.1}, ST::Float, d);
    EXPECT_TRUE(has(e, f32_tenth)) << e;
    // add's scalar and alpha: rounded on the CPU, float on CUDA.
    e = narrow_expr("aten::add", "Tensor", {0.1, int64_t{1}}, ST::BFloat16, d);
    EXPECT_EQ(has(e, bf16_tenth), d.is_cpu()) << e;
    // threshold's bound: float on the CPU, rounded on CUDA.
    e = narrow_expr("aten::threshold", "default", {0.1, 2.0}, ST::BFloat16, d);
    EXPECT_EQ(has(e, bf16_tenth), d.is_cuda()) << e;
    // round.decimals: CUDA computes bf16/fp16 in scalar_t.
    // (and every bf16 result rounds once more, to its dtype).
    e = narrow_expr("aten::round", "decimals", {int64_t{4}}, ST::BFloat16, d);
    EXPECT_EQ(count(e, "tp_round_bf16("), d.is_cuda() ? 2 : 1) << e;
    EXPECT_EQ(has(e, "9.984000000e+03f"), d.is_cuda()) << e; // bf16(10^4)
    // mul's scalar stays float (ATen's opmath: the original scalar).
    e = narrow_expr("aten::mul", "Tensor", {0.1}, ST::BFloat16, d);
    EXPECT_TRUE(has(e, f32_tenth)) << e;
    // div by a constant: CUDA multiplies by the float reciprocal (ATen's
    // div_true_kernel_cuda with a CPU scalar), the CPU divides.
    for (ST t : {ST::Float, ST::BFloat16, ST::Half}) {
      e = narrow_expr("aten::div", "Tensor", {3.0}, t, d);
      EXPECT_EQ(has(e, "__fmul_rn(x, 3.333333433e-01f)"), d.is_cuda()) << e;
      EXPECT_EQ(has(e, "x / 3.000000000e+00f"), d.is_cpu()) << e;
    }
  }
}

TEST(OpHelpers, LowPrecisionResultsRoundedToTheirDtype) {
  // Eager holds every op's result in its bf16/fp16 tensor: a kernel rounds
  // each such fp32 value before the next op reads it; fp32 results stay.
  using ST = c10::ScalarType;
  const c10::Device cpu(c10::kCPU);
  auto starts = [](const std::string& e, const std::string& s) {
    return e.rfind(s, 0) == 0;
  };
  for (const c10::Device& d : {cpu, kCuda}) {
    auto e =
        narrow_expr("aten::add", "Tensor", {1.5, int64_t{1}}, ST::BFloat16, d);
    EXPECT_TRUE(starts(e, "tp_round_bf16(")) << e;
    e = narrow_expr("aten::mul", "Tensor", {3.0}, ST::Half, d);
    EXPECT_EQ(e, "tp_round_f16((x * 3.000000000e+00f))");
    e = narrow_expr("aten::mul", "Tensor", {3.0}, ST::Float, d);
    EXPECT_EQ(e, "(x * 3.000000000e+00f)");
  }
}

} // namespace
} // namespace torch_plugin::compiler
