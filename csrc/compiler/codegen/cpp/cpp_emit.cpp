// cpp_emit.cpp: shared pieces of generated C++ (see cpp_emit.h).
#include "compiler/codegen/cpp/cpp_emit.h"

#include "compiler/codegen/op_semantics.h"

#include <c10/util/Exception.h>

#include <sstream>

namespace torch_plugin::compiler {

namespace {

// What the typed helpers (op_semantics.h, typed_helpers_source) need.
const char* typed_preamble = R"(// ---- types of typed kernels ----
#define TP_FN static inline
#ifndef TP_INF
#define TP_INF __builtin_inff()
#define TP_NAN __builtin_nanf("")
#endif
typedef uint8_t tp_u8;
typedef int8_t tp_i8;
typedef int16_t tp_i16;
typedef int32_t tp_i32;
typedef int64_t tp_i64;
static inline unsigned int tpt_f32_bits(float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; }
static inline unsigned long long tpt_f64_bits(double x) {
  uint64_t u; std::memcpy(&u, &x, 8); return u; }
static inline float tpt_fmodf(float a, float b) { return std::fmod(a, b); }
static inline float tpt_floorf(float a) { return std::floor(a); }
static inline float tpt_truncf(float a) { return std::trunc(a); }
static inline float tpt_fabsf(float a) { return std::fabs(a); }
static inline double tpt_fmod_d(double a, double b) { return std::fmod(a, b); }
static inline double tpt_floor_d(double a) { return std::floor(a); }
static inline double tpt_trunc_d(double a) { return std::trunc(a); }
static inline double tpt_fabs_d(double a) { return std::fabs(a); }
// fp64 arithmetic (op_semantics.h): plain; kernels compile with
// -ffp-contract=off (runtime/cpu/kernel_cache.cpp), so no product and sum
// become one FMA unless written as one.
#define TP_DADD(a, b) ((a) + (b))
#define TP_DSUB(a, b) ((a) - (b))
#define TP_DMUL(a, b) ((a) * (b))
static inline float tpt_fmaf(float a, float b, float c) { return std::fma(a, b, c); }
static inline double tpt_fma_d(double a, double b, double c) { return std::fma(a, b, c); }
// Bitcasts (aten::view.dtype): the bits of one type read as another.
typedef uint16_t tp_u16;
static inline float tpt_f32_from_bits(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline double tpt_f64_from_bits(unsigned long long u) {
  double d; std::memcpy(&d, &u, 8); return d; }
static inline float tpt_bf16_from_bits(unsigned int h) { return tp_load_bf16((uint16_t)h); }
static inline float tpt_f16_from_bits(unsigned int h) { return tp_load_f16((uint16_t)h); }
)";

} // namespace

const std::string& kernel_preamble() {
  static const std::string s = R"(#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

static inline float tp_load_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round to nearest-even, as c10::BFloat16 (round_to_nearest_even).
static inline uint16_t tp_store_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return f != f ? static_cast<uint16_t>(0x7fc0u) : static_cast<uint16_t>(rounded);
}
static inline float tp_round_bf16(float f) { return tp_load_bf16(tp_store_bf16(f)); }
// float -> fp16 bits, round to nearest even with fp16 subnormals, overflow to
// inf and NaN kept (c10::Half's fp16_ieee_from_fp32_value).
static inline uint16_t tp_store_f16(float f) {
  uint32_t w;
  std::memcpy(&w, &f, 4);
  const uint32_t inf_bits = 239u << 23, zero_bits = 17u << 23;
  float to_inf, to_zero;
  std::memcpy(&to_inf, &inf_bits, 4);
  std::memcpy(&to_zero, &zero_bits, 4);
  float base = (std::fabs(f) * to_inf) * to_zero;
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  const uint32_t bias_bits = (bias >> 1) + 0x07800000u;
  float bias_f;
  std::memcpy(&bias_f, &bias_bits, 4);
  base = bias_f + base;
  uint32_t bits;
  std::memcpy(&bits, &base, 4);
  const uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}
// fp16 bits -> float, exact (c10::Half's fp16_ieee_to_fp32_value).
static inline float tp_load_f16(uint16_t h) {
  const uint32_t hw = static_cast<uint32_t>(h) << 16;
  const uint32_t two_w = hw + hw;
  const uint32_t norm_bits = (two_w >> 4) + (0xE0u << 23);
  float norm;
  std::memcpy(&norm, &norm_bits, 4);
  norm *= 0x1.0p-112f;
  const uint32_t denorm_bits = (two_w >> 17) | (126u << 23);
  float denorm;
  std::memcpy(&denorm, &denorm_bits, 4);
  denorm -= 0.5f;
  uint32_t nb, db;
  std::memcpy(&nb, &norm, 4);
  std::memcpy(&db, &denorm, 4);
  const uint32_t result = (hw & 0x80000000u) | (two_w < (1u << 27) ? db : nb);
  float out;
  std::memcpy(&out, &result, 4);
  return out;
}
// float -> fp16 -> float in one step, equal to tp_load_f16(tp_store_f16(f))
// for every float bit pattern (checked exhaustively): fewer operations, as
// every fp16 op's result in a kernel is rounded (codegen/op_semantics.h).
// Subnormal range: |f| + 0.5f rounds to a multiple of 2^-24, nearest even.
static inline float tp_round_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = u & 0x80000000u, a = u ^ sign;
  const float sub = (std::fabs(f) + 0.5f) - 0.5f;
  uint32_t s;
  std::memcpy(&s, &sub, 4);
  const uint32_t normal = (a + 0xFFFu + ((a >> 13) & 1u)) & 0xFFFFE000u;
  const uint32_t r = a > 0x7F800000u ? 0x7FC00000u   // NaN (quiet, as tp_store_f16)
      : a >= 0x477FF000u ? 0x7F800000u               // >= 65520: inf
      : a >= 0x38800000u ? normal : s;               // normal / subnormal
  const uint32_t o = r | sign;
  float out;
  std::memcpy(&out, &o, 4);
  return out;
}
// The op-semantics helpers (codegen/op_semantics.h) that are one standard call.
static inline float tp_max(float a, float b) { return std::max(a, b); }
static inline float tp_min(float a, float b) { return std::min(a, b); }
// hardtanh as ATen's CPU kernel (min(max(x, lo), hi), x kept on a signed-zero tie).
static inline float tp_hardtanh(float x, float lo, float hi) { return std::min(std::max(x, lo), hi); }
static inline float tp_log(float x) { return std::log(x); }
static inline float tp_sqrt(float x) { return std::sqrt(x); }
static inline float tp_rsqrt(float x) { return 1.0f / std::sqrt(x); }
static inline float tp_abs(float x) { return std::fabs(x); }
static inline float tp_pow(float x, float y) { return std::pow(x, y); }
// Cephes expf: exp(x) = 2^n * exp(r), r = x - n ln2 in [-ln2/2, ln2/2]; 2^n is
// applied as 2^(n/2) * 2^(n - n/2) so that results near overflow and in the
// denormal range are right; overflows to inf, underflows to 0, keeps NaN. No
// branch or select: loops calling it vectorize.
static inline float tp_exp(float x) {
  const float c = std::min(std::max(x, -104.0f), 88.8f);
  // n = round(c / ln2) by the 1.5 * 2^23 trick (no floorf call; its bits also give n as int).
  const float magic = c * 1.44269504088896341f + 12582912.0f;
  const float n = magic - 12582912.0f;
  const float r = c - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  int32_t ni;
  std::memcpy(&ni, &magic, 4);
  ni -= 0x4B400000;
  const int32_t n1 = ni >> 1;
  const uint32_t b1 = static_cast<uint32_t>(n1 + 127) << 23;
  const uint32_t b2 = static_cast<uint32_t>(ni - n1 + 127) << 23;
  float s1, s2;
  std::memcpy(&s1, &b1, 4);
  std::memcpy(&s2, &b2, 4);
  return y * s1 * s2;  // NaN in, NaN out: c, n, r and y are NaN
}
static inline float tp_sigmoid(float x) { return 1.0f / (1.0f + tp_exp(-x)); }
// Cephes tanhf: x + x^3 P(x^2) for |x| < 0.625, else 1 - 2 / (exp(2|x|) + 1)
// with x's sign; both computed, one selected, so loops calling it vectorize.
static inline float tp_tanh(float x) {
  const float a = std::fabs(x);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  // copysign: tanh(-0.0) is -0.0 (x + x z p alone gives +0.0).
  const float small = std::copysign(x + x * z * p, x);
  const float big = std::copysign(1.0f - 2.0f / (tp_exp(2.0f * a) + 1.0f), x);
  return a < 0.625f ? small : big;  // NaN: big is NaN
}
// erf: x P(x^2) for |x| < 1 (Cephes erff's polynomial, relative error ~2e-7),
// else sign(x) (1 - t Q(t) exp(-x^2)), t = 1 / (1 + 0.3275911 |x|)
// (Abramowitz and Stegun 7.1.26, absolute error <= 1.5e-7, as ATen's
// vectorized erf). Both computed, one selected: loops calling it vectorize.
static inline float tp_erf(float x) {
  const float a = std::fabs(x);
  const float z = x * x;
  float p = 7.853861353153693e-5f;
  p = p * z - 8.010193625184903e-4f;
  p = p * z + 5.188327685732524e-3f;
  p = p * z - 2.685381193529856e-2f;
  p = p * z + 1.128358514861418e-1f;
  p = p * z - 3.761262582423300e-1f;
  p = p * z + 1.128379165726710e0f;
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float r = 1.061405429f;
  r = r * t - 1.453152027f;
  r = r * t + 1.421413741f;
  r = r * t - 0.284496736f;
  r = r * t + 0.254829592f;
  const float big = std::copysign(1.0f - r * t * tp_exp(-z), x);
  return a < 1.0f ? x * p : big;  // NaN: big is NaN
}
// Floating-point ops of issue #27: libm's float functions (as ATen's scalar
// CPU kernels; ATen's vector paths use SLEEF's 1-ulp versions), or ATen's own
// algorithm where libm has none. Vectorized through libmvec where declared
// above (lgamma, erfinv, digamma, fmod, nextafter stay scalar).
// glibc >= 2.35 (x86-64) has SIMD versions of these in libmvec (max 4 ulp;
// ATen's vector paths use SLEEF's 1-ulp ones, its scalar paths libm):
// declared `simd` here, loops calling them vectorize (sin, tan, expm1, asin,
// sinh on 4M floats, one thread: 15-130x faster than the scalar calls,
// measured on the loaded dev machine). Same results within fp32's tolerance
// (op coverage).
#if defined(__GLIBC__) && defined(__x86_64__) && !defined(__clang__) && \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
#define TP_MVEC __attribute__((simd("notinbranch")))
extern "C" {
TP_MVEC float sinf(float); TP_MVEC float cosf(float); TP_MVEC float tanf(float);
TP_MVEC float asinf(float); TP_MVEC float acosf(float); TP_MVEC float atanf(float);
TP_MVEC float sinhf(float); TP_MVEC float coshf(float); TP_MVEC float asinhf(float);
TP_MVEC float acoshf(float); TP_MVEC float atanhf(float); TP_MVEC float exp2f(float);
TP_MVEC float expm1f(float); TP_MVEC float log1pf(float); TP_MVEC float log2f(float);
TP_MVEC float log10f(float); TP_MVEC float erfcf(float);
TP_MVEC float atan2f(float, float); TP_MVEC float hypotf(float, float);
}
#endif
static inline float tp_sin(float x) { return ::sinf(x); }
static inline float tp_cos(float x) { return ::cosf(x); }
static inline float tp_tan(float x) { return ::tanf(x); }
static inline float tp_asin(float x) { return ::asinf(x); }
static inline float tp_acos(float x) { return ::acosf(x); }
static inline float tp_atan(float x) { return ::atanf(x); }
static inline float tp_sinh(float x) { return ::sinhf(x); }
static inline float tp_cosh(float x) { return ::coshf(x); }
static inline float tp_asinh(float x) { return ::asinhf(x); }
static inline float tp_acosh(float x) { return ::acoshf(x); }
static inline float tp_atanh(float x) { return ::atanhf(x); }
static inline float tp_floor(float x) { return std::floor(x); }
static inline float tp_ceil(float x) { return std::ceil(x); }
static inline float tp_trunc(float x) { return std::trunc(x); }
static inline float tp_round(float x) { return std::nearbyint(x); }  // halves to even
static inline float tp_exp2(float x) { return ::exp2f(x); }
static inline float tp_expm1(float x) { return ::expm1f(x); }
static inline float tp_log1p(float x) { return ::log1pf(x); }
static inline float tp_log2(float x) { return ::log2f(x); }
static inline float tp_log10(float x) { return ::log10f(x); }
static inline float tp_erfc(float x) { return ::erfcf(x); }
static inline float tp_lgamma(float x) { return std::lgamma(x); }
static inline float tp_atan2(float a, float b) { return ::atan2f(a, b); }
static inline float tp_hypot(float a, float b) { return ::hypotf(a, b); }
static inline float tp_copysign(float a, float b) { return std::copysign(a, b); }
static inline float tp_nextafter(float a, float b) { return std::nextafter(a, b); }
static inline float tp_fmod(float a, float b) { return std::fmod(a, b); }
// Python's a % b (ATen's remainder): the sign of the divisor.
static inline float tp_remainder(float a, float b) {
  const float m = std::fmod(a, b);
  return (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) ? m + b : m;
}
// floor(a / b) as ATen's div_floor_floating (c10/util/generic_math.h).
static inline float tp_floordiv(float a, float b) {
  if (b == 0.0f) return a / b;
  const float m = std::fmod(a, b);
  float d = (a - m) / b;
  if (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) d -= 1.0f;
  if (d == 0.0f) return std::copysign(0.0f, a / b);
  float f = std::floor(d);
  if (d - f > 0.5f) f += 1.0f;
  return f;
}
// Inverse erf as ATen's CPU calc_erfinv (aten/src/ATen/native/Math.h): a
// rational approximation (Pavlis, after MATLAB's erfinv) and two Newton steps.
static inline float tp_erfinv(float y) {
  const float a = std::fabs(y);
  if (a > 1.0f) return NAN;
  if (a == 1.0f) return std::copysign(INFINITY, y);
  float x;
  if (a <= 0.7f) {
    const float z = y * y;
    const float num = ((-0.140543331f * z + 0.914624893f) * z - 1.645349621f) * z + 0.886226899f;
    const float dem =
        (((0.012229801f * z - 0.329097515f) * z + 1.442710462f) * z - 2.118377725f) * z + 1.0f;
    x = y * num / dem;
  } else {
    const float z = std::sqrt(-std::log((1.0f - a) / 2.0f));
    const float num = ((1.641345311f * z + 3.429567803f) * z - 1.624906493f) * z - 1.970840454f;
    const float dem = (1.637067800f * z + 3.543889200f) * z + 1.0f;
    x = std::copysign(num, y) / dem;
  }
  const float k = 1.12837916709551257f;  // 2 / sqrt(pi)
  x = x - (std::erf(x) - y) / (k * std::exp(-x * x));
  x = x - (std::erf(x) - y) / (k * std::exp(-x * x));
  return x;
}
// digamma as ATen's CPU calc_digamma (Math.h; Cephes psi): reflection for
// x < 0, recurrence up to 10, asymptotic series. +-0 -> -+inf, negative
// integers -> NaN.
static inline float tp_digamma(float x) {
  if (x == 0.0f) return std::copysign(INFINITY, -x);
  float reflected = 0.0f;
  bool reflect = false;
  if (x < 0.0f) {
    if (x == std::trunc(x)) return NAN;
    double q;
    const double r = std::modf(static_cast<double>(x), &q);
    reflected = static_cast<float>(3.14159265358979323846 / std::tan(3.14159265358979323846 * r));
    reflect = true;
    x = 1.0f - x;
  }
  float result = 0.0f;
  while (x < 10.0f) {
    result -= 1.0f / x;
    x += 1.0f;
  }
  float v;
  if (x == 10.0f) {
    v = result + 2.25175258906672110764f;
  } else {
    float y = 0.0f;
    if (x < 1.0e17f) {
      const float z = 1.0f / (x * x);
      float p = 8.33333333333333333333E-2f;
      p = p * z - 2.10927960927960927961E-2f;
      p = p * z + 7.57575757575757575758E-3f;
      p = p * z - 4.16666666666666666667E-3f;
      p = p * z + 3.96825396825396825397E-3f;
      p = p * z - 8.33333333333333333333E-3f;
      p = p * z + 8.33333333333333333333E-2f;
      y = z * p;
    }
    v = result + std::log(x) - (0.5f / x) - y;
  }
  return reflect ? v - reflected : v;
}
)";
  static const std::string all = s + typed_preamble + typed_helpers_source();
  return all;
}

bool kernel_dtype(c10::ScalarType t) {
  return t == c10::ScalarType::Float || t == c10::ScalarType::BFloat16;
}

bool pointwise_kernel_dtype(c10::ScalarType t) {
  return compute_type_of(t).has_value();
}

std::string c_type(c10::ScalarType t) {
  TORCH_CHECK(pointwise_kernel_dtype(t), "codegen: no kernel type for ", t);
  if (t == c10::ScalarType::BFloat16 || t == c10::ScalarType::Half)
    return "uint16_t";
  return compute_type_name(t);
}

std::string load_expr(
    c10::ScalarType t,
    const std::string& ptr,
    const std::string& offset) {
  std::string e = ptr + "[" + offset + "]";
  if (t == c10::ScalarType::BFloat16)
    return "tp_load_bf16(" + e + ")";
  if (t == c10::ScalarType::Half)
    return "tp_load_f16(" + e + ")";
  return e;
}

std::string store_stmt(
    c10::ScalarType t,
    const std::string& ptr,
    const std::string& offset,
    const std::string& value) {
  std::string v = value;
  if (t == c10::ScalarType::BFloat16)
    v = "tp_store_bf16(" + value + ")";
  else if (t == c10::ScalarType::Half)
    v = "tp_store_f16(" + value + ")";
  return ptr + "[" + offset + "] = " + v + ";";
}

std::string float_literal(const AttrValue& v) {
  std::ostringstream os;
  os.precision(9);
  if (auto* i = std::get_if<int64_t>(&v))
    os << *i << ".0f";
  else if (auto* d = std::get_if<double>(&v)) {
    if (std::isinf(*d))
      os << (*d > 0 ? "INFINITY" : "(-INFINITY)");
    else if (std::isnan(*d))
      os << "NAN";
    else
      os << std::scientific << *d << "f";
  } else if (auto* b = std::get_if<bool>(&v))
    os << (*b ? "1.0f" : "0.0f");
  else
    TORCH_CHECK(false, "codegen: no literal for ", to_string(v));
  return os.str();
}

std::vector<int64_t> broadcast_strides(
    const std::vector<int64_t>& v_sizes,
    const std::vector<int64_t>& v_strides,
    const std::vector<int64_t>& sizes) {
  std::vector<int64_t> out(sizes.size(), 0);
  TORCH_CHECK(
      v_sizes.size() <= sizes.size(),
      "codegen: cannot broadcast rank ",
      v_sizes.size(),
      " to rank ",
      sizes.size());
  size_t offset = sizes.size() - v_sizes.size();
  for (size_t i = 0; i < v_sizes.size(); ++i) {
    out[offset + i] =
        v_sizes[i] == 1 && sizes[offset + i] != 1 ? 0 : v_strides[i];
  }
  return out;
}

} // namespace torch_plugin::compiler
