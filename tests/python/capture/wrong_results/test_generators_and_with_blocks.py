"""Issue #10 regressions: code that runs partly or around a block. Generators run as far as
eager runs them, a user context manager's ``__exit__`` happens, and a resume function that
starts inside a ``with`` block unwinds an exception like CPython.

Each case runs eager and each backend on deep copies of fresh random inputs, over several
calls (the compiling call, cached calls, calls that recompile), and compares the result and
every argument after the call (in-place mutations included): eager_comparison.py.
"""

import pytest
import torch
from eager_comparison import BACKENDS, run_against_eager

import torch_plugin

# a branch on a tensor is these tests' graph break (conftest.py)
pytestmark = pytest.mark.usefixtures("tensor_branches_break")


# --- 2. a user context manager's __exit__ runs (its effect is seen) ----------------------
class _Recorder:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, *exc):
        self.log.append("exit")
        return False


def _context_manager_appends(x, log):
    with _Recorder(log):
        y = x * 2
    log.append("after")
    return y + len(log)


@pytest.mark.parametrize("backend", BACKENDS)
def test_user_context_manager_exit_effect(backend):
    run_against_eager(backend, _context_manager_appends, [(torch.randn(3), []) for _ in range(3)])


# --- 5. generators run as far as eager runs them -----------------------------------------
def _gen_with_effects(x, log):
    for i in range(4):
        log.append(i)
        yield x * i


def _partially_consumed_generator(x, log):
    total = x
    for i, y in enumerate(_gen_with_effects(x, log)):
        total = total + y
        if i == 1:
            break
    return total + len(log)


def _next_on_generator(x, log):
    g = _gen_with_effects(x, log)
    a = next(g)
    b = next(g)
    return a + b + len(log)


def _any_stops_early(x, log):
    found = any(y.shape[0] == 3 for y in _gen_with_effects(x, log))
    return x + len(log) + int(found)


def _zip_with_generator(x, log):
    out = x
    for y, k in zip(_gen_with_effects(x, log), [1, 2]):
        out = out + y * k
    return out + len(log)


def _generator_then_graph_break(x, log):
    g = _gen_with_effects(x, log)
    a = next(g)
    print(end="")  # a graph break while the generator is suspended
    b = next(g)
    return a + b + len(log)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "fn",
    [
        _partially_consumed_generator,
        _next_on_generator,
        _any_stops_early,
        _zip_with_generator,
        _generator_then_graph_break,
    ],
    ids=["for_break", "next", "any", "zip", "graph_break"],
)
def test_generator_runs_as_far_as_eager(backend, fn):
    run_against_eager(backend, fn, [(torch.randn(3), []) for _ in range(3)])


# --- resume functions that start inside a `with` block ------------------------------------
class _Suppress(_Recorder):
    def __exit__(self, *exc):
        self.log.append("exit")
        return True  # swallows the exception: CPython unwinds to the block's handler


def _raise_inside_with(x, log):
    y = x + 1
    with _Suppress(log):  # built by capture (new_object.py), then a graph break at the `with`
        y = y * 2
        if x.sum() > 0:  # data-dependent: the resume function inside the block runs as is
            raise ValueError("swallowed by __exit__")
        y = y - 1
    return y + len(log)


@pytest.mark.parametrize("backend", BACKENDS)
def test_exception_inside_with_block_of_a_resume_function(backend):
    """A resume function entered inside a `with` block had no stack depth for the block's
    exception-table entry (32768): the first exception unwound into garbage (a segfault,
    fuzz seed 230)."""
    argsets = [(torch.randn(3) + (1 if i % 2 else -1) * 5, []) for i in range(4)]
    run_against_eager(backend, _raise_inside_with, argsets)


def test_resume_functions_have_sane_exception_table_depths():
    """Every exception-table entry of every resume function made while running the case above
    has a stack depth within the code's stack size (an unset depth was 32768)."""

    from torch_plugin.capture import resume_execution

    torch_plugin.reset()
    opt = torch_plugin.optimize("eager")(_raise_inside_with)
    for sign in (1, -1):
        opt(torch.randn(3) + sign * 5, [])
    codes = [
        c
        for (code, _), c in resume_execution._cache.items()
        if code.co_name.endswith("_raise_inside_with") or "_raise_inside_with" in code.co_qualname
    ]
    assert codes
    for code in codes:
        # the ranges an instruction that can run lies in (a resume function keeps the
        # original code after its prologue, unreachable, with ranges bytecode gives no depth)
        for entry in resume_execution.live_exception_entries(code):
            assert entry.depth <= code.co_stacksize, (code.co_qualname, entry)
        assert resume_execution.live_exception_entries(code)
    torch_plugin.reset()
