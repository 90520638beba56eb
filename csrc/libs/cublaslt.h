// cublaslt.h: thin wrapper of NVIDIA cuBLASLt for the "plugin" compiler's
// matrix products with fused epilogues. Knows nothing of the IR.
//
// Owns: MatmulDesc (one matrix product's shape, layouts, dtype, epilogue and
// the torch settings it depends on), MatmulPlan (its cuBLASLt descriptors and
// the algorithm chosen by cublasLtMatmulAlgoGetHeuristic, built once per
// descriptor and kept in a process-wide cache), and the at::Tensor glue of the
// linear product that the torch_plugin::linear_pointwise CUDA kernel
// (ops/cuda/library_ops_cuda.cpp) and the executor's cuBLASLt step
// (runtime/cuda/cublaslt_step.cpp) share (cublaslt_linear.cpp): torch's
// cuBLASLt handle and workspace (at::cuda::getCurrentCUDABlasLtHandle,
// getCUDABlasLtWorkspace), torch's current stream, and torch's TF32 /
// reduced-precision settings.
//
// Semantics (row-major operands, as torch stores them):
//   D[b] = act(A[b] @ B[b] + bias + C[b])   for b < batch
// A [m, k], B [k, n], C and D [m, n], bias [n] broadcast over the rows;
// `+ C` only when MatmulDesc::has_c (beta = 1), `+ bias` and act per the
// Epilogue. fp32 (TF32 tensor cores when allow_tf32), bf16 and fp16 with fp32
// compute and accumulation; A, B, C, D and bias all of the one dtype.
// Row-major through the usual transpose trick: cuBLASLt is column-major, so
// the plan computes D^T = B^T A^T, whose bias runs along D^T's rows, as
// cuBLASLt's bias epilogues expect.
#pragma once

#include <ATen/core/Tensor.h>
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace torch_plugin::libs::cublaslt {

enum class DType : uint8_t { kFloat32, kBFloat16, kFloat16 };

// cuBLASLt epilogues used here. kGelu is CUBLASLT_EPILOGUE_GELU, the tanh
// approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (torch's
// gelu(approximate="tanh"); PyTorch's own _addmm_activation(use_gelu=True)
// maps to the same epilogue): never use it for the exact erf GELU.
enum class Epilogue : uint8_t {
  kNone,
  kRelu,
  kGelu,
  kBias,
  kReluBias,
  kGeluBias
};

// The tuning settings (the runtime's cublaslt_tuning and cublaslt_candidates
// options, handed over by runtime/cuda; runtime/options.h): `tuning` "" or
// "1" times the heuristic's candidates and cuBLAS's gemm (MatmulPlan::get),
// "0" takes the heuristic's first, "verbose" also prints each candidate's time
// (ms per product) to stderr, "gemm" takes cuBLAS's gemm wherever it can run
// (tests and benchmarks); `candidates`: how many candidates to ask
// cublasLtMatmulAlgoGetHeuristic for (an integer clamped to 1..64; "": 8).
// Used by plans built afterwards.
void set_tuning(const std::string& tuning, const std::string& candidates);

const char* to_string(DType d);
const char* to_string(Epilogue e);
bool has_bias(Epilogue e);
// The epilogue fusing the library ops' activation `activation` ("" for none)
// after the product, with or without a bias; nullopt for an activation
// cuBLASLt does not fuse (the op table's `cublaslt` column, ir/op_table.h,
// marks the ones this maps: relu and gelu_tanh).
std::optional<Epilogue> epilogue_for(std::string_view activation, bool bias);

// One matrix product. Every field is part of the plan cache key.
struct MatmulDesc {
  int64_t m = 0, n = 0, k = 0; // all > 0
  int64_t batch = 1; // >= 1, at most INT32_MAX
  DType dtype = DType::kFloat32;
  // Row-major storage: A is stored [m, k] with row stride lda, or, when
  // trans_a, [k, m] (A = stored^T); likewise B [k, n] or, when trans_b,
  // [n, k]. C and D are [m, n] with row strides ldc, ldd. Each leading
  // dimension is at least the stored matrix's column count (and >= 1).
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, ldc = 0, ldd = 0;
  // Elements between consecutive matrices of the batch (0 broadcasts A or
  // B; unused when batch == 1). The bias is shared by every batch.
  int64_t stride_a = 0, stride_b = 0, stride_c = 0, stride_d = 0;
  Epilogue epilogue = Epilogue::kNone;
  bool has_c = false; // D = act(A @ B + bias + C)
  // Settings the result depends on, read from torch by the caller.
  bool allow_tf32 = false; // fp32 only: CUBLAS_COMPUTE_32F_FAST_TF32
  // fp16/bf16: split-K partial sums may be reduced in the output type
  // (torch's allow_fp16/bf16_reduced_precision_reduction).
  bool reduced_precision_reduction = true;
  // Guaranteed byte alignment of the A, B, C, D pointers (a power of two,
  // at most 256): heuristics may pick kernels that need it.
  int align_a = 256, align_b = 256, align_c = 256, align_d = 256;
  int device = 0; // CUDA device index: the algorithm is chosen per GPU
  uint64_t workspace_limit = 0; // bytes of workspace the algorithm may use

  bool operator==(const MatmulDesc& o) const;
  bool operator!=(const MatmulDesc& o) const {
    return !(*this == o);
  }
  // "m=128, n=3072, k=768, batch=1, dtype=bf16, epilogue=gelu_bias, ..."
  std::string str() const;
};

struct MatmulDescHash {
  size_t operator()(const MatmulDesc& d) const;
};

// Device memory the tuning of a plan (MatmulPlan::get) uses instead of
// allocating its own, so that tuning holds no more than a run does: the
// product's own B operand (read only, never written; it must have
// desc.align_b), the tuning stream's steady-state workspace (torch's, at
// least desc.workspace_limit bytes), and memory to read between timed runs so
// that the L2 cache holds none of the operands (the graph's weights: each run
// copies 2x the L2's bytes of them into a 1 MiB sink; fewer when they hold
// fewer). Null / empty fields are allocated as scratch, except the flush: with
// resources and no flush_from, runs are timed without flushing.
struct TuneResources {
  const void* b = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::vector<std::pair<const void*, size_t>> flush_from;
};

// The cuBLASLt descriptors and the algorithm of one MatmulDesc. Immutable
// after construction except for the bias pointer, which run() sets under a
// mutex: a plan may be run from several threads.
class MatmulPlan {
 public:
  // The plan of `desc` from the process-wide cache (keyed by the whole
  // descriptor), created on first use: cublasLtMatmulAlgoGetHeuristic
  // proposes up to 8 algorithms whose workspace fits desc.workspace_limit;
  // without `tune_stream` the plan takes the heuristic's first, with one (the
  // legacy default stream, whose handle is null, included) it
  // times each on scratch operands on that stream (a few ms, once per
  // descriptor; a stream that is not being captured into a CUDA graph, on
  // desc.device) and takes the fastest: the heuristic ranks by an estimate.
  // `handle` must belong to desc.device. With `gemm_handle` (a cuBLAS
  // handle on desc.device, its workspace set) and a tuning stream, cuBLAS's
  // own gemm is timed too where it can compute the product (no activation;
  // a bias or C only without a batch): cuBLAS's heuristic reaches kernels
  // cuBLASLt's does not propose (fp32 on an H100: 417 against 506 us for
  // 4096x768x3072, 23 against 41 us for 128x768x3072). Returns nullptr when
  // cuBLASLt has no algorithm for the descriptor (the caller computes the
  // product another way); throws c10::Error naming the cuBLASLt call and
  // status on any other failure, and for an invalid descriptor.
  static std::shared_ptr<const MatmulPlan> get(
      const MatmulDesc& desc,
      cublasLtHandle_t handle,
      std::optional<cudaStream_t> tune_stream = std::nullopt,
      cublasHandle_t gemm_handle = nullptr,
      const TuneResources* resources = nullptr);

  ~MatmulPlan();
  MatmulPlan(const MatmulPlan&) = delete;
  MatmulPlan& operator=(const MatmulPlan&) = delete;

  // Enqueues D = act(A @ B + bias + C) on `stream`. `c` must be non-null
  // exactly when desc().has_c, `bias` exactly when the epilogue has one; the
  // pointers must have the descriptor's alignments and `workspace` at least
  // workspace_bytes() bytes. A plan that uses cuBLAS's gemm (uses_gemm())
  // needs `gemm_handle`, a cuBLAS handle on the plan's device: its stream is
  // set to `stream`, its math mode is set for the call and restored. Throws
  // c10::Error "cuBLASLt: cublasLtMatmul failed: CUBLAS_STATUS_... (m=...)"
  // (or "cuBLAS: cublasGemmEx failed: ...").
  void run(
      cublasLtHandle_t handle,
      const void* a,
      const void* b,
      const void* c,
      const void* bias,
      void* d,
      void* workspace,
      size_t workspace_size,
      cudaStream_t stream,
      cublasHandle_t gemm_handle = nullptr) const;

  // Whether the plan runs cuBLAS's gemm instead of a cuBLASLt algorithm (the
  // bias, when there is one, added by a rank-one gemm first).
  bool uses_gemm() const {
    return gemm_;
  }

  const MatmulDesc& desc() const {
    return desc_;
  }
  size_t workspace_bytes() const {
    return workspace_bytes_;
  }
  // "m=.. n=.. k=.. bf16 epilogue=gelu_bias algo=<id> ws=<bytes>", or
  // "... algo=cublas_gemm" for a plan that uses cuBLAS's gemm.
  std::string describe() const;

  struct Impl; // cuBLASLt objects (cublaslt.cpp)

 private:
  explicit MatmulPlan(const MatmulDesc& desc);
  MatmulDesc desc_;
  std::unique_ptr<Impl> impl_;
  size_t workspace_bytes_ = 0;
  int algo_id_ = -1;
  bool gemm_ = false; // cuBLAS's gemm, not impl_->algo
  void* ones_ = nullptr; // m ones of the dtype (gemm with a bias; never freed)
  mutable std::mutex mutex_; // guards the bias pointer attribute
  friend struct PlanBuilder;
};

// Largest power of two, at most 256, that divides the address.
int alignment_of(const void* p);

// ---------------------------------------------------------------------------
// at::Tensor glue: the linear product y = act(x @ w^T + bias + c) of
// torch_plugin::linear_pointwise on torch's handle, workspace and stream.

// The cuBLASLt dtype of a torch dtype, or nullopt (only float32, bfloat16,
// float16 are taken).
std::optional<DType> dtype_of(c10::ScalarType t);

// How a 2-d matrix [rows, cols] with these strides is stored for cuBLASLt:
// row-major (transposed = false, ld = row stride) or column-major
// (transposed = true: stored row-major as [cols, rows], ld = column stride).
// nullopt when it is neither (the caller makes it contiguous first).
struct MatrixLayout {
  bool transposed = false;
  int64_t ld = 0;
};
std::optional<MatrixLayout> matrix_layout(
    at::IntArrayRef sizes,
    at::IntArrayRef strides);

// The strides of `sizes` [..., K] viewed as 2-d [M, K] without a copy, or
// nullopt when the leading dimensions do not collapse into one.
std::optional<std::vector<int64_t>> flatten_to_2d_strides(
    at::IntArrayRef sizes,
    at::IntArrayRef strides);

// The descriptor of y [M, N] = act(x [M, K] @ w [N, K]^T + bias + c) for
// these 2-d layouts (y and c row-major with row strides ldd and ldc), with
// torch's current settings (TF32, reduced-precision reduction, workspace
// size) for `device`, pointer alignments 256. nullopt when cuBLASLt cannot
// take it: a dtype other than float32/bfloat16/float16, an empty dimension,
// or a layout that is neither row- nor column-major.
std::optional<MatmulDesc> linear_desc(
    at::IntArrayRef x_sizes,
    at::IntArrayRef x_strides,
    at::IntArrayRef w_sizes,
    at::IntArrayRef w_strides,
    int64_t ldd,
    std::optional<int64_t> ldc,
    c10::ScalarType dtype,
    Epilogue epilogue,
    int device);

// ---------------------------------------------------------------------------
// Products whose output rows are not 16-byte aligned. cuBLASLt's and cuBLAS's
// fast kernels (sm90 TMA and wgmma ones, nvjet) load and store C and D by 16
// bytes and want n a multiple of 16 bytes too. GPT-2's LM head (N = 50257:
// 100514 bytes per bf16 row) gets only align1 kernels: on an H100, cutlass_75
// ... align1 3.37 ms for [4096, 768] x [768, 50257] bf16, and still 3.32 ms
// into an output whose rows are padded to 50264 (n itself odd). Such a
// product is computed instead in chunks of rows into a scratch matrix whose
// leading dimension is n rounded up to 16 bytes: its first n rounded down to
// 16 bytes columns by one aligned product (the fast kernel), the remaining
// 1-7 columns by a second, tiny one (C, the residual, copied into the scratch
// first), then each chunk copied into the output's rows. PyTorch's Inductor
// pads such products too (torch/_inductor/fx_passes/pad_mm.py pads the
// operands; here no operand is copied).

// Bytes of one element of the dtype.
int64_t element_size(DType d);
// The descriptor of the aligned part of one chunk of d's padded product (see
// above): m the chunk's rows (at most padded_scratch_bytes() of scratch, at
// least one row; a power of two when there are several chunks), n d.n rounded
// down to 16 bytes, ldd (and ldc when d.has_c) d.n rounded up to 16 bytes,
// align_c/align_d 256; or nullopt when d does not need it: a batch, one row,
// an output row that is already aligned, an n under 16 bytes, an A or B whose
// rows or pointers are not 16-byte aligned themselves (no aligned kernel
// either way), or the padding turned off (set_padded_scratch_bytes(0)).
std::optional<MatmulDesc> padded_chunk_desc(const MatmulDesc& d);
// The descriptor of the tail of a chunk of `rows` rows: the columns
// [chunk.n, full.n), B and D (and C) starting chunk.n elements on.
MatmulDesc padded_tail_desc(
    const MatmulDesc& full,
    const MatmulDesc& chunk,
    int64_t rows);

// Such a product computed in place instead (no scratch of chunks: the chunks'
// scratch sat beside GPT-2's 412 MB logits at the LM head, 50-80 MB above
// eager's peak, and their copy into the output cost 0.38 ms of 0.98 on an
// H200). The output's rows fall in P classes by their address modulo 16 bytes
// (P = 16 bytes / gcd(ldd, 16 bytes) rows: 8 for an odd bf16 n): rows q,
// q + P, q + 2P, ... (q < P) are one matrix of leading dimension P * ldd, a
// multiple of 16 bytes, and each class's columns from c_q on start on a
// 16-byte boundary (c_q < 16 bytes' elements). One aligned product per class
// writes its whole 16-byte vectors of columns, [c_q, c_q + n_q) with n_q
// = (n - c_q) rounded down to 16 bytes, where they belong (A's rows q, q + P,
// ... at leading dimension P * lda; B's rows from c_q on; C's likewise; the
// bias from a copy shifted by c_q, when c_q is not 16 bytes' worth). Two
// small products over every row compute the rest into a scratch of m rows x
// 32 bytes: the head, the first max(c_q) columns, and the tail, the columns
// from min(c_q + n_q) on (under 16 bytes' worth); both are copied into the
// output after the class products (head and tail read C before any class
// product writes D, which may be C itself). Nothing beside the output but that
// scratch (128 KB for GPT-2's logits) and the shifted bias; every element is
// written by one product, then at most once by a copy.
struct PaddedSplit {
  struct Part {
    MatmulDesc desc; // m: the class's rows, n: n_q, lda/ldc/ldd: P times
    int64_t row0 = 0; // q
    int64_t col0 = 0; // c_q
  };
  int64_t period = 1; // P
  std::vector<Part> parts; // the classes with rows and columns, by q
  MatmulDesc head; // m rows, n = max c_q, ldd = 32 bytes, align_d 256
  MatmulDesc tail; // m rows, n - tail_col0 columns (n may be 0), ldd 32 bytes
  int64_t tail_col0 = 0; // min(c_q + n_q)
};
// The split of d (see above), or nullopt where it does not apply: d needs no
// padding (padded_chunk_desc is nullopt), the classes would read B more often
// than the chunks by more than the chunks' copy of the output, (P - chunks) k
// > 2 m (few rows: GPT-2's LM head at batch 1), A stored column-major (its rows
// q, q + P, ... are no matrix), B stored row-major (its rows from c_q on start
// off 16 bytes), or a class's C or D pointer below 16-byte alignment. Such
// products run in padded chunks (padded_chunk_desc). nullopt too while
// padded_in_place() is false.
std::optional<PaddedSplit> padded_split(const MatmulDesc& d);
// Products run_linear has computed split in place (tests).
int64_t split_products();
// Whether padded_split is used (default true; false: every padded product in
// chunks, for benchmarks). Process-wide.
bool padded_in_place();
void set_padded_in_place(bool on);

// Scratch bytes a padded product may use per call (the chunk's rows x the
// padded leading dimension; default 64 MiB: GPT-2's LM head at batch 32 in
// 8 chunks of 512 rows (bf16) or 16 of 256 (fp32) rather than one scratch of
// another 412 / 823 MB of logits beside the output. The scratch lives while
// the product runs, beside its output, so it adds to the peak memory at the
// LM head, which is eager's peak too. On an H100, bf16: 0.89 ms for one chunk,
// 0.97 at 256 MiB, 1.04 at 64 MiB, 1.24 at 32 MiB (unpadded 3.33); fp32: 1.65,
// 1.70, 2.33, 3.26 (unpadded 2.43). 0 turns padded products off (benchmarks,
// tests); `_C._cuda.cublaslt_padding(bytes)` sets it.
// Process-wide.
int64_t padded_scratch_bytes();
void set_padded_scratch_bytes(int64_t bytes);
// Products run_linear has computed padded in this process (tests).
int64_t padded_products();

// Runs y2d = act(x2d @ w^T + bias + c2d) on torch's current CUDA stream of
// y2d's device with torch's cuBLASLt handle and workspace. x2d [M, K] and w
// [N, K] any strides (made contiguous when neither row- nor column-major),
// bias [N] or undefined, c2d [M, N] or undefined, y2d [M, N] row-major
// (stride(1) == 1); all CUDA tensors of one device and one dtype. `hint`
// (may be null) is used when its descriptor is this call's (or, for a padded
// product, its chunk's: padded_chunk_desc), else the plan comes from the
// cache. A product whose output rows are misaligned runs padded (see
// padded_chunk_desc). Returns false, having written nothing, when cuBLASLt
// cannot take the call (see linear_desc; no algorithm); the caller then
// computes the reference. Throws c10::Error on a cuBLASLt failure.
bool run_linear(
    const at::Tensor& x2d,
    const at::Tensor& w,
    const at::Tensor& bias,
    const at::Tensor& c2d,
    Epilogue epilogue,
    const at::Tensor& y2d,
    const MatmulPlan* hint = nullptr);

// The plan of `desc` on torch's cuBLASLt handle of desc.device (see
// MatmulPlan::get), its algorithm timed on torch's current stream unless that
// stream is being captured into a CUDA graph.
// `b` and `flush_from` (optional): TuneResources's; the workspace is torch's
// cuBLASLt workspace of the current stream.
std::shared_ptr<const MatmulPlan> plan_on_torch_handle(
    const MatmulDesc& desc,
    const void* b = nullptr,
    std::vector<std::pair<const void*, size_t>> flush_from = {});

} // namespace torch_plugin::libs::cublaslt
