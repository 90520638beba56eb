// cublaslt.cpp: the cuBLASLt matmul descriptors, the tuning settings, the
// process-wide plan cache and running a plan (see cublaslt.h); building a plan
// is in cublaslt_tuning.cpp, the cuBLAS/cuBLASLt calls below it in
// cublaslt_calls.cpp, the at::Tensor glue in cublaslt_linear.cpp.
//
// Sources: the cuBLASLt API reference (docs.nvidia.com/cuda/cublas,
// "Using the cuBLASLt API": cublasLtMatmul, cublasLtMatmulAlgoGetHeuristic,
// the epilogue and preference attributes) and cublasLt.h of CUDA 13.
// CUBLASLT_EPILOGUE_GELU is the tanh approximation of GELU (PyTorch's
// _addmm_activation relies on this: pytorch/pytorch#104061).
#include "libs/cublaslt_detail.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <unordered_map>

namespace torch_plugin::libs::cublaslt {

namespace {

// The tuning settings (set_tuning): the tuning word and the candidate count.
struct Settings {
  std::mutex mutex;
  std::string tuning = "1";
  int candidates = 8;
};

Settings& settings() {
  static Settings s;
  return s;
}

std::string tuning_setting() {
  Settings& s = settings();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.tuning;
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

void set_tuning(const std::string& tuning, const std::string& candidates) {
  Settings& s = settings();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.tuning = tuning.empty() ? "1" : tuning;
  s.candidates =
      std::clamp(candidates.empty() ? 8 : std::atoi(candidates.c_str()), 1, 64);
}

bool tuning_enabled() {
  return tuning_setting() != "0";
}
bool tuning_verbose() {
  return tuning_setting() == "verbose";
}
bool gemm_forced() {
  return tuning_setting() == "gemm";
}
int heuristic_candidates() {
  Settings& s = settings();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.candidates;
}

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

MatmulPlan::MatmulPlan(const MatmulDesc& desc)
    : desc_(desc), impl_(std::make_unique<Impl>()) {}

MatmulPlan::~MatmulPlan() = default;

std::shared_ptr<const MatmulPlan> MatmulPlan::get(
    const MatmulDesc& desc,
    cublasLtHandle_t handle,
    std::optional<cudaStream_t> tune_stream,
    cublasHandle_t gemm_handle,
    const TuneResources* resources) {
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
      build_plan(desc, handle, tune_stream, gemm_handle, resources);
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
  set_attribute(impl_->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias, desc_);
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
