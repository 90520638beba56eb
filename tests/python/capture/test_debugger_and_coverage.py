"""A debugger (``sys.settrace``) or a coverage tool (``sys.monitoring``, 3.12+) active while
functions are captured and run keeps working (issue #28).

The frame hook captures under either tool (it steps aside only while a trace or monitoring
callback itself runs: docs/internals/capture_hook.md); the tool sees the transformed code
rather than the original lines of a captured function, as with torch.compile. What these
tests check is what a user of the tool can observe: the optimized function matches eager
over a compiling, a cached and a graph-breaking call; the tool is still installed afterwards
with the same events; it still receives every line of uncaptured code run after the
optimized calls. The frame-level counterpart (which events a replaced frame raises) is
eval_frame_hook/test_tracing_and_monitoring.py.
"""

from __future__ import annotations

import sys

import pytest
import torch

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture", "tensor_branches_break")


def model(x, y):
    z = torch.relu(x) @ y
    if z.sum() > 0:  # data-dependent: a graph break and a resume function
        z = z * 2
    return torch.tanh(z) + 1


def plain(a):  # never optimized: the tool must see both lines
    b = a + 1
    return b * 2


PLAIN_LINES = {plain.__code__.co_firstlineno + 1, plain.__code__.co_firstlineno + 2}


def _run_optimized() -> None:
    opt = torch_plugin.optimize("eager")(model)
    for sign in (1, 1, -1):  # compiling, cached, the other branch
        x, y = torch.rand(4, 4) * sign, torch.rand(4, 4)
        torch.testing.assert_close(opt(x, y), model(x, y))
    assert torch_plugin.stats.graphs_compiled >= 2  # captured under the tool, not skipped
    assert len(torch_plugin.stats.graph_breaks) >= 1


def test_settrace_debugger_keeps_working():
    lines = []

    def tracer(frame, event, arg):
        if frame.f_code is plain.__code__ and event == "line":
            lines.append(frame.f_lineno)
        return tracer

    sys.settrace(tracer)
    try:
        _run_optimized()
        assert plain(1) == 4
        installed = sys.gettrace()
    finally:
        sys.settrace(None)
    assert installed is tracer
    assert set(lines) == PLAIN_LINES


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_monitoring_coverage_tool_keeps_working():
    mon = sys.monitoring
    tool = next(t for t in range(6) if mon.get_tool(t) is None)
    wanted = mon.events.LINE | mon.events.PY_START
    lines, starts = set(), []

    def on_line(code, line):
        if code is plain.__code__:
            lines.add(line)

    def on_start(code, offset):
        if code is plain.__code__:
            starts.append(offset)

    mon.use_tool_id(tool, "coverage-like test tool")
    try:
        mon.register_callback(tool, mon.events.LINE, on_line)
        mon.register_callback(tool, mon.events.PY_START, on_start)
        mon.set_events(tool, wanted)
        _run_optimized()
        assert plain(1) == 4
        events_after = mon.get_events(tool)
    finally:
        mon.set_events(tool, 0)
        mon.register_callback(tool, mon.events.LINE, None)
        mon.register_callback(tool, mon.events.PY_START, None)
        mon.free_tool_id(tool)
    assert events_after == wanted
    assert lines == PLAIN_LINES
    assert starts == [0]
