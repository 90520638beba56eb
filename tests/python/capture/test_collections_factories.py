"""``collections.namedtuple()`` called in the frame, ``collections.Counter`` and
``defaultdict`` as containers built in the frame or received (issue #31).

- ``namedtuple(...)`` with constant arguments builds its class at capture time (by
  ``namedtuple`` itself, ``module`` the calling function's ``__name__``); instances are
  modelled as any namedtuple's. Eager builds a new class on every call, so the class or an
  instance leaving the frame is a graph break (and equal to eager).
- ``Counter``: counting from iterables and mappings, missing keys read 0, ``update`` /
  ``subtract`` / ``most_common`` / ``total`` / ``elements`` / ``+ - | &``, tensor counts; a
  Counter argument is guarded on its keys and its mutations replayed in place.
- ``defaultdict`` built in the frame as a container of tensors, returned.

Every case runs through the differential harness on every backend (three calls: compile,
cached, recompile; results, arguments and identities compared), and the captured ones must
be one graph.
"""

from __future__ import annotations

import collections

import pytest
import torch
from differential import check
from one_graph import _probe, check_one_graph

pytestmark = pytest.mark.usefixtures("fresh_capture")

VEC = (
    lambda: (torch.randn(3),),
    lambda: (torch.randn(3),),
    lambda: (torch.randn(4),),
)


def _nt_fields(x):
    Pt = collections.namedtuple("Pt", ["a", "b"])
    p = Pt(x, 2)
    return p.a * p.b


def _nt_defaults_replace(x):
    Pt = collections.namedtuple("Pt", "a b c", defaults=(3,))
    p = Pt(x, b=2)
    q = p._replace(a=x + 1)
    return q.a * q.c + p[1], type(p).__name__, type(p).__module__, Pt._fields, isinstance(p, tuple)


def _nt_rename_asdict(x):
    Pt = collections.namedtuple("Pt", ["a", "def"], rename=True)
    p = Pt(x, 1)
    return p._1 + p.a, p._asdict()


def _counter_most_common(x):
    c = collections.Counter("abca")
    return x * c["a"], c.most_common(1)


def _counter_update_subtract(x):
    c = collections.Counter(["a", "b"], z=3)
    c.update("aab")
    c.subtract({"b": 1})
    c["q"] += 2
    return x * c["a"] + c["missing"], c, c.total(), sorted(c.elements())


def _counter_operators(x):
    a = collections.Counter(a=3, b=1)
    b = collections.Counter(a=1, b=2)
    d = a + b
    a -= b
    return x * len(d), d, a, a | b, a & b, list(d.items())


def _counter_tensor_counts(x):
    c = collections.Counter()
    c["t"] += x
    c.update({"t": x})
    return c["t"] * 2, c


def _counter_argument(x, c):
    c["a"] += 1
    c.update("ab")
    return x * c["a"] + c["zz"], c.most_common()


def _defaultdict_container(x):
    d = collections.defaultdict(list)
    for i in range(3):
        d[i % 2].append(x * i)
    d["k"].extend([x, x + 1])
    return d, sum(d[0]) + d["k"][1]


CAPTURED = {
    "namedtuple_fields": (_nt_fields, VEC),
    "namedtuple_defaults_replace": (_nt_defaults_replace, VEC),
    "namedtuple_rename_asdict": (_nt_rename_asdict, VEC),
    "counter_most_common": (_counter_most_common, VEC),
    "counter_update_subtract": (_counter_update_subtract, VEC),
    "counter_operators": (_counter_operators, VEC),
    "counter_tensor_counts": (_counter_tensor_counts, VEC),
    "counter_argument": (
        _counter_argument,
        (
            lambda: (torch.randn(3), collections.Counter(a=2, b=1)),
            lambda: (torch.randn(3), collections.Counter(a=5, b=0)),
            lambda: (torch.randn(4), collections.Counter(a=1, b=1)),
        ),
    ),
    "defaultdict_container": (_defaultdict_container, VEC),
}


@pytest.mark.parametrize("name", list(CAPTURED))
def test_collections_factory_is_one_graph(name):
    fn, calls = CAPTURED[name]
    check_one_graph(fn, *calls)


def _nt_instance_escapes(x):
    Pt = collections.namedtuple("Pt", ["a", "b"])
    return Pt(x, 2)


def _nt_class_escapes(x):
    Pt = collections.namedtuple("Pt", ["a", "b"])
    return Pt, x + 1


def _nt_nonconstant_name(x):
    Pt = collections.namedtuple("Pt", [f"f{int(x.sum() > 0)}"])  # a data-dependent name
    return Pt(x)[0]


@pytest.mark.parametrize(
    "fn", [_nt_instance_escapes, _nt_class_escapes, _nt_nonconstant_name], ids=lambda f: f.__name__
)
def test_namedtuple_class_leaving_the_frame_breaks(fn):
    check(fn, *VEC)
    mismatch, _, breaks = _probe(fn, VEC, None, fullgraph=False)
    assert mismatch is None, mismatch
    assert breaks, "expected a graph break"
