"""Python versions of C builtins, inlined by the translator where the builtin's own loop
would compare values only known when the graph runs (tensors).

Each is CPython's algorithm written in Python (Objects/bltinmodule.c), so inlining it gives
the builtin's exact semantics through the translator's ordinary rules: a comparison of
tensors is a data-dependent condition (conditionals.py captures it as a conditional in the
graph where it can, else a graph break), and the value returned is one of the operands, as
in eager (on a tensor chosen by tensor data its identity is then unknown to the capture:
``is``, in-place writes and attribute writes on it break the graph, ``TensorVariable.
ambiguous_identity``).
"""

from __future__ import annotations


def pick_extreme(is_max, items, values):
    """``max``/``min`` (``is_max``) of ``items`` whose comparison values (``key(item)``, or
    the items themselves) are ``values``, both non-empty lists of equal length: the first
    item whose value no later value beats with ``>`` (``max``) or ``<`` (``min``), which
    is ``min_max`` in CPython (``PyObject_RichCompareBool(val, maxval, op)``, ties keep the
    earlier item)."""
    best = items[0]
    best_val = values[0]
    for i in range(1, len(items)):
        val = values[i]
        if is_max:
            if val > best_val:
                best = items[i]
                best_val = val
        elif val < best_val:
            best = items[i]
            best_val = val
    return best


def polyfill_codes() -> frozenset:
    """The code objects of this module's polyfills: a branch on a one-element tensor in them
    is captured as a conditional even with ``config.capture_tensor_branches`` off (their
    ways only rebind locals to values that exist before the branch)."""
    return _CODES


_CODES = frozenset({pick_extreme.__code__})
