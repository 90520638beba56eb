// cpp_emit.h: pieces of C++ source shared by the kernel generators
// (cpp_kernel.cpp for pointwise groups, reduction_kernel.cpp for reduction
// groups).
//
// Kernels compute float32/bfloat16/float16 values in fp32: a bf16 operand is
// loaded with tp_load_bf16 (exact widening) and stored with tp_store_bf16,
// which rounds to nearest-even exactly like c10::BFloat16's
// round_to_nearest_even (NaN stays a quiet NaN); fp16 likewise with
// tp_load_f16 / tp_store_f16 (c10::Half's conversions). Pointwise kernels
// also load, compute and store bool, uint8, int8, int16, int32, int64 and
// float64 in their own C types (codegen/op_semantics.h, typed expressions);
// reduction kernels take float32 and bfloat16 only. tp_exp is a vectorizable
// expf (Cephes expf: range reduction by ln 2 split in two constants, degree-5
// minimax polynomial; about 1 ulp) so that loops calling it still vectorize
// under `#pragma omp simd` without -ffast-math.
#pragma once

#include "ir/ir.h"

#include <string>
#include <vector>

namespace torch_plugin::compiler {

// The graph IR (csrc/ir) that passes and codegen read and rewrite.
using namespace ::torch_plugin::ir;

// The includes and helper functions every generated kernel starts with.
const std::string& kernel_preamble();
// Whether reduction kernels can load/store this dtype (float32, bfloat16).
bool kernel_dtype(c10::ScalarType t);
// Whether pointwise kernels can load/store this dtype (every dtype with a
// compute type: bool, integers up to 64 bits, fp16, bf16, fp32, fp64).
bool pointwise_kernel_dtype(c10::ScalarType t);
// The C++ element type of a kernel pointer for `t`: "float", "uint16_t"
// (bf16, fp16 bits), "double", "bool", "tp_u8", "tp_i8" ... "tp_i64".
std::string c_type(c10::ScalarType t);
// The expression loading element `offset` (an expression) of pointer `ptr`,
// in t's compute type (fp32 for float32, bfloat16 and float16).
std::string load_expr(
    c10::ScalarType t,
    const std::string& ptr,
    const std::string& offset);
// The statement storing `value` (in t's compute type) into `ptr[offset]`.
std::string store_stmt(
    c10::ScalarType t,
    const std::string& ptr,
    const std::string& offset,
    const std::string& value);
// A constant argument (int, float or bool) as a float literal; throws
// otherwise.
std::string float_literal(const AttrValue& v);
// Strides of `v` broadcast to `sizes` (right-aligned, 0 where broadcast).
std::vector<int64_t> broadcast_strides(
    const std::vector<int64_t>& v_sizes,
    const std::vector<int64_t>& v_strides,
    const std::vector<int64_t>& sizes);

} // namespace torch_plugin::compiler
