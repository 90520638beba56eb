// random_ops.h: random ops generated in kernels (issue #27), device-neutral.
//
// Owns: which ATen random ops a fusion group may hold (aten::rand, randn,
// rand_like, randn_like, default overloads, with a float32 / bfloat16 /
// float16 result; bernoulli.p and native_dropout reach the IR as rand_like
// and pointwise ops through torch_plugin/compiler/decompositions.py), the
// expression of each, the Philox4x32-10 source both preambles append for
// kernels that hold one, and why a random op stays an ATen call.
//
// The generator is counter based (Philox4x32-10: Salmon, Moraes, Dror, Shaw,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11; the same rounds and
// constants as ATen's at::Philox4_32 and cuRAND's Philox4_32_10). Each
// element draws one Philox block from
//   key     = (seed low 32 bits, seed high 32 bits)
//   counter = (b low, b high, i low, i high), b = offset / 4 + stream
// where (seed, offset) are the kernel's runtime arguments, `stream` the random
// op's ordinal in its kernel (0, 1, ...) and i the element's linear index in
// the op's own result (row-major over its sizes). That is cuRAND's layout for
// curand_init(seed, subsequence = i, offset = 4 b): a kernel with n random ops
// uses the blocks [offset / 4, offset / 4 + n) of every subsequence, and the
// call advances the generator's offset by 4 n (CUDA), so eager kernels that
// run later (offsets >= the advanced one) never repeat its numbers. The value
// depends on (seed, offset, stream, i) only: not on threads, blocks, vector
// width or the memory layout.
//
// Values (generated in fp32, stored in the result dtype; ATen's conventions):
//   uniform [0, 1): the low B bits of word 0 times 2^-B, B the result dtype's
//     significand digits (24 float32, 11 float16, 8 bfloat16) as ATen's
//     uniform_real_distribution, so the stored value is exact and below 1;
//   normal: Box-Muller, u1, u2 the low 24 bits of words 0 and 1 times 2^-24,
//     sqrt(-2 log(1 - u2)) * cos(2 pi u1) (ATen's CPU normal_distribution).
// The numbers differ from eager's bit for bit (eager's CPU generator is
// mt19937; eager CUDA kernels lay out their subsequences by thread), as with
// Inductor's default (config.fallback_random=False); fallback_random keeps
// the ops as ATen calls for eager's numbers.
#pragma once

#include "ir/ir.h"

#include <c10/core/ScalarType.h>

#include <optional>
#include <string>
#include <vector>

namespace torch_plugin::compiler {

using namespace ::torch_plugin::ir;

enum class RandomKind : uint8_t { kUniform, kNormal };

// A random op a kernel generates.
struct RandomOp {
  RandomKind kind;
  c10::ScalarType dtype; // of the result: Float, BFloat16 or Half
};

// Whether `n` is one of the random ops of this file (whatever its dtype or
// overload): aten::rand, randn, rand_like, randn_like.
bool is_random_op(const Node& n);
// The random op `n` generates in a kernel, or nullopt (not a random op, an
// overload with a generator or names, a dtype other than fp32/bf16/fp16, or
// not exactly one output).
std::optional<RandomOp> random_op(const Node& n);
// Why random op `n` stays an ATen call: `fallback_random` set
// (TORCH_PLUGIN_FALLBACK_RANDOM=1), an unsupported overload or dtype. nullopt
// when it is generated in a kernel, or `n` is not a random op. Logged by the
// fusion pass (TORCH_PLUGIN_LOGS=kernels).
std::optional<std::string> random_fallback_reason(
    const Node& n,
    bool fallback_random);
// How many random ops `body` holds (the kernel's random streams).
int count_random_ops(const Graph& body);

// The contiguous (row-major) strides of `sizes`, in elements: the index
// operand through which both renderers give each element its linear index.
std::vector<int64_t> row_major_strides(const std::vector<int64_t>& sizes);
// The fp32 expression of random op `op` with stream ordinal `stream` at the
// element whose linear index is the expression `index` (an integer of at
// most 64 bits). It reads the kernel's `tp_seed` and `tp_offset` (unsigned
// long long), which each renderer declares.
std::string random_expression(
    const RandomOp& op,
    int stream,
    const std::string& index);
// The Philox4x32-10 helpers (tp_philox, tp_rand_uniform, tp_rand_normal) as
// device-neutral source: every preamble defines TP_FN, tp_log, tp_sqrt and
// tp_cos first; renderers append this after their preamble in kernels with
// random ops. The same source runs in the host test of
// tests/cpp/compiler/test_random_ops.cpp.
const std::string& random_helpers_source();

} // namespace torch_plugin::compiler
