# ruff: noqa: PLC0206, PERF102 - the constructs under test
"""Issue #31: a graph break inside a loop over a container the loop mutates behaves as in
CPython (test_container_iteration.py has the loops without a break).

At the break, the loop's iterator is rebuilt for the resume function over the same real
container at the same position (a list's as ``(list, index)``, made again there, so the
resumed loop is captured too; a dict's, set's or deque's as the real iterator), so a
mutation after the break is seen, and one that must raise raises. Differential harness as
in test_container_iteration.py.
"""

from __future__ import annotations

import collections

import pytest
import torch
from differential import check

import torch_plugin
from torch_plugin.capture import convert_frame

pytestmark = pytest.mark.usefixtures("fresh_capture")

CALLS = (lambda: (torch.randn(3),), lambda: (torch.randn(3),), lambda: (torch.randn(4),))


@torch_plugin.disable
def opaque():
    """A call capture never traces: a graph break."""


def break_list_append(x):
    lst = [1, 2]
    for e in lst:
        x = x + e
        opaque()
        if e < 5:
            lst.append(e + 2)  # after the break: the resumed loop sees it
    return x, lst


def break_enumerate_argument(x, lst):
    for i, e in enumerate(lst, 1):
        x = x + e * i
        opaque()
        if len(lst) < 4:
            lst.append(x)
    return x


def break_enumerate_tuple(x):
    for i, e in enumerate((1, 2, 3)):
        x = x + e * i
        opaque()
    return x


def break_zip_tuples(x):
    for a, b in zip((1, 2, 3), (4, 5)):
        x = x + a * b
        opaque()
    return x


def break_tensor_list(x):
    ts = [x, x * 2]
    for t in ts:
        x = x + t
        opaque()
        if len(ts) < 4:
            ts.append(t + 1)
    return x


def break_list_pop_in_try(x):
    lst = [1, 2, 3]
    for e in lst:
        try:
            x = x + e
            opaque()
        except ValueError:
            pass
        if e == 1:
            lst.pop()
    return x, lst


def break_alias_next(x):
    lst = [1, 2, 3, 4]
    it = iter(lst)
    for e in it:
        opaque()
        x = x + e * next(it)
    return x


def break_dict_values_updated(x):
    d = {"a": 1, "b": 2, "c": 3}
    for k, v in d.items():
        x = x + v
        opaque()
        d["c"] = 10
    return x, d


def break_dict_add(x):
    d = {"a": 1, "b": 2}
    for k in d:
        x = x + d[k]
        opaque()
        d[k + "x"] = 1
    return x


def break_set_add(x):
    s = {1, 2, 3}
    for e in s:
        x = x + e
        opaque()
        s.add(e + 10)
    return x


def break_reversed_pop(x):
    lst = [1, 2, 3, 4]
    for a in reversed(lst):
        x = x + a
        opaque()
        lst.pop()
    return x, lst


def break_deque(x):
    q = collections.deque([1, 2, 3])
    for a in q:
        x = x + a
        opaque()
    return x


def _double(v):
    return v * 2


def break_map(x):
    for a in map(_double, [1, 2, 3]):
        x = x + a
        opaque()
    return x


def break_dict_items(x):
    d = {"a": x, "b": x * 2, "c": 3}
    for k, v in d.items():
        x = x + v
        opaque()
    return x


def break_reversed_dict(x):
    d = {"a": 1, "b": 2, "c": 3}
    for k in reversed(d):
        x = x * d[k]
        opaque()
    return x


def break_set(x):
    s = {1, 2, 3}
    for e in s:
        x = x * e
        opaque()
    return x


@torch_plugin.disable
def opaque_swap_key(d):
    """Inside the breaking call: a same-size key change (a removal, then an insertion)."""
    first = next(iter(d))
    del d[first]
    d[first + "z"] = 7


@torch_plugin.disable
def opaque_update(d, k):
    d[k] = d[k] * 2


@torch_plugin.disable
def opaque_grow(container):
    if isinstance(container, set):
        container.add(100)
    else:
        container["new"] = 1


def break_dict_changed_by_the_call(x):
    d = {"a": 1, "b": 2, "c": 3, "d": 4}
    for k, v in d.items():
        x = x + v
        if k == "b":
            opaque_swap_key(d)  # CPython's iterator goes on from its slot: the real one runs
        else:
            opaque_update(d, k)
    return x, d


def break_dict_grown_by_the_call(x):
    d = {"a": 1, "b": 2}
    for k in d:
        x = x + d[k]
        opaque_grow(d)  # RuntimeError at the next step, as in eager
    return x


def break_set_grown_by_the_call(x):
    s = {1, 2}
    for e in s:
        x = x + e
        opaque_grow(s)
    return x


def break_zip_lists(x):
    a = [1, 2, 3]
    b = [x, x * 2, x * 3]
    for i, t in zip(a, b):
        x = x + i * t
        opaque()
    return x


def break_filter(x):
    for a in filter(None, [0, 1, 2, 0, 3]):
        x = x * a
        opaque()
    return x


@torch_plugin.disable
def opaque_append(lst, v):
    lst.append(v)


def break_enumerate_zip_grown_by_the_call(x):
    a = [x, x + 1]
    b = [1, 2, 3, 4]
    for i, (t, k) in enumerate(zip(a, b)):
        x = x + t * k + i
        opaque_append(a, x)  # the resumed zip reads the grown list, as CPython's does
        if len(a) > 4:
            break
    return x, a


def break_reversed_list(x):
    lst = [1, 2, 3]
    for a in reversed(lst):
        x = x * a
        opaque()
    return x


BREAKS = [
    break_list_append,
    break_enumerate_tuple,
    break_zip_tuples,
    break_tensor_list,
    break_list_pop_in_try,
    break_alias_next,
    break_dict_values_updated,
    break_dict_add,
    break_set_add,
    break_reversed_pop,
    break_deque,
    break_map,
    break_dict_items,
    break_reversed_dict,
    break_set,
    break_dict_changed_by_the_call,
    break_dict_grown_by_the_call,
    break_set_grown_by_the_call,
    break_zip_lists,
    break_filter,
    break_enumerate_zip_grown_by_the_call,
    break_reversed_list,
]
# the resume functions capture the rest of the loop (the iterator is made there again)
RESUMES_CAPTURED = {break_list_append, break_enumerate_tuple, break_zip_tuples}
RESUMES_CAPTURED |= {break_tensor_list, break_list_pop_in_try}
# a dict's or set's iterator too, when the breaking call left it as a new one would be
RESUMES_CAPTURED |= {break_dict_values_updated, break_dict_items, break_reversed_dict, break_set}
# zip/map/filter/enumerate over list iterators (resume_lazy_iterator), reversed lists
RESUMES_CAPTURED |= {break_map, break_zip_lists, break_filter, break_reversed_list}
RESUMES_CAPTURED |= {break_enumerate_zip_grown_by_the_call}


@pytest.mark.parametrize("fn", BREAKS, ids=lambda f: f.__name__)
def test_graph_break_inside_the_loop(fn):
    check(fn, *CALLS, observe={"globals": globals()})
    if fn in RESUMES_CAPTURED:
        torch_plugin.reset()
        torch_plugin.optimize("eager")(fn)(torch.randn(3))
        stats = convert_frame.stats
        assert len(stats.graph_breaks) >= 2, stats.graph_breaks
        assert not [f for f in stats.failures if "loop over" in f[1]], stats.failures


def test_graph_break_enumerate_argument_list():
    calls = [lambda: (torch.randn(3), [torch.randn(3)])] * 2
    calls.append(lambda: (torch.randn(4), [torch.randn(4), torch.randn(4)]))
    check(break_enumerate_argument, *calls)
    torch_plugin.reset()
    torch_plugin.optimize("eager")(break_enumerate_argument)(torch.randn(3), [torch.randn(3)])
    assert len(convert_frame.stats.graph_breaks) >= 3
    assert not [f for f in convert_frame.stats.failures if "loop over" in f[1]]


# --------------------------------------------------------------------------- breaks at FOR_ITER


def _breaking(v):
    opaque()
    return v * 2


def for_iter_map_function_breaks(x):
    y = x.sin()
    for a in map(_breaking, [1, 2, 3]):
        y = y + a
    return y.cos()


def for_iter_dict_grows(x):
    y = x * 2
    d = {"a": 1}
    for k in d:
        y = y + d[k]
        d["b"] = 2  # RuntimeError at the next step
    return y


@pytest.mark.parametrize("fn", [for_iter_map_function_breaks, for_iter_dict_grows])
def test_graph_break_at_for_iter(fn):
    """The iterator's next step cannot be captured (``map``'s function breaks; the dict's
    size changed, so the step raises): the graph breaks at FOR_ITER, which runs natively on
    the real iterator, instead of the whole frame running as Python; the code before the
    loop is captured."""
    check(fn, *CALLS, observe={"globals": globals()})
    torch_plugin.reset()
    try:
        torch_plugin.optimize("eager")(fn)(torch.randn(3))
    except RuntimeError:
        pass  # for_iter_dict_grows raises, as in eager
    stats = convert_frame.stats
    assert stats.graphs_compiled >= 1, stats.failures
    assert not [f for f in stats.failures if "FOR_ITER" in f[1]], stats.failures
