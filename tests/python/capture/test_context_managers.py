"""``with`` blocks on Python context managers (variables/context_managers.py): user classes
with ``__enter__``/``__exit__``, ``contextlib.nullcontext``, ``@contextlib.contextmanager``
functions, inside one graph; and a graph break inside a ``with`` block, which moves to the
``with`` statement (before, the whole frame ran unmodified). Each compares with eager over
calls: outputs, the context manager's own state, globals it changes, grad mode after."""

from __future__ import annotations

import contextlib

import pytest
import torch

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture")

LOG: list = []


class Counting:
    """Records entries and exits; ``__enter__`` returns a scale read from the object."""

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.events: list = []

    def __enter__(self):
        self.events.append("enter")
        return self.scale

    def __exit__(self, *exc):
        self.events.append("exit")
        return False


@contextlib.contextmanager
def logged(tag):
    LOG.append(("enter", tag))
    yield 3.0
    LOG.append(("exit", tag))


class Toggle:
    """Sets ``active`` while entered; the block reads it."""

    def __init__(self, scale: float) -> None:
        self.scale = scale
        self.active = False

    def __enter__(self):
        self.active = True
        return self.scale

    def __exit__(self, *exc):
        self.active = False
        return False


def test_user_context_manager_in_one_graph():
    cm_a, cm_b = Toggle(2.0), Toggle(2.0)

    def f(cm, x):
        with cm as s:
            y = x * s if cm.active else x
        return y, cm.active

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(3):
        x = torch.randn(4)
        torch.testing.assert_close(opt(cm_a, x), f(cm_b, x))
        assert cm_a.active is cm_b.active is False
    assert torch_plugin.stats.graph_breaks == []
    assert torch_plugin.stats.graphs_compiled == 1


def test_nullcontext_and_contextmanager_in_one_graph():
    def f(x, use_amp):
        ctx = contextlib.nullcontext() if not use_amp else torch.autocast("cpu")
        with ctx:  # noqa: SIM117 - two blocks, each entered on its own
            with logged("a") as k:
                y = x * k
        return y.sum()

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(3):
        x = torch.randn(4)
        LOG.clear()
        got = opt(x, False)
        got_log = list(LOG)
        LOG.clear()
        torch.testing.assert_close(got, f(x, False))
        assert got_log == LOG == [("enter", "a"), ("exit", "a")]
    assert torch_plugin.stats.graph_breaks == []
    assert torch_plugin.stats.graphs_compiled == 1


def test_graph_break_inside_a_user_with_block():
    """The break moves to the ``with`` statement: the graph before it is compiled, the block
    runs in the resume function; entries and exits counted as in eager."""
    cm_a, cm_b = Counting(3.0), Counting(3.0)

    def f(cm, x):
        y = x.sin() * 2
        with cm as s:
            print(end="")  # a graph break inside the block
            y = y * s
        return y.cos()

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(3):
        x = torch.randn(4)
        torch.testing.assert_close(opt(cm_a, x), f(cm_b, x))
        assert cm_a.events == cm_b.events
    # the resume function starts inside the block: its own break there keeps the block's
    # exit handler (capture/try_blocks.py), so the code after the print is compiled too
    breaks = [name.split(".")[-1] for name, _, _ in torch_plugin.stats.graph_breaks]
    assert breaks == ["f", "<resume at line 105>"], breaks
    assert not any(name.endswith(".f") for name, _, _ in torch_plugin.stats.failures)
    assert torch_plugin.stats.graphs_compiled == 4  # f, then the resume: two shapes each


def test_graph_break_inside_no_grad_compiles_the_code_before_it():
    def f(x, w):
        y = (x @ w).relu()
        with torch.no_grad():
            print(end="")  # a graph break inside the block
            z = y * 2
        return y + z, torch.is_grad_enabled()

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(2):
        x, w = torch.randn(3, 4), torch.randn(4, 4, requires_grad=True)
        got, want = opt(x, w), f(x, w)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1] and torch.is_grad_enabled()
        assert got[0].requires_grad == want[0].requires_grad
    # the product before the block is a compiled graph (before: the frame ran unmodified)
    assert torch_plugin.stats.graphs_compiled >= 1
    assert not any(name.endswith(".f") for name, _, _ in torch_plugin.stats.failures)


def test_contextmanager_that_yields_twice_is_not_captured_wrong():
    @contextlib.contextmanager
    def twice():
        yield 1
        yield 2

    def f(x):
        with twice():
            y = x + 1
        return y

    opt = torch_plugin.optimize("eager")(f)
    with pytest.raises(RuntimeError, match="didn't stop"):
        f(torch.randn(2))
    with pytest.raises(RuntimeError, match="didn't stop"):
        opt(torch.randn(2))
