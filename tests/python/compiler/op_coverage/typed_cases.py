"""TYPED_CASES: the op-coverage cases of typed kernels (issue #27, ops-typed): comparisons,
where, masked_fill, logical and bitwise ops, integer arithmetic with wrap-around, division
modes, remainder/fmod, isnan/isinf/isfinite/signbit, nan_to_num, sign and dtype conversions,
over bool, the integer dtypes and float16/bfloat16/float32/float64.

Format: OpCase of cases.py (the shared harness, tests/python/compiler/op_coverage; see
OPCASES.md). Each op runs behind an identity prologue (`torch.maximum(x, x)`) so that it forms a
fusion group of two ops: a lone pointwise op stays an ATen call by design. masked_fill reaches
the compiler decomposed (aten::scalar_tensor + aten::where.self), so its cases expect
aten::where inside a kernel. Likewise isfinite/isposinf/isneginf/nan_to_num name the ops of
their decompositions, per dtype group: comparisons and where for floats; for integers a
constant fill (full_like, an ATen call) or nothing at all (nan_to_num is the identity).
.to() of a tensor's own dtype is no op, so each to_<dtype> case runs from the other dtypes.

EXTRA_DOMAINS adds the domains these cases need beyond cases.py's:
  "typed": every dtype: floats with nan, +-inf, -0.0, 0, +-1 and small integers (so that
           comparisons find equal elements); integers with min, max, 0, -1; random bools;
  "finite": as "typed" without nan/inf, |v| < 100 (float -> integer conversions, whose
           out-of-range results ATen leaves undefined);
  "shift": shift amounts from -1 to the dtype's bit width + 1;
  "typed_nonzero": as "typed" without zeros (integer divisors).
"""

from __future__ import annotations

import torch

from .cases import OpCase

FLOATS = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
INTS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
ALL = FLOATS + INTS + (torch.bool,)
NUMBERS = FLOATS + INTS
BITS = INTS + (torch.bool,)


def ident(t: torch.Tensor) -> torch.Tensor:
    """The same values and dtype through one pointwise op, for every dtype (-0.0 and nan
    kept; no branch on the dtype, so that symbolic tracing works)."""
    return torch.maximum(t, t)


def _typed(shape, dtype: torch.dtype, gen: torch.Generator, finite: bool = False) -> torch.Tensor:
    n = 1
    for s in shape:
        n *= s
    if dtype == torch.bool:
        return torch.rand(n, generator=gen).lt(0.5).reshape(shape)
    if dtype.is_floating_point:
        small = torch.randint(-3, 4, (n,), generator=gen).double()
        wide = torch.randn(n, generator=gen, dtype=torch.float64) * (30 if finite else 3)
        v = torch.where(torch.rand(n, generator=gen) < 0.5, small, wide)
        specials = [-0.0, 0.0, 1.0, -1.0, 2.5, -2.5, 0.5]
        if not finite:
            specials += [float("nan"), float("inf"), float("-inf"), 1e30, -1e-30]
        v[: len(specials)] = torch.tensor(specials, dtype=torch.float64)
        return v.to(dtype).reshape(shape)
    info = torch.iinfo(dtype)
    lo, hi = max(info.min, -5), min(info.max, 5) + 1
    v = torch.randint(lo, hi, (n,), generator=gen, dtype=torch.int64)
    if not finite:
        edges = sorted({info.min, info.max, 0, max(info.min, -1), info.min + 1, info.max - 1})
        v[: len(edges)] = torch.tensor(edges, dtype=torch.int64)
    return v.to(dtype).reshape(shape)


def _shift(shape, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    bits = torch.iinfo(dtype).bits if not dtype.is_floating_point else 64
    lo = 0 if dtype == torch.uint8 else -1
    return torch.randint(lo, bits + 2, shape, generator=gen).to(dtype)


def _nonzero(t: torch.Tensor) -> torch.Tensor:
    return torch.where(t == 0, torch.ones((), dtype=t.dtype), t)


EXTRA_DOMAINS = {
    "typed": lambda shape, dtype, gen: _typed(shape, dtype, gen),
    "finite": lambda shape, dtype, gen: _typed(shape, dtype, gen, finite=True),
    "shift": _shift,
    # "typed" without zeros, in the case dtype (cases.py's "nonzero" is always a float).
    "typed_nonzero": lambda shape, dtype, gen: _nonzero(_typed(shape, dtype, gen)),
}

_CONSTANT = "a constant for integers: its decomposition is an ATen fill (full_like), no kernel op"
_INT_DIV = "integer division by a tensor may divide by zero: ATen raises, a kernel cannot"

TYPED_CASES: list[OpCase] = []


def _add(*cases: OpCase) -> None:
    TYPED_CASES.extend(cases)


def _compare_cases(op: str) -> list[OpCase]:
    f = getattr(torch, op)
    return [
        OpCase(f"{op}_tensor", lambda x, y: f(ident(x), y), ("typed", "typed"), ALL, f"aten::{op}"),
        OpCase(f"{op}_int_scalar", lambda x: f(ident(x), 1), ("typed",), ALL, f"aten::{op}"),
        # A float scalar: promotes integers to float; rounded to a bf16/fp16 common dtype.
        OpCase(f"{op}_float_scalar", lambda x: f(ident(x), 0.1), ("typed",), ALL, f"aten::{op}"),
        # Two dtypes: an integer index against a float32 tensor (promoted to float32).
        OpCase(
            f"{op}_mixed",
            lambda x, y: f(ident(x), y.float()),
            ("typed", "typed"),
            ALL,
            f"aten::{op}",
        ),
    ]


for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    _add(*_compare_cases(_op))

_add(
    OpCase(
        "where",
        lambda c, x, y: torch.where(ident(c), x, y),
        ("bool", "typed", "typed"),
        ALL,
        "aten::where",
    ),
    OpCase(
        "where_mask_from_compare",
        lambda x, y: torch.where(x > y, x, y * 2),
        ("typed", "typed"),
        NUMBERS,
        ("aten::gt", "aten::where"),
    ),
    OpCase(
        "where_scalar_other",
        lambda c, x: torch.where(ident(c), x, 3),
        ("bool", "typed"),
        ALL,
        "aten::where",
    ),
    OpCase(
        "where_scalar_self",
        lambda c, x: torch.where(ident(c), -2.5, x),
        ("bool", "typed"),
        FLOATS,
        "aten::where",
    ),
    OpCase(
        "masked_fill_int",
        lambda x, m: ident(x).masked_fill(m, 3),
        ("typed", "bool"),
        NUMBERS,
        "aten::where",
    ),
    OpCase(
        "masked_fill_neg_inf",
        lambda x, m: ident(x).masked_fill(m, float("-inf")),
        ("typed", "bool"),
        FLOATS,
        "aten::where",
    ),
    OpCase(
        "masked_fill_bool",
        lambda x, m: ident(x).masked_fill(m, True),
        ("typed", "bool"),
        (torch.bool,),
        "aten::where",
    ),
    OpCase(
        "logical_and",
        lambda x, y: torch.logical_and(ident(x), y),
        ("typed", "typed"),
        ALL,
        "aten::logical_and",
    ),
    OpCase(
        "logical_or",
        lambda x, y: torch.logical_or(ident(x), y),
        ("typed", "typed"),
        ALL,
        "aten::logical_or",
    ),
    OpCase(
        "logical_xor",
        lambda x, y: torch.logical_xor(ident(x), y),
        ("typed", "typed"),
        ALL,
        "aten::logical_xor",
    ),
    OpCase(
        "logical_not", lambda x: torch.logical_not(ident(x)), ("typed",), ALL, "aten::logical_not"
    ),
    OpCase("bitwise_and", lambda x, y: ident(x) & y, ("typed", "typed"), BITS, "aten::bitwise_and"),
    OpCase("bitwise_or", lambda x, y: ident(x) | y, ("typed", "typed"), BITS, "aten::bitwise_or"),
    OpCase("bitwise_xor", lambda x, y: ident(x) ^ y, ("typed", "typed"), BITS, "aten::bitwise_xor"),
    OpCase("bitwise_not", lambda x: ~ident(x), ("typed",), BITS, "aten::bitwise_not"),
    OpCase(
        "left_shift",
        lambda x, s: torch.bitwise_left_shift(ident(x), s),
        ("typed", "shift"),
        INTS,
        "aten::bitwise_left_shift",
    ),
    OpCase(
        "right_shift",
        lambda x, s: torch.bitwise_right_shift(ident(x), s),
        ("typed", "shift"),
        INTS,
        "aten::bitwise_right_shift",
    ),
    OpCase("add", lambda x, y: ident(x) + y, ("typed", "typed"), ALL, "aten::add"),
    OpCase(
        "add_alpha",
        lambda x, y: torch.add(ident(x), y, alpha=3),
        ("typed", "typed"),
        NUMBERS,
        "aten::add",
        # x + 3 y in fp32 then rounded; ATen's CPU kernel may fuse a multiply-add: 1 ulp.
        # (x + 3 y rounded once; eager's bf16 CPU kernel can be 2 ulp off near cancellation:
        # torch.testing's bf16 rtol.)
        tol={torch.bfloat16: (1.6e-2, 0.0), torch.float16: (1e-3, 0.0)},
    ),
    OpCase("sub", lambda x, y: ident(x) - y, ("typed", "typed"), NUMBERS, "aten::sub"),
    # A product then a sum: two roundings in eager; a kernel must not contract them into one
    # FMA (fp64 is compared exactly).
    OpCase(
        "mul_add",
        lambda x, y, z: ident(x) * y + z,
        ("typed", "typed", "typed"),
        NUMBERS,
        ("aten::mul", "aten::add"),
    ),
    OpCase("rsub_scalar", lambda x: 7 - ident(x), ("typed",), NUMBERS, "aten::sub"),
    OpCase("mul", lambda x, y: ident(x) * y, ("typed", "typed"), ALL, "aten::mul"),
    OpCase("mul_overflow", lambda x: ident(x) * 1000003, ("typed",), INTS, "aten::mul"),
    OpCase("neg", lambda x: -ident(x), ("typed",), NUMBERS, "aten::neg"),
    OpCase("abs", lambda x: torch.abs(ident(x)), ("typed",), NUMBERS, "aten::abs"),
    OpCase(
        "maximum", lambda x, y: torch.maximum(ident(x), y), ("typed", "typed"), ALL, "aten::maximum"
    ),
    OpCase(
        "minimum", lambda x, y: torch.minimum(ident(x), y), ("typed", "typed"), ALL, "aten::minimum"
    ),
    OpCase("clamp", lambda x: torch.clamp(ident(x), -3, 4), ("typed",), NUMBERS, "aten::clamp"),
    OpCase(
        "clamp_min_only",
        lambda x: torch.clamp(ident(x), min=-2),
        ("typed",),
        NUMBERS,
        "aten::clamp",
    ),
    OpCase(
        "int_true_div",
        lambda x, y: ident(x) / y,
        ("typed", "typed"),
        INTS + (torch.float64,),
        "aten::div",
    ),
    OpCase(
        "div_floor_scalar",
        lambda x: torch.div(ident(x), 3, rounding_mode="floor"),
        ("typed",),
        NUMBERS,
        "aten::div",
    ),
    OpCase(
        "div_floor_neg_scalar",
        lambda x: torch.div(ident(x), -3, rounding_mode="floor"),
        ("typed",),
        (torch.int8, torch.int32, torch.int64, torch.float32, torch.float64),
        "aten::div",
    ),
    OpCase(
        "div_trunc_scalar",
        lambda x: torch.div(ident(x), -3, rounding_mode="trunc"),
        ("typed",),
        NUMBERS,
        "aten::div",
    ),
    OpCase(
        "floordiv_scalar",
        lambda x: ident(x) // 2,
        ("typed",),
        NUMBERS,
        "aten::div",
    ),
    OpCase("remainder_scalar", lambda x: ident(x) % 3, ("typed",), NUMBERS, "aten::remainder"),
    OpCase(
        "remainder_neg_scalar",
        lambda x: ident(x) % -3,
        ("typed",),
        (torch.int8, torch.int16, torch.int32, torch.int64, torch.float32, torch.float64),
        "aten::remainder",
    ),
    OpCase(
        "fmod_scalar",
        lambda x: torch.fmod(ident(x), -3),
        ("typed",),
        (torch.int8, torch.int16, torch.int32, torch.int64, torch.float32, torch.float64),
        "aten::fmod",
    ),
    OpCase(
        "remainder_tensor_float",
        lambda x, y: torch.remainder(ident(x), y),
        ("typed", "typed"),
        FLOATS,
        "aten::remainder",
    ),
    OpCase(
        "remainder_tensor_int",
        lambda x, y: torch.remainder(ident(x), y),
        ("typed", "typed_nonzero"),
        INTS,
        "aten::remainder",
        fused=False,
        why=_INT_DIV,
    ),
    OpCase("isnan", lambda x: torch.isnan(ident(x)), ("typed",), ALL, "aten::isnan"),
    OpCase("isinf", lambda x: torch.isinf(ident(x)), ("typed",), ALL, "aten::isinf"),
    # isfinite/isposinf/isneginf/nan_to_num are decomposed before the compiler sees them
    # (PyTorch's decompositions): floats hold the comparisons (isposinf in bf16/fp16 after
    # an upcast to float32); integers and bools hold a constant (full_like) or nothing.
    OpCase(
        "isfinite",
        lambda x: torch.isfinite(ident(x)),
        ("typed",),
        FLOATS,
        ("aten::abs", "aten::ne", "aten::eq"),  # x == x and |x| != inf
    ),
    OpCase(
        "isfinite_int",
        lambda x: torch.isfinite(ident(x)),
        ("typed",),
        BITS,
        "aten::full_like",
        fused=False,
        why=_CONSTANT,
    ),
    OpCase("isposinf", lambda x: torch.isposinf(ident(x)), ("typed",), FLOATS, "aten::eq"),
    OpCase("isneginf", lambda x: torch.isneginf(ident(x)), ("typed",), FLOATS, "aten::eq"),
    OpCase(
        "isposinf_int",
        lambda x: torch.isposinf(ident(x)),
        ("typed",),
        INTS,
        "aten::full_like",
        fused=False,
        why=_CONSTANT,
    ),
    OpCase(
        "isneginf_int",
        lambda x: torch.isneginf(ident(x)),
        ("typed",),
        INTS,
        "aten::full_like",
        fused=False,
        why=_CONSTANT,
    ),
    # neg(neg(x)): a sign flip twice keeps a NaN's sign, as eager does on the CPU and for
    # float32/float16/float64 on CUDA. Eager's bfloat16 ops on CUDA round every result through
    # c10::BFloat16, which makes every NaN the positive 0x7FC0, while a kernel computes the
    # chain in float: a NaN's sign differs there, so bfloat16 runs over finite values (-0.0
    # included).
    OpCase(
        "signbit",
        lambda x: torch.signbit(torch.neg(torch.neg(x))),
        ("typed",),
        tuple(d for d in NUMBERS if d != torch.bfloat16),
        "aten::signbit",
    ),
    OpCase(
        "signbit_bf16",
        lambda x: torch.signbit(torch.neg(torch.neg(x))),
        ("finite",),
        (torch.bfloat16,),
        "aten::signbit",
    ),
    OpCase(
        "nan_to_num",
        lambda x: torch.nan_to_num(ident(x)),
        ("typed",),
        FLOATS,
        ("aten::isnan", "aten::eq", "aten::where"),
        reference_in_float=False,  # +-inf become the dtype's own max/min: eager's
    ),
    OpCase(
        "nan_to_num_int",
        lambda x: torch.nan_to_num(ident(x)),
        ("typed",),
        INTS,
        (),
        fused=False,
        why="the identity on integers: its decomposition is a clone, which the graph drops",
    ),
    OpCase(
        "nan_to_num_args",
        lambda x: torch.nan_to_num(ident(x), nan=1.5, posinf=100.0, neginf=-7.0),
        ("typed",),
        FLOATS,
        ("aten::isnan", "aten::eq", "aten::where"),
        reference_in_float=False,  # +-inf become the dtype's own max/min: eager's
    ),
    OpCase(
        "sign_int",
        lambda x: torch.sign(ident(x)),
        ("typed",),
        INTS + (torch.float64,),
        "aten::sign",
    ),
)


def _to_case(to: torch.dtype) -> OpCase:
    # Integer targets: finite sources (float -> int out of range is undefined in ATen too).
    dom = "finite" if to in INTS else "typed"
    name = str(to).removeprefix("torch.")
    # .to() its own dtype is no op (the tensor itself): not a conversion case.
    others = tuple(d for d in ALL if d != to)
    return OpCase(f"to_{name}", lambda x: ident(x).to(to), (dom,), others, "aten::_to_copy")


for _to in ALL:
    _add(_to_case(_to))


# ---- bitcasts: Tensor.view(dtype) of same-size dtypes (aten::view.dtype) -----------------
# Float sources over finite values: a NaN's payload is not defined by the ops before the
# view (ATen's maximum and the kernel's may quiet it differently), and the bits are what the
# integer result shows exactly. Integer sources cover NaN and subnormal bit patterns.
_NARROW_SRC = (
    "a bfloat16/float16 value is held in float32 inside kernels: a computed NaN's bits "
    "are not ATen's"
)
_BITCASTS = (
    # (name, to, domain, dtypes, fused)
    ("f32_i32", torch.int32, "finite", (torch.float32,), True),
    ("i32_f32", torch.float32, "typed", (torch.int32,), True),
    ("f64_i64", torch.int64, "finite", (torch.float64,), True),
    ("i64_f64", torch.float64, "typed", (torch.int64,), True),
    ("i16_bf16", torch.bfloat16, "typed", (torch.int16,), True),
    ("i16_f16", torch.float16, "typed", (torch.int16,), True),
    ("u8_i8", torch.int8, "typed", (torch.uint8,), True),
    ("i8_u8", torch.uint8, "typed", (torch.int8,), True),
    ("bool_u8", torch.uint8, "typed", (torch.bool,), True),
    ("bf16_i16", torch.int16, "finite", (torch.bfloat16, torch.float16), False),
)


def _bitcast_case(name: str, to: torch.dtype, dom: str, dtypes, fused: bool) -> OpCase:
    return OpCase(
        f"bitcast_{name}",
        lambda x: ident(x).view(to),
        (dom,),
        dtypes,
        "aten::view.dtype",
        fused=fused,
        why="" if fused else _NARROW_SRC,
    )


for _b in _BITCASTS:
    _add(_bitcast_case(*_b))
_add(
    OpCase(
        "bitcast_different_size",
        lambda x: ident(x).view(torch.bfloat16),
        ("finite",),
        (torch.float32,),
        "aten::view.dtype",
        fused=False,
        why="elements of different sizes: the view changes the last dim, not each element",
    ),
)
