// cublaslt_detail.h: what the files of the cuBLASLt wrapper share
// (cublaslt.cpp: descriptors, the plan cache and running a plan;
// cublaslt_calls.cpp: the cuBLAS and cuBLASLt calls below the plans;
// cublaslt_tuning.cpp: building a plan and choosing its algorithm;
// cublaslt_padded.cpp: products whose output rows are misaligned). Private
// to csrc/libs/cublaslt*.cpp.
#pragma once

#include "libs/cublaslt.h"

#include <optional>
#include <vector>

namespace torch_plugin::libs::cublaslt {

// --- cublaslt_calls.cpp ----------------------------------------------------
// Raises "cuBLASLt: <call> failed: CUBLAS_STATUS_... (<descriptor>)".
void check(cublasStatus_t status, const char* call, const MatmulDesc& d);
cudaDataType_t cuda_type(DType d);
cublasLtEpilogue_t cuda_epilogue(Epilogue e);
// Validates a descriptor before any cuBLASLt call sees it.
void validate(const MatmulDesc& d);
// Whether cuBLAS's gemm can compute d's product: no activation; a bias or C
// only without a batch (they are written into D first); sizes within int.
bool gemm_can_run(const MatmulDesc& d);
// D = A @ B + bias + C with cuBLAS's gemm (gemm_can_run(d)) on `stream`
// (see cublaslt_calls.cpp).
void run_gemm(
    const MatmulDesc& d,
    cublasHandle_t h,
    const void* a,
    const void* b,
    const void* c,
    const void* bias,
    const void* ones,
    void* out,
    cudaStream_t stream);
// Host bytes of n ones of the dtype (fp32 0x3F800000, bf16 0x3F80, fp16
// 0x3C00).
std::vector<uint8_t> ones_bytes(DType dtype, int64_t n);
// A column-major cuBLASLt layout of rows x cols with leading dimension ld.
cublasLtMatrixLayout_t make_layout(
    const MatmulDesc& d,
    int64_t rows,
    int64_t cols,
    int64_t ld,
    int64_t batch_stride);
// Sets attribute `attr` of the matmul descriptor `op` to `v`.
template <typename T>
void set_attribute(
    cublasLtMatmulDesc_t op,
    cublasLtMatmulDescAttributes_t attr,
    const T& v,
    const MatmulDesc& d) {
  check(
      cublasLtMatmulDescSetAttribute(op, attr, &v, sizeof(v)),
      "cublasLtMatmulDescSetAttribute",
      d);
}

// --- cublaslt.cpp: the tuning settings (set_tuning) --------------------------
// Times the heuristic's candidates and cuBLAS's gemm (tuning "1", the default).
bool tuning_enabled();
// Also prints each candidate's time (ms per product) to stderr ("verbose").
bool tuning_verbose();
// Takes cuBLAS's gemm wherever it can run ("gemm": tests and benchmarks).
bool gemm_forced();
// How many candidates to ask cublasLtMatmulAlgoGetHeuristic for (1 to 64,
// default 8).
int heuristic_candidates();

struct MatmulPlan::Impl {
  cublasLtMatmulDesc_t op = nullptr;
  // Column-major operands of D^T = B^T A^T: "A" is our B, "B" is our A.
  cublasLtMatrixLayout_t lt_a = nullptr, lt_b = nullptr, lt_c = nullptr,
                         lt_d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Impl() {
    for (cublasLtMatrixLayout_t l : {lt_a, lt_b, lt_c, lt_d}) {
      if (l)
        cublasLtMatrixLayoutDestroy(l);
    }
    if (op)
      cublasLtMatmulDescDestroy(op);
  }
};

// --- cublaslt_tuning.cpp
// ------------------------------------------------------- Builds the plan of
// `d` and picks its algorithm (timing the candidates on `tune_stream` when
// given and tuning is on). nullptr when cuBLASLt has no algorithm.
std::shared_ptr<MatmulPlan> build_plan(
    const MatmulDesc& d,
    cublasLtHandle_t handle,
    std::optional<cudaStream_t> tune_stream,
    cublasHandle_t gemm_handle,
    const TuneResources* resources);

// --- cublaslt_padded.cpp -------------------------------------------------
// The product of padded_split(full) (see cublaslt.h), in place: every plan
// found before anything is written; false (nothing written) when cuBLASLt has
// none for one of them. `hint`: a plan to use where its descriptor is one of
// the pieces'.
bool run_split(
    const MatmulDesc& full,
    const PaddedSplit& split,
    const at::Tensor& x,
    const at::Tensor& w,
    const at::Tensor& c,
    const at::Tensor& bias,
    const at::Tensor& y2d,
    const MatmulPlan* hint);
// The product of padded_chunk_desc(full) == chunk, in chunks through a
// scratch; false (nothing written) as run_split.
bool run_padded(
    const MatmulDesc& full,
    const MatmulDesc& chunk,
    const at::Tensor& x,
    const at::Tensor& w,
    const at::Tensor& c,
    const at::Tensor& bias,
    const at::Tensor& y2d,
    const MatmulPlan* hint);

} // namespace torch_plugin::libs::cublaslt
