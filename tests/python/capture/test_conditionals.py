"""Issue #31: a branch on a one-element tensor captured as a conditional (torch.cond, or a
Conditional module run as an eager ``if``) instead of a graph break.

Every case runs through the differential harness (tests/fuzz/differential.py: eager, then
the "eager", "aot_eager" and "plugin" backends, three calls; result, arguments, module
state, RNG state compared), in training where it matters: each function runs forward and
backward and returns the gradients, so a ``.grad`` that eager leaves None must stay None,
and the generator must be where eager leaves it (torch.rand([]) and dropout consume it as
in eager). Then it is checked to be one graph with no break. Cases a conditional cannot
express stay graph breaks and still equal eager.
"""

from __future__ import annotations

import dis

import pytest
import torch
from differential import _copying_factory, check

import torch_plugin
from torch_plugin.capture import convert_frame
from torch_plugin.capture.branch_joins import join_point
from torch_plugin.capture.conditional_execution import Conditional

pytestmark = pytest.mark.usefixtures("fresh_capture", "tensor_branches_capture")


def rand(*shape, grad=False):
    return lambda: (torch.randn(*shape, requires_grad=grad),)


def graph_count(fn, *calls, observe=None, nopython=False) -> tuple[int, list]:
    """(graphs compiled, graph breaks) of ``fn`` over ``calls`` under the "eager" backend."""
    build = _copying_factory(fn, calls, observe, None)
    try:
        world = build()
        torch_plugin.reset()
        opt = torch_plugin.optimize("eager", nopython=nopython)(world.fn)
        for args in world.calls:
            opt(*(args() if callable(args) else args))
        stats = convert_frame.stats
        return stats.graphs_compiled, list(stats.graph_breaks)
    finally:
        build()
        torch_plugin.reset()


def one_graph(fn, *calls, observe=None, forward=None):
    """``fn`` equals eager on every backend; ``forward`` (``fn`` itself when None: a
    training step breaks at ``backward()``) is one graph under nopython."""
    check(fn, *calls, observe=observe)
    graphs, breaks = graph_count(forward or fn, *calls, observe=observe, nopython=True)
    assert breaks == [], breaks
    assert graphs >= 1


def grads(*tensors):
    return [t.grad for t in tensors]


# --------------------------------------------------------------------------- LayerDrop


class LayerDropNet(torch.nn.Module):
    """OPT's LayerDrop loop: ``if torch.rand([]) < p: continue``; dropout in each layer."""

    def __init__(self, dropout: float = 0.0, layers: int = 3) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(6, 6) for _ in range(layers))
        self.layerdrop = 0.5
        self.dropout = dropout

    def forward(self, x):
        for layer in self.layers:
            if self.training and self.layerdrop > 0.0:  # noqa: SIM102 - as HF writes it
                if torch.rand([]) < self.layerdrop:
                    continue
            x = torch.nn.functional.dropout(layer(x).relu(), self.dropout, self.training)
        return x


def _train_step(model):
    def step(x):
        out = model(x)
        out.sum().backward()
        return out.detach(), x.grad, [p.grad for p in model.parameters()]

    return step


@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_layerdrop_trains_as_one_graph(dropout):
    torch.manual_seed(0)
    model = LayerDropNet(dropout)
    step = _train_step(model)
    calls = (rand(4, 6, grad=True), rand(4, 6, grad=True), rand(5, 6, grad=True))
    one_graph(step, *calls, observe={"model": model}, forward=model)


def test_layerdrop_conditional_is_a_module_call_in_training():
    """The skip way returns the layer's input itself, and dropout draws: a Conditional
    module (an eager if) per layer, in one captured graph."""
    torch.manual_seed(0)
    model = LayerDropNet(0.2)
    report = torch_plugin.explain(model, torch.randn(2, 6, requires_grad=True))
    assert report.graph_count == 1 and report.graph_break_count == 0
    conds = [m for m in report.graphs[0].modules() if isinstance(m, Conditional)]
    assert len(conds) == 3


def test_inference_branch_is_torch_cond():
    """No gradient, no random op and a new value on both ways: torch.cond, one graph for
    every backend."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 4).requires_grad_(False)

    def fn(x):
        for _ in range(2):
            if torch.rand([]) < 0.5:
                x = lin(x).relu()
            else:
                x = x * 0.5
        return x

    one_graph(fn, rand(3, 4), rand(3, 4), rand(2, 4), observe={"lin": lin})
    report = torch_plugin.explain(fn, torch.randn(2, 4))
    targets = [n.target for n in report.graphs[0].graph.nodes]
    assert targets.count(torch.ops.higher_order.cond) == 2


def test_cond_in_a_training_graph_keeps_the_generator():
    """A torch.cond in a graph that also needs gradients (operands that do not require
    grad): AOTAutograd's partitioner copied the predicate's ``rand`` into the backward
    graph, which drew one more number per backward (compiler/backward_graphs.py)."""
    lin = torch.nn.Linear(4, 4)

    def forward(x, c):
        y = lin(x)
        if torch.rand([]) < 0.5:
            z = c * 2
        else:
            z = c + 1
        return y + z

    def fn(x, c):
        out = forward(x, c)
        out.sum().backward()
        return out.detach(), x.grad, lin.weight.grad

    def call():
        return torch.randn(3, 4, requires_grad=True), torch.randn(3, 4)

    calls = (call, call, lambda: (torch.randn(2, 4, requires_grad=True), torch.randn(2, 4)))
    one_graph(fn, *calls, observe={"lin": lin}, forward=forward)


# --------------------------------------------------------------------------- other shapes


def test_if_else_on_a_reduction():
    def fn(x):
        y = x * 2
        if x.sum() > 0:
            y = y.sin()
            z = x + 1
        else:
            z = x.cos()
        return y + z, z

    one_graph(fn, rand(5), rand(5), rand(3, 2))


def test_flag_set_in_a_branch():
    """BART / Whisper: ``to_drop = True`` in the branch, then ``if not to_drop:``."""

    def fn(x):
        to_drop = False
        if torch.rand([]) < 0.5:
            to_drop = True
        if not to_drop:
            x = x.exp()
        return x * 3

    one_graph(fn, rand(4), rand(4), rand(2, 3))


def test_comparison_kept_as_a_tensor():
    """wav2vec2: ``skip = torch.rand([]) < p`` then ``if not skip or synced:``."""

    def fn(x, synced=False):
        skip = torch.rand([]) < 0.5
        if not skip or synced:
            x = x.relu() + 1
        return x

    one_graph(fn, rand(4), rand(4), rand(2, 2))


def test_nested_branches():
    def fn(x):
        if x.mean() > 0:
            if x.max() > 1:
                x = x * 3
            else:
                x = x - 1
        return x + 1

    one_graph(fn, rand(6), rand(6), rand(7))


def test_both_ways_return():
    """Both ways end in ``return <value>``: they meet at the return (branch_joins.py), the
    value returned is the conditional's output."""

    def fn(x):
        if x.sum() > 0:
            return x * 2
        y = x - 1
        return y.sin()

    one_graph(fn, rand(3), rand(3), rand(4))


def test_non_bool_predicate():
    def fn(x):
        if x.sum():  # truth of a float tensor: nonzero
            x = x + 1
        return x

    one_graph(fn, rand(3), (torch.zeros(3),), rand(4))


# --------------------------------------------------------------------------- still breaks


def _breaks(fn, *calls, observe=None):
    check(fn, *calls, observe=observe)
    _, breaks = graph_count(fn, *calls, observe=observe)
    assert breaks, "expected a graph break"
    return breaks


def test_branch_with_a_side_effect_breaks():
    seen = []

    def fn(x):
        if x.sum() > 0:
            seen.append(1)
        return x + 1

    _breaks(fn, rand(3), rand(3), rand(4), observe={"seen": seen})


def test_branch_mutating_a_local_list_breaks():
    def fn(x):
        out = [x]
        if x.sum() > 0:
            out.append(x * 2)
        return [t + 1 for t in out]

    _breaks(fn, rand(3), rand(3), rand(4))


def test_branch_returning_a_value_of_another_kind_breaks():
    def fn(x):
        if x.sum() > 0:
            return x * 2
        y = x - 1
        return (y,)

    _breaks(fn, rand(3), rand(3), rand(4))


def test_branches_of_different_shapes_break():
    def fn(x):
        if x.sum() > 0:
            x = x.sum(0)
        return x + 1

    _breaks(fn, rand(3, 2), rand(3, 2), rand(4, 2))


def test_in_place_write_in_a_branch_breaks():
    def fn(x):
        y = x * 1
        if x.sum() > 0:
            y.add_(1)
        return y

    _breaks(fn, rand(3), rand(3), rand(4))


def test_multi_element_truth_still_breaks():
    def fn(x):
        if x > 0:  # RuntimeError in eager for more than one element
            x = x + 1
        return x

    check(fn, rand(3), rand(1), rand(2))


def test_flag_off_keeps_the_break():
    def fn(x):
        if x.sum() > 0:
            x = x + 1
        return x

    torch_plugin.config.capture_tensor_branches = False
    try:
        assert graph_count(fn, rand(3))[1]
    finally:
        torch_plugin.config.capture_tensor_branches = True


# --------------------------------------------------------------------------- join point


def _first_conditional_jump(fn) -> int:
    instructions = list(dis.get_instructions(fn))
    return next(i for i, inst in enumerate(instructions) if inst.opname.startswith("POP_JUMP"))


def test_join_point_of_continue_is_the_loop_header():
    def fn(xs, p):
        for x in xs:
            if x < p:
                continue
            p = p + x
        return p

    instructions = list(dis.get_instructions(fn))
    join = join_point(fn.__code__, _first_conditional_jump(fn))
    assert {instructions[i].opname for i in join} == {"FOR_ITER"}


def test_join_point_none_when_a_way_raises():
    def fn(x):
        if x:
            raise ValueError("x")
        return 2

    assert join_point(fn.__code__, _first_conditional_jump(fn)) is None


def test_join_point_of_copied_exit_blocks():
    """CPython 3.12+ copies ``return y + 1`` into both ways; the copies are one join."""

    def fn(x):
        if x:
            y = x * 2
        else:
            y = x - 1
        return y + 1

    instructions = list(dis.get_instructions(fn))
    join = join_point(fn.__code__, _first_conditional_jump(fn))
    assert join is not None
    # where the ways' code becomes the same (``STORE_FAST y``, then the one or two copies
    # of ``return y + 1``): one instruction per way
    assert len(join) == 2
    assert {(instructions[i].opname, instructions[i].argval) for i in join} == {("STORE_FAST", "y")}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("backend", ["eager", "aot_eager", "plugin", "inductor"])
def test_layerdrop_on_cuda_matches_eager_with_the_seed(backend):
    """On CUDA the draws come from the CUDA generator (Philox offsets): the compiled
    LayerDrop model must advance it as eager does and give eager's masks."""
    torch.manual_seed(0)
    model = LayerDropNet(0.3, layers=4).cuda()
    opt = torch_plugin.optimize(backend)(model)
    fallback_random = torch_plugin.config.fallback_random
    torch_plugin.config.fallback_random = True
    try:
        import torch._inductor.config as inductor_config

        with inductor_config.patch(fallback_random=True):
            for seed in range(3):
                results = []
                x0 = torch.randn(8, 6, device="cuda")
                for fn in (model, opt):
                    x = x0.clone().requires_grad_()
                    model.zero_grad(set_to_none=True)
                    torch.manual_seed(seed)
                    out = fn(x)
                    out.square().sum().backward()
                    grads = [p.grad for p in model.parameters()]
                    results.append((out.detach(), grads, torch.cuda.get_rng_state()))
                (want, want_grads, want_rng), (got, got_grads, got_rng) = results
                torch.testing.assert_close(got, want)
                assert torch.equal(got_rng, want_rng)
                for a, b in zip(got_grads, want_grads):
                    assert (a is None) == (b is None)
                    if b is not None:
                        torch.testing.assert_close(a, b)
    finally:
        torch_plugin.config.fallback_random = fallback_random


def test_flag_whose_branch_computes_nothing_keeps_the_draw():
    """``if not drop: x = x`` computes nothing: no conditional, and the predicate's rand is
    unused in the graph. It still advances the generator, as in eager: the "plugin"
    compiler's dead-code elimination keeps random ops (csrc/compiler/passes/
    dead_code_elimination.cpp), which it used to drop."""

    def fn(x):
        drop = False
        if torch.rand([]) < 0.5:
            drop = True
        if not drop:
            x = x  # noqa: PLW0127 - a way that computes nothing
        return x * 2

    one_graph(fn, rand(3), rand(3), rand(2, 2))
