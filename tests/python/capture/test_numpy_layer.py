"""Issue #31: why NumPy on arrays is not traced into the graph through ``torch._numpy``.

torch.compile maps NumPy calls on arrays derived from tensors to ``torch._numpy`` (NumPy's
API implemented on tensors). Run the same NumPy code through both, and ``torch._numpy``
gives another dtype, other values, an exception where NumPy warns, or another result type
in these cases (each found by running a list of 38 common NumPy expressions through both;
33 agreed). Capturing through it would turn each into a silent wrong result, so NumPy on
arrays stays a graph break (docs/internals/capture.md, "NumPy"). Each test asserts that a
difference still exists: when one fails, ``torch._numpy`` changed and the decision should
be revisited.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

tnp = pytest.importorskip("torch._numpy")


def _both(fn, *arrays):
    want = fn(np, *arrays)
    got = fn(tnp, *[tnp.asarray(torch.from_numpy(a)) for a in arrays])
    return want, got


U8 = np.arange(250, 256, dtype=np.uint8)
I64 = np.arange(-3, 3, dtype=np.int64)
F32 = np.linspace(-1, 1, 6, dtype=np.float32)


def test_uint8_sum_widens_to_uint64_in_numpy_only():
    want, got = _both(lambda m, a: m.sum(a), U8)
    assert want.dtype == np.uint64
    assert got.tensor.dtype != torch.uint64


def test_uint8_cumsum_wraps_in_torch_numpy():
    want, got = _both(lambda m, a: m.cumsum(a), U8)
    assert not np.array_equal(np.asarray(want), got.tensor.numpy())


def test_integer_floor_division_by_zero_raises_in_torch_numpy():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = I64 // np.zeros_like(I64)  # NumPy: a RuntimeWarning, zeros
    assert (want == 0).all()
    with pytest.raises((RuntimeError, ZeroDivisionError)):
        tnp.asarray(torch.from_numpy(I64)) // tnp.zeros_like(tnp.asarray(torch.from_numpy(I64)))


def test_reductions_return_numpy_scalars_not_0d_arrays():
    want, got = _both(lambda m, a: m.sum(a), F32)
    assert type(want) is np.float32
    assert type(got) is not np.float32 and got.ndim == 0


def test_true_division_of_integers_is_float64_in_numpy_only():
    want, got = _both(lambda m, a: a / 2, I64)
    assert want.dtype == np.float64
    assert got.tensor.dtype != torch.float64
