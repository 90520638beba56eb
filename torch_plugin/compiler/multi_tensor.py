"""Multi-tensor kernels of the optimizer step (issue #30): one launch updates every tensor of a
(device, dtype) group in place.

The algorithm is PyTorch's ``multi_tensor_apply`` (ATen/native/cuda/MultiTensorApply.cuh) with
the per-element math of its foreach optimizers (torch/optim/adam.py ``_multi_tensor_adam``,
torch/optim/sgd.py ``_multi_tensor_sgd``) fused into one pass, as ATen's FusedAdamKernel.cu
(``FusedAdamMathFunctor``) does: each tensor is cut into chunks of :data:`CUDA_CHUNK` elements,
one CUDA block per chunk, ``ILP`` elements per thread per iteration with vector loads and stores
when every pointer of the tensor is aligned (``load_store`` / ``is_aligned`` there). Where ATen
passes a table of at most 110 tensor addresses and 320 blocks by value and launches once per
full table, the table here lives in device memory (built once, copied again only when an address
changes), so a group is *one* launch however many tensors it has. On the CPU the same table
drives one OpenMP loop over all chunks of all tensors of the group (``schedule(dynamic)``), the
inner loop over a chunk vectorized (``omp simd``).

*The table* (int64, :func:`build_table`): ``[n, blocks, *pointers (list-major: list l of tensor
t at 2 + l * n + t), *numels, *rows, *block_map]``, ``block_map[b] = (t << 32) | chunk``;
``rows[t]`` is tensor t's row of the hyperparameters.

*The hyperparameters* (float64 ``[rows, k]``, :data:`COLUMNS`) are computed on the host from the
optimizer's param groups (Python floats, in double precision exactly as eager's optimizer
computes them) at each step and read by the kernel, each cast to the compute type (float for
fp32/fp16/bf16 tensors, double for fp64) as eager's ops cast their Python-number scalars: a
changed learning rate or beta is data, never a recompilation.

*Rounding as eager.* Each step of eager's foreach code is one ATen op whose result is rounded
to the tensor's dtype; the kernel computes in the compute type and rounds to the storage dtype
after each of those steps (:func:`_element_update`, the ``R`` calls: the identity for fp32 and
fp64). On the CPU, for bf16/fp16, the ``alpha`` of ``add`` and a scalar added are rounded to the
storage dtype first (``A``), as ATen's CPU kernels round them, and so is the scalar of
``_foreach_mul_`` (``M``; ``Tensor.mul_`` of eager's for-loop code keeps it in float: the
structure's last flag says which code eager runs). The kernel makes one fused multiply-add where
eager's kernels make one (``add(alpha=)``: ``vec::fmadd`` on the CPU; ``addcmul``, which ATen's
CPU build contracts; ``a + alpha * b`` contracted by nvcc on CUDA) and no other (the CPU source
turns contraction off). CPU and CUDA differ where eager's do: ``addcdiv`` is
``self + (value * t1) / t2`` in ATen's CPU kernel, ``self + value * (t1 / t2)`` in its CUDA
foreach functor. What is left: ATen's CPU ``sqrt`` (Sleef, AVX2/AVX-512) is not correctly
rounded and the kernel's is, so about one fp32 parameter in 200 per step differs from eager's
by an ulp; and CUDA's contractions are nvcc's choice (checked on the GPU by the tests).

*ABI.* The kernels run through ``torch.ops.torch_plugin.fused`` (``ops/fused_op.h``: the CPU
kernel cache and NVRTC), called with inputs ``[table, hyper]`` and a one-element dummy output;
the kernel writes through the table's addresses (the op's functional contract does not cover
that: these kernels are only ever called here, outside any traced graph).

Key parts: :func:`kernel_source`, :func:`build_table`, :func:`launch`.
"""

from __future__ import annotations

import torch

# ATen's MultiTensorApply.cuh: kChunkSize, kBlockSize, kILP.
CUDA_CHUNK = 65536
CUDA_BLOCK = 512
ILP = 4
# Elements per OpenMP work item on the CPU (a few hundred KB of operands: a good grain on
# 2 to 64 cores while chunks of small tensors still balance).
CPU_CHUNK = 16384
# Below this many elements in a group the CPU loop runs on one thread (the project's generated
# kernels' threshold: cpp_kernel.cpp).
CPU_PARALLEL_MIN = 32768
_HEADER = 2

# Columns of the hyperparameter rows, per kind (values: optimizer_step.hyper_rows).
COLUMNS = {
    "sgd": ("weight_decay", "momentum", "one_minus_dampening", "neg_lr"),
    "adam": (
        "weight_decay", "decay_factor", "one_minus_beta1", "beta2", "one_minus_beta2",
        "bias_correction2_sqrt", "eps", "neg_step_size",
    ),
}  # fmt: skip

# Storage dtype -> (C type of the storage, compute type, short name).
_DTYPES = {
    torch.float32: ("float", "float", "f32"),
    torch.float64: ("double", "double", "f64"),
    torch.bfloat16: ("unsigned short", "float", "bf16"),
    torch.float16: ("unsigned short", "float", "f16"),
}
SUPPORTED_DTYPES = frozenset(_DTYPES)


def lists_of(kind: str, structure: tuple) -> tuple[str, ...]:
    """The tensor lists of a group, in table order: ``("param", "grad", ...)`` and the state
    a kind keeps (``momentum_buffer`` with SGD momentum; ``exp_avg``, ``exp_avg_sq``)."""
    if kind == "sgd":
        return ("param", "grad", "momentum_buffer") if structure[1] else ("param", "grad")
    return ("param", "grad", "exp_avg", "exp_avg_sq")


# --- kernel source -------------------------------------------------------------------------

_CPU_HELPERS = r"""
// Every fused multiply-add written out (TP_FMA) where eager's kernels make one, and no other:
// the compiler's default contraction would round other products and sums once.
#pragma GCC optimize("fp-contract=off")
#pragma STDC FP_CONTRACT OFF
#include <cmath>
#include <cstdint>
#include <cstring>
static inline float tp_load_bf16(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16; float f; std::memcpy(&f, &u, 4); return f;
}
static inline uint16_t tp_store_bf16(float f) {  // round to nearest even (c10::BFloat16)
  uint32_t u; std::memcpy(&u, &f, 4);
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return f != f ? static_cast<uint16_t>(0x7fc0u) : static_cast<uint16_t>(r);
}
static inline uint16_t tp_store_f16(float f) {  // c10::Half's fp16_ieee_from_fp32_value
  uint32_t w; std::memcpy(&w, &f, 4);
  const uint32_t inf_bits = 239u << 23, zero_bits = 17u << 23;
  float to_inf, to_zero; std::memcpy(&to_inf, &inf_bits, 4); std::memcpy(&to_zero, &zero_bits, 4);
  float base = (std::fabs(f) * to_inf) * to_zero;
  const uint32_t shl1_w = w + w, sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  const uint32_t bias_bits = (bias >> 1) + 0x07800000u;
  float bias_f; std::memcpy(&bias_f, &bias_bits, 4);
  base = bias_f + base;
  uint32_t bits; std::memcpy(&bits, &base, 4);
  const uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}
static inline float tp_load_f16(uint16_t h) {  // c10::Half's fp16_ieee_to_fp32_value
  const uint32_t hw = static_cast<uint32_t>(h) << 16, two_w = hw + hw;
  const uint32_t norm_bits = (two_w >> 4) + (0xE0u << 23);
  float norm; std::memcpy(&norm, &norm_bits, 4); norm *= 0x1.0p-112f;
  const uint32_t denorm_bits = (two_w >> 17) | (126u << 23);
  float denorm; std::memcpy(&denorm, &denorm_bits, 4); denorm -= 0.5f;
  uint32_t nb, db; std::memcpy(&nb, &norm, 4); std::memcpy(&db, &denorm, 4);
  const uint32_t r = (hw & 0x80000000u) | (two_w < (1u << 27) ? db : nb);
  float out; std::memcpy(&out, &r, 4); return out;
}
#define TP_INLINE static inline
#define TP_FMA(a, b, c) std::fma(a, b, c)
#define TP_SQRT(a) std::sqrt(a)
#define TP_ABS(a) std::fabs(a)
"""

_CUDA_HELPERS = r"""
__device__ __forceinline__ float tp_load_bf16(unsigned short b) {
  return __uint_as_float(((unsigned int)b) << 16);
}
__device__ __forceinline__ unsigned short tp_store_bf16(float f) {  // round to nearest even
  unsigned int u = __float_as_uint(f);
  if (f != f) return (unsigned short)0x7fc0u;
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float tp_load_f16(unsigned short h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short tp_store_f16(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
#define TP_INLINE __device__ __forceinline__
#define TP_FMA(a, b, c) fma(a, b, c)
#define TP_SQRT(a) sqrt(a)
#define TP_ABS(a) fabs(a)
"""

_STORAGE = {
    "f32": ("(x)", "(x)", "(x)"),
    "f64": ("(x)", "(x)", "(x)"),
    "bf16": ("tp_load_bf16(x)", "tp_store_bf16(x)", "tp_load_bf16(tp_store_bf16(x))"),
    "f16": ("tp_load_f16(x)", "tp_store_f16(x)", "tp_load_f16(tp_store_f16(x))"),
}


def _element_update(kind: str, structure: tuple, target: str) -> str:
    """The body of ``update(acc_t& p, acc_t& g, acc_t& s1, acc_t& s2, const acc_t* h)``: one
    element's step, the ops of eager's foreach code in order, ``R`` after each (the rounding of
    its result to the storage dtype)."""
    cpu = target == "cpp"
    if kind == "sgd":
        weight_decay, momentum, nesterov, _, _ = structure
        lines = []
        if weight_decay:  # grads = _foreach_add(grads, params, alpha=weight_decay)
            lines.append("g = R(TP_FMA(p, A(h[0]), g));")
        if momentum:
            # _foreach_mul_(bufs, momentum); _foreach_add_(bufs, grads, alpha=1 - dampening)
            lines.append("s1 = R(s1 * M(h[1]));")
            lines.append("s1 = R(TP_FMA(g, A(h[2]), s1));")
            if nesterov:  # _foreach_add_(grads, bufs, alpha=momentum) (in place w/o decay)
                lines.append("g = R(TP_FMA(s1, A(h[1]), g));")
            else:
                lines.append("g = s1;")
        lines.append("p = R(TP_FMA(g, A(h[3]), p));")  # _foreach_add_(params, grads, alpha=-lr)
        return "\n    ".join(lines)
    weight_decay, decoupled, _ = structure
    lines = []
    if weight_decay:
        if decoupled:  # _foreach_mul_(params, 1 - lr * weight_decay)
            lines.append("p = R(p * M(h[1]));")
        else:  # grads = _foreach_add(grads, params, alpha=weight_decay)
            lines.append("g = R(TP_FMA(p, A(h[0]), g));")
    # _foreach_lerp_(exp_avgs, grads, 1 - beta1): ATen's lerp (Lerp.h); the CPU's vectorized
    # lerp_vec is one fmadd with the coefficient and base chosen by |weight| < 0.5.
    if cpu:
        lines.append(
            "{ const bool small = TP_ABS(h[2]) < (acc_t)0.5;"
            " s1 = R(TP_FMA(small ? h[2] : h[2] - (acc_t)1, g - s1, small ? s1 : g)); }"
        )
    else:
        lines.append(
            "s1 = R(TP_ABS(h[2]) < (acc_t)0.5 ? TP_FMA(h[2], g - s1, s1)"
            " : TP_FMA(-(g - s1), (acc_t)1 - h[2], g));"
        )
    lines.append("s2 = R(s2 * M(h[3]));")  # _foreach_mul_(exp_avg_sqs, beta2)
    # _foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
    # (ATen's CPU kernel: self + value * t1 * t2, which its build contracts to one fma)
    lines.append("s2 = R(TP_FMA(h[4] * g, g, s2));" if cpu else "s2 = R(TP_FMA(h[4], g * g, s2));")
    lines.append("acc_t d = R(TP_SQRT(s2));")  # _foreach_sqrt(exp_avg_sqs)
    lines.append("d = R(d / h[5]);")  # _foreach_div_(.., bias_correction2_sqrt)
    lines.append("d = R(d + A(h[6]));")  # _foreach_add_(.., eps)
    # _foreach_addcdiv_(params, exp_avgs, denom, step_size)
    lines.append("p = R(p + (h[7] * s1) / d);" if cpu else "p = R(TP_FMA(h[7], s1 / d, p));")
    return "\n    ".join(lines)


def _writes(kind: str, structure: tuple) -> tuple[bool, ...]:
    """Which lists the kernel stores to (param, grad, s1, s2)."""
    if kind == "sgd":
        return (True, bool(structure[3]), bool(structure[1]), False)
    return (True, False, True, True)


def kernel_source(kind: str, structure: tuple, dtype: torch.dtype, target: str) -> tuple[str, str]:
    """``(source, entry)`` of the multi-tensor update of ``kind`` ("sgd", "adam": Adam and
    AdamW) with ``structure`` (SGD: weight decay, momentum, nesterov, write the gradient
    back, foreach; Adam: weight decay, decoupled, foreach) over tensors of ``dtype`` (float32, float64, bfloat16,
    float16), for ``target`` "cpp" (the CPU) or "cuda" (NVRTC, no includes). Raises
    ValueError for another dtype or target."""
    if dtype not in _DTYPES or target not in ("cpp", "cuda"):
        raise ValueError(f"multi-tensor kernel: no {target} kernel for {dtype}")
    st, acc, short = _DTYPES[dtype]
    load, store, rnd = _STORAGE[short]
    n_lists = len(lists_of(kind, structure))
    k = len(COLUMNS["sgd" if kind == "sgd" else "adam"])
    writes = _writes(kind, structure)
    flags = "_".join(str(int(bool(f))) for f in structure)
    entry = f"tp_multi_tensor_{kind}_{short}_{flags}"
    body = _element_update(kind, structure, target)
    common = f"""
typedef {st} st_t;
typedef {acc} acc_t;
#define LOAD(x) ((acc_t){load})
#define STORE(x) ((st_t){store})
#define R(x) ({rnd})
#define A(x) ({rnd if target == "cpp" else "(x)"})
#define M(x) ({rnd if target == "cpp" and structure[-1] else "(x)"})
TP_INLINE void update(acc_t& p, acc_t& g, acc_t& s1, acc_t& s2, const acc_t* h) {{
    {body}
}}
"""
    # Per element: read the lists this kind has, update, store the ones it writes.
    names = ("P", "G", "S1", "S2")
    loads = "".join(
        f"acc_t v{j} = {'LOAD(' + names[j] + '[i])' if j < n_lists else '(acc_t)0'}; "
        for j in range(4)
    )
    stores = "".join(f"{names[j]}[i] = STORE(v{j}); " for j in range(n_lists) if writes[j])
    pointers = "".join(
        f"st_t* {names[j]} = (st_t*)ptrs[{j} * n + t] + start; " for j in range(n_lists)
    )
    element = f"{{ {loads}update(v0, v1, v2, v3, h); {stores}}}"
    if target == "cpp":
        source = (
            _CPU_HELPERS
            + common
            + f"""
extern "C" void kernel(void** args) {{
  const long long* table = (const long long*)args[1];
  const double* hyper = (const double*)args[2];
  const long long n = table[0], blocks = table[1];
  const long long* ptrs = table + {_HEADER};
  const long long* numel = ptrs + {n_lists} * n;
  const long long* rows = numel + n;
  const long long* block_map = rows + n;
  long long total = 0;
  for (long long t = 0; t < n; ++t) total += numel[t];
#pragma omp parallel for schedule(dynamic, 1) if (total > {CPU_PARALLEL_MIN})
  for (long long b = 0; b < blocks; ++b) {{
    const long long t = block_map[b] >> 32, start = (block_map[b] & 0xffffffffLL) * {CPU_CHUNK};
    const long long end = numel[t] - start < {CPU_CHUNK} ? numel[t] - start : {CPU_CHUNK};
    acc_t h[{k}];
    for (int j = 0; j < {k}; ++j) h[j] = (acc_t)hyper[rows[t] * {k} + j];
    {pointers}
#pragma omp simd
    for (long long i = 0; i < end; ++i) {element}
  }}
}}
"""
        )
        return source, "kernel"
    vec_loads = "".join(f"vec_t a{j} = *(const vec_t*)({names[j]} + i0); " for j in range(n_lists))
    vec_elem_loads = "".join(
        f"acc_t v{j} = {'LOAD(a' + str(j) + '.v[e])' if j < n_lists else '(acc_t)0'}; "
        for j in range(4)
    )
    vec_elem_stores = "".join(f"a{j}.v[e] = STORE(v{j}); " for j in range(n_lists) if writes[j])
    vec_stores = "".join(
        f"*(vec_t*)({names[j]} + i0) = a{j}; " for j in range(n_lists) if writes[j]
    )
    aligned = " | ".join(f"(unsigned long long){names[j]}" for j in range(n_lists))
    source = (
        _CUDA_HELPERS
        + common
        + f"""
struct __align__({ILP} * sizeof(st_t)) vec_t {{ st_t v[{ILP}]; }};
extern "C" __global__ void __launch_bounds__({CUDA_BLOCK})
{entry}(long long* out, const long long* table, const double* hyper) {{
  const long long n = table[0], blocks = table[1];
  if ((long long)blockIdx.x >= blocks) return;
  const long long* ptrs = table + {_HEADER};
  const long long* numel = ptrs + {n_lists} * n;
  const long long* rows = numel + n;
  const long long info = (rows + n)[blockIdx.x];
  const long long t = info >> 32, start = (info & 0xffffffffLL) * {CUDA_CHUNK};
  const long long len = numel[t] - start < {CUDA_CHUNK} ? numel[t] - start : {CUDA_CHUNK};
  acc_t h[{k}];
#pragma unroll
  for (int j = 0; j < {k}; ++j) h[j] = (acc_t)hyper[rows[t] * {k} + j];
  {pointers}
  if (len % {ILP} == 0 && (({aligned}) % ({ILP} * sizeof(st_t))) == 0) {{
    for (long long i0 = (long long)threadIdx.x * {ILP}; i0 < len;
         i0 += (long long)blockDim.x * {ILP}) {{
      {vec_loads}
#pragma unroll
      for (int e = 0; e < {ILP}; ++e) {{
        {vec_elem_loads}update(v0, v1, v2, v3, h); {vec_elem_stores}
      }}
      {vec_stores}
    }}
  }} else {{
    for (long long i = threadIdx.x; i < len; i += blockDim.x) {element}
  }}
}}
"""
    )
    return source, entry


# --- the table and the launch ------------------------------------------------------------


def block_map(numels: list[int], chunk: int) -> list[int]:
    """``(t << 32) | c`` for every chunk ``c`` of every tensor ``t`` (``chunk`` elements each;
    an empty tensor has none)."""
    out = []
    for t, n in enumerate(numels):
        out.extend((t << 32) | c for c in range((n + chunk - 1) // chunk))
    return out


def chunk_of(device: torch.device) -> int:
    """Elements per block (CUDA) or per OpenMP work item (CPU)."""
    return CUDA_CHUNK if device.type == "cuda" else CPU_CHUNK


def build_table(
    lists: list[list[torch.Tensor]],
    rows: list[int],
    device: torch.device,
    chunk: int | None = None,
) -> torch.Tensor:
    """The int64 table of a group (module docstring) on ``device``: ``lists`` are the group's
    tensor lists (each tensor dense and contiguous, every list's tensor t of one numel),
    ``rows[t]`` tensor t's hyperparameter row, ``chunk`` the elements per block (default:
    :func:`chunk_of` the device). On CUDA the copy is asynchronous (from pinned memory): no
    host synchronisation."""
    n = len(lists[0])
    numels = [t.numel() for t in lists[0]]
    bm = block_map(numels, chunk or chunk_of(device))
    values = [n, len(bm)]
    for ts in lists:
        values.extend(t.data_ptr() for t in ts)
    values.extend(numels)
    values.extend(rows)
    values.extend(bm)
    return to_device(torch.tensor(values, dtype=torch.int64), device)


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``host`` (a CPU tensor) on ``device``; to CUDA through pinned memory, non-blocking (the
    caching host allocator keeps the pinned block until the copy has run)."""
    if device.type == "cuda":
        return host.pin_memory().to(device, non_blocking=True)
    return host


def launch(
    source: str, entry: str, table: torch.Tensor, hyper: torch.Tensor, blocks: int, name: str
) -> None:
    """Runs the kernel ``source`` over the group of ``table`` with the float64 rows ``hyper``
    (both on the group's device): on CUDA ``max(blocks, 1)`` blocks of :data:`CUDA_BLOCK`
    threads on the current stream, on the CPU one call. The first call with a source compiles
    it (the CPU kernel cache or NVRTC); a compile error raises RuntimeError naming ``name``."""
    cuda = table.device.type == "cuda"
    torch.ops.torch_plugin.fused(
        [table, hyper], source,
        [list(table.shape), list(hyper.shape)], [list(table.stride()), list(hyper.stride())],
        [torch.int64, torch.float64], [[1]], [[1]], [torch.int64], name,
        "cuda" if cuda else "cpp", entry, max(blocks, 1) if cuda else 0,
        CUDA_BLOCK if cuda else 0, 0,
    )  # fmt: skip


def warm_up(source: str, entry: str, device: torch.device, k: int, name: str) -> None:
    """Compiles (or loads) the kernel by running it over an empty group: nothing is written.
    Raises what compiling raises."""
    table = to_device(torch.tensor([0, 0], dtype=torch.int64), device)
    hyper = to_device(torch.zeros(1, k, dtype=torch.float64), device)
    launch(source, entry, table, hyper, 0, name)
