// cublaslt.cpp: the cuBLASLt matmul plans and their process-wide cache (see
// cublaslt.h); the at::Tensor glue is in cublaslt_linear.cpp.
//
// Sources: the cuBLASLt API reference (docs.nvidia.com/cuda/cublas,
// "Using the cuBLASLt API": cublasLtMatmul, cublasLtMatmulAlgoGetHeuristic,
// the epilogue and preference attributes) and cublasLt.h of CUDA 13.
// CUBLASLT_EPILOGUE_GELU is the tanh approximation of GELU (PyTorch's
// _addmm_activation relies on this: pytorch/pytorch#104061).
#include "libs/cublaslt.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace torch_plugin::libs::cublaslt {

namespace {

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

bool is_pow2(int v) {
  return v > 0 && (v & (v - 1)) == 0;
}

// Validates a descriptor before any cuBLASLt call sees it.
// TORCH_PLUGIN_CUBLASLT_TUNING: unset or "1" times the heuristic's candidates
// and cuBLAS's gemm (MatmulPlan::get), "0" takes the heuristic's first,
// "verbose" also prints each candidate's time (ms per product) to stderr,
// "gemm" takes cuBLAS's gemm wherever it can run (tests and benchmarks).
const char* tuning_setting() {
  const char* v = std::getenv("TORCH_PLUGIN_CUBLASLT_TUNING");
  return v ? v : "1";
}
bool tuning_enabled() {
  return std::strcmp(tuning_setting(), "0") != 0;
}
bool tuning_verbose() {
  return std::strcmp(tuning_setting(), "verbose") == 0;
}
bool gemm_forced() {
  return std::strcmp(tuning_setting(), "gemm") == 0;
}
// How many candidates to ask cublasLtMatmulAlgoGetHeuristic for
// (TORCH_PLUGIN_CUBLASLT_CANDIDATES, 1 to 64, default 8).
int heuristic_candidates() {
  const char* v = std::getenv("TORCH_PLUGIN_CUBLASLT_CANDIDATES");
  int n = v ? std::atoi(v) : 8;
  return std::clamp(n, 1, 64);
}

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
  if (d.has_c) {
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
    beta = 1.0f;
  }
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

struct PlanCache {
  std::mutex mutex;
  // nullptr entries record descriptors without an algorithm.
  std::unordered_map<
      MatmulDesc,
      std::shared_ptr<const MatmulPlan>,
      MatmulDescHash>
      plans;
};

PlanCache& plan_cache() {
  // Never destroyed: plans may be used until the process exits.
  static PlanCache* cache = new PlanCache;
  return *cache;
}

} // namespace

const char* to_string(DType d) {
  switch (d) {
    case DType::kFloat32:
      return "fp32";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat16:
      return "fp16";
  }
  return "?";
}

const char* to_string(Epilogue e) {
  switch (e) {
    case Epilogue::kNone:
      return "none";
    case Epilogue::kRelu:
      return "relu";
    case Epilogue::kGelu:
      return "gelu_tanh";
    case Epilogue::kBias:
      return "bias";
    case Epilogue::kReluBias:
      return "relu_bias";
    case Epilogue::kGeluBias:
      return "gelu_tanh_bias";
  }
  return "?";
}

bool has_bias(Epilogue e) {
  return e == Epilogue::kBias || e == Epilogue::kReluBias ||
      e == Epilogue::kGeluBias;
}

bool MatmulDesc::operator==(const MatmulDesc& o) const {
  return m == o.m && n == o.n && k == o.k && batch == o.batch &&
      dtype == o.dtype && trans_a == o.trans_a && trans_b == o.trans_b &&
      lda == o.lda && ldb == o.ldb && ldc == o.ldc && ldd == o.ldd &&
      stride_a == o.stride_a && stride_b == o.stride_b &&
      stride_c == o.stride_c && stride_d == o.stride_d &&
      epilogue == o.epilogue && has_c == o.has_c &&
      allow_tf32 == o.allow_tf32 &&
      reduced_precision_reduction == o.reduced_precision_reduction &&
      align_a == o.align_a && align_b == o.align_b && align_c == o.align_c &&
      align_d == o.align_d && device == o.device &&
      workspace_limit == o.workspace_limit;
}

std::string MatmulDesc::str() const {
  std::ostringstream s;
  s << "m=" << m << ", n=" << n << ", k=" << k << ", batch=" << batch
    << ", dtype=" << to_string(dtype) << ", epilogue=" << to_string(epilogue)
    << (has_c ? ", +C" : "") << ", trans_a=" << trans_a
    << ", trans_b=" << trans_b << ", lda=" << lda << ", ldb=" << ldb
    << ", ldd=" << ldd;
  if (has_c)
    s << ", ldc=" << ldc;
  if (dtype == DType::kFloat32)
    s << ", tf32=" << allow_tf32;
  s << ", device=" << device;
  return s.str();
}

size_t MatmulDescHash::operator()(const MatmulDesc& d) const {
  size_t h = 0;
  auto mix = [&h](int64_t v) {
    h ^= std::hash<int64_t>()(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  };
  for (int64_t v :
       {d.m,
        d.n,
        d.k,
        d.batch,
        d.lda,
        d.ldb,
        d.ldc,
        d.ldd,
        d.stride_a,
        d.stride_b,
        d.stride_c,
        d.stride_d,
        static_cast<int64_t>(d.workspace_limit)}) {
    mix(v);
  }
  mix(static_cast<int64_t>(d.dtype) | static_cast<int64_t>(d.epilogue) << 8 |
      int64_t(d.trans_a) << 16 | int64_t(d.trans_b) << 17 |
      int64_t(d.has_c) << 18 | int64_t(d.allow_tf32) << 19 |
      int64_t(d.reduced_precision_reduction) << 20);
  mix(int64_t(d.align_a) | int64_t(d.align_b) << 16 | int64_t(d.align_c) << 32 |
      int64_t(d.align_d) << 48);
  mix(d.device);
  return h;
}

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

// Builds a plan's descriptors and picks its algorithm (a friend of
// MatmulPlan). Returns nullptr when cuBLASLt has no algorithm.
struct PlanBuilder {
  static std::shared_ptr<MatmulPlan> build(
      const MatmulDesc& d,
      cublasLtHandle_t handle,
      std::optional<cudaStream_t> tune_stream,
      cublasHandle_t gemm_handle) {
    validate(d);
    std::shared_ptr<MatmulPlan> plan(new MatmulPlan(d));
    MatmulPlan::Impl& p = *plan->impl_;
    const cublasComputeType_t compute =
        d.dtype == DType::kFloat32 && d.allow_tf32
        ? CUBLAS_COMPUTE_32F_FAST_TF32
        : CUBLAS_COMPUTE_32F;
    check(
        cublasLtMatmulDescCreate(&p.op, compute, CUDA_R_32F),
        "cublasLtMatmulDescCreate",
        d);
    // D^T [n, m] = op(B') op(A'), B' = our B's memory, A' = our A's.
    cublasOperation_t op_a = d.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = d.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    set(p.op, CUBLASLT_MATMUL_DESC_TRANSA, op_a, d);
    set(p.op, CUBLASLT_MATMUL_DESC_TRANSB, op_b, d);
    cublasLtEpilogue_t epilogue = cuda_epilogue(d.epilogue);
    set(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, d);
    if (has_bias(d.epilogue)) {
      int32_t bias_type = cuda_type(d.dtype);
      set(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type, d);
      int64_t bias_stride = 0; // one bias for every batch
      set(p.op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, bias_stride, d);
    }
    // Our B [k, n] row-major is B^T [n, k] column-major (op N); stored
    // [n, k] row-major (trans_b) it is [k, n] column-major (op T).
    p.lt_a = d.trans_b ? make_layout(d, d.k, d.n, d.ldb, d.stride_b)
                       : make_layout(d, d.n, d.k, d.ldb, d.stride_b);
    p.lt_b = d.trans_a ? make_layout(d, d.m, d.k, d.lda, d.stride_a)
                       : make_layout(d, d.k, d.m, d.lda, d.stride_a);
    p.lt_d = make_layout(d, d.n, d.m, d.ldd, d.stride_d);
    p.lt_c = d.has_c ? make_layout(d, d.n, d.m, d.ldc, d.stride_c)
                     : make_layout(d, d.n, d.m, d.ldd, d.stride_d);

    cublasLtMatmulPreference_t pref = nullptr;
    check(
        cublasLtMatmulPreferenceCreate(&pref),
        "cublasLtMatmulPreferenceCreate",
        d);
    std::unique_ptr<
        std::remove_pointer_t<cublasLtMatmulPreference_t>,
        cublasStatus_t (*)(cublasLtMatmulPreference_t)>
        pref_guard(pref, cublasLtMatmulPreferenceDestroy);
    uint64_t ws = d.workspace_limit;
    set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, ws, d);
    uint32_t align_a = d.align_b, align_b = d.align_a,
             align_c = d.has_c ? d.align_c : d.align_d, align_d = d.align_d;
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align_a, d);
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align_b, d);
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align_c, d);
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align_d, d);
    if (d.dtype != DType::kFloat32 && !d.reduced_precision_reduction) {
      uint32_t mask = CUBLASLT_REDUCTION_SCHEME_MASK &
          ~CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
      set_pref(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, mask, d);
    }

    const int kRequested = heuristic_candidates();
    std::vector<cublasLtMatmulHeuristicResult_t> results(kRequested);
    int returned = 0;
    cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle,
        p.op,
        p.lt_a,
        p.lt_b,
        p.lt_c,
        p.lt_d,
        pref,
        kRequested,
        results.data(),
        &returned);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED)
      return nullptr;
    check(status, "cublasLtMatmulAlgoGetHeuristic", d);
    // Results come best first (estimated time): the first that fits, or,
    // with a tuning stream, the fastest of those that fit.
    std::vector<const cublasLtMatmulHeuristicResult_t*> fits;
    for (int i = 0; i < returned; ++i) {
      if (results[i].state == CUBLAS_STATUS_SUCCESS &&
          results[i].workspaceSize <= d.workspace_limit)
        fits.push_back(&results[i]);
    }
    if (tuning_verbose()) {
      for (int i = 0; i < returned; ++i)
        std::fprintf(
            stderr,
            "torch_plugin cublaslt heuristic: %s result %d: status %d, "
            "workspace %zu of %llu, estimated %g\n",
            d.str().c_str(),
            i,
            static_cast<int>(results[i].state),
            results[i].workspaceSize,
            static_cast<unsigned long long>(d.workspace_limit),
            static_cast<double>(results[i].wavesCount));
    }
    if (fits.empty())
      return nullptr;
    size_t best = 0;
    std::vector<cublasLtMatmulHeuristicResult_t> variants;
    if (tune_stream && tuning_enabled()) {
      variants = split_k_variants(p, handle, d, fits);
      for (const auto& v : variants)
        fits.push_back(&v);
    }
    cublasHandle_t gemm = tune_stream && tuning_enabled() && gemm_can_run(d)
        ? gemm_handle
        : nullptr;
    if (gemm && gemm_forced())
      best = fits.size();
    else if (tune_stream && (fits.size() > 1 || gemm) && tuning_enabled())
      best = fastest(*plan, fits, handle, *tune_stream, gemm);
    if (best == fits.size())
      use_gemm(*plan, *tune_stream);
    else
      use(*plan, *fits[best]);
    return plan;
  }

  // Makes `plan` run cuBLAS's gemm; a plan with a bias gets its ones
  // vector (from the caching allocator, never freed: plans live as long as
  // the process).
  static void use_gemm(MatmulPlan& plan, cudaStream_t stream) {
    const MatmulDesc& d = plan.desc();
    plan.gemm_ = true;
    plan.algo_id_ = -1;
    plan.workspace_bytes_ = 0;
    if (!has_bias(d.epilogue))
      return;
    std::vector<uint8_t> ones = ones_bytes(d.dtype, d.m);
    void* p = c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(
        ones.size(), stream);
    TORCH_CHECK(
        cudaMemcpyAsync(
            p, ones.data(), ones.size(), cudaMemcpyHostToDevice, stream) ==
                cudaSuccess &&
            cudaStreamSynchronize(stream) == cudaSuccess,
        "cuBLAS gemm: copying the ones vector failed: ",
        cudaGetErrorString(cudaGetLastError()));
    plan.ones_ = p;
  }

  // Split-K versions of the heuristic's first candidate of each of its
  // first three algorithm ids (K cut into 2, 4 or 8 slices, partial products
  // reduced in place or in fp32 workspace), those cublasLtMatmulAlgoCheck
  // accepts within desc.workspace_limit. The heuristic proposes none for fp32
  // products with few output tiles (BERT at batch 1: M = 128 tokens, N = 768),
  // where it ranks a largeK kernel first that an H100 runs 2x slower than the
  // split-K kernel cuBLAS's own gemm picks (52.5 against 23.4 us for
  // 128x768x3072). Timed with the heuristic's candidates by fastest(); never
  // used untimed.
  static std::vector<cublasLtMatmulHeuristicResult_t> split_k_variants(
      const MatmulPlan::Impl& p,
      cublasLtHandle_t handle,
      const MatmulDesc& d,
      const std::vector<const cublasLtMatmulHeuristicResult_t*>& fits) {
    constexpr size_t kBases = 3;
    const int32_t slices[] = {2, 4, 8};
    const uint32_t schemes[] = {
        CUBLASLT_REDUCTION_SCHEME_INPLACE,
        CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE};
    std::vector<cublasLtMatmulHeuristicResult_t> out;
    std::vector<int> seen_ids; // the first candidate of each algorithm id
    for (size_t i = 0; i < fits.size() && seen_ids.size() < kBases; ++i) {
      int id = -1;
      if (cublasLtMatmulAlgoConfigGetAttribute(
              &fits[i]->algo,
              CUBLASLT_ALGO_CONFIG_ID,
              &id,
              sizeof(id),
              nullptr) != CUBLAS_STATUS_SUCCESS ||
          std::find(seen_ids.begin(), seen_ids.end(), id) != seen_ids.end())
        continue;
      seen_ids.push_back(id);
      for (int32_t split : slices) {
        if (d.k < 64 * split)
          continue; // slices too thin to pay for the reduction
        for (uint32_t scheme : schemes) {
          cublasLtMatmulAlgo_t algo = fits[i]->algo;
          if (cublasLtMatmulAlgoConfigSetAttribute(
                  &algo,
                  CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                  &split,
                  sizeof(split)) != CUBLAS_STATUS_SUCCESS ||
              cublasLtMatmulAlgoConfigSetAttribute(
                  &algo,
                  CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                  &scheme,
                  sizeof(scheme)) != CUBLAS_STATUS_SUCCESS)
            continue;
          cublasLtMatmulHeuristicResult_t r = {};
          if (cublasLtMatmulAlgoCheck(
                  handle, p.op, p.lt_a, p.lt_b, p.lt_c, p.lt_d, &algo, &r) !=
                  CUBLAS_STATUS_SUCCESS ||
              r.state != CUBLAS_STATUS_SUCCESS ||
              r.workspaceSize > d.workspace_limit)
            continue;
          r.algo = algo;
          out.push_back(r);
        }
      }
    }
    return out;
  }

  static void use(
      MatmulPlan& plan,
      const cublasLtMatmulHeuristicResult_t& result) {
    plan.impl_->algo = result.algo;
    plan.workspace_bytes_ = result.workspaceSize;
    int id = -1;
    plan.algo_id_ = cublasLtMatmulAlgoConfigGetAttribute(
                        &plan.impl_->algo,
                        CUBLASLT_ALGO_CONFIG_ID,
                        &id,
                        sizeof(id),
                        nullptr) == CUBLAS_STATUS_SUCCESS
        ? id
        : -1;
  }

  // Index of the candidate that runs the plan's product fastest on `stream`
  // (one warm-up, then kTuneRuns runs, each between its own CUDA events and
  // after a write of twice the L2 cache's bytes, on scratch operands from
  // PyTorch's caching allocator filled with a constant: no random number is
  // drawn). The L2 is flushed before each run because in a model each weight
  // is read once per call, from HBM: timed with operands left in L2 (a
  // 768x768 fp32 weight is 2.4 MB of the H100's 50 MB), small-M products
  // favour kernels that lose in the model (BERT b1 on an H100: 32x32-tile
  // split-K kernels chosen L2-hot ran 17-20 us per product in the graph
  // where cuBLAS's 64x64 ran 12-16 us). Triton's do_bench flushes the same
  // way. 0 (the heuristic's first choice) when the
  // operands would need more than kTuneBytes or anything fails. Tunings
  // are serialised so that plans built on several threads do not time each
  // other's kernels.
  // With `gemm` (a cuBLAS handle), cuBLAS's gemm is candidate fits.size().
  static size_t fastest(
      MatmulPlan& plan,
      const std::vector<const cublasLtMatmulHeuristicResult_t*>& fits,
      cublasLtHandle_t handle,
      cudaStream_t stream,
      cublasHandle_t gemm) {
    constexpr int kTuneRuns = 5;
    constexpr size_t kTuneBytes = size_t(256) << 20;
    const MatmulDesc& d = plan.desc();
    const size_t elem = d.dtype == DType::kFloat32 ? 4 : 2;
    auto extent = [&](int64_t rows, int64_t cols, int64_t ld, int64_t bs) {
      int64_t n = (rows - 1) * ld + cols + (d.batch - 1) * bs;
      return (static_cast<size_t>(n) * elem + 255) / 256 * 256;
    };
    const size_t bytes_a = d.trans_a ? extent(d.k, d.m, d.lda, d.stride_a)
                                     : extent(d.m, d.k, d.lda, d.stride_a);
    const size_t bytes_b = d.trans_b ? extent(d.n, d.k, d.ldb, d.stride_b)
                                     : extent(d.k, d.n, d.ldb, d.stride_b);
    const size_t bytes_d = extent(d.m, d.n, d.ldd, d.stride_d);
    const size_t bytes_c = d.has_c ? extent(d.m, d.n, d.ldc, d.stride_c) : 0;
    const size_t bytes_bias =
        has_bias(d.epilogue) ? (d.n * elem + 255) / 256 * 256 : 0;
    const size_t bytes_ones =
        gemm && bytes_bias ? (d.m * elem + 255) / 256 * 256 : 0;
    size_t ws = 0;
    for (const auto* r : fits)
      ws = std::max(ws, r->workspaceSize);
    const size_t total =
        bytes_a + bytes_b + bytes_d + bytes_c + bytes_bias + bytes_ones + ws;
    if (total > kTuneBytes)
      return 0;

    static std::mutex tune_mutex;
    std::lock_guard<std::mutex> lock(tune_mutex);
    namespace alloc = c10::cuda::CUDACachingAllocator;
    char* base = nullptr;
    char* flush = nullptr;
    size_t flush_bytes = 0;
    std::vector<cudaEvent_t> events;
    size_t best = 0;
    try {
      base = static_cast<char*>(alloc::raw_alloc_with_stream(total, stream));
      int device = 0, l2 = 0;
      if (cudaGetDevice(&device) == cudaSuccess &&
          cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device) ==
              cudaSuccess &&
          l2 > 0) {
        flush_bytes = 2 * static_cast<size_t>(l2);
        flush = static_cast<char*>(
            alloc::raw_alloc_with_stream(flush_bytes, stream));
      }
      cudaGetLastError(); // an attribute query failure only skips flushing
      if (cudaMemsetAsync(base, 0x3C, total, stream) != cudaSuccess)
        throw std::runtime_error("cudaMemsetAsync");
      const char* a = base;
      const char* b = a + bytes_a;
      char* out = const_cast<char*>(b + bytes_b);
      const char* c = d.has_c ? out + bytes_d : nullptr;
      const char* bias =
          bytes_bias ? out + bytes_d + bytes_c : static_cast<char*>(nullptr);
      char* ones = out + bytes_d + bytes_c + bytes_bias;
      void* workspace = ws ? ones + bytes_ones : nullptr;
      const size_t count = fits.size() + (gemm ? 1 : 0);
      std::vector<uint8_t> host_ones;
      if (bytes_ones) {
        host_ones = ones_bytes(d.dtype, d.m);
        if (cudaMemcpyAsync(
                ones,
                host_ones.data(),
                host_ones.size(),
                cudaMemcpyHostToDevice,
                stream) != cudaSuccess)
          throw std::runtime_error("cudaMemcpyAsync");
      }
      std::vector<bool> ran(count, false);
      events.assign(2 * count * kTuneRuns, nullptr);
      for (cudaEvent_t& e : events) {
        if (cudaEventCreate(&e) != cudaSuccess)
          throw std::runtime_error("cudaEventCreate");
      }
      for (size_t i = 0; i < count; ++i) {
        auto once = [&] {
          if (i == fits.size())
            run_gemm(d, gemm, a, b, c, bias, ones, out, stream);
          else
            plan.run(handle, a, b, c, bias, out, workspace, ws, stream);
        };
        if (i < fits.size())
          use(plan, *fits[i]);
        try {
          once();
          for (int r = 0; r < kTuneRuns; ++r) {
            if (flush &&
                cudaMemsetAsync(flush, r & 0xff, flush_bytes, stream) !=
                    cudaSuccess)
              throw std::runtime_error("cudaMemsetAsync");
            cudaEventRecord(events[2 * (i * kTuneRuns + r)], stream);
            once();
            cudaEventRecord(events[2 * (i * kTuneRuns + r) + 1], stream);
          }
          ran[i] = true;
        } catch (const c10::Error&) {
          // This algorithm does not run here: not a candidate.
        }
      }
      if (cudaStreamSynchronize(stream) != cudaSuccess)
        throw std::runtime_error("cudaStreamSynchronize");
      float best_ms = 0;
      const bool verbose = tuning_verbose();
      for (size_t i = 0; i < count; ++i) {
        float ms = 0;
        bool timed = ran[i];
        for (int r = 0; timed && r < kTuneRuns; ++r) {
          float run_ms = 0;
          timed = cudaEventElapsedTime(
                      &run_ms,
                      events[2 * (i * kTuneRuns + r)],
                      events[2 * (i * kTuneRuns + r) + 1]) == cudaSuccess;
          ms += run_ms;
        }
        if (verbose && i == fits.size()) {
          std::fprintf(
              stderr,
              "torch_plugin cublaslt tuning: %s cublas_gemm candidate %zu: "
              "%s\n",
              d.str().c_str(),
              i,
              timed ? std::to_string(ms / kTuneRuns).c_str() : "did not run");
        } else if (verbose) {
          use(plan, *fits[i]);
          int32_t split = 1;
          cublasLtMatmulAlgoConfigGetAttribute(
              &fits[i]->algo,
              CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
              &split,
              sizeof(split),
              nullptr);
          std::fprintf(
              stderr,
              "torch_plugin cublaslt tuning: %s split-k %d candidate %zu: "
              "%s\n",
              plan.describe().c_str(),
              static_cast<int>(split),
              i,
              timed ? std::to_string(ms / kTuneRuns).c_str() : "did not run");
        }
        if (timed && (best_ms == 0 || ms < best_ms)) {
          best_ms = ms;
          best = i;
        }
      }
    } catch (const std::exception&) {
      cudaGetLastError(); // clear a sticky launch error; keep the heuristic's
      best = 0;
    }
    for (cudaEvent_t e : events) {
      if (e)
        cudaEventDestroy(e);
    }
    if (base)
      alloc::raw_delete(base);
    if (flush)
      alloc::raw_delete(flush);
    return best;
  }

  template <typename T>
  static void set(
      cublasLtMatmulDesc_t op,
      cublasLtMatmulDescAttributes_t attr,
      const T& v,
      const MatmulDesc& d) {
    check(
        cublasLtMatmulDescSetAttribute(op, attr, &v, sizeof(v)),
        "cublasLtMatmulDescSetAttribute",
        d);
  }
  template <typename T>
  static void set_pref(
      cublasLtMatmulPreference_t pref,
      cublasLtMatmulPreferenceAttributes_t attr,
      const T& v,
      const MatmulDesc& d) {
    check(
        cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v)),
        "cublasLtMatmulPreferenceSetAttribute",
        d);
  }
};

MatmulPlan::MatmulPlan(const MatmulDesc& desc)
    : desc_(desc), impl_(std::make_unique<Impl>()) {}

MatmulPlan::~MatmulPlan() = default;

std::shared_ptr<const MatmulPlan> MatmulPlan::get(
    const MatmulDesc& desc,
    cublasLtHandle_t handle,
    std::optional<cudaStream_t> tune_stream,
    cublasHandle_t gemm_handle) {
  PlanCache& cache = plan_cache();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.plans.find(desc);
    if (it != cache.plans.end())
      return it->second;
  }
  // Built outside the lock: heuristics of different shapes run in parallel
  // (the executor builds its library steps on several threads).
  std::shared_ptr<const MatmulPlan> plan =
      PlanBuilder::build(desc, handle, tune_stream, gemm_handle);
  std::lock_guard<std::mutex> lock(cache.mutex);
  return cache.plans.emplace(desc, std::move(plan)).first->second;
}

void MatmulPlan::run(
    cublasLtHandle_t handle,
    const void* a,
    const void* b,
    const void* c,
    const void* bias,
    void* d,
    void* workspace,
    size_t workspace_size,
    cudaStream_t stream,
    cublasHandle_t gemm_handle) const {
  TORCH_CHECK(
      (c != nullptr) == desc_.has_c &&
          (bias != nullptr) == has_bias(desc_.epilogue),
      "cuBLASLt: the C and bias pointers do not match the plan (",
      desc_.str(),
      ")");
  TORCH_CHECK(
      workspace_size >= workspace_bytes_ &&
          (workspace != nullptr || workspace_bytes_ == 0),
      "cuBLASLt: the plan needs ",
      workspace_bytes_,
      " bytes of workspace, got ",
      workspace_size,
      " (",
      desc_.str(),
      ")");
  if (gemm_) {
    TORCH_CHECK(
        gemm_handle != nullptr,
        "cuBLAS: the plan uses cuBLAS's gemm and needs a cuBLAS handle (",
        desc_.str(),
        ")");
    run_gemm(desc_, gemm_handle, a, b, c, bias, ones_, d, stream);
    return;
  }
  const float alpha = 1.0f, beta = desc_.has_c ? 1.0f : 0.0f;
  auto matmul = [&] {
    check(
        cublasLtMatmul(
            handle,
            impl_->op,
            &alpha,
            b,
            impl_->lt_a,
            a,
            impl_->lt_b,
            &beta,
            desc_.has_c ? c : d,
            impl_->lt_c,
            d,
            impl_->lt_d,
            &impl_->algo,
            workspace,
            workspace_size,
            stream),
        "cublasLtMatmul",
        desc_);
  };
  if (!bias) {
    matmul();
    return;
  }
  // The bias pointer is an attribute of the shared descriptor, read when
  // cublasLtMatmul enqueues the kernel: set and enqueue under the lock.
  std::lock_guard<std::mutex> lock(mutex_);
  PlanBuilder::set(impl_->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, desc_);
  matmul();
}

std::string MatmulPlan::describe() const {
  std::ostringstream s;
  s << "m=" << desc_.m << " n=" << desc_.n << " k=" << desc_.k;
  if (desc_.batch > 1)
    s << " batch=" << desc_.batch;
  s << " " << to_string(desc_.dtype);
  if (desc_.dtype == DType::kFloat32 && desc_.allow_tf32)
    s << "(tf32)";
  s << " epilogue=" << to_string(desc_.epilogue) << (desc_.has_c ? "+C" : "")
    << " algo=";
  if (gemm_)
    s << "cublas_gemm";
  else
    s << algo_id_ << " ws=" << workspace_bytes_;
  return s.str();
}

int alignment_of(const void* p) {
  auto addr = reinterpret_cast<uintptr_t>(p);
  int align = 1;
  while (align < 256 && addr % (2 * static_cast<uintptr_t>(align)) == 0)
    align *= 2;
  return align;
}

} // namespace torch_plugin::libs::cublaslt
