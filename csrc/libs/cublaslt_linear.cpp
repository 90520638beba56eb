// cublaslt_linear.cpp: the at::Tensor glue of libs/cublaslt.h — layouts of
// 2-d tensors for cuBLASLt, the descriptor of the linear product
// y = act(x @ w^T + bias + c) with torch's current settings, and its run on
// torch's cuBLASLt handle, workspace and current stream (products whose output
// rows are misaligned: cublaslt_padded.cpp).
//
// The handle, workspace and settings are the ones PyTorch's own cuBLASLt
// calls use (ATen/cuda/CUDAContextLight.h: getCurrentCUDABlasLtHandle,
// getCUDABlasLtWorkspace/Size; ATen/Context.h: allowTF32CuBLAS,
// allowFP16/BF16ReductionCuBLAS).
#include "libs/cublaslt_detail.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <algorithm>

namespace torch_plugin::libs::cublaslt {

int64_t element_size(DType d) {
  return d == DType::kFloat32 ? 4 : 2;
}

std::optional<DType> dtype_of(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
      return DType::kFloat32;
    case c10::ScalarType::BFloat16:
      return DType::kBFloat16;
    case c10::ScalarType::Half:
      return DType::kFloat16;
    default:
      return std::nullopt;
  }
}

std::optional<MatrixLayout> matrix_layout(
    at::IntArrayRef sizes,
    at::IntArrayRef strides) {
  if (sizes.size() != 2 || strides.size() != 2)
    return std::nullopt;
  const int64_t rows = sizes[0], cols = sizes[1];
  const int64_t sr = strides[0], sc = strides[1];
  // Row-major: element (i, j) at i * ld + j.
  if ((cols == 1 || sc == 1) && (rows == 1 || sr >= std::max<int64_t>(cols, 1)))
    return MatrixLayout{false, rows == 1 ? std::max<int64_t>(cols, 1) : sr};
  // Column-major: element (i, j) at i + j * ld.
  if ((rows == 1 || sr == 1) && (cols == 1 || sc >= std::max<int64_t>(rows, 1)))
    return MatrixLayout{true, cols == 1 ? std::max<int64_t>(rows, 1) : sc};
  return std::nullopt;
}

std::optional<std::vector<int64_t>> flatten_to_2d_strides(
    at::IntArrayRef sizes,
    at::IntArrayRef strides) {
  const size_t n = sizes.size();
  if (n == 0 || strides.size() != n)
    return std::nullopt;
  const int64_t k = sizes[n - 1];
  int64_t stride_m = -1, expected = -1;
  for (size_t i = n - 1; i-- > 0;) {
    if (sizes[i] == 1)
      continue;
    if (stride_m < 0) {
      stride_m = strides[i];
    } else if (strides[i] != expected) {
      return std::nullopt;
    }
    expected = strides[i] * sizes[i];
  }
  if (stride_m < 0) // one row
    stride_m = std::max<int64_t>(k, 1);
  return std::vector<int64_t>{stride_m, strides[n - 1]};
}

std::optional<MatmulDesc> linear_desc(
    at::IntArrayRef x_sizes,
    at::IntArrayRef x_strides,
    at::IntArrayRef w_sizes,
    at::IntArrayRef w_strides,
    int64_t ldd,
    std::optional<int64_t> ldc,
    c10::ScalarType dtype,
    Epilogue epilogue,
    int device) {
  std::optional<DType> dt = dtype_of(dtype);
  if (!dt || x_sizes.size() != 2 || w_sizes.size() != 2 ||
      x_sizes[1] != w_sizes[1])
    return std::nullopt;
  const int64_t m = x_sizes[0], k = x_sizes[1], n = w_sizes[0];
  if (m <= 0 || n <= 0 || k <= 0)
    return std::nullopt;
  std::optional<MatrixLayout> x = matrix_layout(x_sizes, x_strides);
  std::optional<MatrixLayout> w = matrix_layout(w_sizes, w_strides);
  if (!x || !w)
    return std::nullopt;
  MatmulDesc d;
  d.m = m;
  d.n = n;
  d.k = k;
  d.dtype = *dt;
  d.trans_a = x->transposed;
  d.lda = x->ld;
  // B = w^T [k, n]: w row-major [n, k] is B stored transposed; w
  // column-major is B stored row-major [k, n].
  d.trans_b = !w->transposed;
  d.ldb = w->ld;
  d.ldd = m == 1 ? n : ldd;
  if (ldc) {
    d.has_c = true;
    d.ldc = m == 1 ? n : *ldc;
  }
  d.epilogue = epilogue;
  // torch's settings at the time of the call (part of the cache key: a
  // change of torch.backends.cuda.matmul.allow_tf32 or of the
  // reduced-precision-reduction flags after compilation gives another
  // descriptor, hence another plan, at the next run).
  at::Context& ctx = at::globalContext();
  if (d.dtype == DType::kFloat32)
    d.allow_tf32 = ctx.allowTF32CuBLAS();
  else if (d.dtype == DType::kFloat16)
    d.reduced_precision_reduction = ctx.allowFP16ReductionCuBLAS() ==
        at::CuBLASReductionOption::AllowReducedPrecisionWithSplitK;
  else
    d.reduced_precision_reduction = ctx.allowBF16ReductionCuBLAS() ==
        at::CuBLASReductionOption::AllowReducedPrecisionWithSplitK;
  d.device = device;
  d.workspace_limit = at::cuda::getCUDABlasLtWorkspaceSize();
  return d;
}

std::shared_ptr<const MatmulPlan> plan_on_torch_handle(
    const MatmulDesc& desc,
    const void* b,
    std::vector<std::pair<const void*, size_t>> flush_from) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(desc.device));
  // The legacy default stream's handle is null: a stream is told apart from
  // "no tuning" by the optional, not by the handle.
  std::optional<cudaStream_t> tune = at::cuda::getCurrentCUDAStream().stream();
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(*tune, &capturing) != cudaSuccess ||
      capturing != cudaStreamCaptureStatusNone) {
    cudaGetLastError();
    tune = std::nullopt; // no timing inside a capture: the heuristic's choice
  }
  // cuBLAS's gemm is a timed candidate only (torch's handle: its workspace is
  // set for the current stream).
  cublasHandle_t gemm = tune ? at::cuda::getCurrentCUDABlasHandle() : nullptr;
  // Tuning uses the workspace the plan runs with (torch's, of this stream),
  // the weight itself when it has the descriptor's alignment, and reads the
  // caller's memory to flush the L2: its scratch holds only what a run holds.
  TuneResources resources;
  if (tune) {
    resources.workspace = at::cuda::getCUDABlasLtWorkspace();
    resources.workspace_bytes = at::cuda::getCUDABlasLtWorkspaceSize();
    if (b && alignment_of(b) >= desc.align_b)
      resources.b = b;
    resources.flush_from = std::move(flush_from);
  }
  return MatmulPlan::get(
      desc,
      at::cuda::getCurrentCUDABlasLtHandle(),
      tune,
      gemm,
      tune ? &resources : nullptr);
}

bool run_linear(
    const at::Tensor& x2d,
    const at::Tensor& w_in,
    const at::Tensor& bias_in,
    const at::Tensor& c2d_in,
    Epilogue epilogue,
    const at::Tensor& y2d,
    const MatmulPlan* hint) {
  const c10::ScalarType dtype = y2d.scalar_type();
  const c10::Device device = y2d.device();
  auto same = [&](const at::Tensor& t) {
    return !t.defined() || (t.scalar_type() == dtype && t.device() == device);
  };
  if (!device.is_cuda() || !same(x2d) || !same(w_in) || !same(bias_in) ||
      !same(c2d_in) || x2d.dim() != 2 || w_in.dim() != 2 || y2d.dim() != 2)
    return false;
  const int64_t m = x2d.size(0), k = x2d.size(1), n = w_in.size(0);
  TORCH_CHECK(
      w_in.size(1) == k && y2d.size(0) == m && y2d.size(1) == n,
      "cuBLASLt linear: shapes do not match: x ",
      x2d.sizes(),
      ", w ",
      w_in.sizes(),
      ", y ",
      y2d.sizes());
  TORCH_CHECK(
      has_bias(epilogue) == bias_in.defined(),
      "cuBLASLt linear: epilogue ",
      to_string(epilogue),
      " and the bias do not match");
  if (m == 0 || n == 0)
    return true; // nothing to compute
  if (k == 0 || !dtype_of(dtype))
    return false;
  TORCH_CHECK(
      y2d.stride(1) == 1 || n == 1,
      "cuBLASLt linear: the output must be row-major, has strides ",
      y2d.strides());
  c10::cuda::CUDAGuard guard(device);

  at::Tensor x =
      matrix_layout(x2d.sizes(), x2d.strides()) ? x2d : x2d.contiguous();
  at::Tensor w =
      matrix_layout(w_in.sizes(), w_in.strides()) ? w_in : w_in.contiguous();
  at::Tensor bias = bias_in;
  if (bias.defined()) {
    TORCH_CHECK(
        bias.dim() == 1 && bias.size(0) == n,
        "cuBLASLt linear: bias must be [",
        n,
        "], got ",
        bias.sizes());
    if (!bias.is_contiguous() || alignment_of(bias.data_ptr()) < 16)
      bias = bias.clone(at::MemoryFormat::Contiguous);
  }
  at::Tensor c = c2d_in;
  std::optional<int64_t> ldc;
  if (c.defined()) {
    TORCH_CHECK(
        c.sizes() == y2d.sizes(),
        "cuBLASLt linear: C must be [",
        m,
        ", ",
        n,
        "], got ",
        c.sizes());
    std::optional<MatrixLayout> lc = matrix_layout(c.sizes(), c.strides());
    if (!lc || lc->transposed) {
      c = c.contiguous();
      lc = matrix_layout(c.sizes(), c.strides());
    }
    ldc = lc->ld;
  }
  const int64_t ldd = m == 1 ? n : y2d.stride(0);
  std::optional<MatmulDesc> desc = linear_desc(
      x.sizes(),
      x.strides(),
      w.sizes(),
      w.strides(),
      ldd,
      ldc,
      dtype,
      epilogue,
      device.index());
  if (!desc)
    return false;
  desc->align_a = alignment_of(x.data_ptr());
  desc->align_b = alignment_of(w.data_ptr());
  desc->align_c = c.defined() ? alignment_of(c.data_ptr()) : 256;
  desc->align_d = alignment_of(y2d.data_ptr());

  if (std::optional<PaddedSplit> split = padded_split(*desc))
    return run_split(*desc, *split, x, w, c, bias, y2d, hint);
  if (std::optional<MatmulDesc> chunk = padded_chunk_desc(*desc))
    return run_padded(*desc, *chunk, x, w, c, bias, y2d, hint);

  std::shared_ptr<const MatmulPlan> found;
  const MatmulPlan* plan = hint;
  if (!plan || plan->desc() != *desc) {
    found = plan_on_torch_handle(*desc, w.const_data_ptr());
    plan = found.get();
  }
  if (!plan)
    return false;
  plan->run(
      at::cuda::getCurrentCUDABlasLtHandle(),
      x.data_ptr(),
      w.data_ptr(),
      c.defined() ? c.data_ptr() : nullptr,
      bias.defined() ? bias.data_ptr() : nullptr,
      y2d.data_ptr(),
      at::cuda::getCUDABlasLtWorkspace(),
      at::cuda::getCUDABlasLtWorkspaceSize(),
      at::cuda::getCurrentCUDAStream(device.index()).stream(),
      plan->uses_gemm() ? at::cuda::getCurrentCUDABlasHandle() : nullptr);
  return true;
}

std::optional<Epilogue> epilogue_for(std::string_view activation, bool bias) {
  if (activation.empty())
    return bias ? Epilogue::kBias : Epilogue::kNone;
  if (activation == "relu")
    return bias ? Epilogue::kReluBias : Epilogue::kRelu;
  if (activation == "gelu_tanh") // CUBLASLT_EPILOGUE_GELU is the tanh form
    return bias ? Epilogue::kGeluBias : Epilogue::kGelu;
  return std::nullopt;
}

} // namespace torch_plugin::libs::cublaslt
