// cublaslt_linear.cpp: the at::Tensor glue of libs/cublaslt.h — layouts of
// 2-d tensors for cuBLASLt, the descriptor of the linear product
// y = act(x @ w^T + bias + c) with torch's current settings, and its run on
// torch's cuBLASLt handle, workspace and current stream.
//
// The handle, workspace and settings are the ones PyTorch's own cuBLASLt
// calls use (ATen/cuda/CUDAContextLight.h: getCurrentCUDABlasLtHandle,
// getCUDABlasLtWorkspace/Size; ATen/Context.h: allowTF32CuBLAS,
// allowFP16/BF16ReductionCuBLAS).
#include "libs/cublaslt.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>

namespace torch_plugin::libs::cublaslt {

namespace {

std::atomic<int64_t> padded_scratch_limit{int64_t{64} << 20};
std::atomic<int64_t> padded_count{0};
std::atomic<int64_t> split_count{0};

int64_t gcd(int64_t a, int64_t b) {
  while (b != 0) {
    const int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

int offset_alignment(int base, int64_t bytes) {
  return std::min(
      base,
      alignment_of(reinterpret_cast<void*>(static_cast<uintptr_t>(bytes))));
}

bool row_aligned(int64_t ld, int64_t elem) {
  return (ld * elem) % 16 == 0;
}

} // namespace

int64_t element_size(DType d) {
  return d == DType::kFloat32 ? 4 : 2;
}

int64_t padded_scratch_bytes() {
  return padded_scratch_limit.load();
}

void set_padded_scratch_bytes(int64_t bytes) {
  padded_scratch_limit.store(std::max<int64_t>(bytes, 0));
}

int64_t padded_products() {
  return padded_count.load();
}

std::optional<MatmulDesc> padded_chunk_desc(const MatmulDesc& d) {
  const int64_t elem = element_size(d.dtype);
  const int64_t limit = padded_scratch_bytes();
  if (limit <= 0 || d.batch != 1 || d.m <= 1 || d.n * elem < 16 ||
      row_aligned(d.ldd, elem) || !row_aligned(d.lda, elem) ||
      !row_aligned(d.ldb, elem) || d.align_a < 16 || d.align_b < 16)
    return std::nullopt;
  MatmulDesc chunk = d;
  const int64_t per_element = 16 / elem;
  chunk.ldd = (d.n + per_element - 1) / per_element * per_element;
  chunk.n = d.n / per_element * per_element; // the tail is padded_tail_desc's
  if (d.has_c)
    chunk.ldc = chunk.ldd;
  chunk.align_c = chunk.align_d = 256;
  // Rows per chunk: what the scratch limit holds, a power of two when more
  // than one chunk is needed (equal chunks: one plan).
  const int64_t fit = std::max<int64_t>(limit / (chunk.ldd * elem), 1);
  int64_t rows = 1;
  while (rows * 2 <= fit)
    rows *= 2;
  chunk.m = fit >= d.m ? d.m : rows;
  return chunk;
}

int64_t split_products() {
  return split_count.load();
}

std::optional<PaddedSplit> padded_split(const MatmulDesc& d) {
  if (!padded_chunk_desc(d) || d.trans_a || !d.trans_b)
    return std::nullopt;
  const int64_t elem = element_size(d.dtype);
  const int64_t per = 16 / elem; // elements in 16 bytes
  PaddedSplit split;
  split.period = per / gcd(d.ldd % per, per);
  const int64_t p = split.period;
  int64_t head_cols = 0;
  for (int64_t q = 0; q < p && q < d.m; ++q) {
    PaddedSplit::Part part;
    part.row0 = q;
    part.col0 = (per - (q * d.ldd) % per) % per;
    if (part.col0 >= d.n)
      return std::nullopt; // n under 16 bytes (padded_chunk_desc bars it)
    MatmulDesc& m = part.desc;
    m = d;
    m.m = (d.m - q + p - 1) / p;
    m.n = d.n - part.col0;
    m.lda = d.lda * p;
    m.ldd = d.ldd * p;
    m.align_a = offset_alignment(d.align_a, q * d.lda * elem);
    m.align_b = offset_alignment(d.align_b, part.col0 * d.ldb * elem);
    m.align_d = offset_alignment(d.align_d, (q * d.ldd + part.col0) * elem);
    if (d.has_c) {
      m.ldc = d.ldc * p;
      m.align_c = offset_alignment(d.align_c, (q * d.ldc + part.col0) * elem);
    }
    if (m.align_a < 16 || m.align_b < 16 || m.align_d < 16 ||
        (d.has_c && m.align_c < 16))
      return std::nullopt;
    head_cols = std::max(head_cols, part.col0);
    split.parts.push_back(part);
  }
  split.head = d;
  split.head.n = head_cols;
  split.head.ldd = per;
  split.head.align_d = 256;
  return split;
}

MatmulDesc padded_tail_desc(
    const MatmulDesc& full,
    const MatmulDesc& chunk,
    int64_t rows) {
  const int64_t elem = element_size(full.dtype);
  MatmulDesc tail = chunk;
  tail.m = rows;
  tail.n = full.n - chunk.n;
  // B's first tail row (column when B is stored row-major) and the scratch's
  // first tail column: chunk.n elements on, a multiple of 16 bytes.
  const int64_t offset = chunk.n * elem;
  tail.align_b = std::min(
      full.align_b,
      alignment_of(reinterpret_cast<void*>(
          static_cast<uintptr_t>((full.trans_b ? full.ldb : 1) * offset))));
  tail.align_c = tail.align_d = std::min(
      chunk.align_d,
      alignment_of(reinterpret_cast<void*>(static_cast<uintptr_t>(offset))));
  return tail;
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

namespace {

void copy_rows(
    void* dst,
    int64_t dst_ld,
    const void* src,
    int64_t src_ld,
    int64_t cols,
    int64_t rows,
    int64_t elem,
    cudaStream_t stream) {
  TORCH_CHECK(
      cudaMemcpy2DAsync(
          dst,
          dst_ld * elem,
          src,
          src_ld * elem,
          cols * elem,
          rows,
          cudaMemcpyDeviceToDevice,
          stream) == cudaSuccess,
      "cuBLASLt linear (padded): cudaMemcpy2DAsync failed: ",
      cudaGetErrorString(cudaGetLastError()));
}

// Rows [row0, row0 + rows) of y2d from the first rows of the scratch (its
// first n columns). fp32 through ATen's copy kernel, 2-byte types through
// cudaMemcpy2DAsync: the faster of the two for each on an H100 (GPT-2's
// logits, 4096 x 50257: bf16 0.40 against 0.50 ms, fp32 0.69 against 0.99
// ms).
void copy_out(
    const at::Tensor& y2d,
    int64_t row0,
    int64_t rows,
    const at::Tensor& scratch,
    int64_t n,
    cudaStream_t stream) {
  const int64_t elem = y2d.element_size();
  if (elem == 4) {
    y2d.narrow(0, row0, rows).copy_(scratch.narrow(0, 0, rows).narrow(1, 0, n));
    return;
  }
  copy_rows(
      static_cast<char*>(y2d.data_ptr()) + row0 * y2d.stride(0) * elem,
      y2d.stride(0),
      scratch.const_data_ptr(),
      scratch.stride(0),
      n,
      rows,
      elem,
      stream);
}

// The padded product of padded_chunk_desc (see cublaslt.h): chunks of
// chunk.m rows of x (the last one shorter), each computed into one scratch of
// leading dimension chunk.ldd as its aligned columns [0, chunk.n) and its
// tail [chunk.n, n) (padded_tail_desc), then copied into y2d's rows. Every
// plan is found before anything is written: false (nothing written) when
// cuBLASLt has none for one of them.
bool run_padded(
    const MatmulDesc& full,
    const MatmulDesc& chunk,
    const at::Tensor& x,
    const at::Tensor& w,
    const at::Tensor& c,
    const at::Tensor& bias,
    const at::Tensor& y2d,
    const MatmulPlan* hint) {
  const int64_t elem = element_size(full.dtype);
  at::Tensor scratch = at::empty({chunk.m, chunk.ldd}, y2d.options());
  struct Piece {
    int64_t row0;
    const MatmulPlan* main;
    const MatmulPlan* tail;
  };
  std::vector<Piece> pieces;
  std::vector<std::shared_ptr<const MatmulPlan>> held;
  auto plan_of = [&](const MatmulDesc& d, const void* b) {
    if (hint && hint->desc() == d)
      return hint;
    for (const auto& p : held)
      if (p->desc() == d)
        return p.get();
    held.push_back(plan_on_torch_handle(d, b));
    return held.back().get();
  };
  const char* a0 = static_cast<const char*>(x.const_data_ptr());
  auto a_of = [&](int64_t row0) {
    return a0 + (full.trans_a ? row0 : row0 * full.lda) * elem;
  };
  const int64_t offset = chunk.n * elem; // of the tail's columns
  const char* w0 = static_cast<const char*>(w.const_data_ptr());
  const char* w_tail = w0 + (full.trans_b ? full.ldb : 1) * offset;
  char* s0 = static_cast<char*>(scratch.data_ptr());
  for (int64_t row0 = 0; row0 < full.m; row0 += chunk.m) {
    MatmulDesc d = chunk;
    d.m = std::min(chunk.m, full.m - row0);
    d.align_a = std::min(full.align_a, alignment_of(a_of(row0)));
    d.align_c = d.align_d = alignment_of(s0);
    MatmulDesc t = padded_tail_desc(full, d, d.m);
    const MatmulPlan* main = plan_of(d, w0);
    const MatmulPlan* tail = main ? plan_of(t, w_tail) : nullptr;
    if (!main || !tail)
      return false;
    pieces.push_back({row0, main, tail});
  }
  const cudaStream_t stream =
      at::cuda::getCurrentCUDAStream(y2d.device().index()).stream();
  char* y0 = static_cast<char*>(y2d.data_ptr());
  const char* c0 =
      c.defined() ? static_cast<const char*>(c.const_data_ptr()) : nullptr;
  const char* b0 = bias.defined()
      ? static_cast<const char*>(bias.const_data_ptr())
      : nullptr;
  auto run = [&](const MatmulPlan* p,
                 const char* a,
                 const char* b,
                 const char* bias_ptr,
                 char* d) {
    p->run(
        at::cuda::getCurrentCUDABlasLtHandle(),
        a,
        b,
        c0 ? d : nullptr, // C was copied into the scratch: D = C there
        bias_ptr,
        d,
        at::cuda::getCUDABlasLtWorkspace(),
        at::cuda::getCUDABlasLtWorkspaceSize(),
        stream,
        p->uses_gemm() ? at::cuda::getCurrentCUDABlasHandle() : nullptr);
  };
  for (const Piece& p : pieces) {
    const int64_t rows = p.main->desc().m;
    if (c0)
      copy_rows(
          s0,
          chunk.ldd,
          c0 + p.row0 * full.ldc * elem,
          full.ldc,
          full.n,
          rows,
          elem,
          stream);
    run(p.main, a_of(p.row0), w0, b0, s0);
    run(p.tail, a_of(p.row0), w_tail, b0 ? b0 + offset : nullptr, s0 + offset);
    copy_out(y2d, p.row0, rows, scratch, full.n, stream);
  }
  padded_count.fetch_add(1);
  return true;
}

// The product of padded_split(full) (see cublaslt.h): every plan found
// before anything is written (false, nothing written, when cuBLASLt has none
// for one of them); the head into its scratch, the classes in place, the
// head's columns copied into the output.
bool run_split(
    const MatmulDesc& full,
    const PaddedSplit& split,
    const at::Tensor& x,
    const at::Tensor& w,
    const at::Tensor& c,
    const at::Tensor& bias,
    const at::Tensor& y2d,
    const MatmulPlan* hint) {
  const int64_t elem = element_size(full.dtype);
  std::vector<std::shared_ptr<const MatmulPlan>> held;
  auto plan_of = [&](const MatmulDesc& d, const void* b) -> const MatmulPlan* {
    if (hint && hint->desc() == d)
      return hint;
    for (const auto& p : held)
      if (p->desc() == d)
        return p.get();
    held.push_back(plan_on_torch_handle(d, b));
    return held.back().get();
  };
  const char* a0 = static_cast<const char*>(x.const_data_ptr());
  const char* w0 = static_cast<const char*>(w.const_data_ptr());
  const MatmulPlan* head = plan_of(split.head, w0);
  if (!head)
    return false;
  std::vector<const MatmulPlan*> parts;
  for (const PaddedSplit::Part& part : split.parts) {
    const MatmulPlan* plan =
        plan_of(part.desc, w0 + part.col0 * full.ldb * elem);
    if (!plan)
      return false;
    parts.push_back(plan);
  }
  const int64_t per = 16 / elem;
  // The bias of each class from its first column: where that is not 16
  // bytes on, from a copy whose row s holds bias[s:] (rows 16 bytes apart).
  at::Tensor shifted;
  bool shift = false;
  for (const PaddedSplit::Part& part : split.parts)
    shift = shift || (part.col0 * elem) % 16 != 0;
  const int64_t bias_ld = (full.n + per - 1) / per * per;
  if (bias.defined() && shift) {
    shifted = at::zeros({per, bias_ld}, bias.options());
    const at::Tensor padded = at::cat({bias, at::zeros({per}, bias.options())});
    shifted.narrow(1, 0, full.n)
        .copy_(padded.as_strided({per, full.n}, {1, 1}));
  }
  auto bias_of = [&](int64_t col0) -> const char* {
    if (!bias.defined())
      return nullptr;
    if ((col0 * elem) % 16 == 0)
      return static_cast<const char*>(bias.const_data_ptr()) + col0 * elem;
    return static_cast<const char*>(shifted.const_data_ptr()) +
        col0 * bias_ld * elem;
  };
  const cudaStream_t stream =
      at::cuda::getCurrentCUDAStream(y2d.device().index()).stream();
  auto run = [&](const MatmulPlan* p,
                 const char* a,
                 const char* b,
                 const char* cp,
                 const char* bias_ptr,
                 char* d) {
    p->run(
        at::cuda::getCurrentCUDABlasLtHandle(),
        a,
        b,
        cp,
        bias_ptr,
        d,
        at::cuda::getCUDABlasLtWorkspace(),
        at::cuda::getCUDABlasLtWorkspaceSize(),
        stream,
        p->uses_gemm() ? at::cuda::getCurrentCUDABlasHandle() : nullptr);
  };
  const char* c0 =
      c.defined() ? static_cast<const char*>(c.const_data_ptr()) : nullptr;
  char* y0 = static_cast<char*>(y2d.data_ptr());
  at::Tensor scratch = at::empty({full.m, per}, y2d.options());
  char* s0 = static_cast<char*>(scratch.data_ptr());
  run(head, a0, w0, c0, bias_of(0), s0);
  for (size_t i = 0; i < parts.size(); ++i) {
    const PaddedSplit::Part& part = split.parts[i];
    run(parts[i],
        a0 + part.row0 * full.lda * elem,
        w0 + part.col0 * full.ldb * elem,
        c0 ? c0 + (part.row0 * full.ldc + part.col0) * elem : nullptr,
        bias_of(part.col0),
        y0 + (part.row0 * full.ldd + part.col0) * elem);
  }
  copy_rows(y0, full.ldd, s0, per, split.head.n, full.m, elem, stream);
  split_count.fetch_add(1);
  padded_count.fetch_add(1);
  return true;
}

} // namespace

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
