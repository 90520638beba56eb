// cublaslt_calls.cpp: the cuBLAS and cuBLASLt calls below the plans (see
// cublaslt_detail.h): status checks, dtype and epilogue mapping, descriptor
// validation, matrix layouts and the product through cuBLAS's gemm.
//
// Sources: the cuBLASLt and cuBLAS API references (docs.nvidia.com/cuda/cublas)
// and cublasLt.h of CUDA 13.
#include "libs/cublaslt_detail.h"

#include <c10/util/Exception.h>

#include <cstring>
#include <vector>

namespace torch_plugin::libs::cublaslt {

namespace {

bool is_pow2(int v) {
  return v > 0 && (v & (v - 1)) == 0;
}

} // namespace

// Raises "cuBLASLt: <call> failed: CUBLAS_STATUS_... (<descriptor>)".
void check(cublasStatus_t status, const char* call, const MatmulDesc& d) {
  TORCH_CHECK(
      status == CUBLAS_STATUS_SUCCESS,
      "cuBLASLt: ",
      call,
      " failed: ",
      cublasLtGetStatusName(status),
      " (",
      d.str(),
      ")");
}

cudaDataType_t cuda_type(DType d) {
  switch (d) {
    case DType::kFloat32:
      return CUDA_R_32F;
    case DType::kBFloat16:
      return CUDA_R_16BF;
    case DType::kFloat16:
      return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

cublasLtEpilogue_t cuda_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::kNone:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::kRelu:
      return CUBLASLT_EPILOGUE_RELU;
    case Epilogue::kGelu:
      return CUBLASLT_EPILOGUE_GELU;
    case Epilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kReluBias:
      return CUBLASLT_EPILOGUE_RELU_BIAS;
    case Epilogue::kGeluBias:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// Validates a descriptor before any cuBLASLt call sees it.
void validate(const MatmulDesc& d) {
  TORCH_CHECK(
      d.m > 0 && d.n > 0 && d.k > 0 && d.batch >= 1 && d.batch <= INT32_MAX,
      "cuBLASLt: invalid matmul sizes (",
      d.str(),
      ")");
  // Stored column counts: A [m, k] or [k, m]; B [k, n] or [n, k].
  const int64_t a_cols = d.trans_a ? d.m : d.k;
  const int64_t b_cols = d.trans_b ? d.k : d.n;
  TORCH_CHECK(
      d.lda >= a_cols && d.ldb >= b_cols && d.ldd >= d.n &&
          (!d.has_c || d.ldc >= d.n),
      "cuBLASLt: a leading dimension is smaller than its row (",
      d.str(),
      ")");
  TORCH_CHECK(
      is_pow2(d.align_a) && is_pow2(d.align_b) && is_pow2(d.align_c) &&
          is_pow2(d.align_d),
      "cuBLASLt: alignments must be powers of two (",
      d.str(),
      ")");
}

// Whether cuBLAS's gemm can compute d's product: no activation; a bias or C
// only without a batch (they are written into D first); sizes within int.
bool gemm_can_run(const MatmulDesc& d) {
  if (d.epilogue != Epilogue::kNone && d.epilogue != Epilogue::kBias)
    return false;
  if ((has_bias(d.epilogue) || d.has_c) && d.batch != 1)
    return false;
  for (int64_t v : {d.m, d.n, d.k, d.lda, d.ldb, d.ldc, d.ldd}) {
    if (v > INT32_MAX)
      return false;
  }
  return true;
}

void check_gemm(cublasStatus_t status, const char* call, const MatmulDesc& d) {
  TORCH_CHECK(
      status == CUBLAS_STATUS_SUCCESS,
      "cuBLAS: ",
      call,
      " failed: ",
      cublasGetStatusName(status),
      " (",
      d.str(),
      ")");
}

// D = A @ B + bias + C with cuBLAS's gemm (gemm_can_run(d)) on `stream`:
// C is copied into D, the bias added by the rank-one product
// bias [n, 1] x ones [1, m] (`ones`: m ones of the dtype), then the product
// accumulated with beta = 1. Same column-major view as the cuBLASLt plan:
// D^T [n, m] = B^T A^T. The handle's math mode is set for the call (reduced-
// precision split-K reductions as the descriptor allows; TF32 through the
// compute type) and restored.
void run_gemm(
    const MatmulDesc& d,
    cublasHandle_t h,
    const void* a,
    const void* b,
    const void* c,
    const void* bias,
    const void* ones,
    void* out,
    cudaStream_t stream) {
  const size_t elem = d.dtype == DType::kFloat32 ? 4 : 2;
  const cudaDataType_t type = cuda_type(d.dtype);
  const cublasComputeType_t compute = d.dtype == DType::kFloat32 && d.allow_tf32
      ? CUBLAS_COMPUTE_32F_FAST_TF32
      : CUBLAS_COMPUTE_32F;
  check_gemm(cublasSetStream(h, stream), "cublasSetStream", d);
  cublasMath_t prior = CUBLAS_DEFAULT_MATH;
  check_gemm(cublasGetMathMode(h, &prior), "cublasGetMathMode", d);
  int mode = CUBLAS_DEFAULT_MATH;
  if (d.dtype != DType::kFloat32 && !d.reduced_precision_reduction)
    mode |= CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  check_gemm(
      cublasSetMathMode(h, static_cast<cublasMath_t>(mode)),
      "cublasSetMathMode",
      d);
  struct Restore {
    cublasHandle_t h;
    cublasMath_t mode;
    ~Restore() {
      cublasSetMathMode(h, mode);
    }
  } restore{h, prior};
  const float one = 1.0f;
  float beta = 0.0f;
  const int m = static_cast<int>(d.m), n = static_cast<int>(d.n),
            k = static_cast<int>(d.k);
  // C may be D itself (same layout: the padded products of
  // cublaslt_linear.cpp accumulate into their scratch): nothing to copy.
  if (d.has_c && (c != out || d.ldc != d.ldd)) {
    TORCH_CHECK(
        cudaMemcpy2DAsync(
            out,
            d.ldd * elem,
            c,
            d.ldc * elem,
            d.n * elem,
            d.m,
            cudaMemcpyDeviceToDevice,
            stream) == cudaSuccess,
        "cuBLAS gemm: cudaMemcpy2DAsync of C failed: ",
        cudaGetErrorString(cudaGetLastError()),
        " (",
        d.str(),
        ")");
  }
  if (d.has_c)
    beta = 1.0f;
  if (bias) {
    check_gemm(
        cublasGemmEx(
            h,
            CUBLAS_OP_N,
            CUBLAS_OP_N,
            n,
            m,
            1,
            &one,
            bias,
            type,
            n,
            ones,
            type,
            1,
            &beta,
            out,
            type,
            static_cast<int>(d.ldd),
            compute,
            CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx (bias)",
        d);
    beta = 1.0f;
  }
  const cublasOperation_t op_a = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (d.batch == 1) {
    check_gemm(
        cublasGemmEx(
            h,
            op_a,
            op_b,
            n,
            m,
            k,
            &one,
            b,
            type,
            static_cast<int>(d.ldb),
            a,
            type,
            static_cast<int>(d.lda),
            &beta,
            out,
            type,
            static_cast<int>(d.ldd),
            compute,
            CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx",
        d);
    return;
  }
  check_gemm(
      cublasGemmStridedBatchedEx(
          h,
          op_a,
          op_b,
          n,
          m,
          k,
          &one,
          b,
          type,
          static_cast<int>(d.ldb),
          d.stride_b,
          a,
          type,
          static_cast<int>(d.lda),
          d.stride_a,
          &beta,
          out,
          type,
          static_cast<int>(d.ldd),
          d.stride_d,
          static_cast<int>(d.batch),
          compute,
          CUBLAS_GEMM_DEFAULT),
      "cublasGemmStridedBatchedEx",
      d);
}

// Host bytes of n ones of the dtype (fp32 0x3F800000, bf16 0x3F80, fp16
// 0x3C00).
std::vector<uint8_t> ones_bytes(DType dtype, int64_t n) {
  std::vector<uint8_t> out;
  if (dtype == DType::kFloat32) {
    std::vector<float> v(n, 1.0f);
    out.resize(n * 4);
    std::memcpy(out.data(), v.data(), out.size());
  } else {
    const uint16_t bits = dtype == DType::kBFloat16 ? 0x3F80 : 0x3C00;
    std::vector<uint16_t> v(n, bits);
    out.resize(n * 2);
    std::memcpy(out.data(), v.data(), out.size());
  }
  return out;
}

// A column-major cuBLASLt layout of rows x cols with leading dimension ld.
cublasLtMatrixLayout_t make_layout(
    const MatmulDesc& d,
    int64_t rows,
    int64_t cols,
    int64_t ld,
    int64_t batch_stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  check(
      cublasLtMatrixLayoutCreate(
          &layout,
          cuda_type(d.dtype),
          static_cast<uint64_t>(rows),
          static_cast<uint64_t>(cols),
          ld),
      "cublasLtMatrixLayoutCreate",
      d);
  if (d.batch > 1) {
    int32_t count = static_cast<int32_t>(d.batch);
    check(
        cublasLtMatrixLayoutSetAttribute(
            layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
        "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)",
        d);
    check(
        cublasLtMatrixLayoutSetAttribute(
            layout,
            CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
            &batch_stride,
            sizeof(batch_stride)),
        "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)",
        d);
  }
  return layout;
}

} // namespace torch_plugin::libs::cublaslt
