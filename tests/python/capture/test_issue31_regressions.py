# ruff: noqa: SIM117
"""Issue #31 audit's findings, each with a dedicated test: wrong results it found (storage
queries a FakeTensor cannot answer, an attribute set then deleted in the frame, OrderedDict
arguments, a failing ``torch._check``), ``torch.inference_mode`` blocks, ``yield from`` and
``generator.send``, and C descriptors' ``__get__``. The audit's probes are in
test_issue31_audit.py and test_issue31_audit_gaps.py.
"""

from __future__ import annotations

import collections
import functools

import pytest
import torch
from audit_probes import _getset_descriptor, _inference_mode, _is_set_to, _usr
from differential import check
from one_graph import CALLS, _probe, one_graph, rand

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture")


# --------------------------------------------------------------------------- wrong results found


def _ordered_dict_moved_while_iterated(x):
    o = collections.OrderedDict(a=1, b=2)
    for k in o:
        o.move_to_end(k)  # RuntimeError at the next step, as in eager
        x = x + 1
    return x


def _is_shared(x):
    return x * x.is_shared()


def _has_names(x):
    return x.rename(None) * x.has_names()


def _shared(n):
    return lambda: (torch.randn(n).share_memory_(),)


def _named(n):
    return lambda: (torch.randn(n, names=("a",)),)


@pytest.mark.parametrize(
    "fn, calls",
    [
        (_is_set_to, CALLS),
        (_is_shared, (_shared(3), rand(3), _shared(4))),
    ],
    ids=["is_set_to", "is_shared"],
)
def test_storage_queries_are_asked_of_the_real_tensor(fn, calls):
    """A FakeTensor answers False to ``is_set_to``/``is_shared``/``has_names`` whatever the
    real tensor is: these were folded into the graph as constants (wrong results); they are
    graph breaks now."""
    m, _, _ = _probe(fn, calls, None, fullgraph=False)
    assert m is None, m


@pytest.mark.filterwarnings("ignore:Named tensors")
def test_has_names_is_asked_of_the_real_tensor():
    """(The harness cannot snapshot named tensors: compared by hand.)"""
    opt = torch_plugin.optimize("eager")(_has_names)
    for x in (_named(3)()[0], torch.randn(3), _named(4)()[0]):
        torch.testing.assert_close(opt(x), _has_names(x))


class _Obj:
    pass


def _set_then_delete(x, o):
    o.tmp = x + 1
    del o.tmp
    delattr_ok = not hasattr(o, "tmp")
    o.keep = 2
    delattr(o, "keep")
    return x * delattr_ok, o


def _obj_calls(n):
    return lambda: (torch.randn(n), _Obj())


def test_deleting_an_attribute_set_in_the_frame():
    """``o.tmp = 1; del o.tmp`` on an object without ``tmp``: the replay deleted ``tmp`` from
    the real object, which never got it, and raised AttributeError."""
    one_graph(_set_then_delete, (_obj_calls(3), _obj_calls(3), _obj_calls(4)))


def _check_fails(x):
    y = x + 1
    torch._check(y.shape[0] == 3, lambda: f"want 3, got {y.shape}")
    torch._check_value(True, lambda: "never built")
    return y * 2


def _ordered_dict_argument(x, o):
    o.move_to_end("a")
    k, v = o.popitem(last=False)
    return x * v, k, list(o)


def _od_calls(n):
    return lambda: (torch.randn(n), collections.OrderedDict(a=1, b=2, c=3))


def test_ordered_dict_argument_mutation_replayed():
    """``move_to_end``/``popitem`` on an OrderedDict argument: replayed on the caller's
    object in the captured order."""
    one_graph(_ordered_dict_argument, (_od_calls(3), _od_calls(3), _od_calls(4)))
    o = collections.OrderedDict(a=1, b=2, c=3)
    torch_plugin.optimize("eager")(_ordered_dict_argument)(torch.randn(3), o)
    assert list(o.items()) == [("c", 3), ("a", 1)]


def test_ordered_dict_moved_while_iterated_raises_as_eager():
    m, _, _ = _probe(_ordered_dict_moved_while_iterated, CALLS, None, fullgraph=False)
    assert m is None, m


def test_check_with_a_message_lambda_that_fails_raises_as_eager():
    """A false ``torch._check`` condition known at capture is a graph break: CPython runs the
    message lambda and raises (RuntimeError, as in eager) on the 4-element call."""
    m, _, _ = _probe(_check_fails, CALLS, None, fullgraph=False)
    assert m is None, m


# --------------------------------------------------------------------------- inference mode


@torch_plugin.disable
def _opaque():
    """A call capture never traces: a graph break."""


def _inference_nested(x):
    with torch.no_grad():
        with torch.inference_mode():
            y = x.sin()
    return y + x, y.is_inference(), torch.is_inference_mode_enabled()


def _inference_off(x):
    with torch.inference_mode(False):
        y = x * 2
    return y


def _inference_break_inside(x):
    with torch.inference_mode():
        y = x * 2
        _opaque()
        z = y + 1
    return z * 3


def _grad_calls(n):
    return lambda: (torch.randn(n, requires_grad=True),)


@pytest.mark.parametrize(
    "fn", [_inference_mode, _inference_nested, _inference_off, _inference_break_inside]
)
@pytest.mark.parametrize("calls", [CALLS, (_grad_calls(3), _grad_calls(3), _grad_calls(4))])
def test_inference_mode_blocks_every_backend(fn, calls):
    """``with torch.inference_mode():`` is entered and exited inside the graph (as
    torch.compile's graphs do), on every backend, inputs requiring grad or not; a graph
    break inside the block breaks at the ``with`` statement."""
    check(fn, *calls)


# --------------------------------------------------------------------------- generators


def _gen_returns(x):
    yield x
    yield x + 1
    return x * 10


def _outer_gen(x):
    r = yield from _gen_returns(x)
    yield r
    yield from [x * 3, x * 4]


def _yield_from_return_value(x):
    return sum(_outer_gen(x))


def _sender3(x):
    got = yield x
    got2 = yield got * 2
    yield got2 + got


def _send_sequence(x):
    g = _sender3(x)
    return next(g) + g.send(x + 1) + g.send(x * 5)


def _send_none_first(x):
    g = _sender3(x)
    return g.send(None) + g.send(x)


def _send_to_a_new_generator(x):
    return _sender3(x).send(x)  # TypeError in eager: a graph break, then the same error


def _delegating(x):
    got = yield from _sender3(x)
    yield got


def _send_through_yield_from(x):
    g = _delegating(x)
    return next(g) + g.send(x + 2) + g.send(x * 2)


@pytest.mark.parametrize(
    "fn",
    [
        _yield_from_return_value,
        _send_sequence,
        _send_none_first,
        _send_to_a_new_generator,
        _send_through_yield_from,
    ],
)
def test_yield_from_and_send_every_backend(fn):
    """``yield from`` (GET_YIELD_FROM_ITER, SEND, END_SEND; its value is the sub-generator's
    return value) and ``generator.send`` in inlined generators, on every backend."""
    check(fn, *CALLS)


# --------------------------------------------------------------------------- descriptors' __get__


def _desc_get_none(x):
    d = torch.Tensor.ndim.__get__(None, torch.Tensor)
    return x * (d is torch.Tensor.ndim)


def _desc_get_member(x):
    p = functools.partial(_usr, b=2)
    return type(p).func.__get__(p)(x), type(p).keywords.__get__(p)["b"]


@pytest.mark.parametrize("fn", [_desc_get_none, _desc_get_member, _getset_descriptor])
def test_c_descriptor_get(fn):
    """``desc.__get__(obj)`` of a C getset or member descriptor is the attribute read."""
    one_graph(fn)
