"""REDUCTION_CASES: the reductions and scans of issue #27 for the shared op-coverage test.

Each case is an ``OpCase`` (cases.py; format in OPCASES.md): the op on tensors of the
harness's shapes (rank >= 2: odd sizes such as (3, 37) and (2, 5, 129)), the input domains,
the dtypes, and the ATen op(s) expected inside a generated kernel. Reduced dims are the last
(inner), the first (outer) and dim 1 (the middle one of a 3-d shape), with and without
keepdim. max/min with a dim return (values, int64 indices); argmax/argmin also with
dim=None (the index into the flattened input). Index ties are ATen's: the first maximal
(minimal) index; with NaN, the first NaN. The "ties" domain (EXTRA_DOMAINS) has rows of
repeated values, all-equal rows, rows with NaN (several per row), rows of -inf and +inf;
"near_one" keeps products of up to a few hundred factors finite.

std arrives as var.correction + sqrt (AOTAutograd's core decompositions) and fuses as
both; logsumexp is kept whole (torch_plugin/compiler/decompositions.py) and fuses as
ATen's formula. cumsum/cumprod run as generated scans on both renderers (CUDA: one block per
row along a contiguous dim, one thread per column along another; fp32 sums in another order
than ATen's, within the fp32 tolerance); bool and integer inputs scan exactly into int64
(ATen's promotion; sums and products wrap around). any/all (aten.all kept whole) take bool, integer
and float inputs over the "sparse" domain.
"""

from __future__ import annotations

import torch

from .cases import OpCase

F32_BF16 = (torch.float32, torch.bfloat16)


def _ties(shape, dtype, gen: torch.Generator) -> torch.Tensor:
    """Small integers (many equal values per row), then special rows: all equal, NaN at
    two places, all -inf, +inf twice, -inf mixed with finite values."""
    x = torch.randint(-3, 4, shape, generator=gen).to(torch.float32)
    rows = x.reshape(-1, shape[-1])
    n = rows.shape[0]
    if n > 0:
        rows[0] = 2.0
    if n > 1:
        rows[1, shape[-1] // 3] = float("nan")
        rows[1, shape[-1] // 2] = float("nan")
    if n > 2:
        rows[2] = float("-inf")
    if n > 3:
        rows[3, 1::2] = float("inf")
    if n > 4:
        rows[4, ::3] = float("-inf")
    # A NaN in the first column too, so that NaN also lands on outer/middle reductions.
    x.view(-1)[shape[-1] * min(n - 1, 5)] = float("nan")
    return x.to(dtype)


def _near_one(shape, dtype, gen: torch.Generator) -> torch.Tensor:
    """Factors in [0.8, 1.25] with a few signs flipped, a zero, and one NaN and one inf."""
    x = torch.rand(shape, generator=gen) * 0.45 + 0.8
    x = torch.where(torch.rand(shape, generator=gen) < 0.1, -x, x)
    flat = x.view(-1)
    flat[0] = 0.0
    if flat.numel() > 7:
        flat[5] = float("nan")
        flat[7] = float("inf")
    return x.to(dtype)


def _factors(shape, dtype, gen: torch.Generator) -> torch.Tensor:
    """Factors in [0.995, 1.005] (products of a whole tensor stay finite and non-zero)."""
    return (torch.rand(shape, generator=gen) * 0.01 + 0.995).to(dtype)


def _sparse(shape, dtype, gen: torch.Generator) -> torch.Tensor:
    """Mostly zeros (any/all): ~5% nonzero values, then special rows (all zero, all
    nonzero, a lone NaN, all -0.0, tiny values: 1e-30, and 6e-8, which x * 0.5 in fp16
    rounds to zero) and a column nonzero everywhere (so that all() over the outer dims is
    true there). In `dtype` (bool, integers, floats)."""
    vals = torch.randn(shape, generator=gen) * 3
    vals = torch.where(vals.abs() < 0.5, torch.full_like(vals, 2.0), vals)
    x = torch.where(torch.rand(shape, generator=gen) < 0.05, vals, torch.zeros(shape))
    x[..., 1] = 1.0
    rows = x.reshape(-1, shape[-1])
    n, floats = rows.shape[0], dtype.is_floating_point
    if n > 1:
        rows[1] = -1.0
    if n > 2:
        rows[2] = 0.0
        rows[2, shape[-1] // 2] = float("nan") if floats else 1.0
    if n > 3 and floats:
        rows[3] = -0.0
    if n > 4 and floats:
        rows[4, 0], rows[4, 2] = 1e-30, 6e-8
    if n > 0:
        rows[0] = 0.0
    if dtype == torch.bool:
        return x != 0
    return x.to(dtype)


EXTRA_DOMAINS = {"ties": _ties, "near_one": _near_one, "factors": _factors, "sparse": _sparse}

# bf16 prod: ATen's CPU prod rounds every partial product to bf16 (129 factors: up to ~6%
# off the exact product); the kernels multiply in fp32 (as ATen's CUDA prod).
_PROD_TOL = {torch.bfloat16: (1e-1, 1e-3)}
# Scans: a prefix of up to 129 terms summed in another order than ATen's (its CUDA cumsum is a
# parallel scan, ours a per-thread serial run then a warp scan): each partial sum carries about
# eps * |running sum| * log2(n) of error, and the chain's "* 3 - 1" puts results near zero.
_SCAN_TOL = {torch.float32: (1e-5, 1e-4)}


DEVICE_FALLBACKS: dict[str, dict[str, str]] = {}
"""Device -> {ATen op: why}: ops that stay ATen calls on that device (read by the harness:
a case naming one is checked as a fallback there). None since the CUDA scan kernel."""


_INT_SCAN = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
_ANY_DTYPES = (
    torch.bool, torch.uint8, torch.int32, torch.int64, torch.float32, torch.bfloat16,
    torch.float16, torch.float64,
)  # fmt: skip


def _case(name, fn, inputs, aten, **kw):
    return OpCase(
        name=name, fn=fn, inputs=inputs, dtypes=kw.pop("dtypes", F32_BF16), aten=aten, **kw
    )


REDUCTION_CASES = [
    # prod
    _case("prod_dim_last", lambda x: x.prod(-1), ("near_one",), "aten::prod", tol=_PROD_TOL),
    _case("prod_dim0_keep", lambda x: x.prod(0, keepdim=True), ("near_one",), "aten::prod",
          tol=_PROD_TOL),
    _case("prod_dim1", lambda x: x.prod(1), ("near_one",), "aten::prod", tol=_PROD_TOL),
    # fp32 only: ATen's CPU bf16 prod of a whole (2, 5, 129) tensor rounds 1290 partial
    # products to bf16 (0.45 where the exact product is 0.63; the kernel's fp32 gives 0.63).
    _case("prod_all", lambda x: x.prod(), ("factors",), "aten::prod",
          dtypes=(torch.float32,)),
    # amin / amax / max() / min()
    _case("amin_last", lambda x: x.amin(-1), ("any",), "aten::amin"),
    _case("amin_outer_keep", lambda x: x.amin(0, keepdim=True), ("any",), "aten::amin"),
    _case("amin_01", lambda x: x.amin((0, 1)), ("ties",), "aten::amin"),
    _case("max_all", lambda x: x.max(), ("any",), "aten::max"),
    _case("min_all", lambda x: x.min(), ("ties",), "aten::min"),
    # max / min with a dim: values and int64 indices
    _case("max_dim_last", lambda x: tuple(x.max(-1)), ("ties",), "aten::max"),
    _case("max_dim0_keep", lambda x: tuple(x.max(0, keepdim=True)), ("ties",), "aten::max"),
    _case("min_dim_last", lambda x: tuple(x.min(-1)), ("ties",), "aten::min"),
    _case("min_dim1", lambda x: tuple(x.min(1)), ("any",), "aten::min"),
    _case("max_dim_any", lambda x: tuple(x.max(-1, keepdim=True)), ("any",), "aten::max"),
    # argmax / argmin
    _case("argmax_dim_last", lambda x: x.argmax(-1), ("ties",), "aten::argmax"),
    _case("argmax_dim0_keep", lambda x: x.argmax(0, keepdim=True), ("ties",), "aten::argmax"),
    _case("argmax_dim1", lambda x: x.argmax(1), ("any",), "aten::argmax"),
    _case("argmax_none", lambda x: x.argmax(), ("ties",), "aten::argmax"),
    _case("argmin_dim_last", lambda x: x.argmin(-1), ("ties",), "aten::argmin"),
    _case("argmin_none_keep", lambda x: x.argmin(keepdim=True), ("any",), "aten::argmin"),
    _case("argmin_dim0", lambda x: x.argmin(0), ("ties",), "aten::argmin"),
    # std / var_mean (two-pass: the sum, then the sum of squared deviations). Over "case"
    # values: with an inf in a row ATen's CPU Welford gives mean NaN (inf - inf in its
    # update) where the kernels give inf, and it accumulates fp32 in double, so a variance
    # whose squares overflow fp32 (|x| ~ 1e30) but whose sqrt does not is finite in ATen's
    # std; NaN rows agree (NaN).
    _case("std_last", lambda x: x.std(-1), ("case",), ("aten::var", "aten::sqrt")),
    _case("std_outer_keep_c0", lambda x: x.std(0, correction=0, keepdim=True), ("case",),
          ("aten::var", "aten::sqrt")),
    _case("var_mean_last", lambda x: tuple(torch.var_mean(x, -1)), ("case",),
          "aten::var_mean"),
    _case("var_mean_middle", lambda x: tuple(torch.var_mean(x, 1, keepdim=True)), ("case",),
          "aten::var_mean"),
    # logsumexp
    _case("logsumexp_last", lambda x: torch.logsumexp(x, -1), ("any",), "aten::logsumexp"),
    _case("logsumexp_outer_keep", lambda x: torch.logsumexp(x, 0, keepdim=True), ("ties",),
          "aten::logsumexp"),
    _case("logsumexp_scaled", lambda x: torch.logsumexp(x * 30, 1), ("case",),
          "aten::logsumexp"),
    # sum / mean with dtype, full mean
    _case("sum_dtype_f32", lambda x: x.sum(-1, dtype=torch.float32), ("case",), "aten::sum"),
    _case("mean_dtype_f32", lambda x: x.mean(0, dtype=torch.float32), ("case",), "aten::mean"),
    _case("mean_all", lambda x: x.mean(), ("case",), "aten::mean"),
    # any / all over bool, integer and float inputs (NaN is nonzero, -0.0 is zero); a bool
    # result (uint8 for uint8, as ATen)
    _case("any_last", lambda x: x.any(-1), ("sparse",), "aten::any", dtypes=_ANY_DTYPES),
    _case("any_dim0_keep", lambda x: x.any(0, keepdim=True), ("sparse",), "aten::any",
          dtypes=_ANY_DTYPES),
    # Adjacent dims (outer two): a reduction over non-adjacent dims of a 3-d tensor, such as
    # (0, -1), stays an ATen call on CUDA (the row kernel reduces one run of dims), for any
    # as for sum.
    _case("any_dims", lambda x: x.any(dim=(0, 1)), ("sparse",), "aten::any",
          dtypes=_ANY_DTYPES),
    _case("any_whole", lambda x: x.any(), ("sparse",), "aten::any", dtypes=_ANY_DTYPES),
    _case("all_last", lambda x: x.all(-1), ("sparse",), "aten::all", dtypes=_ANY_DTYPES),
    _case("all_dim1", lambda x: x.all(1), ("sparse",), "aten::all", dtypes=_ANY_DTYPES),
    _case("all_dims_keep", lambda x: x.all(dim=(0, 1), keepdim=True), ("sparse",),
          "aten::all", dtypes=_ANY_DTYPES),
    _case("all_whole", lambda x: x.all(), ("sparse",), "aten::all", dtypes=_ANY_DTYPES),
    # scans along the last dim and along the first
    _case("cumsum_last", lambda x: x.cumsum(-1), ("any",), "aten::cumsum", tol=_SCAN_TOL),
    _case("cumsum_dim0", lambda x: x.cumsum(0), ("case",), "aten::cumsum", tol=_SCAN_TOL),
    _case("cumprod_last", lambda x: x.cumprod(-1), ("near_one",), "aten::cumprod",
          tol=_PROD_TOL),
    # integer scans: bool and integers into int64 (ATen's promotion), exact with wrap-around
    # over the "typed" domain (the dtypes' min and max: sums and products overflow)
    _case("cumsum_int_last", lambda x: x.cumsum(-1), ("typed",), "aten::cumsum",
          dtypes=_INT_SCAN),
    _case("cumsum_int_dim0", lambda x: x.cumsum(0), ("typed",), "aten::cumsum",
          dtypes=_INT_SCAN),
    _case("cumprod_int_last", lambda x: x.cumprod(-1), ("typed",), "aten::cumprod",
          dtypes=_INT_SCAN),
]  # fmt: skip
