"""One-graph checks for hand-written capture tests: :func:`assert_one_graph` (capture takes a
function whole, with no graph break, under ``nopython=True``) and :func:`check_one_graph`
(that, after :func:`differential.check` compared it with eager). The worlds are built as
:func:`differential.check` builds them (fresh deep copies, globals restored after).

The issue #31 audit's form (tests/python/capture/test_issue31_*.py) is :func:`one_graph`:
equal to eager on the eager backend with graph breaks allowed, and under ``fullgraph=True``
with no graph break; :func:`_probe` is its one run, :data:`CALLS` (made by :func:`rand`) its
default calls."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from differential import DEFAULT_BACKENDS, _copying_factory, _run_world, check, compare_runs

import torch_plugin
from torch_plugin.capture import convert_frame


def assert_one_graph(fn: Any, *calls: Any, observe: dict | None = None, graphs: int = 1) -> None:
    """Assert that capture takes ``fn`` whole: run over ``calls`` on a fresh copy of the
    world (as :func:`check` makes them) under ``optimize("eager", nopython=True)``, which
    raises ``torch_plugin.CaptureError`` at a graph break, it breaks no graph and compiles
    at least ``graphs`` graphs (0: a frame that may run as plain Python). ``calls`` and
    ``observe`` are :func:`check`'s; the globals are restored afterwards and the capture
    state reset. Results are not compared: :func:`check_one_graph` does both."""
    build = _copying_factory(fn, calls, observe, None)
    try:
        world = build()
        torch_plugin.reset()
        opt = torch_plugin.optimize("eager", nopython=True)(world.fn)
        for args in world.calls:
            opt(*(args() if callable(args) else args))
        stats = convert_frame.stats
        assert stats.graph_breaks == [], stats.graph_breaks
        assert stats.graphs_compiled >= graphs, stats.graphs_compiled
    finally:
        build()
        torch_plugin.reset()


def check_one_graph(
    fn: Any,
    *calls: Any,
    observe: dict | None = None,
    graphs: int = 1,
    backends: Sequence[str] = DEFAULT_BACKENDS,
) -> None:
    """:func:`check` ``fn`` over ``calls`` on ``backends``, then :func:`assert_one_graph`:
    it behaves as in eager and capture takes it as one graph, with no graph break."""
    check(fn, *calls, observe=observe, backends=backends)
    assert_one_graph(fn, *calls, observe=observe, graphs=graphs)


def rand(*shape: int) -> Any:
    """A call's arguments: a factory of one fresh ``torch.randn(*shape)``."""
    return lambda: (torch.randn(*shape),)


# The default calls: compile, cached (same shape), recompile (another shape).
CALLS = (rand(3), rand(3), rand(4))


def _probe(fn, calls, observe, fullgraph):
    """(mismatch or None, graphs compiled, graph-break reasons) of ``fn`` under the eager
    backend against eager Python."""
    calls = calls or CALLS
    build = _copying_factory(fn, calls, observe, None)
    try:
        ref = _run_world(build, None, 0)
        torch_plugin.reset()

        got = _run_world(build, "eager", 0, fullgraph=fullgraph)
        stats = convert_frame.stats
        breaks = [str(r) for _, r, _ in stats.graph_breaks + stats.failures]
        return compare_runs(ref, got, "eager", 1.3e-6, 1e-5), stats.graphs_compiled, breaks
    finally:
        build()
        torch_plugin.reset()


def one_graph(fn, calls=None, observe=None):
    """Equal to eager with graph breaks allowed, and under fullgraph with none."""
    m, _, _ = _probe(fn, calls, observe, fullgraph=False)
    assert m is None, f"WRONG RESULT (graph breaks allowed): {m}"
    m, _, breaks = _probe(fn, calls, observe, fullgraph=True)
    # a frame without tensor operations runs as plain Python (as under torch.compile)
    breaks = [b for b in breaks if b != "no tensor operations to capture"]
    assert not breaks, breaks
    assert m is None, f"fullgraph: {m}"
