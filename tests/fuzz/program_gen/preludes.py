"""Module code of the generated programs: what every program starts with (PRELUDE: the
``Box`` object, the ``Rec`` context manager, the generator ``gen`` and the inlined helpers) and
what a newer family adds when a program uses it (PRELUDE_EXTRA, keyed by family name)."""

PRELUDE = """\
import io
import torch


class Box:
    def __init__(self, t, n):
        self.t = t
        self.n = n
        self.items = [t]


class Rec:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, *exc):
        self.log.append("exit")
        return False


def gen(t, log):
    log.append("g0")
    yield t * 2
    log.append("g1")
    yield t + 1
    log.append("g2")


def helper(t, lst):
    lst.append(t.sum())
    return t * 2


def helper_obj(o, t):
    o.n = o.n + 1
    o.t = o.t + t
    return o.t
"""


# Extra module-level code, emitted only when a program uses the family (so a program without
# the new families is the same text as before they existed).
PRELUDE_EXTRA = {
    "python-builtins": """\
import collections
import functools
import itertools
import operator


class Vec:
    def __init__(self, v, k):
        self.v = v
        self.k = k

    def __add__(self, other):
        return Vec(self.v + other.v, self.k + other.k)

    def __eq__(self, other):
        return isinstance(other, Vec) and self.k == other.k

    def __iter__(self):
        return iter([self.v, self.k])


def scale(t, k=2):
    return t * k


G_PART = functools.partial(scale, k=3)


def grow(items, t):
    # a loop over a list it appends to: the new items are seen, as in CPython
    for i, a in enumerate(items):
        if len(items) < 5:
            items.append(a * 0.5)
        t = t + a * i
    return t


def bump(d, t):
    # a dict's values updated while iterating it (allowed: its size stays)
    for k, v in d.items():
        d["b"] = v + 1
        t = t + v
    return t


def add_while_iterating(d, t):
    # a key added while iterating: RuntimeError at the next step, caught
    try:
        for k in d:
            d[k + "x"] = t
    except RuntimeError:
        return t * 2
    return t
""",
    "numpy-scalars": """\
import numpy as np
""",
    "descriptors": """\
class SetOnly:
    # only __set__ (a data descriptor without __get__): reads find the instance __dict__
    def __set_name__(self, owner, name):
        self.name = name

    def __set__(self, obj, value):
        obj.__dict__[self.name] = value * 2


class GetSet:
    def __set_name__(self, owner, name):
        self.name = "_" + name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return obj.__dict__[self.name] + 1

    def __set__(self, obj, value):
        obj.__dict__["sets"] = obj.__dict__.get("sets", 0) + 1
        obj.__dict__[self.name] = value * 0.5


class NonData:
    # __get__ only: an instance attribute of the same name shadows it
    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return obj.base * 3


class DObj:
    sa = SetOnly()
    gs = GetSet()
    nd = NonData()

    def __init__(self, t, n):
        self.base = t
        self.sa = t
        self.gs = t
        self._p = t
        self.n = n

    @property
    def p(self):
        return self._p - 1

    @p.setter
    def p(self, v):
        self._p = v * 3
""",
    "object-attrs": """\
import collections
import typing

Pair = collections.namedtuple("Pair", ["a", "b"])


class PairX(Pair):
    pass


class NT(typing.NamedTuple):
    a: torch.Tensor
    b: int


class NTX(NT):
    pass


class Plain:
    pass
""",
}
