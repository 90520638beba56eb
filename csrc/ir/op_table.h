// op_table.h: the op table — every op the compiler knows, defined once.
//
// Owns: for each op (by qualified name, "aten::add.Tensor"; "aten::relu" for
// the default overload), its category (pointwise, reduction, view, library),
// its scalar semantics (a device-neutral fp32 expression template that every
// renderer spells through its own tp_* helpers, codegen/op_semantics.h), the
// library epilogue it becomes when it follows a library node (relu,
// gelu_tanh, ...), and its reduction plan (which primitive reductions it
// expands into, each with its identity and combine). Also the epilogue table:
// each activation name of the library ops once, with its ATen reference and
// whether cuBLASLt fuses it. Named schema positions: ir/op_schema.h.
//
// Read by: passes/fusion.cpp (what is pointwise, what reduces), codegen
// (op_semantics.cpp for the expressions, reduction_plan.cpp for the plans),
// passes/library_patterns.cpp (which ops become which epilogue), ops/ (the
// reference kernels and the activation check) and runtime/cuda (cuBLASLt's
// epilogue mapping). Depends on ATen/c10 only (the reference kernels).
#pragma once

#include "ir/ir.h"

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace torch_plugin::ir {

enum class OpCategory : uint8_t { kPointwise, kReduction, kView, kLibrary };

// ---- epilogues ------------------------------------------------------------

// An activation a library node (conv_pointwise, linear_pointwise) applies to
// its result, named by the node's `activation` argument.
enum class EpilogueKind : uint8_t {
  kNone,
  kRelu,
  kSilu,
  kGelu, // exact (erf)
  kGeluTanh, // the tanh approximation
  kSigmoid,
  kTanh,
  kHardswish,
  kClamp, // alpha = min, beta = max
};

struct EpilogueInfo {
  EpilogueKind kind;
  const char* name; // the activation argument: "" (none), "relu", ...
  // cuBLASLt has an epilogue for it (the enum mapping: libs/cublaslt.h,
  // epilogue_for). oneDNN has a post-op for every one (libs/onednn.cpp).
  bool cublaslt;
  // act(y) with ATen ops: the reference kernels and the fallback paths.
  at::Tensor (*reference)(const at::Tensor& y, double alpha, double beta);
};

// Every epilogue, kNone first.
const std::vector<EpilogueInfo>& epilogues();
// The epilogue named `name` ("" is kNone); nullptr for an unknown name.
const EpilogueInfo* find_epilogue(std::string_view name);
const EpilogueInfo& epilogue_info(EpilogueKind kind);
// Raises c10::Error naming the known activations unless `name` is one ("" is).
void check_epilogue_name(std::string_view name);
// act(y) for the activation `name` (reference, ATen); y itself for "".
at::Tensor apply_epilogue(
    const at::Tensor& y,
    std::string_view name,
    double alpha,
    double beta);

// ---- reductions -----------------------------------------------------------

// The primitive reductions every reduction op expands into.
enum class Combine : uint8_t {
  kSum, // identity 0, combine +
  kMax, // identity -inf, combine max that propagates NaN
  // Appended for issue #27 (reductions):
  kMin, // identity +inf, combine min that propagates NaN
  kProd, // identity 1, combine *
  // (value, int64 index) pairs: the greater (smaller) value, NaN greatest
  // (smallest), ties to the smaller index; identity (-inf (+inf), INT64_MAX).
  // Associative and commutative, so any order of combining gives ATen's
  // answer (the first maximal index; the first NaN's when there is one).
  kArgMax,
  kArgMin,
  // Inclusive prefix sum / product along the reduced dim (a scan, not a
  // reduction): one value per element.
  kScanSum,
  kScanProd,
};

struct CombineInfo {
  Combine kind;
  double identity;
  const char* name;
};
const CombineInfo& combine_info(Combine c);

enum class ReductionKind : uint8_t {
  kNone,
  kSum, // sum over R
  kMean, // sum / N
  kAmax, // max
  kVar, // sum((x - mean)^2) / (N - correction): two passes
  kSoftmax, // exp(x - max) / sum(exp(x - max))
  kLogSoftmax, // x - max - log(sum(exp(x - max)))
  kLayerNorm, // (x - mean) * rsqrt(var + eps) [* w] [+ b]; mean, rstd
  // Appended for issue #27 (reductions):
  kProd, // product over R (prod.dim_int, prod.default)
  kAmin, // min over R
  kMaxDim, // (values, int64 indices) of the max over one dim: ATen's max.dim
  kMinDim, // the same for the min
  kArgMax, // int64 index of the max (dim=None: over the flattened input)
  kArgMin,
  kVarMean, // (var, mean), var two-pass as kVar
  kLogSumExp, // m + log(sum(exp(x - m))), m = max (0 where it is +-inf)
  kCumSum, // inclusive scan along one dim (row-wise output)
  kCumProd,
  // Appended for issue #27 (any/all): whether some (every) element is nonzero
  // (NaN counts as nonzero), as the max (min) of x != 0 over R; a bool output
  // (uint8 for a uint8 input, as ATen).
  kAny,
  kAll,
};

// How a reduction op is computed (codegen/reduction_plan.cpp expands it).
struct ReductionPlan {
  ReductionKind kind = ReductionKind::kNone;
  // The primitive reductions, in the order of the passes over R.
  std::vector<Combine> passes;
  // Output 0 has the input's sizes (softmax, log_softmax, layer_norm: "row-
  // wise"); else every output has one value per kept index.
  bool rowwise = false;
};

// ---- typing of pointwise rows ---------------------------------------------

// How a pointwise row types its operands and its result, after PyTorch's type
// promotion. A compute type is the type a template runs in: Float (fp32) for
// float32, bfloat16 and float16 values (bf16/fp16 computed in fp32), Double
// for float64, the integer C type for Byte, Char, Short, Int, Long, and Bool.
enum class TypeRule : uint8_t {
  // Every tensor is float32/bfloat16/float16; `expression` in fp32. The
  // default of every row: a row says otherwise to take other dtypes.
  kFloat,
  // Computed in the output's compute type, every operand converted to it
  // (arithmetic, where's values, masked_fill; int / int true division).
  kResult,
  // Computed in the promoted type of the operands (tensors and scalars, as
  // at::result_type); the result is bool (comparisons).
  kCompare,
  // Operands read as bool (x != 0); the result is bool (logical ops).
  kLogical,
  // Computed in the first operand's own compute type; the result is bool
  // (isnan, isinf, isfinite, isposinf, isneginf, signbit).
  kPredicate,
};

// The classes of compute types a row generates (a mask).
enum TypeClass : uint8_t {
  kTypeFloat = 1, // fp32 (float32, bfloat16, float16 values)
  kTypeDouble = 2,
  kTypeInt = 4, // uint8, int8, int16, int32, int64
  kTypeBool = 8,
  kTypeAll = 15,
};

// The typing of one op: a row of the typed block (op_table_typed.cpp),
// merged into the op table's row of the same name (or a new pointwise row).
struct TypedRow {
  const char* name;
  TypeRule rule;
  uint8_t classes; // TypeClass mask
  // The template for every compute type except Float when the row has an
  // fp32 `expression` (then Float uses that); $i as in `expression`, each
  // operand already converted to the compute type. Helpers: tpt_* (overloaded
  // for every compute type, codegen/op_semantics.h).
  const char* typed_expression;
  uint32_t bool_args = 0; // bit i: argument i is a condition, read as bool
  // >= 0: with an integer compute type this argument must be a nonzero
  // constant (ATen raises on integer division by zero; a kernel cannot).
  int divisor_arg = -1;
};
// The typed block (op_table_typed.cpp).
const std::vector<TypedRow>& typed_rows();

// ---- ops ------------------------------------------------------------------

// One value of a string argument that selects an op's semantics (gelu's
// approximate = "none" | "tanh").
struct OpVariant {
  const char* value;
  const char* expression;
  EpilogueKind epilogue;
};

struct OpInfo {
  std::string name; // qualified name
  OpCategory category;
  // Pointwise: the fp32 expression, $0, $1, ... standing for schema arguments
  // 0, 1, ... (codegen/op_semantics.h lists the helpers); nullptr when
  // generated kernels do not compute the op.
  const char* expression = nullptr;
  // The library epilogue this op becomes after a library node.
  EpilogueKind epilogue = EpilogueKind::kNone;
  // When not empty: the string argument `variant_arg` picks one of these
  // (expression and epilogue); a value not listed has neither.
  size_t variant_arg = 0;
  std::vector<OpVariant> variants;
  ReductionPlan reduction; // kReduction
  size_t activation_arg = 0; // kLibrary: the `activation` argument
  // Pointwise typing (see TypedRow): kFloat / kTypeFloat unless the typed
  // block lists the op.
  TypeRule type_rule = TypeRule::kFloat;
  uint8_t type_classes = kTypeFloat;
  const char* typed_expression = nullptr;
  uint32_t bool_args = 0;
  int divisor_arg = -1;
};

const std::vector<OpInfo>& op_table();
// The row of an op (qualified name); nullptr when the table does not have it.
const OpInfo* find_op(const std::string& qualified_name);
const OpInfo* find_op(const Node& n);
// The expression template of this use of `n` (its variant), or nullptr.
const char* pointwise_template(const Node& n);

// The epilogue pointwise node `n` becomes when it follows a library node, with
// its alpha and beta (clamp's bounds, -3.4e38 / 3.4e38 for None); nullopt when
// it has none.
struct EpilogueUse {
  EpilogueKind kind;
  double alpha = 0.0, beta = 0.0;
};
std::optional<EpilogueUse> epilogue_of(const Node& n);

// Whether `n` is a library node (conv_pointwise, linear_pointwise), and the
// position of its `activation` argument.
bool is_library_node(const Node& n);
size_t activation_arg(const Node& library_node);

} // namespace torch_plugin::ir
