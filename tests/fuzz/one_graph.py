"""One-graph checks for hand-written capture tests: :func:`assert_one_graph` (capture takes a
function whole, with no graph break, under ``nopython=True``) and :func:`check_one_graph`
(that, after :func:`differential.check` compared it with eager). The worlds are built as
:func:`differential.check` builds them (fresh deep copies, globals restored after)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from differential import DEFAULT_BACKENDS, _copying_factory, check

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
