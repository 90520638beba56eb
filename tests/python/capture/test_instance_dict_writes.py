"""Writes and reads through an instance ``__dict__`` (issue #31): ``obj.__dict__[k] = v``,
``vars(obj).update(...)``, ``del obj.__dict__[k]``, ``setdefault``/``pop``/``popitem``/
``clear``/``|=``, on objects from the frame's inputs (attribute side effects replayed as the
same dict operations, so no ``__setattr__`` or descriptor runs) and on objects built in the
frame (the ``__dict__`` is the object's attribute table).

Each case runs through the differential harness on every backend (three calls: compile,
cached, recompile; results, arguments with their attribute order, identities compared) and
is then captured as one graph with no break; the cases Python's rules make unsafe to
answer from the pending writes (a data descriptor at the name, a custom
``__getattribute__``, a non-str key, the dict of a new object leaving the frame) must break
the graph and still equal eager.
"""

from __future__ import annotations

import pytest
import torch
from differential import check
from one_graph import _probe, check_one_graph

pytestmark = pytest.mark.usefixtures("fresh_capture")


class Box:
    def __init__(self, v):
        self.v = v


class Logged:
    """``__setattr__`` logs every write: a ``__dict__`` write must not run it."""

    def __init__(self, v):
        object.__setattr__(self, "log", [])
        object.__setattr__(self, "v", v)

    def __setattr__(self, name, value):
        self.log.append(name)
        object.__setattr__(self, name, value)


class WithProp:
    def __init__(self, v):
        self.v = v

    @property
    def p(self):
        return self.v * 2


class Intercepts:
    def __init__(self, v):
        self.v = v

    def __getattribute__(self, name):
        if name == "w":
            return 100
        return object.__getattribute__(self, name)


def _calls(cls):
    return (
        lambda: (torch.randn(3), cls(torch.randn(3))),
        lambda: (torch.randn(3), cls(torch.randn(3))),
        lambda: (torch.randn(4), cls(torch.randn(4))),
    )


def _setitem(x, o):
    o.__dict__["w"] = x + 4
    return x * o.w


def _vars_update_then_attr(x, o):
    d = vars(o)
    d.update(a=x + 1, b=2)
    o.c = 3  # a plain write is seen through the dict read earlier
    d["v"] = x * 2
    return x * o.a + o.b + len(d) + o.v, list(d), d["c"]


def _del_then_reinsert(x, o):
    # the key moves to the end of the dict, as in CPython (replayed: deleted, then written)
    o.extra = 1
    del o.__dict__["v"]
    o.v = x
    return list(o.__dict__), o.v + 1, o.__dict__ is vars(o)


def _setdefault_pop(x, o):
    d = o.__dict__
    d.setdefault("k", x)
    d.setdefault("k", x * 5)
    y = d.pop("v")
    d.pop("missing", None)
    return d, y + d["k"], d is o.__dict__, hasattr(o, "v")


def _popitem_clear_ior(x, o):
    d = vars(o)
    d |= {"a": x, "b": x + 1}
    k, v = d.popitem()
    d.clear()
    d["z"] = v * 2
    return k, o.z, list(d)


def _iterate_after_write(x, o):
    vars(o)["u"] = 3
    total = x
    for k, v in o.__dict__.items():
        total = total + v * len(k)
    return total


def _bypasses_setattr(x, o):
    o.__dict__["w"] = x * 3
    vars(o).update(q=2)
    return o.w + o.q, list(o.log)


def _new_object_dict(x):
    b = Box(x)
    b.__dict__["z"] = x + 1
    vars(b).update(q=3)
    del b.__dict__["v"]
    b.v = x * 2
    return b.z * b.q + b.v, list(vars(b)), b


def _new_object_dict_reads(x):
    b = Box(x)
    b.w = 2
    d = b.__dict__
    return sum(d[k] * len(k) for k in d), "w" in d, len(d)


CAPTURED = {
    "setitem": (_setitem, _calls(Box)),
    "vars_update_then_attr": (_vars_update_then_attr, _calls(Box)),
    "del_then_reinsert": (_del_then_reinsert, _calls(Box)),
    "setdefault_pop": (_setdefault_pop, _calls(Box)),
    "popitem_clear_ior": (_popitem_clear_ior, _calls(Box)),
    "iterate_after_write": (_iterate_after_write, _calls(Box)),
    "bypasses_setattr": (_bypasses_setattr, _calls(Logged)),
    "new_object_dict": (_new_object_dict, None),
    "new_object_dict_reads": (_new_object_dict_reads, None),
}


@pytest.mark.parametrize("name", list(CAPTURED))
def test_instance_dict_write_is_one_graph(name):
    fn, calls = CAPTURED[name]
    calls = calls or (
        lambda: (torch.randn(3),),
        lambda: (torch.randn(3),),
        lambda: (torch.randn(4),),
    )
    check_one_graph(fn, *calls)


def _shadowed_by_property(x, o):
    o.__dict__["p"] = 5  # the property still answers o.p
    return x * o.p, o.__dict__["p"]


def _custom_getattribute(x, o):
    o.__dict__["w"] = 3
    return x * o.w


def _non_str_key(x, o):
    o.__dict__[1] = 3
    return x * len(o.__dict__)


def _new_object_dict_escapes(x):
    b = Box(x)
    return vars(b), b


BREAKS = {
    "data_descriptor": (_shadowed_by_property, _calls(WithProp), "data descriptor"),
    "custom_getattribute": (_custom_getattribute, _calls(Intercepts), "__getattribute__"),
    "non_str_key": (_non_str_key, _calls(Box), "not a str"),
    "new_object_dict_escapes": (
        _new_object_dict_escapes,
        (
            lambda: (torch.randn(3),),
            lambda: (torch.randn(3),),
            lambda: (torch.randn(4),),
        ),
        "leaves the frame",
    ),
}


@pytest.mark.parametrize("name", list(BREAKS))
def test_unsafe_instance_dict_write_breaks_and_equals_eager(name):
    fn, calls, reason = BREAKS[name]
    check(fn, *calls)
    mismatch, _, breaks = _probe(fn, calls, None, fullgraph=False)
    assert mismatch is None, mismatch
    assert any(reason in b for b in breaks), breaks
