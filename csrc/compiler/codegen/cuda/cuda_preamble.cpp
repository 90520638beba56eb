// cuda_preamble.cpp: the pieces of CUDA source every kernel of the CUDA
// renderer shares (see cuda_common.h): the preamble with the op-semantics
// helpers and the bf16/fp16 conversions, loads and stores, literals and index
// expressions.
//
// Conversions (pinned contract 3): bf16 is widened exactly (bits << 16) and
// stored rounding to nearest even with NaN kept a quiet NaN, as
// c10::BFloat16's round_to_nearest_even; fp16 converts with the PTX
// instructions cvt.f32.f16 / cvt.rn.f16.f32 (as cuda_fp16.hpp's
// __half2float / __float2half_rn).
#include "compiler/codegen/cuda/cuda_common.h"

#include "compiler/codegen/op_semantics.h"

#include <c10/util/Exception.h>

#include <cfloat>
#include <cmath>
#include <sstream>

namespace torch_plugin::compiler::cuda {

const std::string& preamble() {
  static const std::string s =
      R"(// ---- torch_plugin CUDA preamble (no includes: NVRTC) ----
#define TP_INF __int_as_float(0x7f800000)
#define TP_NAN __int_as_float(0x7fc00000)
// The helpers of the op-semantics table (codegen/op_semantics.h), fp32.
__device__ __forceinline__ float tp_max(float a, float b) { return a < b ? b : a; }
__device__ __forceinline__ float tp_min(float a, float b) { return b < a ? b : a; }
// hardtanh as ATen's CUDA clamp kernel: x's NaN kept, else ::min(::max(x, lo), hi)
// (fmaxf: +0.0 against a -0.0 tie, where the CPU's vector max keeps x).
__device__ __forceinline__ float tp_hardtanh(float x, float lo, float hi) {
  return x != x ? x : fminf(fmaxf(x, lo), hi);
}
__device__ __forceinline__ float tp_exp(float x) { return expf(x); }
__device__ __forceinline__ float tp_log(float x) { return logf(x); }
__device__ __forceinline__ float tp_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ float tp_rsqrt(float x) { return rsqrtf(x); }
__device__ __forceinline__ float tp_abs(float x) { return fabsf(x); }
__device__ __forceinline__ float tp_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ float tp_erf(float x) { return erff(x); }
__device__ __forceinline__ float tp_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float tp_pow(float x, float y) { return powf(x, y); }
// Floating-point ops of issue #27: CUDA's float math functions, as ATen's
// CUDA kernels call them (no fast-math intrinsics).
__device__ __forceinline__ float tp_sin(float x) { return sinf(x); }
__device__ __forceinline__ float tp_cos(float x) { return cosf(x); }
__device__ __forceinline__ float tp_tan(float x) { return tanf(x); }
__device__ __forceinline__ float tp_asin(float x) { return asinf(x); }
__device__ __forceinline__ float tp_acos(float x) { return acosf(x); }
__device__ __forceinline__ float tp_atan(float x) { return atanf(x); }
__device__ __forceinline__ float tp_sinh(float x) { return sinhf(x); }
__device__ __forceinline__ float tp_cosh(float x) { return coshf(x); }
__device__ __forceinline__ float tp_asinh(float x) { return asinhf(x); }
__device__ __forceinline__ float tp_acosh(float x) { return acoshf(x); }
__device__ __forceinline__ float tp_atanh(float x) { return atanhf(x); }
__device__ __forceinline__ float tp_floor(float x) { return floorf(x); }
__device__ __forceinline__ float tp_ceil(float x) { return ceilf(x); }
__device__ __forceinline__ float tp_trunc(float x) { return truncf(x); }
__device__ __forceinline__ float tp_round(float x) { return nearbyintf(x); }
__device__ __forceinline__ float tp_exp2(float x) { return exp2f(x); }
__device__ __forceinline__ float tp_expm1(float x) { return expm1f(x); }
__device__ __forceinline__ float tp_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ float tp_log2(float x) { return log2f(x); }
__device__ __forceinline__ float tp_log10(float x) { return log10f(x); }
__device__ __forceinline__ float tp_erfc(float x) { return erfcf(x); }
__device__ __forceinline__ float tp_erfinv(float x) { return erfinvf(x); }
__device__ __forceinline__ float tp_lgamma(float x) { return lgammaf(x); }
__device__ __forceinline__ float tp_atan2(float a, float b) { return atan2f(a, b); }
__device__ __forceinline__ float tp_hypot(float a, float b) { return hypotf(a, b); }
__device__ __forceinline__ float tp_copysign(float a, float b) { return copysignf(a, b); }
__device__ __forceinline__ float tp_nextafter(float a, float b) { return nextafterf(a, b); }
__device__ __forceinline__ float tp_fmod(float a, float b) { return fmodf(a, b); }
// Python's a % b (ATen's remainder): the sign of the divisor.
__device__ __forceinline__ float tp_remainder(float a, float b) {
  const float m = fmodf(a, b);
  return (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) ? m + b : m;
}
// floor(a / b) as ATen's div_floor_floating (c10/util/generic_math.h).
__device__ __forceinline__ float tp_floordiv(float a, float b) {
  if (b == 0.0f) return a / b;
  const float m = fmodf(a, b);
  float d = (a - m) / b;
  if (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) d -= 1.0f;
  if (d == 0.0f) return copysignf(0.0f, a / b);
  float f = floorf(d);
  if (d - f > 0.5f) f += 1.0f;
  return f;
}
// digamma as ATen's CUDA calc_digamma (ATen/native/Math.h, is_cuda): the
// reflection term in double, recurrence up to 10, asymptotic series.
__device__ __forceinline__ float tp_digamma(float x) {
  if (x == 0.0f) return copysignf(TP_INF, -x);
  float result = 0.0f;
  if (x < 0.0f) {
    if (x == truncf(x)) return TP_NAN;
    const double pi = 3.14159265358979323846;
    result = (float)(-pi / tan(pi * (double)x));
    x = 1.0f - x;
  }
  while (x < 10.0f) {
    result -= 1.0f / x;
    x += 1.0f;
  }
  if (x == 10.0f) return result + 2.25175258906672110764f;
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
  return logf(x) - (0.5f / x) - y + result;
}
// bf16 (raw bits in the low 16 bits): exact widening; store rounds to nearest
// even, NaN stays a quiet NaN (c10::BFloat16's round_to_nearest_even).
__device__ __forceinline__ float tp_ld_bf16(unsigned int h) { return __uint_as_float(h << 16); }
__device__ __forceinline__ unsigned short tp_st_bf16(float f) {
  const unsigned int u = __float_as_uint(f);
  return f != f ? (unsigned short)0x7fc0u
                : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
// fp16 (raw bits): the PTX conversions of __half2float / __float2half_rn.
__device__ __forceinline__ float tp_ld_f16(unsigned int h) {
  float f;
  const unsigned short b = (unsigned short)h;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(b));
  return f;
}
__device__ __forceinline__ unsigned short tp_st_f16(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}
__device__ __forceinline__ float tp_round_bf16(float x) { return tp_ld_bf16(tp_st_bf16(x)); }
__device__ __forceinline__ float tp_round_f16(float x) { return tp_ld_f16(tp_st_f16(x)); }
// Max that propagates NaN from either side (amax, softmax's row max), as
// ATen's CUDA max reductions.
__device__ __forceinline__ float tp_max_nan(float a, float b) {
  return a != a ? a : (b != b ? b : fmaxf(a, b));
}
// Softmax partials (m, s): a row's max and the sum of exp(x - m) (online
// normalizer, Milakov and Gimelshein 2018). tp_online_add adds x;
// tp_online_merge adds another thread's partials. -inf elements add 0 (a
// masked row stays finite); NaN propagates through the max.
__device__ __forceinline__ void tp_online_add(float& m, float& s, float x) {
  const float mn = tp_max_nan(m, x);
  s = (m == mn ? s : s * expf(m - mn)) + (x == -TP_INF ? 0.0f : expf(x - mn));
  m = mn;
}
__device__ __forceinline__ void tp_online_merge(float& m, float& s, float m2, float s2) {
  const float mn = tp_max_nan(m, m2);
  s = (m == mn ? s : s * expf(m - mn)) + (m2 == mn ? s2 : s2 * expf(m2 - mn));
  m = mn;
}
// Whether every pointer given is aligned to `bytes` (a power of two).
__device__ __forceinline__ bool tp_aligned(const void* p, unsigned int bytes) {
  return ((unsigned long long)p & (bytes - 1)) == 0;
}
// ---- types of typed kernels (codegen/op_semantics.h) ----
#define TP_FN __device__ __forceinline__
typedef unsigned char tp_u8;
typedef signed char tp_i8;
typedef short tp_i16;
typedef int tp_i32;
typedef long long tp_i64;
TP_FN unsigned int tpt_f32_bits(float x) { return __float_as_uint(x); }
TP_FN unsigned long long tpt_f64_bits(double x) {
  return (unsigned long long)__double_as_longlong(x); }
TP_FN float tpt_fmodf(float a, float b) { return fmodf(a, b); }
TP_FN float tpt_floorf(float a) { return floorf(a); }
TP_FN float tpt_truncf(float a) { return truncf(a); }
TP_FN float tpt_fabsf(float a) { return fabsf(a); }
TP_FN double tpt_fmod_d(double a, double b) { return fmod(a, b); }
TP_FN double tpt_floor_d(double a) { return floor(a); }
TP_FN double tpt_trunc_d(double a) { return trunc(a); }
TP_FN double tpt_fabs_d(double a) { return fabs(a); }
// fp64 arithmetic (op_semantics.h): the _rn intrinsics, which NVRTC never
// contracts into an FMA (fp32 arithmetic may contract: --fmad's default).
#define TP_DADD(a, b) __dadd_rn(a, b)
#define TP_DSUB(a, b) __dsub_rn(a, b)
#define TP_DMUL(a, b) __dmul_rn(a, b)
TP_FN float tpt_fmaf(float a, float b, float c) { return __fmaf_rn(a, b, c); }
TP_FN double tpt_fma_d(double a, double b, double c) { return __fma_rn(a, b, c); }
// Bitcasts (aten::view.dtype): the bits of one type read as another.
typedef unsigned short tp_u16;
TP_FN float tpt_f32_from_bits(unsigned int u) { return __uint_as_float(u); }
TP_FN double tpt_f64_from_bits(unsigned long long u) {
  return __longlong_as_double((long long)u); }
TP_FN float tpt_bf16_from_bits(unsigned int h) { return tp_ld_bf16(h); }
TP_FN float tpt_f16_from_bits(unsigned int h) { return tp_ld_f16(h); }
)";
  static const std::string all =
      s + typed_helpers_source() + "// ---- end of preamble ----\n";
  return all;
}

bool cuda_dtype(c10::ScalarType t) {
  return t == c10::ScalarType::Float || t == c10::ScalarType::BFloat16 ||
      t == c10::ScalarType::Half;
}

bool pointwise_cuda_dtype(c10::ScalarType t) {
  return compute_type_of(t).has_value();
}

std::string element_type(c10::ScalarType t) {
  TORCH_CHECK(pointwise_cuda_dtype(t), "cuda codegen: no kernel type for ", t);
  if (t == c10::ScalarType::BFloat16 || t == c10::ScalarType::Half)
    return "unsigned short";
  return compute_type_name(t);
}

int64_t element_size(c10::ScalarType t) {
  TORCH_CHECK(pointwise_cuda_dtype(t), "cuda codegen: no kernel type for ", t);
  return static_cast<int64_t>(c10::elementSize(t));
}

std::string from_bits(c10::ScalarType t, const std::string& bits) {
  if (t == c10::ScalarType::Float)
    return "__uint_as_float(" + bits + ")";
  if (t == c10::ScalarType::BFloat16)
    return "tp_ld_bf16(" + bits + ")";
  return "tp_ld_f16(" + bits + ")";
}

std::string to_bits(c10::ScalarType t, const std::string& value) {
  if (t == c10::ScalarType::Float)
    return "__float_as_uint(" + value + ")";
  if (t == c10::ScalarType::BFloat16)
    return "(unsigned int)tp_st_bf16(" + value + ")";
  return "(unsigned int)tp_st_f16(" + value + ")";
}

std::string load(
    c10::ScalarType t,
    const std::string& ptr,
    const std::string& offset) {
  const std::string e = ptr + "[" + offset + "]";
  if (t != c10::ScalarType::BFloat16 && t != c10::ScalarType::Half)
    return e;
  return from_bits(t, e);
}

std::string store(
    c10::ScalarType t,
    const std::string& ptr,
    const std::string& offset,
    const std::string& value) {
  std::string v = value;
  if (t == c10::ScalarType::BFloat16)
    v = "tp_st_bf16(" + value + ")";
  else if (t == c10::ScalarType::Half)
    v = "tp_st_f16(" + value + ")";
  return ptr + "[" + offset + "] = " + v + ";";
}

std::string literal(double d) {
  std::ostringstream os;
  if (std::isnan(d))
    return "TP_NAN";
  if (std::isinf(d) || std::fabs(d) > FLT_MAX)
    return d > 0 ? "TP_INF" : "(-TP_INF)";
  os.precision(9);
  os << std::scientific << d << "f";
  return d < 0 ? "(" + os.str() + ")" : os.str();
}

std::string literal(const AttrValue& v) {
  if (auto* i = std::get_if<int64_t>(&v)) {
    std::string s = std::to_string(*i) + ".0f";
    return *i < 0 ? "(" + s + ")" : s;
  }
  if (auto* d = std::get_if<double>(&v))
    return literal(*d);
  if (auto* b = std::get_if<bool>(&v))
    return *b ? "1.0f" : "0.0f";
  TORCH_CHECK(false, "cuda codegen: no literal for ", to_string(v));
}

std::vector<int64_t> broadcast_strides(
    const std::vector<int64_t>& v_sizes,
    const std::vector<int64_t>& v_strides,
    const std::vector<int64_t>& sizes) {
  TORCH_CHECK(
      v_sizes.size() <= sizes.size(),
      "cuda codegen: cannot broadcast rank ",
      v_sizes.size(),
      " to rank ",
      sizes.size());
  std::vector<int64_t> out(sizes.size(), 0);
  const size_t offset = sizes.size() - v_sizes.size();
  for (size_t i = 0; i < v_sizes.size(); ++i)
    out[offset + i] =
        v_sizes[i] == 1 && sizes[offset + i] != 1 ? 0 : v_strides[i];
  return out;
}

std::string offset_expr(
    const std::vector<int64_t>& sizes,
    const std::vector<int64_t>& strides,
    const std::string& index,
    const std::string& type) {
  // Merge (outer to inner) the dims this operand stores contiguously.
  struct Dim {
    int64_t size, stride;
  };
  std::vector<Dim> dims;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1)
      continue;
    if (!dims.empty() && dims.back().stride == strides[d] * sizes[d]) {
      dims.back() = {dims.back().size * sizes[d], strides[d]};
      continue;
    }
    dims.push_back({sizes[d], strides[d]});
  }
  std::string e;
  int64_t inner = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    const Dim& dim = dims[d];
    if (dim.stride != 0) {
      std::string t = index;
      if (inner != 1)
        t = "(" + t + " / (" + type + ")" + std::to_string(inner) + ")";
      if (d != 0)
        t = "(" + t + " % (" + type + ")" + std::to_string(dim.size) + ")";
      if (dim.stride != 1)
        t += " * (" + type + ")" + std::to_string(dim.stride);
      e = e.empty() ? t : t + " + " + e;
    }
    inner *= dim.size;
  }
  return e.empty() ? "(" + type + ")0" : "(" + e + ")";
}

namespace {

// The unsigned word type of a load/store of `bytes` bytes and its fields.
struct Word {
  std::string type;
  std::vector<std::string> fields; // 32-bit words (or the single 16-bit one)
};
Word word_of(int64_t bytes) {
  if (bytes == 2)
    return {"unsigned short", {""}};
  if (bytes == 4)
    return {"unsigned int", {""}};
  if (bytes == 8)
    return {"uint2", {".x", ".y"}};
  return {"uint4", {".x", ".y", ".z", ".w"}};
}

// The raw bits of element `e` (of `es` bytes) of a chunk held in word
// variable `v` of Word `w`, as an unsigned int (es <= 4) or unsigned long
// long (es == 8) expression.
std::string element_bits(
    const Word& w,
    const std::string& v,
    int64_t e,
    int64_t es) {
  const int64_t byte = e * es;
  if (es == 8)
    return "(((unsigned long long)" + v + w.fields[byte / 4 + 1] +
        " << 32) | " + v + w.fields[byte / 4] + ")";
  std::string word = "(unsigned int)" + v + w.fields[byte / 4];
  const int64_t shift = 8 * (byte % 4);
  if (shift)
    word = "(" + word + " >> " + std::to_string(shift) + ")";
  if (es == 4)
    return word;
  return "(" + word + (es == 1 ? " & 0xffu)" : " & 0xffffu)");
}

// Vector loads and stores of the typed dtypes (bool, integers, float64): a
// 2- to 16-byte word per chunk, elements unpacked from / packed into it.
std::string typed_vector_load(
    c10::ScalarType t,
    const std::string& ptr,
    const std::string& offset,
    int64_t n,
    const std::string& dst,
    const std::string& indent) {
  const int64_t es = element_size(t);
  const int64_t bytes = n * es;
  const int64_t chunk = bytes >= 16 ? 16 : bytes;
  const Word w = word_of(chunk);
  const int64_t per_chunk = chunk / es;
  std::ostringstream os;
  for (int64_t c = 0; c < bytes / chunk; ++c) {
    const std::string v = dst + "_w" + std::to_string(c);
    os << indent << "const " << w.type << " " << v
       << " = __ldg(reinterpret_cast<const " << w.type << "*>(" << ptr << " + "
       << offset << ") + " << c << ");\n";
    for (int64_t e = 0; e < per_chunk; ++e) {
      const std::string bits = element_bits(w, v, e, es);
      std::string val;
      if (t == c10::ScalarType::Bool)
        val = "(" + bits + " != 0u)";
      else if (t == c10::ScalarType::Double)
        val = "__longlong_as_double((long long)" + bits + ")";
      else
        val = "(" + std::string(compute_type_name(t)) + ")" + bits;
      os << indent << dst << "[" << c * per_chunk + e << "] = " << val << ";\n";
    }
  }
  return os.str();
}

std::string typed_vector_store(
    c10::ScalarType t,
    const std::string& ptr,
    const std::string& offset,
    int64_t n,
    const std::string& src,
    const std::string& indent) {
  const int64_t es = element_size(t);
  const int64_t bytes = n * es;
  const int64_t chunk = bytes >= 16 ? 16 : bytes;
  const Word w = word_of(chunk);
  const int64_t per_chunk = chunk / es;
  // The raw bits of src[i]: unsigned int for es <= 4, else unsigned long long.
  auto raw = [&](int64_t i) {
    const std::string x = src + "[" + std::to_string(i) + "]";
    if (t == c10::ScalarType::Double)
      return "(unsigned long long)__double_as_longlong(" + x + ")";
    if (es == 8)
      return "(unsigned long long)" + x;
    if (es == 4)
      return "(unsigned int)" + x;
    return std::string("(unsigned int)(") +
        (es == 1 ? "tp_u8" : "unsigned short") + ")" + x;
  };
  std::ostringstream os;
  for (int64_t c = 0; c < bytes / chunk; ++c) {
    std::vector<std::string> words; // 32-bit words (or the one 16-bit word)
    const int64_t wbytes = chunk == 2 ? 2 : 4;
    for (int64_t b = 0; b < chunk; b += wbytes) {
      std::string word;
      if (es == 8) {
        const std::string x = raw(c * per_chunk + b / 8);
        word = b % 8 == 0 ? "(unsigned int)(" + x + ")"
                          : "(unsigned int)(" + x + " >> 32)";
      } else {
        for (int64_t e = b / es; e < (b + wbytes) / es; ++e) {
          const int64_t shift = 8 * (e * es - b);
          std::string part = raw(c * per_chunk + e);
          if (shift)
            part = "(" + part + " << " + std::to_string(shift) + ")";
          word = word.empty() ? part : word + " | " + part;
        }
        word = "(" + word + ")";
      }
      words.push_back(word);
    }
    os << indent << "*(reinterpret_cast<" << w.type << "*>(" << ptr << " + "
       << offset << ") + " << c << ") = ";
    if (words.size() == 1)
      os << "(" << w.type << ")" << words[0] << ";\n";
    else if (words.size() == 2)
      os << "make_uint2(" << words[0] << ", " << words[1] << ");\n";
    else
      os << "make_uint4(" << words[0] << ", " << words[1] << ", " << words[2]
         << ", " << words[3] << ");\n";
  }
  return os.str();
}

} // namespace

std::string vector_load(
    c10::ScalarType t,
    const std::string& ptr,
    const std::string& offset,
    int64_t n,
    const std::string& dst,
    const std::string& indent) {
  const int64_t es = element_size(t);
  const int64_t bytes = n * es;
  TORCH_CHECK(
      bytes == 2 || bytes == 4 || bytes == 8 || bytes % 16 == 0,
      "cuda codegen: vector of ",
      bytes,
      " bytes");
  if (n == 1)
    return indent + dst + "[0] = " + load(t, ptr, offset) + ";\n";
  if (!cuda_dtype(t))
    return typed_vector_load(t, ptr, offset, n, dst, indent);
  const int64_t chunk = bytes >= 16 ? 16 : bytes;
  const Word w = word_of(chunk);
  const int64_t per_chunk = chunk / es;
  std::ostringstream os;
  for (int64_t c = 0; c < bytes / chunk; ++c) {
    const std::string v = dst + "_w" + std::to_string(c);
    os << indent << "const " << w.type << " " << v
       << " = __ldg(reinterpret_cast<const " << w.type << "*>(" << ptr << " + "
       << offset << ") + " << c << ");\n";
    for (int64_t e = 0; e < per_chunk; ++e) {
      const int64_t word = es == 4 ? e : e / 2;
      const std::string bits = v + w.fields[word];
      std::string val;
      if (t == c10::ScalarType::Float)
        val = "__uint_as_float(" + bits + ")";
      else if (t == c10::ScalarType::BFloat16)
        val = e % 2 == 0 ? "__uint_as_float(" + bits + " << 16)"
                         : "__uint_as_float(" + bits + " & 0xffff0000u)";
      else
        val = e % 2 == 0 ? "tp_ld_f16(" + bits + " & 0xffffu)"
                         : "tp_ld_f16(" + bits + " >> 16)";
      os << indent << dst << "[" << c * per_chunk + e << "] = " << val << ";\n";
    }
  }
  return os.str();
}

std::string vector_store(
    c10::ScalarType t,
    const std::string& ptr,
    const std::string& offset,
    int64_t n,
    const std::string& src,
    const std::string& indent) {
  const int64_t es = element_size(t);
  const int64_t bytes = n * es;
  TORCH_CHECK(
      bytes == 2 || bytes == 4 || bytes == 8 || bytes % 16 == 0,
      "cuda codegen: vector of ",
      bytes,
      " bytes");
  if (n == 1)
    return indent + store(t, ptr, offset, src + "[0]") + "\n";
  if (!cuda_dtype(t))
    return typed_vector_store(t, ptr, offset, n, src, indent);
  const int64_t chunk = bytes >= 16 ? 16 : bytes;
  const Word w = word_of(chunk);
  const int64_t per_chunk = chunk / es;
  std::ostringstream os;
  for (int64_t c = 0; c < bytes / chunk; ++c) {
    std::vector<std::string> words;
    for (int64_t e = 0; e < per_chunk; e += (es == 4 ? 1 : 2)) {
      const int64_t i = c * per_chunk + e;
      const std::string lo = to_bits(t, src + "[" + std::to_string(i) + "]");
      if (es == 4)
        words.push_back(lo);
      else
        words.push_back(
            "(" + lo + " | (" +
            to_bits(t, src + "[" + std::to_string(i + 1) + "]") + " << 16))");
    }
    os << indent << "*(reinterpret_cast<" << w.type << "*>(" << ptr << " + "
       << offset << ") + " << c << ") = ";
    if (words.size() == 1)
      os << words[0] << ";\n";
    else if (words.size() == 2)
      os << "make_uint2(" << words[0] << ", " << words[1] << ");\n";
    else
      os << "make_uint4(" << words[0] << ", " << words[1] << ", " << words[2]
         << ", " << words[3] << ");\n";
  }
  return os.str();
}

std::string node_expression(
    const Node& n,
    const std::vector<std::string>& input_exprs) {
  std::vector<std::string> operands;
  for (const Arg& a : n.args) {
    if (a.kind == Arg::Kind::kTensor)
      operands.push_back(input_exprs.at(a.inputs.at(0)));
    else if (
        std::holds_alternative<std::monostate>(a.value) ||
        std::holds_alternative<std::string>(a.value))
      operands.push_back("0.0f");
    else if (
        a.kind == Arg::Kind::kConst &&
        (std::holds_alternative<int64_t>(a.value) ||
         std::holds_alternative<double>(a.value) ||
         std::holds_alternative<bool>(a.value)))
      operands.push_back(literal(a.value));
    else
      operands.push_back("0.0f");
  }
  auto e = pointwise_expression(n, operands);
  TORCH_CHECK(
      e.has_value(), "cuda codegen: no expression for ", n.qualified_name());
  return *e;
}

} // namespace torch_plugin::compiler::cuda
