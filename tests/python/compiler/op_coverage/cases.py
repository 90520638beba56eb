"""Op cases of the op-coverage test: the :class:`OpCase` format, the input :data:`DOMAINS`,
and :data:`FLOAT_CASES`, the floating-point pointwise ops (issue #27, ops-float).

Each case is one op on tensors; ``test_op_coverage.py`` runs it alone (between identity
neighbours, so that it sits inside a fusion group) and inside a chain, in each of its
dtypes, against eager, and checks that its ATen op(s) ran inside a generated kernel.
The format is shared with ``typed_cases.py`` and ``reduction_cases.py`` (see the issue's
OPCASES note); a module may add input domains as ``EXTRA_DOMAINS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
FLOATS = (F32, BF16, F16)


@dataclass(frozen=True)
class OpCase:
    """One op of the coverage test.

    name: test id ("sin"); fn: the op on tensors; inputs: one domain name (:data:`DOMAINS`)
    per tensor argument; dtypes: the dtypes it runs in; aten: the ATen op(s) expected inside
    a generated kernel ("aten::sin"; an overload-less name matches every overload); fused:
    False for a documented fallback (``why`` says why); tol: {dtype: (rtol, atol)}
    overrides; chain: also run inside a longer pointwise chain.

    A tuple ``aten`` means ALL of these ops inside a generated kernel (an op that PyTorch
    decomposes is named by the ops its decomposition holds, e.g. softsign as abs and div);
    ``()`` names none (the op vanishes in these dtypes; only values are checked). Every name
    must be in the case's decomposed ATen graph in each of its dtypes (checked by
    ``test_case_names_its_graph_ops``), so that a batch's kernels cannot vouch for it.

    reference_in_float: for a fused case in bf16/fp16, compare with the op computed in
    float32 from the same inputs and rounded once (Inductor's ``reference_in_float``: what
    the kernel does), not with eager, whose narrow kernels may round intermediates (logit,
    tanhshrink's tanh, addcmul's product). False: compare with eager (the op's own
    semantics round in the narrow dtype), with a ``tol`` saying by how much.
    """

    name: str
    fn: Callable[..., torch.Tensor | tuple]
    inputs: tuple[str, ...]
    dtypes: tuple[torch.dtype, ...]
    aten: str | tuple[str, ...]
    fused: bool = True
    why: str = ""
    tol: dict | None = None
    chain: bool = True
    reference_in_float: bool = True


# ---- input domains ---------------------------------------------------------------------

_SPECIAL_ANY = (
    float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1e30, -1e30, 1e-30, -1e-30,
    0.5, -0.5, 1.5, -2.5, 1.0, -1.0, 3.0,
)  # fmt: skip
_SPECIAL_POS = (0.0, float("inf"), float("nan"), 1e-30, 1e30, 1.0, 0.5)
_SPECIAL_UNIT = (1.0, -1.0, 0.0, -0.0, float("nan"), 0.5, -0.5, 0.999, -0.999)


def _with_specials(t: torch.Tensor, specials: tuple[float, ...]) -> torch.Tensor:
    """`t` with its first elements (in memory order) set to `specials` (cast to its dtype)."""
    flat = t.reshape(-1)
    k = min(len(specials), flat.numel())
    flat[:k] = torch.tensor(specials[:k], dtype=torch.float64).to(t.dtype)
    return t


def _float_dtype(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype.is_floating_point else torch.float32


def _any(shape, dtype, gen):
    d = _float_dtype(dtype)
    t = (torch.randn(shape, generator=gen, dtype=torch.float64) * 3).to(d)
    return _with_specials(t, _SPECIAL_ANY)


def _any_but_nan(shape, dtype, gen):
    """``any`` without NaN: the sign source of copysign. The sign bit of a NaN is not
    portable across CUDA kernels (PTX leaves the NaN that ``neg.f32`` and arithmetic return
    unspecified, ATen's bf16/fp16 rounding returns the canonical positive NaN, NVRTC folds
    ``-(-x)`` to ``x``), and copysign turns that bit into the sign of a finite result (seen
    on an H100: a negative NaN source, 0xFFFF in bf16, gave -0.94 where eager gave 0.94)."""
    t = _any(shape, dtype, gen)
    return torch.where(t.isnan(), torch.ones_like(t), t)


def _pos(shape, dtype, gen):
    d = _float_dtype(dtype)
    t = (torch.rand(shape, generator=gen, dtype=torch.float64) * 5 + 1e-3).to(d)
    return _with_specials(t, _SPECIAL_POS)


def _unit(shape, dtype, gen):
    d = _float_dtype(dtype)
    t = (torch.rand(shape, generator=gen, dtype=torch.float64) * 1.98 - 0.99).to(d)
    return _with_specials(t, _SPECIAL_UNIT)


def _nonzero(shape, dtype, gen):
    d = _float_dtype(dtype)
    t = torch.randn(shape, generator=gen, dtype=torch.float64) * 3
    t = torch.where(t.abs() < 0.25, torch.copysign(torch.full_like(t, 0.25), t), t).to(d)
    return _with_specials(t, (1.0, -1.0, 0.5, -1.5, float("inf"), -float("inf")))


def _bool(shape, dtype, gen):
    return torch.rand(shape, generator=gen) < 0.5


def _int(shape, dtype, gen):
    d = dtype if not (dtype.is_floating_point or dtype == torch.bool) else torch.int64
    info = torch.iinfo(d)
    lo, hi = max(info.min, -1000), min(info.max, 1000)
    t = torch.randint(lo, hi, shape, generator=gen, dtype=torch.int64).to(d)
    flat = t.reshape(-1)
    edges = torch.tensor([0, -1, info.min, info.max], dtype=torch.int64).to(d)
    k = min(4, flat.numel())
    flat[:k] = edges[:k]
    return t


def _small_int(shape, dtype, gen):
    d = dtype if not (dtype.is_floating_point or dtype == torch.bool) else torch.int64
    t = torch.randint(1, 100, shape, generator=gen, dtype=torch.int64)
    sign = torch.where(torch.rand(shape, generator=gen) < 0.5, -1, 1)
    return (t * sign).to(d)


def _case(shape, dtype, gen):
    if dtype == torch.bool:
        return _bool(shape, dtype, gen)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    return _small_int(shape, dtype, gen)


def _tenths(shape, dtype, gen):
    """Random values and 0.1, 0.2, 0.3 in the case dtype: a bf16/fp16 0.1 is not float32's."""
    t = (torch.randn(shape, generator=gen, dtype=torch.float64) * 3).to(_float_dtype(dtype))
    return _with_specials(t, (0.1, -0.1, 0.2, 0.3, 1.0, float("nan"), float("inf"), -0.0))


DOMAINS: dict[str, Callable[[tuple[int, ...], torch.dtype, torch.Generator], torch.Tensor]] = {
    "tenths": _tenths,
    "any": _any,
    "any_but_nan": _any_but_nan,
    "pos": _pos,
    "unit": _unit,
    "nonzero": _nonzero,
    "bool": _bool,
    "int": _int,
    "small_int": _small_int,
    "case": _case,
}
"""Input domains: name -> (shape, case dtype, generator) -> tensor (on the CPU)."""

# ---- the floating-point pointwise ops --------------------------------------------------

# lgamma/digamma/erfinv/tan near poles and edges: libm and ATen's vector kernels (SLEEF)
# differ by a few ulp; the gradients there are large.
_LOOSE = {F32: (1e-4, 1e-4), BF16: (1.6e-2, 1e-2), F16: (2e-3, 1e-3)}


def _u(name, fn, aten, domain="any", **kw) -> OpCase:
    return OpCase(name, fn, (domain,), FLOATS, aten, **kw)


def _b(name, fn, aten, domains=("any", "any"), **kw) -> OpCase:
    return OpCase(name, fn, domains, FLOATS, aten, **kw)


FLOAT_CASES: list[OpCase] = [
    _u("sin", torch.sin, "aten::sin"),
    _u("cos", torch.cos, "aten::cos"),
    _u("tan", torch.tan, "aten::tan", tol=_LOOSE),
    _u("asin", torch.asin, "aten::asin", "unit"),
    _u("acos", torch.acos, "aten::acos", "unit"),
    _u("atan", torch.atan, "aten::atan"),
    _u("sinh", torch.sinh, "aten::sinh"),
    _u("cosh", torch.cosh, "aten::cosh"),
    _u("asinh", torch.asinh, "aten::asinh"),
    _u("acosh", torch.acosh, "aten::acosh", "pos"),
    _u("atanh", torch.atanh, "aten::atanh", "unit"),
    _u("floor", torch.floor, "aten::floor"),
    _u("ceil", torch.ceil, "aten::ceil"),
    _u("round", torch.round, "aten::round"),
    # ATen's CUDA kernel computes bf16/fp16 in that dtype (10^d and the product rounded), its
    # CPU kernel in float32: compared with eager itself, alone; float32 also in a chain.
    _u(
        "round_decimals",
        lambda x: torch.round(x, decimals=2),
        "aten::round.decimals",
        chain=False,
        reference_in_float=False,
    ),
    _u(
        "round_decimals_neg",
        lambda x: torch.round(x, decimals=-1),
        "aten::round.decimals",
        chain=False,
        reference_in_float=False,
    ),
    OpCase(
        "round_decimals_f32",
        lambda x: torch.round(x, decimals=3),
        ("any",),
        (F32,),
        "aten::round.decimals",
    ),
    _u("trunc", torch.trunc, "aten::trunc"),
    _u("frac", torch.frac, "aten::frac"),
    _u("sign", torch.sign, "aten::sign"),
    _u("sgn", torch.sgn, "aten::sign"),
    _u("exp2", torch.exp2, "aten::exp2"),
    _u("expm1", torch.expm1, "aten::expm1"),
    _u("log1p", torch.log1p, "aten::log1p", "pos"),
    _u("log2", torch.log2, "aten::log2", "pos"),
    _u("log10", torch.log10, "aten::log10", "pos"),
    _u("erfc", torch.erfc, "aten::erfc"),
    _u("erfinv", torch.erfinv, "aten::erfinv", "unit", tol=_LOOSE),
    _u("lgamma", torch.lgamma, "aten::lgamma", tol=_LOOSE),
    _u("digamma", torch.digamma, "aten::digamma", tol=_LOOSE),
    _u("logit", torch.logit, "aten::logit", "unit"),
    # With eps, ATen's CPU kernel rounds the bounds to a bf16/fp16 output's dtype and its CUDA
    # kernel does not: only float32 fuses (op_semantics.cpp).
    OpCase("logit_eps", lambda x: torch.logit(x, eps=1e-3), ("unit",), (F32,), "aten::logit"),
    OpCase(
        "logit_eps_narrow",
        lambda x: torch.logit(x, eps=1e-3),
        ("unit",),
        (BF16, F16),
        "aten::logit",
        fused=False,
        why="the eps bounds: rounded to the dtype by ATen's CPU kernel, not by its CUDA kernel",
        reference_in_float=False,
        tol={F16: (4e-3, 1e-3)},
    ),
    _u("square", torch.square, "aten::pow"),
    _u("exp_neg", lambda x: torch.exp(-x), "aten::exp"),
    _u("sigmoid", torch.sigmoid, "aten::sigmoid"),
    _u("logsigmoid", F.logsigmoid, ("aten::minimum", "aten::log1p")),
    _u("clamp", lambda x: torch.clamp(x, -0.5, 2.0), "aten::clamp"),
    _u("clamp_min_only", lambda x: torch.clamp(x, min=-0.5), "aten::clamp"),
    _u("clamp_max_only", lambda x: torch.clamp(x, max=0.5), "aten::clamp"),
    _b(
        "clamp_tensor",
        lambda x, lo: torch.clamp(x, lo, lo + 1.0),
        "aten::clamp.Tensor",
    ),
    _u("leaky_relu", lambda x: F.leaky_relu(x, 0.1), "aten::leaky_relu"),
    _u("elu", lambda x: F.elu(x, 0.7), "aten::elu"),
    _u("selu", F.selu, "aten::elu"),
    _u("celu", lambda x: F.celu(x, 1.3), "aten::celu"),
    _u("softplus", lambda x: F.softplus(x, 2.0, 10.0), "aten::softplus"),
    _u("mish", F.mish, "aten::mish"),
    # Both arrive decomposed: hardshrink as where(|x| <= l, 0, x), softshrink as
    # where(|x| > l, x - sign(x) l, x * 0).
    _u("hardshrink", lambda x: F.hardshrink(x, 0.5), ("aten::abs", "aten::le", "aten::where")),
    _u(
        "softshrink",
        lambda x: F.softshrink(x, 0.5),
        ("aten::abs", "aten::gt", "aten::sign", "aten::where"),
    ),
    # 0.125: the same bound in every dtype (threshold_at_bound checks 0.1, where ATen's CPU
    # and CUDA kernels differ in bf16/fp16).
    _u("threshold", lambda x: F.threshold(x, 0.125, 2.0), "aten::threshold"),
    _u("silu", F.silu, "aten::silu"),
    _u("hardswish", F.hardswish, "aten::hardswish"),
    _u("gelu", F.gelu, "aten::gelu"),
    _u("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), "aten::gelu"),
    _u("tanhshrink", F.tanhshrink, "aten::tanh"),
    _u("softsign", F.softsign, ("aten::abs", "aten::div")),
    _u("relu6", F.relu6, "aten::hardtanh"),
    _u("hardsigmoid", F.hardsigmoid, "aten::hardsigmoid"),
    _b("pow_tensor", lambda x, y: torch.pow(x, y), "aten::pow.Tensor_Tensor", ("pos", "any")),
    _u("pow_scalar_base", lambda x: torch.pow(2.0, x), "aten::pow.Scalar"),
    # 1.75: the same exponent in every dtype (a chain's float32 reference keeps a scalar
    # unrounded; pow_exponent_rounded checks the bf16/fp16 exponent).
    _u("pow_tensor_scalar", lambda x: torch.pow(x, 1.75), "aten::pow.Tensor_Scalar", "pos"),
    _b("atan2", torch.atan2, "aten::atan2"),
    _b("hypot", torch.hypot, "aten::hypot"),
    _b("copysign", torch.copysign, "aten::copysign", ("any", "any_but_nan")),
    OpCase("nextafter", torch.nextafter, ("any", "any"), (F32,), "aten::nextafter"),
    OpCase(
        "nextafter_narrow",
        torch.nextafter,
        ("any", "any"),
        (BF16, F16),
        "aten::nextafter",
        fused=False,
        why="in bf16/fp16 ATen steps by the narrow type's ulp; a float32 kernel cannot",
        # In a chain the fused neighbours round once where eager rounds after each op:
        # nothing of nextafter's own to check there.
        chain=False,
    ),
    _b("fmod", torch.fmod, "aten::fmod", ("any", "nonzero")),
    _u("fmod_scalar", lambda x: torch.fmod(x, -1.5), "aten::fmod"),
    _b("remainder", torch.remainder, "aten::remainder", ("any", "nonzero")),
    _u("remainder_scalar", lambda x: torch.remainder(x, -1.5), "aten::remainder"),
    _b("floor_divide", torch.floor_divide, "aten::div.Tensor_mode", ("any", "nonzero")),
    _b(
        "div_trunc",
        lambda x, y: torch.div(x, y, rounding_mode="trunc"),
        "aten::div.Tensor_mode",
        ("any", "nonzero"),
    ),
    _b(
        "div_floor_by_zero",
        lambda x, y: torch.div(x, y * 0.0, rounding_mode="floor"),
        "aten::div.Tensor_mode",
        ("any", "nonzero"),
    ),
    _b("xlogy", torch.xlogy, "aten::xlogy", ("any", "pos")),
    _b("lerp_scalar", lambda x, y: torch.lerp(x, y, 0.3), "aten::lerp.Scalar"),
    OpCase(
        "lerp_tensor",
        lambda x, y, w: torch.lerp(x, y, w),
        ("any", "any", "unit"),
        FLOATS,
        "aten::lerp.Tensor",
    ),
    OpCase(
        "addcmul",
        lambda x, y, z: torch.addcmul(x, y, z, value=0.5),
        ("any", "any", "any"),
        FLOATS,
        "aten::mul",
        # The decomposition computes in float32 and converts back (_to_copy): the kernel
        # rounds the result to fp16 there too, then a chain scales it by 3: 1.5 fp16 ulp.
        tol={F16: (1e-3, 1e-3)},
    ),
    OpCase(
        "addcdiv",
        lambda x, y, z: torch.addcdiv(x, y, z, value=0.5),
        ("any", "any", "nonzero"),
        FLOATS,
        "aten::div",
        tol={F16: (1e-3, 1e-3)},  # as addcmul
    ),
]
"""The floating-point pointwise ops of issue #27."""


def _rounded(name, fn, aten, domains=("tenths",), **kw) -> OpCase:
    """A scalar that ATen's bf16/fp16 kernels read in that dtype (codegen/op_semantics.cpp,
    ``narrowed_scalar_args``): bf16(0.1) is 0.10009765625, bf16(1.7) 1.703125. Compared with
    eager itself (a float32 reference keeps the scalar unrounded), alone (a chain's reference
    is float32)."""
    return OpCase(name, fn, domains, FLOATS, aten, chain=False, reference_in_float=False, **kw)


_EXACT = {BF16: (0.0, 0.0), F16: (0.0, 0.0)}  # one op in float32, rounded once, as eager

FLOAT_CASES += [
    _rounded("add_scalar_rounded", lambda x: x + 0.1, "aten::add", tol=_EXACT),
    _rounded("rsub_scalar_rounded", lambda x: 0.1 - x, "aten::sub", tol=_EXACT),
    _rounded(
        "sub_alpha_rounded",
        lambda x, y: torch.sub(x, y, alpha=0.1),
        "aten::sub",
        ("tenths", "tenths"),
        # x - alpha y: ATen's CPU kernel rounds the product or fuses it (1 ulp either way).
        tol={BF16: (8e-3, 0.0), F16: (1e-3, 0.0)},
    ),
    _rounded("fmod_scalar_rounded", lambda x: torch.fmod(x, 0.1), "aten::fmod", tol=_EXACT),
    _rounded(
        "remainder_scalar_rounded", lambda x: torch.remainder(x, 0.1), "aten::remainder", tol=_EXACT
    ),
    _rounded("pow_exponent_rounded", lambda x: torch.pow(x, 1.7), "aten::pow", ("pos",)),
    _rounded("pow_base_rounded", lambda x: torch.pow(2.7, x), "aten::pow"),
    # ATen's CUDA kernel compares with the bound in the dtype, its CPU kernel in float32.
    _rounded("threshold_at_bound", lambda x: F.threshold(x, 0.1, 2.0), "aten::threshold"),
    # ATen's opmath: these scalars stay float32 in every dtype.
    _rounded("mul_scalar_float", lambda x: x * 0.1, "aten::mul", tol=_EXACT),
    _rounded("leaky_relu_float", lambda x: F.leaky_relu(x, 0.1), "aten::leaky_relu", tol=_EXACT),
]

KNOWN_DIFFERENCES: dict[str, tuple[str, str]] = {
    "softshrink": (
        "signed_zero",
        (
            "PyTorch's decomposition (x * 0 for |x| <= lambd) gives -0.0 for small negative "
            "x, ATen's kernel +0.0; the compiled graph runs the decomposition"
        ),
    ),
    "gelu": (
        "nan_vs_inf",
        "ATen's CPU gelu gives nan at +inf; the generated kernel (and ATen's CUDA gelu) inf",
    ),
}
"""Case name -> (check relaxed, why): a difference between eager and the compiled graph that
is PyTorch's own (read by the harness; any list may define one)."""
