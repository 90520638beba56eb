"""``importlib.util.find_spec(name)`` and ``importlib.metadata.version(name)`` in captured
code: whether a package is installed, and which version.

HF's ``is_<package>_available()`` helpers ask both (through ``lru_cache``) inside forward
passes (wav2vec2's ``is_fsdp_managed_module``). With constant arguments the call runs at
capture time and its result is a constant of the capture.
Assumption, not guarded: the packages installed (and ``sys.path``) do not change while the
process runs; a guard would repeat the file-system search on every call. A name known only
at run time, or a ``package`` argument that is not constant, stays a graph break.

Key part: :func:`call_import_probe`.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

from .. import graph_break_types as gbt
from ..exc import unimplemented
from .base import VariableTracker

_PROBES = (importlib.util.find_spec, importlib.metadata.version)


def is_import_probe(fn) -> bool:
    """Whether ``fn`` is ``importlib.util.find_spec`` or ``importlib.metadata.version``."""
    return fn in _PROBES


def call_import_probe(tx, fn, args, kwargs) -> VariableTracker:
    """``fn(*args, **kwargs)`` (an :func:`is_import_probe` function) with constant
    arguments, run now; an exception it raises (``PackageNotFoundError``) is a graph break."""
    from .builder import wrap_constant_or_object

    name = fn.__qualname__
    if not all(a.is_python_constant() for a in [*args, *kwargs.values()]):
        unimplemented(gbt.IMPORT, f"{name} with arguments not known at capture time")
    values = [a.as_python_constant() for a in args]
    options = {k: v.as_python_constant() for k, v in kwargs.items()}
    if fn is importlib.util.find_spec and (
        not values or not isinstance(values[0], str) or "." in values[0] or options
    ):
        # a dotted name imports its parent package: an effect, not a probe
        unimplemented(
            gbt.IMPORT, "importlib.util.find_spec of a submodule (it imports the package)"
        )
    try:
        result = fn(*values, **options)
    except (ImportError, ValueError, TypeError) as e:
        unimplemented(gbt.IMPORT, f"{name} raised {type(e).__name__}: {e}")
    return wrap_constant_or_object(result)
