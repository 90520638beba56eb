"""NumPy in captured code: scalars and dtypes are constants, pure NumPy calls on constants run
at capture time; arrays stay graph breaks (issue #31, docs/internals/capture.md "NumPy").

- A NumPy scalar (``np.float32(2.5)``, ``np.int64(3)``, ``np.bool_``) or dtype
  (``np.dtype("float64")``) is immutable: a constant of the capture
  (``constant._IMMUTABLE_TYPES``), guarded by type and value where it is read from a source.
  Passed to a torch operation it is spelled as the Python number of the same value, only
  where FakeTensor gives the call the same result's type, dtype and shape both ways
  (``operation_recording._check_plain_scalars_agree``: ``torch.tensor(np.float32(1))`` is
  float32 where ``torch.tensor(1.0)`` is too, ``torch.tensor(np.int32(1))`` is int32 where
  ``torch.tensor(1)`` is int64, a graph break).
- A call of a NumPy function known to be pure (:data:`_PURE_NAMES`, every ``np.ufunc``, the
  scalar types, ``np.finfo``/``np.iinfo``) whose arguments are all constants of the kinds
  above (Python or NumPy scalars, dtypes and scalar types, strings, tuples and lists of
  them) runs at capture time, under ``np.errstate(all="raise")`` with warnings as errors, and
  its result is the constant when it is immutable (a scalar, a dtype, a ``finfo``/``iinfo``,
  a tuple of those). ``np.sqrt(d_k)``, ``np.log(10000.0)``, ``np.prod(x.shape)``,
  ``np.finfo(np.float32).eps``. A symbolic size argument is specialized (guarded), as NumPy
  cannot compute on it. Anything else is a graph break, as before: an array argument or
  result (an ndarray is mutable and its data is not guarded), a call that warns or raises
  (eager then warns or raises when the call runs natively), ``out=``, ``np.random``.
"""

from __future__ import annotations

import warnings
from typing import Any

from .. import graph_break_types as gbt
from ..dynamic_shapes import has_symbolic, specialize_deep
from ..exc import unimplemented
from .base import CallableVariable, VariableTracker

try:
    import numpy as np
except ImportError:  # pragma: no cover - NumPy is optional
    np = None

# NumPy functions (``np.<name>``) that compute a value from their arguments and nothing else
_PURE_NAMES = frozenset(
    {
        "prod",
        "sum",
        "mean",
        "amax",
        "amin",
        "max",
        "min",
        "round",
        "around",
        "isclose",
        "allclose",
        "clip",
        "finfo",
        "iinfo",
        "dtype",
        "result_type",
        "promote_types",
        "can_cast",
        "issubdtype",
        "isscalar",
        "ndim",
    }
)
# methods of NumPy scalars and dtypes that compute a value (``tofile``/``dump`` write files)
_PURE_METHODS = frozenset(
    {
        "item",
        "tolist",
        "astype",
        "round",
        "conjugate",
        "conj",
        "is_integer",
        "as_integer_ratio",
        "bit_count",
        "newbyteorder",
    }
)


def _scalar_types() -> tuple:
    """NumPy scalar types whose ``.item()`` is the Python number of exactly the same value
    (not ``np.longdouble``, wider than a double; not ``np.void`` or string scalars)."""
    if np is None:
        return ()
    return (np.bool_, np.integer, np.float16, np.float32, np.float64, np.complex64, np.complex128)


SCALAR_TYPES = _scalar_types()


def is_numpy_scalar(value: Any) -> bool:
    """A NumPy scalar of :data:`SCALAR_TYPES` (a constant of the capture)."""
    return bool(SCALAR_TYPES) and isinstance(value, SCALAR_TYPES)


def is_numpy_value(value: Any) -> bool:
    """A value of a NumPy type (a scalar, a dtype, an array, ...)."""
    return (type(value).__module__ or "").split(".")[0] == "numpy"


def immutable_numpy_types() -> tuple:
    """The NumPy types whose instances are constants of the capture: the scalars above,
    dtypes, ``finfo``/``iinfo`` (their instances are cached by NumPy and never changed)."""
    return () if np is None else (*SCALAR_TYPES, np.dtype, np.finfo, np.iinfo)


def foldable(value: Any) -> bool:
    """Whether ``value`` is a NumPy callable whose calls on constants may run at capture."""
    if np is None:
        return False
    if isinstance(value, np.ufunc):
        return True
    if isinstance(value, type) and issubclass(value, SCALAR_TYPES):
        return True  # np.float32(2.5)
    name = getattr(value, "__name__", None)
    return name in _PURE_NAMES and getattr(np, name, None) is value


def _allowed_argument(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_allowed_argument(v) for v in value)
    if isinstance(value, type):
        return issubclass(value, SCALAR_TYPES)
    import torch

    return value is None or isinstance(
        value, (bool, int, float, complex, str, torch.Size, np.dtype, *SCALAR_TYPES)
    )


def _immutable_result(value: Any) -> bool:
    if isinstance(value, tuple):
        return all(_immutable_result(v) for v in value)
    return isinstance(value, (bool, int, float, complex, str, *immutable_numpy_types()))


def refuse_effectful_method(value: Any, name: str) -> None:
    """A graph break for a method of a NumPy constant that is not known to be pure (``tofile``
    writes a file): called before ``ConstantVariable`` runs a constant's method."""
    dunder = name.startswith("__") and name.endswith("__")
    if is_numpy_value(value) and name not in _PURE_METHODS and not dunder:
        unimplemented(gbt.NON_PYTHON_CALL, f"method {name} of a NumPy {type(value).__name__}")


def run(fn, *args, **kwargs) -> Any:
    """``fn(*args)`` at capture time, under ``np.errstate(all="raise")`` with warnings as
    errors: a call that would warn or raise in eager (``np.float32(1) / 0``, an overflow)
    is a graph break, so that it runs natively and warns or raises there, each call."""
    try:
        with np.errstate(all="raise"), warnings.catch_warnings():
            warnings.simplefilter("error")
            return fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - eager raises or warns: runs natively
        name = getattr(fn, "__name__", repr(fn))
        unimplemented(gbt.EXCEPTION, f"NumPy {name} raised or warned {type(e).__name__}: {e}")


def is_numpy_data(value: Any) -> bool:
    """An ndarray, or a NumPy scalar that is not a constant here (``np.longdouble``, a
    ``np.void`` record that may view an array)."""
    return (
        np is not None
        and isinstance(value, (np.ndarray, np.generic))
        and not isinstance(value, immutable_numpy_types())
    )


class NumpyArrayVariable(VariableTracker):
    """A NumPy array (read from a source, or computed before capture): an opaque real
    object. Its data and shape can change between calls without any guard seeing it, so it
    is never a constant of the capture: every operation on it (arithmetic, ``len``, ``str``,
    iteration, ``sum``, an attribute, a method, passing it to a torch or NumPy function) is
    a graph break, and it is handed on as the same real object (its source, or the object
    itself). Before, it was a constant of the capture like a user object: ``G * 2``,
    ``sum(G)``, ``str(G)``, ``x in G`` on a global array ran at capture and the result was
    reused after the array changed (a silent wrong result)."""

    def __init__(self, value, source=None) -> None:
        super().__init__(source)
        self.value = value

    def python_type(self) -> type:
        return type(self.value)

    def is_python_constant(self) -> bool:
        return False

    def as_python_constant(self):
        unimplemented(
            gbt.NON_PYTHON_CALL, f"a NumPy {type(self.value).__name__} used as a constant"
        )

    def var_getattr(self, tx, name):
        unimplemented(
            gbt.NON_PYTHON_CALL, f"attribute {name} of a NumPy {type(self.value).__name__}"
        )

    def call_method(self, tx, name, args, kwargs):
        unimplemented(gbt.NON_PYTHON_CALL, f"method {name} of a NumPy {type(self.value).__name__}")

    def unpack_var_sequence(self, tx):
        unimplemented(gbt.NON_PYTHON_CALL, f"iteration over a NumPy {type(self.value).__name__}")

    def truthiness(self, tx) -> bool:
        unimplemented(gbt.NON_PYTHON_CALL, f"truth value of a NumPy {type(self.value).__name__}")

    def __repr__(self) -> str:
        return f"NumpyArrayVariable({type(self.value).__name__})"


class NumpyFunctionVariable(CallableVariable):
    """A pure NumPy callable (see the module docstring); calls on constants run at capture."""

    def call_function(self, tx, args, kwargs):
        from .builder import wrap_constant_or_object

        name = getattr(self.fn, "__name__", repr(self.fn))
        parts = [*args, *kwargs.values()]
        if "out" in kwargs or "where" in kwargs or not all(a.is_python_constant() for a in parts):
            unimplemented(gbt.NON_PYTHON_CALL, f"NumPy call np.{name} on values not constant")
        real_args = [a.as_python_constant() for a in args]
        real_kwargs = {k: v.as_python_constant() for k, v in kwargs.items()}
        if has_symbolic((real_args, real_kwargs)):  # NumPy cannot compute on a symbol
            real_args, real_kwargs = specialize_deep((real_args, real_kwargs))
        if not _allowed_argument([*real_args, *real_kwargs.values()]):
            unimplemented(
                gbt.NON_PYTHON_CALL, f"NumPy call np.{name} on an array or another object"
            )
        result = run(self.fn, *real_args, **real_kwargs)
        if not _immutable_result(result):
            unimplemented(
                gbt.NON_PYTHON_CALL, f"np.{name} gives a {type(result).__name__} (an array)"
            )
        return wrap_constant_or_object(result)

    def var_getattr(self, tx, name):
        from .constant import ConstantVariable, is_immutable

        value = getattr(self.fn, name, None)
        if value is not None and is_immutable(value):
            return ConstantVariable(value)  # np.float32.__name__, np.sqrt.nin
        if value is not None and foldable(value):
            return NumpyFunctionVariable(value)
        unimplemented(gbt.UNMODELLED_VALUE, f"attribute {name} of NumPy {self.fn!r}")

    def __repr__(self) -> str:
        return f"NumpyFunctionVariable({getattr(self.fn, '__name__', self.fn)})"
