// op_semantics_typed_helpers.cpp: the typed helpers (tpt_*) every
// renderer's preamble appends (see op_semantics.h, typed_helpers_source):
// integer arithmetic in the unsigned type, division modes and remainders with
// ATen's sign rules, bool arithmetic, NaN-propagating float max/min, and the
// float predicates.
#include "compiler/codegen/op_semantics.h"

namespace torch_plugin::compiler {

const std::string& typed_helpers_source() {
  static const std::string s =
      R"(// ---- typed helpers (codegen/op_semantics.h) ----
// Integers: arithmetic in the unsigned type U (wrap-around, as ATen; no
// signed overflow), division modes, remainder and fmod with ATen's sign
// rules (divisors are nonzero constants: the op table's divisor_arg), shifts
// as ATen's lshift/rshift (a shift by a negative amount or past the width
// gives 0, or the sign for >>).
#define TPT_INT(T, U, SIGNED) \
TP_FN T tpt_add(T a, T b) { return (T)((U)a + (U)b); } \
TP_FN T tpt_sub(T a, T b) { return (T)((U)a - (U)b); } \
TP_FN T tpt_mul(T a, T b) { return (T)((U)a * (U)b); } \
TP_FN T tpt_neg(T a) { return (T)((U)0 - (U)a); } \
TP_FN T tpt_fma(T a, T b, T c) { return tpt_add(c, tpt_mul(a, b)); } \
TP_FN T tpt_abs(T a) { return a < (T)0 ? tpt_neg(a) : a; } \
TP_FN T tpt_max(T a, T b) { return a < b ? b : a; } \
TP_FN T tpt_min(T a, T b) { return b < a ? b : a; } \
TP_FN T tpt_and(T a, T b) { return (T)(a & b); } \
TP_FN T tpt_or(T a, T b) { return (T)(a | b); } \
TP_FN T tpt_xor(T a, T b) { return (T)(a ^ b); } \
TP_FN T tpt_not(T a) { return (T)(~a); } \
TP_FN T tpt_shl(T a, T b) { \
  return (b < (T)0 || (U)b >= (U)(sizeof(T) * 8)) ? (T)0 : (T)((U)a << (U)b); } \
TP_FN T tpt_shr(T a, T b) { \
  const U m = (U)(sizeof(T) * 8 - (SIGNED ? 1 : 0)); \
  return (T)((b < (T)0 || (U)b >= m) ? (a >> m) : (a >> b)); } \
TP_FN T tpt_div_trunc(T a, T b) { return (SIGNED && b == (T)-1) ? tpt_neg(a) : (T)(a / b); } \
TP_FN T tpt_div_floor(T a, T b) { \
  if (SIGNED && b == (T)-1) return tpt_neg(a); \
  const T q = (T)(a / b), r = (T)(a % b); \
  return (r != (T)0 && ((a < (T)0) != (b < (T)0))) ? (T)(q - (T)1) : q; } \
TP_FN T tpt_fmod(T a, T b) { return (SIGNED && b == (T)-1) ? (T)0 : (T)(a % b); } \
TP_FN T tpt_remainder(T a, T b) { \
  if (SIGNED && b == (T)-1) return (T)0; \
  const T r = (T)(a % b); \
  return (r != (T)0 && ((r < (T)0) != (b < (T)0))) ? (T)(r + b) : r; } \
TP_FN T tpt_sign(T a) { return (T)(((T)0 < a) - (a < (T)0)); } \
TP_FN bool tpt_isnan(T) { return false; } \
TP_FN bool tpt_isinf(T) { return false; } \
TP_FN bool tpt_isfinite(T) { return true; } \
TP_FN bool tpt_isposinf(T) { return false; } \
TP_FN bool tpt_isneginf(T) { return false; } \
TP_FN bool tpt_signbit(T a) { return a < (T)0; }
TPT_INT(tp_u8, unsigned int, 0)
TPT_INT(tp_i8, unsigned int, 1)
TPT_INT(tp_i16, unsigned int, 1)
TPT_INT(tp_i32, unsigned int, 1)
TPT_INT(tp_i64, unsigned long long, 1)
// Bool: + is or, * is and (ATen computes bool arithmetic in bool).
TP_FN bool tpt_add(bool a, bool b) { return a || b; }
TP_FN bool tpt_mul(bool a, bool b) { return a && b; }
TP_FN bool tpt_fma(bool a, bool b, bool c) { return c || (a && b); }
TP_FN bool tpt_max(bool a, bool b) { return a || b; }
TP_FN bool tpt_min(bool a, bool b) { return a && b; }
TP_FN bool tpt_and(bool a, bool b) { return a && b; }
TP_FN bool tpt_or(bool a, bool b) { return a || b; }
TP_FN bool tpt_xor(bool a, bool b) { return a != b; }
TP_FN bool tpt_not(bool a) { return !a; }
TP_FN bool tpt_sign(bool a) { return a; }
TP_FN bool tpt_isnan(bool) { return false; }
TP_FN bool tpt_isinf(bool) { return false; }
TP_FN bool tpt_isfinite(bool) { return true; }
TP_FN bool tpt_isposinf(bool) { return false; }
TP_FN bool tpt_isneginf(bool) { return false; }
TP_FN bool tpt_signbit(bool) { return false; }
// Floating types: max/min propagate NaN from either side (ATen's
// maximum/minimum), floor division as ATen's div_floor_floating, remainder
// takes the divisor's sign, sign(NaN) is 0 (ATen's CPU kernel).
// ADD/SUB/MUL: fp64's TP_D* (per preamble: never contracted into an FMA, as
// eager rounds each op). FMA: rounded once (ATen's add/sub with alpha).
#define TPT_PLAIN_ADD(a, b) ((a) + (b))
#define TPT_PLAIN_SUB(a, b) ((a) - (b))
#define TPT_PLAIN_MUL(a, b) ((a) * (b))
#define TPT_FLT(T, FMOD, FLOOR, TRUNC, FABS, BITS, TOP, ADD, SUB, MUL, FMA) \
TP_FN T tpt_add(T a, T b) { return ADD(a, b); } \
TP_FN T tpt_sub(T a, T b) { return SUB(a, b); } \
TP_FN T tpt_mul(T a, T b) { return MUL(a, b); } \
TP_FN T tpt_fma(T a, T b, T c) { return FMA(a, b, c); } \
TP_FN T tpt_neg(T a) { return -a; } \
TP_FN T tpt_abs(T a) { return FABS(a); } \
TP_FN T tpt_max(T a, T b) { return (a != a || b != b) ? a + b : (a < b ? b : a); } \
TP_FN T tpt_min(T a, T b) { return (a != a || b != b) ? a + b : (b < a ? b : a); } \
TP_FN bool tpt_signbit(T a) { return (BITS(a) >> TOP) != 0; } \
TP_FN T tpt_div_trunc(T a, T b) { return TRUNC(a / b); } \
TP_FN T tpt_div_floor(T a, T b) { \
  if (b == (T)0) return a / b; \
  const T mod = FMOD(a, b); \
  T div = (a - mod) / b; \
  if (mod != (T)0 && ((b < (T)0) != (mod < (T)0))) div -= (T)1; \
  if (div != (T)0) { \
    T fl = FLOOR(div); \
    if (div - fl > (T)0.5) fl += (T)1; \
    return fl; } \
  return tpt_signbit(a / b) ? -(T)0 : (T)0; } \
TP_FN T tpt_fmod(T a, T b) { return FMOD(a, b); } \
TP_FN T tpt_remainder(T a, T b) { \
  T mod = FMOD(a, b); \
  if (mod != (T)0 && ((b < (T)0) != (mod < (T)0))) mod += b; \
  return mod; } \
TP_FN T tpt_sign(T a) { return (T)((T)0 < a) - (T)(a < (T)0); } \
TP_FN bool tpt_isnan(T a) { return a != a; } \
TP_FN bool tpt_isinf(T a) { return a == (T)TP_INF || a == -(T)TP_INF; } \
TP_FN bool tpt_isfinite(T a) { return a == a && !tpt_isinf(a); } \
TP_FN bool tpt_isposinf(T a) { return a == (T)TP_INF; } \
TP_FN bool tpt_isneginf(T a) { return a == -(T)TP_INF; } \
TP_FN T tpt_nan_to_num(T a, T nan, T posinf, T neginf) { \
  return a != a ? nan : (a == (T)TP_INF ? posinf : (a == -(T)TP_INF ? neginf : a)); }
TPT_FLT(float, tpt_fmodf, tpt_floorf, tpt_truncf, tpt_fabsf, tpt_f32_bits, 31,
        TPT_PLAIN_ADD, TPT_PLAIN_SUB, TPT_PLAIN_MUL, tpt_fmaf)
TPT_FLT(double, tpt_fmod_d, tpt_floor_d, tpt_trunc_d, tpt_fabs_d, tpt_f64_bits, 63,
        TP_DADD, TP_DSUB, TP_DMUL, tpt_fma_d)
// ---- end of typed helpers ----
)";
  return s;
}

} // namespace torch_plugin::compiler
