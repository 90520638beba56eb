// random_ops.cpp: random ops generated in kernels (see random_ops.h).
#include "compiler/codegen/random_ops.h"

#include <c10/util/Exception.h>

namespace torch_plugin::compiler {
namespace {

bool default_overload(const Node& n) {
  return n.overload.empty() || n.overload == "default";
}

std::optional<RandomKind> kind_of(const Node& n) {
  if (n.op == "aten::rand" || n.op == "aten::rand_like")
    return RandomKind::kUniform;
  if (n.op == "aten::randn" || n.op == "aten::randn_like")
    return RandomKind::kNormal;
  return std::nullopt;
}

bool random_dtype(c10::ScalarType t) {
  return t == c10::ScalarType::Float || t == c10::ScalarType::BFloat16 ||
      t == c10::ScalarType::Half;
}

// Significand digits of the result dtype (ATen's uniform_real_distribution
// draws that many bits, so the stored value is exact and below 1).
int uniform_bits(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::BFloat16:
      return 8;
    case c10::ScalarType::Half:
      return 11;
    default:
      return 24;
  }
}

} // namespace

bool is_random_op(const Node& n) {
  return kind_of(n).has_value();
}

std::optional<RandomOp> random_op(const Node& n) {
  const auto kind = kind_of(n);
  if (!kind || !default_overload(n) || n.outputs.size() != 1 ||
      !random_dtype(n.outputs[0]->dtype))
    return std::nullopt;
  return RandomOp{*kind, n.outputs[0]->dtype};
}

std::optional<std::string> random_fallback_reason(
    const Node& n,
    bool fallback_random) {
  if (!is_random_op(n))
    return std::nullopt;
  if (fallback_random)
    return std::string(
        "random op kept as an ATen call for eager's numbers "
        "(TORCH_PLUGIN_FALLBACK_RANDOM=1, config fallback_random)");
  if (!default_overload(n))
    return "random op overload '" + n.overload +
        "' (a generator or names argument) is not generated in kernels";
  if (n.outputs.size() != 1 || !random_dtype(n.outputs[0]->dtype))
    return std::string(
               "random numbers are generated in kernels for float32, "
               "bfloat16 and float16 results only, not ") +
        (n.outputs.empty() ? "no result" : c10::toString(n.outputs[0]->dtype));
  return std::nullopt;
}

int count_random_ops(const Graph& body) {
  int count = 0;
  for (const auto& owned : body.node_list())
    count += random_op(*owned).has_value() ? 1 : 0;
  return count;
}

std::string random_expression(
    const RandomOp& op,
    int stream,
    const std::string& index) {
  TORCH_CHECK(stream >= 0, "random_expression: negative stream");
  const std::string i = "(unsigned long long)(" + index + ")";
  const std::string s = std::to_string(stream) + "ull";
  if (op.kind == RandomKind::kNormal)
    return "tp_rand_normal(tp_seed, tp_offset, " + s + ", " + i + ")";
  return "tp_rand_uniform(tp_seed, tp_offset, " + s + ", " + i + ", " +
      std::to_string(uniform_bits(op.dtype)) + ")";
}

const std::string& random_helpers_source() {
  static const std::string s = R"(// ---- random numbers: Philox4x32-10 ----
// Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3"
// (SC'11): 10 rounds, multipliers 0xD2511F53 / 0xCD9E8D57, key increments
// 0x9E3779B9 / 0xBB67AE85, the same as ATen's at::Philox4_32 and cuRAND's
// Philox4_32_10. Counter (b, i) and key seed as in csrc/compiler/codegen/
// random_ops.h: one 128-bit block per element, independent of the launch.
struct tp_u32x4 { unsigned int x, y, z, w; };
TP_FN tp_u32x4 tp_philox(unsigned long long seed, unsigned long long block,
                         unsigned long long index) {
  unsigned int c0 = (unsigned int)block, c1 = (unsigned int)(block >> 32);
  unsigned int c2 = (unsigned int)index, c3 = (unsigned int)(index >> 32);
  unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    if (r > 0) { k0 += 0x9E3779B9u; k1 += 0xBB67AE85u; }
    const unsigned long long p0 = (unsigned long long)0xD2511F53u * c0;
    const unsigned long long p1 = (unsigned long long)0xCD9E8D57u * c2;
    const unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0;
    const unsigned int n2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1;
    c1 = (unsigned int)p1;
    c3 = (unsigned int)p0;
    c0 = n0;
    c2 = n2;
  }
  tp_u32x4 out = {c0, c1, c2, c3};
  return out;
}
// The low `bits` bits of `w` times 2^-bits: uniform in [0, 1) (ATen's
// uniform_real_distribution; bits = the result dtype's significand digits).
TP_FN float tp_uniform_bits(unsigned int w, int bits) {
  return (float)(w & ((1u << bits) - 1u)) * (1.0f / (float)(1u << bits));
}
TP_FN float tp_rand_uniform(unsigned long long seed, unsigned long long offset,
                            unsigned long long stream, unsigned long long i,
                            int bits) {
  return tp_uniform_bits(tp_philox(seed, offset / 4 + stream, i).x, bits);
}
// Box-Muller (ATen's CPU normal_distribution): 1 - u2 is in (0, 1], exact.
TP_FN float tp_rand_normal(unsigned long long seed, unsigned long long offset,
                           unsigned long long stream, unsigned long long i) {
  const tp_u32x4 r = tp_philox(seed, offset / 4 + stream, i);
  const float u1 = tp_uniform_bits(r.x, 24), u2 = tp_uniform_bits(r.y, 24);
  return tp_sqrt(-2.0f * tp_log(1.0f - u2)) *
      tp_cos(6.2831853071795864769f * u1);
}
)";
  return s;
}

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t s = 1;
  for (size_t d = strides.size(); d-- > 0;) {
    strides[d] = s;
    s *= sizes[d];
  }
  return strides;
}

} // namespace torch_plugin::compiler
