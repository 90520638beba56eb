"""A tensor as a dict key and as a list index (issue #31).

``Tensor.__hash__`` is ``id``: a dict keyed by tensors is keyed by identity, and dict
order is insertion order, so such a dict built in the frame is modelled exactly (keys are
identity keys of the tensor variables, one variable per object in a capture); lookups,
membership, iteration, deletion and ``collections.Counter`` / ``defaultdict`` keyed by
tensors are captured. Returning or storing a plain dict keyed by a tensor, or keeping it
live at a graph break, is a graph break, as is a key whose object depends on a branch on
tensor data. ``lst[t]`` calls ``t.__index__()``, which reads the tensor's value: a graph
break at that subscript, the code after it captured again.

Every case runs through the differential harness on every backend (three calls: compile,
cached, recompile; everything observable compared).
"""

from __future__ import annotations

import collections

import pytest
import torch
from differential import check
from one_graph import _probe, check_one_graph

import torch_plugin
from torch_plugin.capture import convert_frame

pytestmark = pytest.mark.usefixtures("fresh_capture")

VEC = (
    lambda: (torch.randn(3),),
    lambda: (torch.randn(3),),
    lambda: (torch.randn(4),),
)


def _lookup(x):
    d = {x: 1}
    return x * d[x]


def _mixed_keys(x):
    y = x + 1
    d = {x: "a", y: "b", 3: "c"}
    d[y] = "B"
    out = x
    for k, v in d.items():
        out = out + (k if not isinstance(k, int) else 0) * len(v)
    return out, x in d, (x * 2) in d, list(d.values()), d.get(x + 0, "none")


def _delete_and_add(x):
    d = {x: 1}
    del d[x]
    d[x * 2] = 2
    return len(d), x in d, sum(k.sum() for k in d)


def _counter_of_tensors(x):
    y = x + 1
    c = collections.Counter([x, y, x])
    return c[x] * x + c[y] * y


def _defaultdict_of_tensors(x):
    d = collections.defaultdict(list)
    y = x * 2
    for t in (x, y, x):
        d[t].append(t.sum())
    return sum(len(v) for v in d.values()) * x, d[x][1]


def _input_key(x, y):
    d = {x: x.sin(), y: y.cos()}
    return d[y] + d[x], y in d


CAPTURED = {
    "lookup": (_lookup, VEC),
    "mixed_keys": (_mixed_keys, VEC),
    "delete_and_add": (_delete_and_add, VEC),
    "counter_of_tensors": (_counter_of_tensors, VEC),
    "defaultdict_of_tensors": (_defaultdict_of_tensors, VEC),
    "graph_input_keys": (
        _input_key,
        (
            lambda: (torch.randn(3), torch.randn(3)),
            lambda: (torch.randn(3), torch.randn(3)),
            lambda: (torch.randn(4), torch.randn(4)),
        ),
    ),
}


@pytest.mark.parametrize("name", list(CAPTURED))
def test_tensor_dict_key_is_one_graph(name):
    fn, calls = CAPTURED[name]
    check_one_graph(fn, *calls)


def _returned(x):
    d = {x: 1}
    return d


def _missing(x):
    d = {x: 1}
    return d[x + 0]  # another object: KeyError, as in eager


@pytest.mark.parametrize("fn", [_returned, _missing], ids=lambda f: f.__name__)
def test_tensor_dict_key_breaks_where_not_modelled(fn):
    check(fn, *VEC)
    mismatch, _, breaks = _probe(fn, VEC, None, fullgraph=False)
    assert mismatch is None, mismatch
    assert breaks


def _list_index(x, i):
    lst = [x, x * 2, x * 3]
    y = x.sin()
    return lst[i] + y, y.cos()


INDEX_CALLS = (
    lambda: (torch.randn(3), torch.tensor(1)),
    lambda: (torch.randn(3), torch.tensor(-1)),
    lambda: (torch.randn(4), torch.tensor(0)),
)


def test_list_indexed_by_tensor_breaks_there_and_resumes():
    check(_list_index, *INDEX_CALLS)
    mismatch, _, breaks = _probe(_list_index, INDEX_CALLS, None, fullgraph=False)
    assert mismatch is None, mismatch
    assert any("indexed by a tensor" in b for b in breaks), breaks
    # the code before and after the subscript is captured (two graphs per compile)
    torch_plugin.reset()
    opt = torch_plugin.optimize("eager")(_list_index)
    opt(*INDEX_CALLS[0]())
    assert convert_frame.stats.graphs_compiled == 2, convert_frame.stats.graphs_compiled


def test_float_tensor_index_raises_as_in_eager():
    def fn(x):
        return [x, x][torch.tensor(0.5)]  # TypeError: only integer tensors ...

    check(fn, *VEC)
