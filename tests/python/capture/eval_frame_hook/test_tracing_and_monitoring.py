"""What ``sys.settrace`` and ``sys.monitoring`` see of a replaced frame: only the transformed one.

See conftest.py and frame_callbacks.py in this folder."""

from __future__ import annotations

import sys

import pytest
from frame_callbacks import Compiler, capturing


def test_tracing_sees_only_the_transformed_frame():
    def original(x):
        return ("original", x)

    def transformed(x):
        return ("transformed", x)

    events = []

    def tracer(frame, event, arg):
        if frame.f_code.co_name in ("original", "transformed"):
            events.append((event, frame.f_code.co_name))
        return tracer

    cb = Compiler().add(original, transformed)
    with capturing(cb):
        sys.settrace(tracer)
        try:
            assert original(1) == ("transformed", 1)
            assert original(2) == ("transformed", 2)
        finally:
            sys.settrace(None)
    assert ("call", "original") not in events
    assert ("exception", "original") not in events
    assert events.count(("call", "transformed")) == 2
    assert events.count(("return", "transformed")) == 2


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is 3.12+")
def test_monitoring_sees_no_events_for_replaced_frames():
    mon = sys.monitoring
    tool = 4
    seen = []

    def original(x):
        return ("original", x)

    def transformed(x):
        return ("transformed", x)

    def record(name):
        def handler(code, *args):
            if code.co_name in ("original", "transformed"):
                seen.append((name, code.co_name))

        return handler

    events = {
        "PY_START": mon.events.PY_START,
        "PY_THROW": mon.events.PY_THROW,
        "RAISE": mon.events.RAISE,
        "PY_UNWIND": mon.events.PY_UNWIND,
        "PY_RETURN": mon.events.PY_RETURN,
    }
    cb = Compiler().add(original, transformed)
    mon.use_tool_id(tool, "torch_plugin test")
    try:
        for name, event in events.items():
            mon.register_callback(tool, event, record(name))
        mon.set_events(tool, sum(events.values()))
        with capturing(cb):
            assert original(1) == ("transformed", 1)
    finally:
        mon.set_events(tool, 0)
        for event in events.values():
            mon.register_callback(tool, event, None)
        mon.free_tool_id(tool)
    assert seen == [("PY_START", "transformed"), ("PY_RETURN", "transformed")]
