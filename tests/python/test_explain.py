"""torch_plugin.explain: graphs, graph breaks with the user's line, ops, guards, times, report."""

import inspect
import operator
import sys

import pytest
import torch

import torch_plugin
from torch_plugin.capture.convert_frame import listeners
from torch_plugin.capture.exc import UserSourceLocation
from torch_plugin.explain import NO_TENSOR_OPS, BreakReason, ExplainOutput, op_name

pytestmark = pytest.mark.usefixtures("fresh_capture", "tensor_branches_break")


def bar(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


# What the first graph of ``bar`` ends with. 3.11 and 3.12 compile ``if b.sum() < 0:`` to
# COMPARE_OP then a conditional jump: the comparison is a graph op and the break lands on the
# jump, which takes the 0-dim bool tensor ``lt`` from the graph. 3.13 compiles it to one
# COMPARE_OP with its convert-to-bool bit, the instruction that decides the tensor's truth:
# the break lands there, CPython runs the comparison on ``b.sum()`` (a graph output), and the
# graph has no ``lt``.
PY313 = sys.version_info >= (3, 13)
BRANCH_OPS = [] if PY313 else [operator.lt]


def line_of(fn, text: str) -> int:
    """The file line number of the line of ``fn`` whose stripped source is ``text``."""
    lines, first = inspect.getsourcelines(fn)
    (index,) = [i for i, line in enumerate(lines) if line.strip() == text]
    return first + index


def op_nodes(gm):
    return [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]


def test_bar_reports_the_break_with_its_line_and_source():
    out = torch_plugin.explain(bar, torch.randn(10), torch.rand(10) + 0.1)
    assert isinstance(out, ExplainOutput)
    assert out.graph_count == len(out.graphs) == 2
    assert out.graph_break_count == len(out.break_reasons) == 1
    assert out.not_captured == []
    br = out.break_reasons[0]
    assert "data-dependent" in br.reason
    assert br.frame == "bar" and br.function == "bar"
    assert br.filename == __file__
    assert br.lineno == line_of(bar, "if b.sum() < 0:")
    assert br.source_line == "if b.sum() < 0:"


def test_bar_ops_per_graph_and_op_count():
    out = torch_plugin.explain(bar, torch.randn(10), torch.rand(10) + 0.1)
    first, second = out.ops_per_graph
    # graph 1: the division and the branch condition; graph 2 (b >= 0): x * b
    assert first == [torch.abs, operator.add, operator.truediv, "sum", *BRANCH_OPS]
    assert second == [operator.mul]
    assert out.op_count == sum(len(op_nodes(g)) for g in out.graphs) == 5 + len(BRANCH_OPS)
    for ops, gm in zip(out.ops_per_graph, out.graphs):
        assert ops == [n.target for n in op_nodes(gm)]


def test_bar_negative_takes_the_other_branch():
    out = torch_plugin.explain(bar, torch.randn(10), -(torch.rand(10) + 0.1))
    assert out.graph_count == 2 and out.graph_break_count == 1
    assert out.ops_per_graph[1] == [operator.mul, operator.mul]  # b * -1, then x * b


def test_graphs_are_runnable_and_match_eager():
    a, b = torch.randn(6), torch.randn(6)
    out = torch_plugin.explain(bar, a, b)
    cond, x = out.graphs[0](a, b)
    torch.testing.assert_close(x, a / (torch.abs(a) + 1))
    if PY313:  # the value CPython compares (see BRANCH_OPS)
        torch.testing.assert_close(cond, b.sum())
    else:
        assert cond.dtype == torch.bool and bool(cond) == bool(b.sum() < 0)


def test_guards_are_in_source_terms_and_follow_the_inputs():
    out = torch_plugin.explain(bar, torch.randn(10), torch.randn(10))
    assert out.out_guards == [g for f in out.frames for g in f.guards]
    first = out.frames[0].guards
    assert any(g.startswith("L['a']: tensor") and "size=[10]" in g for g in first)
    assert any(g.startswith("L['b']: tensor") for g in first)
    # the resume function's guards are on the live values it receives
    assert any(g.startswith("L['x']: tensor") for g in out.frames[1].guards)
    other = torch_plugin.explain(bar, torch.randn(3, 2), torch.randn(3, 2))
    assert any("size=[3, 2]" in g for g in other.out_guards)
    assert not any("size=[10]" in g for g in other.out_guards)


def test_compile_times_sum_the_frames():
    out = torch_plugin.explain(bar, torch.randn(4), torch.randn(4))
    t = out.compile_times
    assert t.translate_s > 0 and t.backend_s >= 0
    assert t.translate_s == pytest.approx(sum(f.translate_time_s for f in out.frames))
    assert t.backend_s == pytest.approx(sum(f.compile_time_s for f in out.frames))
    assert t.total_s == pytest.approx(t.translate_s + t.backend_s)


def test_report_text():
    out = torch_plugin.explain(bar, torch.randn(4), torch.rand(4) + 0.1)  # b >= 0: 6 ops (3.13: 5)
    text = str(out)
    lineno = line_of(bar, "if b.sum() < 0:")
    assert f"2 graphs, 1 graph break, {5 + len(BRANCH_OPS)} ops" in text
    assert f'File "{__file__}", line {lineno}, in bar' in text
    assert "if b.sum() < 0:" in text
    assert "torch.abs" in text and "Tensor.sum" in text
    assert "L['a']: tensor" in text
    assert f"graph break at line {lineno} in bar" in text


def test_whole_graph_has_no_breaks():
    def f(x, y):
        return torch.cos(x) + torch.sin(y)

    out = torch_plugin.explain(f, torch.randn(3), torch.randn(3))
    assert (out.graph_count, out.graph_break_count, out.op_count) == (1, 0, 3)
    assert out.ops_per_graph == [[torch.cos, torch.sin, operator.add]]
    assert "Graph breaks" not in str(out)


def test_kwargs_are_passed():
    def f(x, *, scale):
        return x * scale

    out = torch_plugin.explain(f, torch.randn(3), scale=torch.randn(3))
    assert out.graph_count == 1 and out.ops_per_graph == [[operator.mul]]


def test_break_inside_an_inlined_call_names_the_callee_line():
    def helper(x):
        if x.sum() > 0:
            return x * 2
        return x

    def outer(x):
        y = x + 1
        return helper(y) - 1

    out = torch_plugin.explain(outer, torch.ones(3))
    assert out.graph_break_count >= 1
    first = out.break_reasons[0]
    assert first.frame == "test_break_inside_an_inlined_call_names_the_callee_line.<locals>.outer"
    assert first.function == "helper"
    assert first.lineno == line_of(helper, "if x.sum() > 0:")
    assert first.source_line == "if x.sum() > 0:"


class BranchyModule(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        x = self.linear(x)
        if x.sum() > 0:
            x = x * 3
        return torch.relu(x)


def test_module_as_fn():
    module = BranchyModule()
    out = torch_plugin.explain(module, torch.randn(2, 4))
    assert out.graph_count == 2 and out.graph_break_count == 1
    br = out.break_reasons[0]
    assert br.frame == "BranchyModule.forward"
    assert br.lineno == line_of(BranchyModule.forward, "if x.sum() > 0:")
    assert any(g.startswith("L['self']") for g in out.frames[0].guards)
    assert torch.relu in out.ops_per_graph[-1]


def test_optimized_wrappers_are_unwrapped():
    wrapped = torch_plugin.optimize("eager")(bar)
    out = torch_plugin.explain(wrapped, torch.randn(4), torch.randn(4))
    assert (out.graph_count, out.graph_break_count) == (2, 1)
    module = torch_plugin.optimize("eager")(BranchyModule())
    out = torch_plugin.explain(module, torch.randn(2, 4))
    assert out.break_reasons[0].frame == "BranchyModule.forward"


def test_frames_not_captured_are_reported(monkeypatch):
    monkeypatch.setattr(torch_plugin.config, "graph_breaks", False)
    out = torch_plugin.explain(bar, torch.randn(4), torch.randn(4))
    assert out.graph_count == 0 and out.graph_break_count == 0
    (nc,) = out.not_captured
    assert nc.frame == "bar" and "data-dependent" in nc.reason
    assert nc.lineno == line_of(bar, "if b.sum() < 0:")
    assert nc.source_line == "if b.sum() < 0:"
    assert "bar: not captured: data-dependent" in str(out)


def test_frames_without_tensor_operations_are_listed_as_plain_python():
    def no_tensors(n):
        return n + 1

    out = torch_plugin.explain(no_tensors, 3)
    assert out.graph_count == 0
    assert [(nc.frame, nc.reason) for nc in out.not_captured] == [
        (no_tensors.__qualname__, NO_TENSOR_OPS)
    ]
    text = str(out)
    assert "0 frames not captured" in text
    assert f"ran as plain Python): {no_tensors.__qualname__}" in text


def test_fresh_state_and_restored_after():
    opt = torch_plugin.optimize("eager")(bar)
    opt(torch.randn(4), torch.randn(4))
    before = (torch_plugin.stats.graphs_compiled, list(torch_plugin.stats.graph_breaks))
    n_listeners = len(listeners)
    a, b = torch.randn(4), torch.randn(4)
    out1 = torch_plugin.explain(bar, a, b)
    out2 = torch_plugin.explain(bar, a, b)
    # bar compiled before explain, and explain ran twice: each run still sees the break
    assert out1.graph_break_count == out2.graph_break_count == 1
    assert out1.ops_per_graph == out2.ops_per_graph
    assert (torch_plugin.stats.graphs_compiled, torch_plugin.stats.graph_breaks) == before
    assert len(listeners) == n_listeners


def test_exception_from_fn_propagates_and_state_is_restored():
    def boom(x):
        x = x + 1
        raise ValueError("boom")

    n_listeners = len(listeners)
    before = torch_plugin.stats.graphs_compiled
    with pytest.raises(ValueError, match="boom"):
        torch_plugin.explain(boom, torch.randn(2))
    assert len(listeners) == n_listeners
    assert torch_plugin.stats.graphs_compiled == before


def test_not_callable():
    with pytest.raises(TypeError, match="function or nn.Module"):
        torch_plugin.explain(3)


def test_break_reason_from_location_text_and_object():
    loc = UserSourceLocation(__file__, line_of(bar, "return x * b"), "bar")
    from_obj = BreakReason.from_capture("why", "bar", loc)
    from_text = BreakReason.from_capture("why", "bar", str(loc))
    assert from_obj == from_text
    assert from_text.source_line == "return x * b"
    assert from_text.location == f"{__file__}:{loc.lineno}"
    unknown = BreakReason.from_capture("why", "bar", None)
    assert unknown.filename is None and "location unknown" in str(unknown)


def test_op_names_in_the_report():
    class Small(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(2, 2)

        def forward(self, x):
            return torch.relu(self.linear(x)).sum() + 1

    gm = torch.fx.symbolic_trace(Small())
    names = [op_name(n) for n in gm.graph.nodes if n.op.startswith("call_")]
    assert names == ["linear (Linear)", "torch.relu", "Tensor.sum", "add"]
