"""Issue #31, class "NumPy": NumPy scalars, dtypes, ``finfo``/``iinfo`` and pure NumPy calls
on constants are captured (variables/numpy_calls.py); arrays are graph breaks, never
constants (docs/internals/capture.md, "NumPy").

Every case runs through the differential harness (tests/fuzz/differential.py: eager, then
the "eager", "aot_eager" and "plugin" backends; three calls: compile, cached, recompile;
result, arguments, observed globals, identity and RNG compared). Captured cases must also be
one graph under ``nopython=True``. NumPy's own RNG is seeded from torch's in every call's
arguments, so every run draws the same NumPy values.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from differential import check
from one_graph import check_one_graph

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture")


def _seeded(*args):
    np.random.seed(int(torch.randint(0, 2**31, ())))
    return args


CALLS = (
    lambda: _seeded(torch.randn(4, 3)),
    lambda: _seeded(torch.randn(4, 3)),
    lambda: _seeded(torch.randn(2, 5)),
)

G_F32 = np.float32(0.25)
G_F64 = np.float64(1.5)
G_I64 = np.int64(2)
G_BOOL = np.bool_(True)
G_DT = np.dtype("float32")
G_ARR = np.array([1.0, 2.0, 3.0])
G_LONG = np.longdouble(2.0)


def one_graph(fn, calls=CALLS):
    check_one_graph(fn, *calls, observe={"globals": globals()})


# --------------------------------------------------------------------------- captured

CAPTURED = {
    "sqrt_of_size": lambda x: x / np.sqrt(x.shape[-1]),
    "log_constant": lambda x: x * np.log(10000.0) / 100,
    "pi": lambda x: torch.sin(x * np.pi),
    "finfo_eps": lambda x: x.abs().clamp(min=np.finfo(np.float32).eps).log(),
    "iinfo_max": lambda x: x * (np.iinfo(np.int16).max / 1000),
    "prod_of_shape": lambda x: x.reshape(np.prod(x.shape)),
    "float32_scalar": lambda x: x * np.float32(2.5),
    "float32_global": lambda x: x * G_F32 + G_F32,
    "float32_on_the_left": lambda x: G_F32 * x,
    "int64_global": lambda x: x[G_I64 - 1] * G_I64,
    "bool_global": lambda x: x * 2 if G_BOOL else x,
    "scalar_arithmetic": lambda x: x + (G_F32 * 2 + G_F64) / G_I64,
    "scalar_type_kept": lambda x: x * (2 if type(G_F32 * 2) is np.float32 else 3),
    "scalar_item": lambda x: x * G_F32.item(),
    "dtype_compare": lambda x: x.double() if G_DT == np.float32 else x,
    "isclose": lambda x: x * (1 if np.isclose(0.1 + 0.2, 0.3) else 2),
    "tensor_of_float32": lambda x: x + torch.tensor(G_F32),
    "max_of_list": lambda x: x * np.max([1, x.shape[0], 3]),
    "ufunc_attribute": lambda x: x * np.sqrt.nin,
}


@pytest.mark.parametrize("name", list(CAPTURED))
def test_captured(name):
    one_graph(CAPTURED[name])


def test_numpy_scalar_arguments_recompile():
    """A NumPy scalar argument is a constant guarded by type and value."""
    calls = [
        lambda: (torch.randn(3), np.float32(0.5)),
        lambda: (torch.randn(3), np.float32(0.5)),
        lambda: (torch.randn(3), np.float64(0.5)),  # another type: recompiles
    ]
    check(lambda x, s: x * s + torch.tensor(s), *calls)


# --------------------------------------------------------------------------- graph breaks


def _refill_global_array():
    G_ARR[:] = torch.randn(3).double().numpy()  # changes between calls, as a user could
    return (torch.randn(3),)


ARRAY_CALLS = (_refill_global_array, _refill_global_array, lambda: (torch.randn(3),))

BREAKS = {
    # a global array is never a constant: these ran at capture and were reused after it
    # changed (silent wrong results) before
    "array_times_two": lambda x: x + torch.from_numpy(G_ARR * 2).float(),
    "array_item": lambda x: x + float((G_ARR * 2)[0]),
    "array_sum": lambda x: x + sum(G_ARR),
    "array_neg": lambda x: x + float((-G_ARR)[1]),
    "array_str": lambda x: x + len(str(G_ARR)),
    "array_contains": lambda x: x + (float(G_ARR[0]) in G_ARR),
    "np_sum_of_array": lambda x: x + float(np.sum(G_ARR)),
    # arrays made from tensors: Tensor.numpy() reads data (a graph break)
    "numpy_roundtrip": lambda x: torch.from_numpy(x.numpy() + 1) * 2,
    "ufunc_on_array": lambda x: torch.from_numpy(np.sin(x.numpy())),
    # NumPy's RNG draws in the call itself
    "numpy_random": lambda x: x + float(np.random.rand()),
    # a longdouble is wider than a double: opaque
    "longdouble": lambda x: x * float(G_LONG),
}


@pytest.mark.parametrize("name", list(BREAKS))
def test_graph_breaks_equal_eager(name):
    fn = BREAKS[name]
    calls = ARRAY_CALLS if "array" in name else CALLS
    check(fn, *calls, observe={"globals": globals()})


def _log_of_zero(x):
    return x + float(np.log(np.float64(0.0)))  # RuntimeWarning: divide by zero


def _overflow(x):
    return x * float(np.float32(3e38) * np.float32(10))  # RuntimeWarning: overflow


@pytest.mark.parametrize("fn", [_log_of_zero, _overflow], ids=["log0", "overflow"])
def test_numpy_warnings_happen_every_call(fn):
    """A NumPy computation that warns is not folded at capture (the warning would be lost
    on later calls): it runs natively and warns each call, as in eager."""
    check(fn, *CALLS)
    opt = torch_plugin.optimize("eager")(fn)
    for _ in range(3):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = opt(torch.zeros(3))
        assert any(issubclass(w.category, RuntimeWarning) for w in caught)
        torch.testing.assert_close(got, fn(torch.zeros(3)), equal_nan=True)


def test_effectful_scalar_method_not_run_at_capture(tmp_path):
    """``np.float32.tofile`` writes a file: never run at capture, so each call writes."""
    path = tmp_path / "out.bin"

    def fn(x):
        G_F32.tofile(str(path))
        return x * 2

    opt = torch_plugin.optimize("eager")(fn)
    opt(torch.randn(3))
    path.unlink()
    opt(torch.randn(3))
    assert path.exists()
