"""Attributes through Python's lookup rules (capture/variables/attribute_rules.py, issue #31).

Each case runs through the differential harness (eager vs the "eager", "aot_eager" and
"plugin" backends, three calls, outputs, arguments, observed objects, class attributes and
globals compared), then under nopython (fullgraph), where it must be one graph.
"""

import collections

import pytest
import torch
from differential import check

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture")


class Counter:
    count = 0
    scale = 2.0


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a, b):
        self.a = a
        self.b = b


class Twice:
    """A user descriptor (non-data): reads ``obj.base`` twice."""

    def __init__(self, k):
        self.k = k

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        return obj.base * self.k


class Holder:
    doubled = Twice(2)

    def __init__(self, base):
        self.base = base
        self.tmp = 1


def scaled(t):
    return t * scaled.factor


scaled.factor = 3

Pair = collections.namedtuple("Pair", "first second")


def tensor_attr_on_input(x):
    x.tag = 5
    return x * x.tag


def tensor_attr_on_local(x):
    y = x + 1
    y.note = 2
    return y * y.note


def grad_reads(x):
    z = x.sin()
    a = x * 2 if x.grad is None else x + x.grad
    return a if z.grad is None else z


def class_attr_mutation(x):
    Counter.count += 1
    return x * Counter.count * Counter.scale


def slots_and_descriptor(x, s, h):
    return x * s.a + s.b + h.doubled


def function_attribute(x):
    return scaled(x) + scaled.factor


def namedtuple_fields(x):
    p = Pair(x, x + 1)
    return p.first * p.second, p[1]


def delete_attribute(x, h):
    del h.tmp
    return x * h.base


def isinstance_checks(x, s, h):
    import collections.abc
    import typing

    n = isinstance(s, (int, Slotted)) + isinstance(h, Holder) + isinstance([1], typing.List)  # noqa: UP006
    n += isinstance((), collections.abc.Sequence) + isinstance(x, (torch.Tensor, int))
    return x * n


def _args(n):
    return lambda: (torch.randn(n),)


def _objs(n):
    return lambda: (torch.randn(n), Slotted(torch.randn(n), 1.5), Holder(torch.randn(n)))


CASES = [
    (tensor_attr_on_input, _args),
    (tensor_attr_on_local, _args),
    (grad_reads, _args),
    (class_attr_mutation, _args),
    (slots_and_descriptor, _objs),
    (function_attribute, _args),
    (namedtuple_fields, _args),
    (isinstance_checks, _objs),
    (delete_attribute, lambda n: lambda: (torch.randn(n), Holder(torch.randn(n)))),
]


@pytest.mark.parametrize("fn,make", CASES, ids=[c[0].__name__ for c in CASES])
def test_attribute_rule(fn, make):
    observe = {"globals": globals(), "counter": Counter}
    check(fn, make(3), make(3), make(4), observe=observe)  # puts Counter back after each run
    torch_plugin.reset()
    opt = torch_plugin.optimize("eager", nopython=True)(fn)
    args = make(3)()
    opt(*args)
    assert torch_plugin.stats.graphs_compiled == 1
    Counter.count = 0


def test_grad_of_an_input_is_guarded():
    def f(x):
        return x * 2 if x.grad is None else x + x.grad

    opt = torch_plugin.optimize("eager")(f)
    x = torch.randn(3, requires_grad=True)
    torch.testing.assert_close(opt(x), f(x))
    x.grad = torch.ones(3)
    torch.testing.assert_close(opt(x), f(x))  # recompiled: the guard saw the new .grad
    assert torch_plugin.stats.graphs_compiled == 2


def test_attribute_written_on_a_returned_local_tensor_breaks():
    def f(x):
        y = x + 1
        y.note = 2
        return y

    with pytest.raises(torch_plugin.CaptureError, match="attributes set in the frame"):
        torch_plugin.optimize("eager", nopython=True)(f)(torch.randn(3))
    check(f, _args(3), _args(3), _args(4))
