"""Dynamic shapes: automatic dynamic, ``mark_dynamic``, ``optimize(dynamic=...)`` and the
shape guards (torch_plugin/capture/{dynamic_shapes,shape_guards}.py,
csrc/capture/shape_guards.cpp).

Every test compares with eager PyTorch on fresh random inputs and counts compiles.
"""

from __future__ import annotations

import pytest
import torch

import torch_plugin
from torch_plugin import _C, stats


@pytest.fixture(autouse=True)
def fresh(fresh_capture):
    yield


def run_sweep(opt, eager, make_inputs, sizes):
    for n in sizes:
        args = make_inputs(n)
        torch.testing.assert_close(opt(*args), eager(*args))


def scale_and_flatten(x, y):
    return (x * 2 + y).view(x.size(0), -1).sum(1)


def pair(n):
    return torch.randn(n, 3, 4), torch.randn(n, 3, 4)


def test_automatic_dynamic_compiles_twice_for_a_sweep():
    opt = torch_plugin.optimize("eager")(scale_and_flatten)
    run_sweep(opt, scale_and_flatten, pair, [1, 2, 3, 4, 7, 16, 5, 2, 1])
    assert stats.graphs_compiled == 2  # size 1 (static), then symbolic from size 2 on


def test_dynamic_false_recompiles_every_size():
    opt = torch_plugin.optimize("eager", dynamic=False)(scale_and_flatten)
    run_sweep(opt, scale_and_flatten, pair, [2, 3, 4])
    assert stats.graphs_compiled == 3


def test_dynamic_true_is_symbolic_from_the_first_compile():
    opt = torch_plugin.optimize("eager", dynamic=True)(scale_and_flatten)
    run_sweep(opt, scale_and_flatten, pair, [3, 2, 9, 4])
    assert stats.graphs_compiled == 1
    run_sweep(opt, scale_and_flatten, pair, [1])  # 0 and 1 are never symbolic
    assert stats.graphs_compiled == 2


def test_dynamic_must_be_none_or_bool():
    with pytest.raises(TypeError, match="dynamic"):
        torch_plugin.optimize("eager", dynamic="yes")


def test_mark_dynamic():
    def f(x):
        return torch.nn.functional.softmax(x, dim=-1) * x.size(1)

    opt = torch_plugin.optimize("eager", dynamic=False)(f)
    for n in (5, 6, 11):
        x = torch.randn(2, n)
        torch_plugin.mark_dynamic(x, 1)
        torch.testing.assert_close(opt(x), f(x))
    assert stats.graphs_compiled == 1


def test_mark_dynamic_rejects_bad_arguments():
    with pytest.raises(TypeError, match="torch.Tensor"):
        torch_plugin.mark_dynamic([1, 2], 0)
    with pytest.raises(IndexError, match="out of range"):
        torch_plugin.mark_dynamic(torch.randn(2, 3), 2)


def test_backends_receive_symbolic_sizes():
    seen = []

    def backend(gm, example_inputs):
        seen.append([n.meta["example_value"] for n in gm.graph.nodes if n.op == "placeholder"])
        return gm.forward

    def marked_pair(n):
        x, y = pair(n)
        torch_plugin.mark_dynamic(x, 0)
        torch_plugin.mark_dynamic(y, 0)  # x + y: a static y would specialize x's size too
        return x, y

    opt = torch_plugin.optimize(backend)(scale_and_flatten)
    run_sweep(opt, scale_and_flatten, marked_pair, [4, 6])
    assert len(seen) == 1
    x_fake = seen[0][0]
    assert isinstance(x_fake.size(0), torch.SymInt)
    assert x_fake.size(1) == 3 and not isinstance(x_fake.size(1), torch.SymInt)


def test_aot_eager_runs_symbolic_graphs():
    def f(x, w):
        return torch.relu(x @ w).reshape(x.size(0), -1).mean(dim=1)

    opt = torch_plugin.optimize("aot_eager", dynamic=True)(f)
    w = torch.randn(8, 5)
    run_sweep(opt, f, lambda n: (torch.randn(n, 8), w), [3, 10, 4])
    assert stats.graphs_compiled == 1


@pytest.mark.slow
def test_inductor_runs_symbolic_graphs():
    def f(x, y):
        return torch.sigmoid(x) * y.sum(dim=1, keepdim=True)

    opt = torch_plugin.optimize("inductor", dynamic=True)(f)
    run_sweep(opt, f, lambda n: (torch.randn(n, 5), torch.randn(n, 7)), [3, 8, 17])
    assert stats.graphs_compiled == 1


def test_branch_on_a_symbolic_size_is_guarded():
    def f(x):
        if x.size(0) > 4:
            return x * 2
        return x - 1

    opt = torch_plugin.optimize("eager", dynamic=True)(f)
    run_sweep(opt, f, lambda n: (torch.randn(n, 3),), [2, 3, 4])
    assert stats.graphs_compiled == 1
    run_sweep(opt, f, lambda n: (torch.randn(n, 3),), [5, 9, 6, 3])
    assert stats.graphs_compiled == 2


def test_relation_between_two_inputs_is_guarded():
    """``x + y`` needs equal sizes: the guard holds it, so unequal sizes do not reuse the
    entry, and the call fails as in eager instead of returning a wrong result."""

    def f(x, y):
        return (x + y) * x.size(0)

    opt = torch_plugin.optimize("eager", dynamic=True)(f)
    run_sweep(opt, f, lambda n: (torch.randn(n, 2), torch.randn(n, 2)), [3, 5, 8])
    assert stats.graphs_compiled == 1
    x, y = torch.randn(4, 2), torch.randn(6, 2)
    with pytest.raises(RuntimeError, match="size of tensor"):
        f(x, y)
    with pytest.raises(RuntimeError, match="size of tensor"):
        opt(x, y)
    guard = _C.cache_entries(f.__code__)[-1][1]
    reason = guard.failure_reason((x, y), globals(), __builtins__, None)
    assert "L['x'].size()[0]" in reason and "L['y'].size()[0]" in reason


def test_returning_a_size_specializes_it():
    def f(x):
        return x + 1, x.size(0) * 2

    opt = torch_plugin.optimize("eager", dynamic=True)(f)
    for n in (3, 4, 3):
        x = torch.randn(n)
        got, size = opt(x)
        torch.testing.assert_close(got, x + 1)
        assert size == 2 * n
    assert stats.graphs_compiled == 2  # the returned int is guarded: one entry per size


def test_shape_guard_failure_names_the_source():
    opt = torch_plugin.optimize("eager", dynamic=True)(scale_and_flatten)
    run_sweep(opt, scale_and_flatten, pair, [3])
    guard = _C.cache_entries(scale_and_flatten.__code__)[0][1]
    x, y = torch.randn(1, 3, 4), torch.randn(1, 3, 4)
    reason = guard.failure_reason((x, y), globals(), __builtins__, None)
    assert "L['x'].size()[0]" in reason and "got" in reason and "= 1" in reason
    assert guard.num_shape_checks() >= 1


def test_guards_describe_dynamic_dims():
    records = []
    torch_plugin.capture.convert_frame.listeners.append(records.append)
    try:
        opt = torch_plugin.optimize("eager", dynamic=True)(scale_and_flatten)
        run_sweep(opt, scale_and_flatten, pair, [3])
    finally:
        torch_plugin.capture.convert_frame.listeners.remove(records.append)
    text = "\n".join(records[0].guards)
    assert "size=['*', '*', '*'], stride=['*', '*', 1]" in text
    assert "2 <= L['x'].size()[0]" in text


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2)
        self.fc = torch.nn.Linear(16 * 7 * 7, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv1(x)))
        x = torch.relu(self.conv2(x))
        return self.fc(x.view(x.size(0), -1))


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_small_cnn_batch_sweep_compiles_at_most_twice(backend):
    model = SmallCNN().eval()
    opt = torch_plugin.optimize(backend)(model)
    with torch.no_grad():
        for n in range(1, 65):
            x = torch.randn(n, 3, 16, 16)
            torch.testing.assert_close(opt(x), model(x), rtol=1e-4, atol=1e-5)
    assert stats.graphs_compiled <= 2
    assert stats.recompiles <= 1


def test_bert_layer_batch_sweep_compiles_at_most_twice():
    transformers = pytest.importorskip("transformers")
    # "sdpa" is the attention HF picks for BertModel by default on torch >= 2.1.
    config = transformers.BertConfig(
        hidden_size=64,
        num_attention_heads=4,
        intermediate_size=128,
        num_hidden_layers=1,
        attn_implementation="sdpa",
    )
    layer = transformers.models.bert.modeling_bert.BertLayer(config).eval()
    opt = torch_plugin.optimize("eager")(layer)
    with torch.no_grad():
        for n in range(1, 65):
            h = torch.randn(n, 12, 64)
            mask = torch.zeros(n, 1, 1, 12)
            mask[:, :, :, -2:] = torch.finfo(torch.float32).min
            torch.testing.assert_close(opt(h, mask)[0], layer(h, mask)[0], rtol=1e-4, atol=1e-5)
    assert stats.graphs_compiled <= 2
    assert stats.frames_failed == 0


@torch_plugin.disable
def _not_captured(t):
    return t


def test_sizes_stay_symbolic_across_a_graph_break():
    """A size held in a local across a graph break is passed out of the graph (not
    specialized), and the resume function takes it as an int that becomes symbolic."""

    def f(x):
        n = x.size(0)
        y = x * 2
        y = _not_captured(y)  # graph break
        return y.view(n, -1) + n

    opt = torch_plugin.optimize("eager")(f)
    make = lambda n: (torch.randn(n, 3, 2),)
    run_sweep(opt, f, make, [1, 2])
    compiled = stats.graphs_compiled
    run_sweep(opt, f, make, [3, 7, 12, 5])
    assert stats.graphs_compiled == compiled  # sizes 3.. reuse the entries made at size 2
    assert stats.graph_breaks


def test_int_argument_becomes_symbolic_after_it_changes():
    def f(x, n):
        return x.reshape(n, -1) * n

    opt = torch_plugin.optimize("eager")(f)
    for n in (2, 4, 8, 16):
        x = torch.randn(n * 6)
        torch.testing.assert_close(opt(x, n), f(x, n))
    assert stats.graphs_compiled == 2
    with pytest.raises(RuntimeError):
        opt(torch.randn(10), 3)  # as in eager: 10 is not a multiple of 3


def _sympy_relations():
    import sympy
    from torch.utils._sympy import functions as F

    s = sympy.Symbol("s0", integer=True, positive=True)
    return [
        sympy.Le(2, s),
        sympy.Eq(F.PythonMod(s * 3, 4), 0),
        sympy.Ne(F.FloorDiv(s - 3, 2) + 1, 4),
        sympy.Eq(F.ModularIndexing(s, 2, 3), 1),
        sympy.Lt(F.Max(s, 9) * F.Min(s, 5), 60),
        sympy.Ge(F.IntTrueDiv(7840 * s, 794 * s + 7840), 4.5),  # Inductor-style heuristic
        sympy.Eq(F.CeilDiv(s, 4), F.FloorToInt(F.IntTrueDiv(s + 3, 4))),
        sympy.And(sympy.Gt(s, 5), sympy.Not(sympy.Eq(s, 7))),
        sympy.Or(sympy.Lt(s, 4), sympy.Eq(F.PythonMod(s, 5), 0)),
        sympy.Le(s**2, 200),
        sympy.Eq(sympy.Rational(1, 2) * s, F.FloorDiv(s, 2)),
    ]


@pytest.mark.parametrize("index", range(11))
def test_shape_guard_programs_agree_with_sympy(index):
    """Each sympy function a ShapeEnv guard uses, compiled for the C++ evaluator, gives the
    same truth value as sympy for every size 2..40."""
    import sympy

    from torch_plugin.capture.shape_guards import _program

    rel = _sympy_relations()[index]
    s = sympy.Symbol("s0", integer=True, positive=True)
    assert rel.free_symbols == {s}, rel  # not folded to a constant by sympy
    root = _C.RootGuardManager()
    sym = root.add_shape_symbol(root.local(0, "L['x']"), "size", 0, "L['x'].size()[0]")
    root.add_shape_check(_program(rel, {s: sym}), str(rel))
    for n in range(2, 41):
        expected = bool(rel.subs(s, n))
        got = root.check((torch.empty(n),), {}, {}, None)
        assert got == expected, (str(rel), n)
