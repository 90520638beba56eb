# ruff: noqa: B009, C405, FURB192
"""Issue #31 audit, first suite: one probe per example the issue names, class by class
(functools.partial attributes, C builtins, NumPy, operators, no tensor operation, attributes,
objects built inside, sets, C queries, data-dependent scalars), outside suites' lists. The
second suite's whole-graph gaps are in test_issue31_audit_gaps.py, the tests of what the
audit found (wrong results, inference mode, generators, descriptors) in
test_issue31_regressions.py.

Each probe runs in eager Python and under ``optimize("eager", fullgraph=True)`` through the
differential harness (tests/fuzz/differential.py: three calls, compile / cached /
recompile; result, arguments, observed globals and objects, identity, RNG and global torch
state compared), and once more without fullgraph (graph breaks allowed), which must equal
eager too (``one_graph``, tests/fuzz/one_graph.py). A probe that still breaks is
``xfail(strict=True)`` with the reason, so the state of each class is visible here and a
probe that starts to capture (or regresses) fails.

State: of the 74 probes here and in test_issue31_audit_gaps.py, 68 are one graph (with
the 6 of test_issue31_regressions.py, 74 of 80); still breaking: ``Tensor.numpy()`` and
``np.*`` on arrays, ``torch.distributions`` constructors, functorch queries, storage
queries a FakeTensor cannot answer, and a tensor used as a list index.
"""

from __future__ import annotations

import collections
import functools
import itertools
import operator
import typing

import numpy as np
import pytest
import torch
from audit_probes import (
    _BOX_CALLS,
    _VEC_CALLS,
    NT,
    Box,
    P,
    _getset_descriptor,
    _is_set_to,
    _usr,
    probe_params,
)
from one_graph import one_graph

pytestmark = pytest.mark.usefixtures("fresh_capture")


# --------------------------------------------------------------------------- module state


T = typing.TypeVar("T")


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self, a):
        self.a = a


class Doubler:
    """A data descriptor."""

    def __get__(self, obj, owner=None):
        return obj._v * 2

    def __set__(self, obj, value):
        obj._v = value


class WithDescriptor:
    d = Doubler()

    def __init__(self, v):
        self._v = v


class WithProperty:
    def __init__(self, v):
        self._v = v
        self.log = []

    @property
    def v(self):
        return self._v

    @v.setter
    def v(self, value):
        self.log.append(len(self.log))
        self._v = value * 3


class MyDict(dict):
    def total(self):
        return sum(self.values())


def _attr_fn(x):
    return x


_attr_fn.scale = 3


# --------------------------------------------------------------------------- probes


def _partial_setattr(x):
    p = functools.partial(_usr)
    p.tag = x + 1
    return p.tag * 2, hasattr(p, "tag"), getattr(p, "tag")


def _reduce(x):
    return functools.reduce(operator.add, [x, x * 2, x * 3])


def _defaultdict_setitem(x):
    d = collections.defaultdict(list)
    collections.defaultdict.__setitem__(d, "k", [x])
    d["j"].append(x + 1)
    return d["k"][0] + d["j"][0]


def _set_add_isdisjoint(x):
    s = set()
    set.add(s, 1)
    s.add(2)
    return x * set.isdisjoint(s, {3}) + s.isdisjoint({2})


def _namedtuple_factory(x):
    Pt = collections.namedtuple("Pt", ["a", "b"])
    p = Pt(x, 2)
    return p.a * p.b


def _tensor_numpy(x):
    return torch.from_numpy(x.numpy() * 2)


def _np_on_array(x):
    a = x.numpy()
    return torch.as_tensor(np.sum(a)) + torch.as_tensor(np.exp(a))


def _np_scalar_dtype_finfo(x):
    return x * np.float32(2.0) + np.finfo(np.float32).eps + np.dtype(np.float64).itemsize


def _tuple_iadd(x):
    t = ()
    t += (x,)
    t += (x + 1,)
    return t


def _user_iter_eq_str(x, v):
    w = v + v
    a, b = w
    return a + b, w == v, str(w)


def _no_tensor_op(a, b):
    return a + b, [a] * b


def _tensor_custom_attr(x):
    y = x + 1
    x.tag = 3
    return y * x.tag


def _grad_read(x):
    return x * 2 if x.grad is None else x.grad


def _namedtuple_attr(x):
    p = NT(x, 3)
    return p.a * p.b + NT._fields.index("b")


def _obj_dict(x, o):
    total = x * o.__dict__["v"] + len(vars(o)) + ("v" in o.__dict__)
    for k, v in vars(o).items():
        total = total + v * len(k)
    return total, list(o.__dict__)


def _obj_dict_write(x, o):
    o.__dict__["w"] = 4
    return x * o.w


def _slots(x, s):
    s.b = x + 1
    return s.a * s.b


def _descriptor(x, o):
    o.d = 3
    return x * o.d


def _property_setter(x, o):
    o.v = x + 1
    o.v = o.v * 2
    return o.v, o.log


def _function_attr(x):
    return x * _attr_fn.scale


def _deque_inside(x):
    d = collections.deque([x], maxlen=2)
    d.append(x + 1)
    d.appendleft(x * 2)
    return list(d)


def _defaultdict_inside(x):
    d = collections.defaultdict(int)
    d["a"] += 2
    return x * d["a"] + d["b"]


def _dict_subclass_inside(x):
    d = MyDict(a=x, b=x * 2)
    return d.total()


def _combinations_inside(x):
    return [a * b for a, b in itertools.combinations([x, x + 1, x + 2], 2)]


def _module_inside(x):
    m = torch.nn.ReLU()
    return m(x)


def _distribution_inside(x):
    d = torch.distributions.Normal(x, torch.ones_like(x))
    return d.log_prob(x * 0.5)


def _return_types_inside(x):
    r = torch.max(x.reshape(1, -1), dim=1)
    return r.values + r.indices, type(r).__name__


def _user_class_inside(x):
    b = Box(x)
    b.v = b.v + 1
    return b.v


def _set_of_list(x):
    return len(set([1, 2, 2])) * x


def _set_of_tensors(x):
    y = x + 1
    return len({x, y, x}) * x


def _set_update(x):
    return len({1, 2, 3, 4, *[5, 6]}) * x


def _autocast_query(x):
    return x * torch.is_autocast_enabled() + torch.get_autocast_gpu_dtype().is_floating_point


def _functorch_query(x):
    return (
        x
        + torch._C._functorch.is_functorch_wrapped_tensor(x)
        + torch._C._are_functorch_transforms_active()
    )


def _is_(x):
    y = x.view(-1)
    return x * x.is_contiguous() + x.is_floating_point() + (y is x) + x.is_inference()


def _tensor_iter(x):
    a, b = x[:2]
    return [r * 2 for r in x] + [a + b]


def _check_message_lambda(x):
    torch._check(x.shape[0] > 0, lambda: f"empty {x.shape}")
    return x + 1


def _foreach_0d(x):
    xs = [x.clone(), x * 2]
    torch._foreach_add_(xs, torch.tensor(2.0))
    torch._foreach_mul_(xs, torch.tensor(0.5))
    return xs


def _addcmul_0d(x):
    y = x.clone()
    y.addcmul_(x, x, value=torch.tensor(0.25))
    return y


def _tensor_as_index(x):
    lst = [10, 20, 30]
    return x * lst[torch.tensor(1)]


def _tensor_dict_key(x):
    d = {x: 1}
    return x * d[x]


def _max_of_tensors(x):
    return max(x.sum(), x.mean()) * x


# name -> (issue class, fn, calls, observe, reason when it still breaks or None)
PROBES: dict[str, tuple] = {
    # suite 1, class: functools.partial attributes (40)
    "partial_func_args_keywords": (
        "partial",
        lambda x: P.func(x, 2) * len(P.args) + P.keywords["b"],
        None,
        None,
        None,
    ),
    "partial_hasattr_getattr": (
        "partial",
        lambda x: x * hasattr(P, "func") + hasattr(P, "nope") + getattr(P, "nope", 7),
        None,
        None,
        None,
    ),
    "partial_local_setattr": ("partial", _partial_setattr, None, None, None),
    # class: C builtins and slot wrappers (26)
    "functools_reduce": ("builtins", _reduce, None, None, None),
    "defaultdict_setitem": (
        "builtins",
        _defaultdict_setitem,
        None,
        None,
        None,
    ),
    "dict_fromkeys": ("builtins", lambda x: dict.fromkeys(["a", "b"], x + 1), None, None, None),
    "set_add_isdisjoint": ("builtins", _set_add_isdisjoint, None, None, None),
    "chain_from_iterable": (
        "builtins",
        lambda x: sum(itertools.chain.from_iterable([[x, x], [x * 2]])),
        None,
        None,
        None,
    ),
    "namedtuple_factory": (
        "builtins",
        _namedtuple_factory,
        None,
        None,
        None,
    ),
    "typevar_dict_key": ("builtins", lambda x: {T: x}[T] + 1, None, None, None),
    "getset_descriptor": (
        "builtins",
        _getset_descriptor,
        None,
        None,
        None,
    ),
    # class: NumPy (20)
    "tensor_numpy": (
        "numpy",
        _tensor_numpy,
        None,
        None,
        "Tensor.numpy() reads tensor data into Python (no torch._numpy tracing)",
    ),
    "np_on_array": (
        "numpy",
        _np_on_array,
        None,
        None,
        "Tensor.numpy() reads tensor data into Python (no torch._numpy tracing)",
    ),
    "np_scalar_dtype_finfo": ("numpy", _np_scalar_dtype_finfo, None, None, None),
    # class: operators on containers and user objects (15)
    "empty_tuple_plus": ("operators", lambda x: ((() + (x,)) + ())[0] + 1, None, None, None),
    "list_times_n": ("operators", lambda x: sum([x] * 3) + len([1] * 2), None, None, None),
    "tuple_iadd": ("operators", _tuple_iadd, None, None, None),
    "keys_or_keys": (
        "operators",
        lambda x: x * len({"a": 1}.keys() | {"b": 2}.keys()),
        None,
        None,
        None,
    ),
    "next_range_iterator": ("operators", lambda x: x * next(iter(range(3, 5))), None, None, None),
    "sorted_key": (
        "operators",
        lambda x: x * sorted([3, 1, 2], key=lambda v: -v)[0],
        None,
        None,
        None,
    ),
    "user_iter_eq_str": ("operators", _user_iter_eq_str, _VEC_CALLS, None, None),
    "abs_tensor": ("operators", lambda x: abs(x), None, None, None),
    # class: fullgraph with no tensor operation (14)
    "no_tensor_op": ("no-tensor-op", _no_tensor_op, ((2, 3), (2, 3), (4, 5)), None, None),
    # class: attribute reads and writes (13)
    "tensor_custom_attr": ("attributes", _tensor_custom_attr, None, None, None),
    "tensor_grad": ("attributes", _grad_read, None, None, None),
    "namedtuple_attr": ("attributes", _namedtuple_attr, None, None, None),
    "obj_dict": (
        "attributes",
        _obj_dict,
        _BOX_CALLS,
        None,
        None,
    ),
    "obj_dict_write": (
        "attributes",
        _obj_dict_write,
        _BOX_CALLS,
        None,
        None,
    ),
    "slots": (
        "attributes",
        _slots,
        (
            lambda: (torch.randn(3), Slotted(torch.randn(3))),
            lambda: (torch.randn(3), Slotted(torch.randn(3))),
            lambda: (torch.randn(4), Slotted(torch.randn(4))),
        ),
        None,
        None,
    ),
    "descriptor": (
        "attributes",
        _descriptor,
        (
            lambda: (torch.randn(3), WithDescriptor(1)),
            lambda: (torch.randn(3), WithDescriptor(2)),
            lambda: (torch.randn(4), WithDescriptor(3)),
        ),
        None,
        None,
    ),
    "property_setter": (
        "attributes",
        _property_setter,
        (
            lambda: (torch.randn(3), WithProperty(1)),
            lambda: (torch.randn(3), WithProperty(2)),
            lambda: (torch.randn(4), WithProperty(3)),
        ),
        None,
        None,
    ),
    "function_attr": ("attributes", _function_attr, None, None, None),
    # class: objects built inside captured code (12)
    "deque_inside": ("objects", _deque_inside, None, None, None),
    "defaultdict_inside": ("objects", _defaultdict_inside, None, None, None),
    "dict_subclass_inside": ("objects", _dict_subclass_inside, None, None, None),
    "combinations_inside": ("objects", _combinations_inside, None, None, None),
    "nn_module_inside": ("objects", _module_inside, None, None, None),
    "distribution_inside": (
        "objects",
        _distribution_inside,
        None,
        None,
        "constructing torch.distributions classes is not modelled",
    ),
    "return_types_inside": ("objects", _return_types_inside, None, None, None),
    "user_class_inside": ("objects", _user_class_inside, None, None, None),
    # class: sets (12)
    "set_of_list": ("sets", _set_of_list, None, None, None),
    "set_of_tensors": ("sets", _set_of_tensors, None, None, None),
    "set_update_instruction": ("sets", _set_update, None, None, None),
    # class: C queries returning non-tensors (9) and torch._check with a message lambda (8)
    "autocast_query": ("c-queries", _autocast_query, None, None, None),
    "functorch_query": (
        "c-queries",
        _functorch_query,
        None,
        None,
        "torch._C._functorch queries are not known pure",
    ),
    "is_queries": ("c-queries", _is_, None, None, None),
    "is_set_to": (
        "c-queries",
        _is_set_to,
        None,
        None,
        "is_set_to/is_shared/is_pinned/has_names: a FakeTensor cannot answer (graph break)",
    ),
    "tensor_iter": ("c-queries", _tensor_iter, None, None, None),
    "check_message_lambda": (
        "c-queries",
        _check_message_lambda,
        None,
        None,
        None,
    ),
    # class: data-dependent scalars (6)
    "foreach_0d_scalar": ("data-dependent", _foreach_0d, None, None, None),
    "addcmul_0d_value": ("data-dependent", _addcmul_0d, None, None, None),
    "tensor_as_index": (
        "data-dependent",
        _tensor_as_index,
        None,
        None,
        "lst[t] calls Tensor.__index__, which reads the tensor's value (data-dependent):"
        " a graph break at the subscript, the code after it captured again",
    ),
    "tensor_dict_key": (
        "data-dependent",
        _tensor_dict_key,
        None,
        None,
        None,
    ),
    "max_of_tensors": (
        "data-dependent",
        _max_of_tensors,
        None,
        None,
        None,
    ),
}


@pytest.mark.parametrize("name", probe_params(PROBES))
def test_probe(name):
    _, fn, calls, observe, _ = PROBES[name]
    one_graph(fn, calls, observe)
