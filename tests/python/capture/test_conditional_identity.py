"""Issue #31: what a captured tensor branch makes of values whose identity depends on it.

A conditional's output that is, on one way, a tensor from before the branch (LayerDrop's
``hidden_states`` when the layer is skipped) or a view of one, is *which object* only at run
time. The program generator found three wrong results with ``config.capture_tensor_branches``
on (seeds 924, 1238, 1388 of tests/fuzz/run.py): ``r is obj.t`` answered at capture time,
``getattr(x, "tag", 1)`` read from the new tensor of the other way, ``lst[0] is r``. Each
case here is a differential test (tests/fuzz/differential.py: eager, then the "eager",
"aot_eager" and "plugin" backends, three calls, everything observable compared, identity
included) where the first two calls take different ways of the branch; each failed before
the fix (identity, attributes, in-place writes through an alias, ``0.0`` merged with
``-0.0``, a tuple from before the branch rebuilt). Metadata the two ways agree on stays
captured in one graph.
"""

from __future__ import annotations

import math

import pytest
import torch
from differential import check

import torch_plugin
from torch_plugin.capture import convert_frame

pytestmark = pytest.mark.usefixtures("fresh_capture", "tensor_branches_capture")


def _inputs(sign: float, rows: int):
    return lambda: (sign * (torch.rand(rows, 2) + 0.1), [torch.randn(2), 1])


# the compiling call takes one way, the cached call the other, the recompile the first
CALLS = (_inputs(1, 3), _inputs(-1, 3), _inputs(1, 4))
REVERSED = (_inputs(-1, 3), _inputs(1, 3), _inputs(-1, 4))


class Box:
    def __init__(self, t) -> None:
        self.t = t


# --------------------------------------------------------------------------- the fuzz seeds


def seed_924_is_after_a_flag(x, lst):
    """Seed 924: ``r is not obj.t`` after ``drop`` set in one branch and ``if not drop``."""
    obj = Box(x)
    r = obj.t
    drop = False
    if x.sum() > 0:
        drop = True
    if not drop:
        r = (x + x).flip(0)
    return r * 2, r is not obj.t


def seed_1238_attribute_of_a_passed_through_input(x, lst):
    """Seed 1238: an attribute the caller set on an input, read after a branch that
    replaces the tensor on one way."""
    x.tag = 2
    r = x
    if x.sum() > 0:
        r = (x + x) * 2
    return r * getattr(r, "tag", 1), hasattr(r, "tag")


def seed_1388_is_against_a_list_item(x, lst):
    """Seed 1388: ``lst[0] is r`` where ``r`` came back from ``mul_`` on ``lst[0]``."""
    r = torch.Tensor.mul_(lst[0], 2)
    drop = False
    if x.sum() > 0:
        drop = True
    if not drop:
        r = (x + 1).t()[:, 1]
    return r, r, lst[0] is r


def attribute_set_on_one_way(x, lst):
    if x.sum() > 0:
        r = x * 2
        r.tag = 1
    else:
        r = x + 1
    return r * getattr(r, "tag", 3)


# --------------------------------------------------------------------------- identity


def set_of_the_two(x, lst):
    r = x
    if x.sum() > 0:
        r = x * 2
    return r + 1, len({r, x})


def stored_then_compared(x, lst):
    r = x
    if x.sum() > 0:
        r = x * 2
    d = {"a": r, "b": Box(r)}
    return d, d["a"] is x, d["b"].t is x


def nested_branch_passes_it_on(x, lst):
    r = x
    if x.sum() > 0:
        r = x * 2
    if x.max() > 0.5:
        r = r + 1
    return r, r is x


def tuple_from_before_the_branch(x, lst):
    t0 = (x, 2)
    t = t0
    if x.sum() > 0:
        t = (x, 2)
    return t[0] + 1, t is t0


# --------------------------------------------------------------------------- in-place writes


def write_to_the_original_after(x, lst):
    x = x.clone()
    r = x
    if x.sum() > 0:
        r = x * 2
    x.add_(1)
    return r * 1, x


def write_to_the_result_after(x, lst):
    r = x
    if x.sum() > 0:
        r = x * 2
    r.mul_(3)  # the caller's x on one way
    return r * 1, x * 1


def setitem_on_the_original_after(x, lst):
    x = x.clone()
    r = x
    if x.sum() > 0:
        r = x * 2
    x[0] = 5.0
    return r * 1


def out_argument_after(x, lst):
    x = x.clone()
    r = x
    if x.sum() > 0:
        r = x * 2
    torch.add(x, 1, out=r)
    return x * 1, r * 1


def view_of_the_original(x, lst):
    x = x.clone()
    if x.sum() > 0:
        r = x[1:]
    else:
        r = x[1:] + 1
    x.add_(1)
    return r * 1


def outputs_alias_each_other_on_one_way(x, lst):
    if x.sum() > 0:
        a = x * 2
        b = a[1:]
    else:
        a = x + 1
        b = x[1:] * 3
    a.add_(1)
    return b * 1


def operands_share_memory(x, lst):
    """Program generator seed 3021 (``--only tensor-branch``): a way reads ``x`` and its
    view ``t1``; AOTAutograd refused the torch.cond ("might be aliasing the input")."""
    t1 = x[:, 0]
    if x.sum() > 0:
        x = (x + 1.5) * (t1 + 0.5).unsqueeze(1)  # dead after the branch: no output
    return t1 * 1


COUNTS = torch.zeros(2)


def write_to_a_global_first_read_in_the_way(x, lst):
    """Program generator seed 543: ``M.add_(1.0)`` in one way, ``M`` a global tensor first
    read there (its FakeTensor made inside the way): a torch.cond that writes its input,
    which AOTAutograd refused; now a graph break at the branch."""
    if x.sum() > 0:
        COUNTS.add_(1.0)
    return x * 1


# --------------------------------------------------------------------------- Python values


def negative_zero(x, lst):
    s = 0.0
    if x.sum() > 0:
        s = -0.0
    return x * math.copysign(1.0, s)


def flag_used_as_a_value(x, lst):
    drop = False
    if x.sum() > 0:
        drop = True
    return x + int(drop), drop, [drop], str(drop), drop is True


def strides_differ(x, lst):
    m = x.reshape(1, -1)
    if x.sum() > 0:
        r = m.t().contiguous()
    else:
        r = m.t()
    return r * 1, r.is_contiguous(), r.stride()


CASES = [
    (seed_924_is_after_a_flag, CALLS),
    (seed_1238_attribute_of_a_passed_through_input, CALLS),
    (seed_1388_is_against_a_list_item, CALLS),
    (attribute_set_on_one_way, CALLS),
    (set_of_the_two, CALLS),
    (stored_then_compared, CALLS),
    (nested_branch_passes_it_on, CALLS),
    (tuple_from_before_the_branch, CALLS),
    (write_to_the_original_after, CALLS),
    (write_to_the_result_after, CALLS),
    (setitem_on_the_original_after, CALLS),
    (out_argument_after, CALLS),
    (view_of_the_original, CALLS),
    (outputs_alias_each_other_on_one_way, REVERSED),
    (operands_share_memory, CALLS),
    (write_to_a_global_first_read_in_the_way, CALLS),
    (negative_zero, CALLS),
    (flag_used_as_a_value, CALLS),
    (strides_differ, CALLS),
]


@pytest.mark.parametrize(("fn", "calls"), CASES, ids=[f.__name__ for f, _ in CASES])
def test_matches_eager(fn, calls):
    check(fn, *calls, observe={"globals": globals()})


def test_metadata_both_ways_agree_on_stays_one_graph():
    """A tensor passed through on one way (LayerDrop's skip) keeps what both ways agree on:
    shape, dtype, ``size()``, ``dim()``; one graph, no break."""

    def fn(x, lst):
        r = x
        if x.sum() > 0:
            r = (x * 2).relu()
        return r.new_zeros(r.shape[0], r.dim()) + r.size(0), r * 1, r.dtype is torch.float32

    check(fn, *CALLS)
    torch_plugin.reset()
    opt = torch_plugin.optimize("eager", nopython=True)(fn)
    for args in CALLS:
        opt(*args())
    assert list(convert_frame.stats.graph_breaks) == []
