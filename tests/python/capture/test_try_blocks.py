"""Graph breaks inside try/except/finally blocks (capture/try_blocks.py, issue #31).

A break inside a ``try`` compiles the code before it, runs the breaking instruction inside
the try's handler and resumes in the try. Each case runs through the differential harness
(eager vs the "eager", "aot_eager" and "plugin" backends, three calls, everything observable
compared), on inputs that take the normal path and inputs that raise: from the breaking
instruction itself, from later code in the try, and from the compiled graph before the
break (the frame then runs again in plain Python). Then it checks that the frame itself was
captured (before, it ran unmodified: a failure recorded under its name).
"""

import contextlib

import pytest
import torch
from differential import check

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture")

LOG: list = []


@torch_plugin.disable
def opaque(t, fail=False):
    """A graph break (a call capture never enters); raises ValueError when ``fail``."""
    LOG.append(tuple(t.shape))
    if fail:
        raise ValueError("opaque failed")
    return t + 1


def _frame_captured(fn, calls):
    """Run ``fn`` under the "eager" backend and assert its own frame was captured with a
    graph break (not run unmodified)."""
    torch_plugin.reset()
    opt = torch_plugin.optimize("eager")(fn)
    for args in calls:
        args = args() if callable(args) else args
        with contextlib.suppress(Exception):  # the differential check compared it already
            opt(*args)
    failed = [f for f in torch_plugin.stats.failures if f[0] == fn.__qualname__]
    assert not failed, failed
    assert torch_plugin.stats.graphs_compiled >= 1
    assert any(b[0] == fn.__qualname__ for b in torch_plugin.stats.graph_breaks)


def _calls(*specs):
    """Argument tuples built lazily: (shape, flag) pairs -> (randn(shape), flag)."""
    return [(lambda s=s, k=k: (torch.randn(*s), k)) for s, k in specs]


def try_except(x, fail):
    y = x.sin()
    try:
        y = y * 2
        y = opaque(y, fail) + 1
        out = y.cos()
    except ValueError:
        out = y - 100  # y as it was before the breaking call
    return out


def try_except_raise_after_break(x, fail):
    y = x + 1
    try:
        y = opaque(y) * 2
        if fail:
            raise KeyError("late")
        y = y - 3
    except KeyError as e:
        y = y + len(str(e))
    finally:
        y = y * 3
    return y


def try_finally_return_inside(x, fail):
    log = []
    try:
        z = opaque(x * 2, fail)
        log.append(1)
        return z.relu(), log
    finally:
        log.append(2)


def loop_with_try_continue(x, n):
    total = x
    for i in range(3):
        try:
            total = total + i
            total = opaque(total, fail=(i == n))
        except ValueError:
            total = total * 2
            continue
        total = total - 1
    return total


def nested_try(x, fail):
    try:
        y = x * 3
        try:
            y = opaque(y, fail)
        except KeyError:
            y = y * 0  # not taken: opaque raises ValueError
        y = y + 1
    except ValueError:
        y = x - 7
    return y


def with_inside_try(x, fail):
    try:
        with torch.no_grad():
            y = x * 2
            y = opaque(y, fail)
    except ValueError:
        y = x.exp()
    return y * torch.is_grad_enabled()


CASES = [
    try_except,
    try_except_raise_after_break,
    try_finally_return_inside,
    nested_try,
    with_inside_try,
]


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_break_inside_try(fn):
    calls = _calls(((3,), False), ((3,), True), ((4,), False))
    check(fn, *calls, observe={"globals": globals()})
    _frame_captured(fn, calls)


def test_break_inside_try_in_a_loop():
    calls = [lambda: (torch.randn(3), 1), lambda: (torch.randn(3), 1), lambda: (torch.randn(4), 2)]
    check(loop_with_try_continue, *calls, observe={"globals": globals()})
    _frame_captured(loop_with_try_continue, calls)


def index_in_try(x, idx):
    try:
        y = torch.index_select(x.sin(), 0, idx)  # out of range: raises inside the graph
        y = opaque(y)
        return y * 2
    except (IndexError, RuntimeError):
        return x.cos()


def test_exception_from_the_compiled_part_reaches_the_handler():
    good = lambda: (torch.randn(5), torch.tensor([0, 3]))
    bad = lambda: (torch.randn(5), torch.tensor([0, 9]))
    check(index_in_try, good, bad, lambda: (torch.randn(6), torch.tensor([1, 2])))
    opt = torch_plugin.optimize("eager")(index_in_try)
    x = torch.randn(5)
    torch.testing.assert_close(opt(x, torch.tensor([0, 3])), index_in_try(x, torch.tensor([0, 3])))
    torch.testing.assert_close(opt(x, torch.tensor([0, 9])), x.cos())
    assert not [f for f in torch_plugin.stats.failures if f[0] == "index_in_try"]


def mutate_then_break(x, fail):
    x.add_(1)  # in place on an input: the graph cannot be run again after it raised
    try:
        x.mul_(2)
        y = opaque(x, fail)
    except ValueError:
        y = x - 1
    return y


def test_graph_that_cannot_rerun_breaks_at_the_try():
    """A graph with an in-place write inside the try: the break moves to the ``try``
    statement (the graph before it is compiled, the try runs in a resume function)."""
    calls = [lambda: (torch.randn(3), False), lambda: (torch.randn(3), True)]
    calls.append(lambda: (torch.randn(4), False))
    check(mutate_then_break, *calls)
    _frame_captured(mutate_then_break, calls)
