"""The process environment as captured code reads it.

``os.environ.get(key[, default])``, ``os.environ[key]``, ``key in os.environ`` and
``os.getenv(key[, default])`` with a constant key become constants of the capture (HF's
attention asks ``os.environ.get("TRANSFORMERS_SDPA_FORCE_GQA", "0")`` in every layer, which
was a graph break per layer). Each read is guarded on the variable, so a program that sets
or removes it later recompiles instead of reusing a stale answer: the guard reads
``os.environ._data`` (CPython's mapping of encoded names to encoded values, on POSIX)
through an ``EQUALS_MATCH`` on the item, or a ``NOT_IN_DICT`` when the variable is unset.
Writes (``os.environ[key] = v``, ``pop``, ``putenv``) and reads with keys known only at run
time are not modelled: they stay graph breaks.

Key parts: :class:`EnvironVariable` (``os.environ`` itself, as the builder wraps it; any use
but the reads above is a graph break), :func:`call_getenv`.
"""

from __future__ import annotations

import os

from .. import graph_break_types as gbt
from ..exc import unimplemented
from ..sources import AttrSource, ItemSource, ObjectSource
from .base import BoundMethodVariable, VariableTracker
from .constant import ConstantVariable

_DATA_SOURCE = AttrSource(ObjectSource(os.environ, "os.environ"), "_data")


def _lookup(tx, key: str) -> str | None:
    """The value of environment variable ``key`` now (None if unset), guarded."""
    data = getattr(os.environ, "_data", None)
    encode = getattr(os.environ, "encodekey", None)
    decode = getattr(os.environ, "decodevalue", None)
    if not isinstance(data, dict) or encode is None or decode is None:  # pragma: no cover
        unimplemented(gbt.ENVIRONMENT, "reading os.environ (an unknown os.environ layout)")
    encoded = encode(key)
    if encoded in data:
        raw = data[encoded]
        tx.output.guards.equals_match(ItemSource(_DATA_SOURCE, encoded), raw)
        return decode(raw)
    tx.output.guards.not_in_dict(_DATA_SOURCE, encoded)
    return None


def _constant_args(args, kwargs) -> list | None:
    if kwargs or not all(a.is_python_constant() for a in args):
        return None
    values = [a.as_python_constant() for a in args]
    if not values or not isinstance(values[0], str):
        return None
    return values


def _call_environ_method(tx, name: str, args, kwargs) -> VariableTracker | None:
    """``os.environ.<name>(*args)`` as a guarded constant, or None when not modelled."""
    values = _constant_args(args, kwargs)
    if values is None:
        return None
    if name == "get" and len(values) in (1, 2):
        found = _lookup(tx, values[0])
        if found is None:
            return ConstantVariable(values[1] if len(values) == 2 else None)
        return ConstantVariable(found)
    if name == "__getitem__" and len(values) == 1:
        found = _lookup(tx, values[0])
        if found is None:
            unimplemented(gbt.ENVIRONMENT, f"os.environ[{values[0]!r}] raises KeyError")
        return ConstantVariable(found)
    if name == "__contains__" and len(values) == 1:
        return ConstantVariable(_lookup(tx, values[0]) is not None)
    return None


_READS = ("get", "__getitem__", "__contains__")


class EnvironVariable(VariableTracker):
    """``os.environ``: its reads with constant keys are guarded constants (module doc)."""

    def python_type(self) -> type:
        return type(os.environ)

    def is_python_constant(self) -> bool:
        return False

    def as_python_constant(self):
        unimplemented(
            gbt.ENVIRONMENT, "os.environ used other than by reading a key known at capture time"
        )

    def var_getattr(self, tx, name: str) -> VariableTracker:
        if name in _READS:
            return BoundMethodVariable(self, name)
        unimplemented(gbt.ENVIRONMENT, f"os.environ.{name}")

    def call_method(self, tx, name, args, kwargs):
        result = _call_environ_method(tx, name, args, kwargs) if name in _READS else None
        if result is None:
            unimplemented(
                gbt.ENVIRONMENT, f"os.environ.{name} with arguments not known at capture time"
            )
        return result

    def __repr__(self) -> str:
        return "EnvironVariable()"


def call_getenv(tx, args, kwargs) -> VariableTracker:
    """``os.getenv(key[, default])`` as a guarded constant; a graph break otherwise."""
    kwargs = dict(kwargs)
    default = kwargs.pop("default", None)
    args = list(args) + ([default] if default is not None else [])
    values = _constant_args(args, kwargs)
    if values is None or len(values) not in (1, 2):
        unimplemented(gbt.ENVIRONMENT, "os.getenv with a key not known at capture time")
    found = _lookup(tx, values[0])
    if found is None:
        return ConstantVariable(values[1] if len(values) == 2 else None)
    return ConstantVariable(found)
