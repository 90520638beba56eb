// cpp_emit.h: pieces of C++ source shared by the kernel generators
// (cpp_kernel.cpp for pointwise groups, reduction_kernel.cpp for reduction
// groups).
//
// Every generated kernel computes in fp32: a bf16 operand is loaded with
// tp_load_bf16 (exact widening) and stored with tp_store_bf16, which rounds to
// nearest-even exactly like c10::BFloat16's round_to_nearest_even (NaN stays a
// quiet NaN). tp_exp is a vectorizable expf (Cephes expf: range reduction by
// ln 2 split in two constants, degree-5 minimax polynomial; about 1 ulp) so
// that loops calling it still vectorize under `#pragma omp simd` without
// -ffast-math.
#pragma once

#include "ir/ir.h"

#include <string>
#include <vector>

namespace torch_plugin::compiler {

// The graph IR (csrc/ir) that passes and codegen read and rewrite.
using namespace ::torch_plugin::ir;

// The includes and helper functions every generated kernel starts with.
const std::string& kernel_preamble();
// Whether generated kernels can load/store this dtype (float32, bfloat16).
bool kernel_dtype(c10::ScalarType t);
// The C++ element type of a kernel pointer for `t`: "float" or "uint16_t".
std::string c_type(c10::ScalarType t);
// The fp32 expression loading element `offset` (an expression) of pointer
// `ptr`.
std::string load_expr(
    c10::ScalarType t,
    const std::string& ptr,
    const std::string& offset);
// The statement storing the fp32 expression `value` into `ptr[offset]`.
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
