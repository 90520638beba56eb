// cuda_common.h: what the CUDA renderer's parts (cuda_pointwise.cpp,
// cuda_reduction.cpp) share: the preamble every kernel starts with, element
// types, loads and stores of fp32/bf16/fp16 in fp32, literals, index types,
// broadcasting and the launch-configuration constants. Defined in
// cuda_preamble.cpp.
#pragma once

#include "ir/ir.h"

#include <cstdint>
#include <string>
#include <vector>

namespace torch_plugin::compiler::cuda {

using namespace ::torch_plugin::ir;

// Threads per block of pointwise kernels and of row kernels with one warp per
// row (8 rows per block).
constexpr int64_t kBlock = 256;
// Most blocks a grid-stride kernel is launched with: 132 SMs (H100 SXM, H200)
// times 64, i.e. >= 8 rounds of blocks per SM at the 8 resident 256-thread
// blocks of full occupancy, so that a last partial round costs little.
constexpr int64_t kMaxBlocks = 132 * 64;

// The kernel preamble (no #include: NVRTC compiles it with no headers): the
// tp_* helpers of the op-semantics table as __device__ __forceinline__ float
// functions (accurate CUDA math: expf, logf, tanhf, erff, ...), tp_ld/st of
// bf16 and fp16 raw bits (unsigned short), a NaN-propagating max for amax and
// softmax, TP_INF/TP_NAN.
const std::string& preamble();

// Whether the CUDA renderer's reduction kernels (fp32 compute) load and
// store this dtype (float32, bfloat16, float16).
bool cuda_dtype(c10::ScalarType t);
// Whether its pointwise kernels load and store this dtype: every dtype with
// a compute type (codegen/op_semantics.h): bool, uint8, int8, int16, int32,
// int64, float16, bfloat16, float32, float64.
bool pointwise_cuda_dtype(c10::ScalarType t);
// The element type of a kernel pointer: "float", "unsigned short" (bf16,
// fp16 bits), "double", "bool", "tp_u8", "tp_i8", ... "tp_i64".
std::string element_type(c10::ScalarType t);
// Bytes per element (1, 2, 4 or 8).
int64_t element_size(c10::ScalarType t);
// Expression of element `offset` of `ptr` in t's compute type (fp32 for
// float32, bfloat16 and float16).
std::string load(
    c10::ScalarType t,
    const std::string& ptr,
    const std::string& offset);
// fp32 expression of raw element bits `bits` (an unsigned int expression
// holding the element in its low bits for 2-byte types, all 32 bits for
// float).
std::string from_bits(c10::ScalarType t, const std::string& bits);
// The raw element bits (unsigned int, low bits) of the fp32 `value`.
std::string to_bits(c10::ScalarType t, const std::string& value);
// Statement storing `value` (in t's compute type) into `ptr[offset]`.
std::string store(
    c10::ScalarType t,
    const std::string& ptr,
    const std::string& offset,
    const std::string& value);
// A constant argument (int, float or bool) as a CUDA float literal; throws
// c10::Error on others.
std::string literal(const AttrValue& v);
std::string literal(double v);
// Strides of a value of `v_sizes`/`v_strides` broadcast to `sizes`
// (right-aligned, 0 where broadcast); throws when the rank is larger.
std::vector<int64_t> broadcast_strides(
    const std::vector<int64_t>& v_sizes,
    const std::vector<int64_t>& v_strides,
    const std::vector<int64_t>& sizes);

// The index of the element at row-major position `index` of a loop nest of
// `sizes` (outermost first) in an operand of `strides` (per dim), as a CUDA
// expression in `type`; dims of size 1 or stride 0 add nothing, and adjacent
// dims that the operand stores contiguously are merged first.
std::string offset_expr(
    const std::vector<int64_t>& sizes,
    const std::vector<int64_t>& strides,
    const std::string& index,
    const std::string& type);

// One vector load of `n` consecutive elements of `ptr` at element offset
// `offset` (aligned to n elements) into dst[0..n), an array of t's compute
// type: statements. n * element size must be 2, 4, 8, 16 or a multiple of 16
// bytes.
std::string vector_load(
    c10::ScalarType t,
    const std::string& ptr,
    const std::string& offset,
    int64_t n,
    const std::string& dst,
    const std::string& indent);
// One vector store of src[0..n) (t's compute type; statements).
std::string vector_store(
    c10::ScalarType t,
    const std::string& ptr,
    const std::string& offset,
    int64_t n,
    const std::string& src,
    const std::string& indent);

// The expressions of a body node given its tensor operands' expressions, via
// the op-semantics table; throws when the op is not in it. `tensor_expr(i)`
// gives the expression of the node's i-th input value.
std::string node_expression(
    const Node& n,
    const std::vector<std::string>& input_exprs);

} // namespace torch_plugin::compiler::cuda

#include "compiler/codegen/renderer.h"

#include <optional>

namespace torch_plugin::compiler::cuda {

// The renderer's two kernel kinds (cuda_pointwise.cpp, cuda_reduction.cpp);
// nullopt for a group they do not handle.
std::optional<KernelSource> render_pointwise(const Node& group);
std::optional<KernelSource> render_row_reduction(const Node& group);
// Scan groups (cumsum, cumprod with their pointwise neighbours;
// cuda_scan.cpp).
std::optional<KernelSource> render_scan(const Node& group);

// "int" when every index and offset of a kernel stays below 2^31, else
// "long long"; `max_index` is the largest index or offset it computes.
inline std::string index_type(int64_t max_index) {
  return max_index < (int64_t{1} << 31) - 1 ? "int" : "long long";
}

} // namespace torch_plugin::compiler::cuda
