"""Run a function eagerly and optimized, call by call, and compare what a user can observe:
the regression tests' harness (tests/python/capture/test_wrong_results_round2.py,
test_internal_errors.py).

:func:`run_against_eager` calls ``fn`` eagerly and through ``torch_plugin.optimize(backend)``
on deep copies of each argument tuple, and compares the results (values, dtypes, types,
instance attributes of tuple subclasses and user objects), the identity relations among the
objects reachable from the result and the arguments (``is``), the arguments after the call
(in-place mutations), the global torch state, and optionally a state snapshot (globals, objects the function
touches). When eager raises, the optimized call must raise the same exception type.
"""

import copy

import pytest
import torch
from differential import global_state

import torch_plugin


def same(a, b) -> bool:
    """``a`` (eager's) and ``b`` (the optimized call's) are equal: same types, tensor values
    within 1e-5, containers element by element, instance state of user objects."""
    if isinstance(a, torch.Tensor):
        return (
            isinstance(b, torch.Tensor)
            and type(a) is type(b)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and torch.allclose(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
        )
    if isinstance(a, (list, tuple)):
        return (
            type(a) is type(b)
            and len(a) == len(b)
            and all(map(same, a, b))
            and same(getattr(a, "__dict__", None), getattr(b, "__dict__", None))
        )
    if isinstance(a, dict):
        return type(a) is type(b) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if hasattr(a, "__dict__") and not isinstance(a, type) and type(a).__eq__ is object.__eq__:
        return type(a) is type(b) and same(vars(a), vars(b))  # a user object: its state
    return type(a) is type(b) and a == b


def _objects(value, out: list) -> list:
    """Every object reachable from ``value`` through tuples, lists, dicts and instance
    ``__dict__``s, in a fixed order (for identity comparisons)."""
    out.append(value)
    if isinstance(value, (list, tuple)):
        for v in value:
            _objects(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _objects(v, out)
    if isinstance(value, tuple) and hasattr(value, "__dict__"):
        for v in vars(value).values():
            _objects(v, out)
    return out


def identities(result, args) -> list:
    """Which of the objects reachable from the result and the arguments are one object."""
    objs = _objects((result, list(args)), [])
    objs = [o for o in objs if not isinstance(o, (int, float, bool, str, type(None)))]
    return [[i for i, b in enumerate(objs) if a is b] for a in objs]


def run_against_eager(backend, fn, argsets, state=None):
    """Call ``fn`` eagerly and optimized on copies of each argument tuple in ``argsets``;
    compare results, identity relations, arguments after the call, the global torch state
    (grad mode, inference mode, default dtype, autocast: differential.global_state) and
    ``state()`` (object state the function touches: a snapshot taken after each call)."""
    torch_plugin.reset()
    opt = torch_plugin.optimize(backend)(fn)
    try:
        for i, args in enumerate(argsets):
            eager_args, opt_args = copy.deepcopy(args), copy.deepcopy(args)
            try:
                expected = fn(*eager_args)
            except Exception as e:  # noqa: BLE001 - the optimized call must raise it too
                with pytest.raises(type(e)):
                    opt(*opt_args)
                continue
            eager_ids = identities(expected, eager_args)
            eager_state = state() if state else None
            eager_global = global_state()
            got = opt(*opt_args)
            assert same(expected, got), f"call {i}: result {got} != eager {expected}"
            assert identities(got, opt_args) == eager_ids, (
                f"call {i}: identity relations differ from eager"
            )
            assert same(list(eager_args), list(opt_args)), f"call {i}: arguments differ"
            assert global_state() == eager_global, f"call {i}: global torch state differs"
            if state:
                assert same(eager_state, state()), f"call {i}: state {state()} != {eager_state}"
    finally:
        torch_plugin.reset()


def argsets(make, shapes=((4, 3), (4, 3), (4, 3), (5, 2))):
    """Fresh random inputs per call (``make(shape)``); the last call recompiles with another
    shape (automatic dynamic)."""
    return [make(shape) for shape in shapes]
