// cublaslt_padded.cpp: products whose output rows are not 16-byte aligned
// (libs/cublaslt.h: padded_split, padded_chunk_desc): computed in place by
// row classes (run_split), else in padded chunks through a scratch
// (run_padded). run_linear (cublaslt_linear.cpp) picks them.
#include "libs/cublaslt_detail.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>

namespace torch_plugin::libs::cublaslt {

namespace {

std::atomic<int64_t> padded_scratch_limit{int64_t{64} << 20};
std::atomic<int64_t> padded_count{0};
std::atomic<int64_t> split_count{0};
// On by default: on an H200, GPT-2's LM head ([4096, 768] x [768, 50257])
// took 0.70 ms bf16 and 1.11 ms fp32 in place against 0.94 and 2.01 in
// chunks (their copy into the output: 0.37 and 0.63 ms);
// `_C._cuda.cublaslt_padding(in_place=False)` goes back to the chunks.
std::atomic<bool> split_on{true};

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

bool padded_in_place() {
  return split_on.load();
}

void set_padded_in_place(bool on) {
  split_on.store(on);
}

std::optional<PaddedSplit> padded_split(const MatmulDesc& d) {
  const std::optional<MatmulDesc> chunk = padded_chunk_desc(d);
  if (!split_on.load() || !chunk || d.trans_a || !d.trans_b)
    return std::nullopt;
  const int64_t elem = element_size(d.dtype);
  const int64_t per = 16 / elem; // elements in 16 bytes
  PaddedSplit split;
  split.period = per / gcd(d.ldd % per, per);
  const int64_t p = split.period;
  // Each class product reads all of B; the chunks read it once per chunk and
  // then copy the output (read and write). Classes only where their extra
  // reads of B cost no more than that copy: (P - chunks) n k <= 2 m n
  // elements. GPT-2's LM head at batch 32 (4096 rows: 8 or 16 chunks) splits;
  // at batch 1 (128 rows, one chunk) eight classes would read its 77 MB (bf16)
  // of weights eight times where the chunk copies 13 MB of logits twice.
  const int64_t chunks = (d.m + chunk->m - 1) / chunk->m;
  if ((p - chunks) * d.k > 2 * d.m)
    return std::nullopt;
  int64_t head_cols = 0, tail_col0 = d.n;
  for (int64_t q = 0; q < p && q < d.m; ++q) {
    PaddedSplit::Part part;
    part.row0 = q;
    part.col0 = (per - (q * d.ldd) % per) % per;
    if (part.col0 >= d.n)
      return std::nullopt; // n under 16 bytes (padded_chunk_desc bars it)
    MatmulDesc& m = part.desc;
    m = d;
    m.m = (d.m - q + p - 1) / p;
    // Whole 16-byte vectors of columns: cuBLASLt's aligned kernels want the
    // contiguous extent a multiple of their vector too (an H100 gave the
    // classes of GPT-2's logits, n - c_q columns, cutlass align1 and align2
    // kernels: 2.2 ms against 0.43 for the aligned product). The last
    // columns are the tail's.
    m.n = (d.n - part.col0) / per * per;
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
    tail_col0 = std::min(tail_col0, part.col0 + m.n);
    if (m.n > 0)
      split.parts.push_back(part);
  }
  // The head and the tail: one scratch of m rows x 32 bytes, the head's
  // columns in its first 16 bytes, the tail's in its last.
  split.head = d;
  split.head.n = head_cols;
  split.head.ldd = 2 * per;
  split.head.align_d = 256;
  split.tail_col0 = tail_col0;
  split.tail = d;
  split.tail.n = d.n - tail_col0;
  split.tail.ldd = 2 * per;
  split.tail.align_d = 16;
  split.tail.align_b = offset_alignment(d.align_b, tail_col0 * d.ldb * elem);
  if (d.has_c)
    split.tail.align_c = offset_alignment(d.align_c, tail_col0 * elem);
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

} // namespace

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
// for one of them); the head and the tail into their scratch, the classes in
// place, the head's and the tail's columns copied into the output.
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
  const char* w_tail = w0 + split.tail_col0 * full.ldb * elem;
  const MatmulPlan* tail =
      split.tail.n > 0 ? plan_of(split.tail, w_tail) : nullptr;
  if (!head || (split.tail.n > 0 && !tail))
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
  shift = shift || (split.tail.n > 0 && (split.tail_col0 * elem) % 16 != 0);
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
    // bias[col0:] is row col0 % per of the copy, from column col0 - that.
    const int64_t s = col0 % per;
    return static_cast<const char*>(shifted.const_data_ptr()) +
        (s * bias_ld + col0 - s) * elem;
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
  at::Tensor scratch = at::empty({full.m, 2 * per}, y2d.options());
  char* s0 = static_cast<char*>(scratch.data_ptr());
  char* s_tail = s0 + per * elem;
  // The head and the tail read C before any class product writes D (which
  // may be C itself).
  run(head, a0, w0, c0, bias_of(0), s0);
  if (tail)
    run(tail,
        a0,
        w_tail,
        c0 ? c0 + split.tail_col0 * elem : nullptr,
        bias_of(split.tail_col0),
        s_tail);
  for (size_t i = 0; i < parts.size(); ++i) {
    const PaddedSplit::Part& part = split.parts[i];
    run(parts[i],
        a0 + part.row0 * full.lda * elem,
        w0 + part.col0 * full.ldb * elem,
        c0 ? c0 + (part.row0 * full.ldc + part.col0) * elem : nullptr,
        bias_of(part.col0),
        y0 + (part.row0 * full.ldd + part.col0) * elem);
  }
  copy_rows(y0, full.ldd, s0, 2 * per, split.head.n, full.m, elem, stream);
  if (tail)
    copy_rows(
        y0 + split.tail_col0 * elem,
        full.ldd,
        s_tail,
        2 * per,
        split.tail.n,
        full.m,
        elem,
        stream);
  split_count.fetch_add(1);
  padded_count.fetch_add(1);
  return true;
}

} // namespace torch_plugin::libs::cublaslt
