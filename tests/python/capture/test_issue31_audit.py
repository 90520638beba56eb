# ruff: noqa: B009, C405, FURB192, SIM117
"""Issue #31 audit: one probe per example the issue names, class by class, both outside
suites' lists.

Each probe runs in eager Python and under ``optimize("eager", fullgraph=True)`` through the
differential harness (tests/fuzz/differential.py: three calls, compile / cached /
recompile; result, arguments, observed globals and objects, identity, RNG and global torch
state compared), and once more without fullgraph (graph breaks allowed), which must equal
eager too. A probe that still breaks is ``xfail(strict=True)`` with the reason, so the state
of each class is visible here and a probe that starts to capture (or regresses) fails.

``BREAKS_RESUME`` probes a graph break inside a construct (a loop over a dict, set, deque,
zip or map of a live list; a map function that breaks; a ``try`` block): the code after the
break must still be captured (a resume function with a graph), not run as plain Python.
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
from differential import _copying_factory, _run_world, check, compare_runs

import torch_plugin
from torch_plugin.capture import convert_frame

pytestmark = pytest.mark.usefixtures("fresh_capture")


def rand(*shape):
    return lambda: (torch.randn(*shape),)


CALLS = (rand(3), rand(3), rand(4))


def _probe(fn, calls, observe, fullgraph):
    """(mismatch or None, graphs compiled, graph-break reasons) of ``fn`` under the eager
    backend against eager Python."""
    calls = calls or CALLS
    build = _copying_factory(fn, calls, observe, None)
    try:
        ref = _run_world(build, None, 0)
        torch_plugin.reset()

        got = _run_world(build, "eager", 0, fullgraph=fullgraph)
        stats = convert_frame.stats
        breaks = [str(r) for _, r, _ in stats.graph_breaks + stats.failures]
        return compare_runs(ref, got, "eager", 1.3e-6, 1e-5), stats.graphs_compiled, breaks
    finally:
        build()
        torch_plugin.reset()


def one_graph(fn, calls=None, observe=None):
    """Equal to eager with graph breaks allowed, and under fullgraph with none."""
    m, _, _ = _probe(fn, calls, observe, fullgraph=False)
    assert m is None, f"WRONG RESULT (graph breaks allowed): {m}"
    m, _, breaks = _probe(fn, calls, observe, fullgraph=True)
    # a frame without tensor operations runs as plain Python (as under torch.compile)
    breaks = [b for b in breaks if b != "no tensor operations to capture"]
    assert not breaks, breaks
    assert m is None, f"fullgraph: {m}"


# --------------------------------------------------------------------------- module state


def _usr(a, b=2):
    return a * b


NT = collections.namedtuple("NT", ["a", "b"])
T = typing.TypeVar("T")
P = functools.partial(_usr, b=3)


class Vec:
    def __init__(self, v, scale=1):
        self.v = v
        self.scale = scale

    def __add__(self, other):
        return Vec(self.v + other.v, self.scale + other.scale)

    def __eq__(self, other):
        return isinstance(other, Vec) and self.scale == other.scale

    def __iter__(self):
        return iter([self.v, self.v * self.scale])

    def __str__(self):
        return f"Vec({self.scale})"

    __hash__ = None


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


class Counter:
    count = 0


class MyDict(dict):
    def total(self):
        return sum(self.values())


class Box:
    def __init__(self, v):
        self.v = v


def _attr_fn(x):
    return x


_attr_fn.scale = 3


class BufMod(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(4))

    def forward(self, x):
        self.buf[:] = x
        self.buf += 1
        return self.buf * 2


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


def _getset_descriptor(x):
    return x * torch.Tensor.ndim.__get__(x) + type(P).func.__get__(P)(x)


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


def _is_set_to(x):
    y = x.view(-1)
    return x * y.is_set_to(x) + x.is_set_to(x)


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


def _dtype_casts(x):
    return x.to(torch.float64), x.double().half(), x.type(torch.int32), x.type(), x.float().dtype


def _set_ops(x):
    a, b = {1, 2, 3}, {2, 3, 4}
    return x * len((a | b) - (a & b)) + len(a ^ b) + a.issubset(b)


def _ordered_dict_iteration_then_move(x):
    o = collections.OrderedDict(a=1, b=2, c=3)
    o.move_to_end("a", last=False)
    total = x
    for k, v in o.items():
        total = total * v + len(k)
    o.move_to_end("c", last=False)
    return total, list(o), o.popitem(), o.popitem(last=False)


def _ordered_dict_moved_while_iterated(x):
    o = collections.OrderedDict(a=1, b=2)
    for k in o:
        o.move_to_end(k)  # RuntimeError at the next step, as in eager
        x = x + 1
    return x


def _collections_types(x):
    c = collections.Counter("abca")
    return x * c["a"], c.most_common(1)


def _ordered_dict(x):
    o = collections.OrderedDict(a=x)
    o["b"] = x * 2
    o.move_to_end("a")
    o.popitem(last=False)
    return list(o.values()), o, list(o)


def _vars_dict(x, o):
    return x * sum(vars(o).values()), sorted(vars(o))


def _gen(x):
    yield x
    yield x + 1


def _yield_from_gen(x):
    yield from _gen(x)
    yield x * 3


def _yield_from(x):
    return sum(_yield_from_gen(x))


def _sender(x):
    got = yield x
    yield got * 2


def _generator_send(x):
    g = _sender(x)
    a = next(g)
    b = g.send(x + 1)
    return a + b


def _isinstance(x, o):
    return (
        x * isinstance(x, torch.Tensor)
        + isinstance(o, (Box, Vec))
        + issubclass(type(o), Box)
        + isinstance(x, torch.nn.Parameter)
    )


def _inference_mode(x):
    with torch.inference_mode():
        y = x * 2
    return y + 1


def _class_attr_mutation(x):
    Counter.count += 1
    return x * Counter.count


def _user_operators(x, v):
    return (v + v).v + x


def _list_reverse(x):
    lst = [x, x * 2, x * 3]
    lst.reverse()
    return lst


def _sorted_dict(x):
    return x * sorted({"b": 1, "a": 2})[0].__len__()


def _namedtuple_replace(x):
    return NT(x, 2)._replace(b=5)


def _delattr(x, o):
    o.tmp = 1
    delattr(o, "tmp")
    return x * hasattr(o, "tmp")


def _checkpoint_body(x):
    return torch.sin(x) * 2


def _activation_checkpoint(x):
    return torch.utils.checkpoint.checkpoint(_checkpoint_body, x, use_reentrant=False) + 1


def _box3():
    return lambda: (torch.randn(3), Box(torch.randn(3)))


def _box4():
    return lambda: (torch.randn(4), Box(torch.randn(4)))


def _vec(n, s):
    return lambda: (torch.randn(n), Vec(torch.randn(n), s))


_BOX_CALLS = (_box3(), _box3(), _box4())
_VEC_CALLS = (_vec(3, 2), _vec(3, 3), _vec(4, 5))

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
        "collections.namedtuple() builds a class (exec): not modelled",
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
        "a write through obj.__dict__ is not modelled (reads are)",
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
        "a tensor's value used as a Python index is data-dependent",
    ),
    "tensor_dict_key": (
        "data-dependent",
        _tensor_dict_key,
        None,
        None,
        "a tensor as a dict key (hashed by identity) is not modelled",
    ),
    "max_of_tensors": (
        "data-dependent",
        _max_of_tensors,
        None,
        None,
        "max() comparing tensors is data-dependent",
    ),
    # suite 2 (whole-graph gaps)
    "dtype_casts": (
        "suite2",
        _dtype_casts,
        None,
        None,
        None,
    ),
    "set_operations": ("suite2", _set_ops, None, None, None),
    "collections_types": (
        "suite2",
        _collections_types,
        None,
        None,
        "collections.Counter built inside is not modelled (a dict subclass with dunders)",
    ),
    "ordered_dict": ("suite2", _ordered_dict, None, None, None),
    "ordered_dict_iteration_then_move": (
        "suite2",
        _ordered_dict_iteration_then_move,
        None,
        None,
        None,
    ),
    "vars_dict": (
        "suite2",
        _vars_dict,
        _BOX_CALLS,
        None,
        None,
    ),
    "yield_from": ("suite2", _yield_from, None, None, None),
    "generator_send": ("suite2", _generator_send, None, None, None),
    "isinstance_checks": ("suite2", _isinstance, _BOX_CALLS, None, None),
    "inference_mode_block": (
        "suite2",
        _inference_mode,
        None,
        None,
        None,
    ),
    "class_attr_mutation": (
        "suite2",
        _class_attr_mutation,
        None,
        {"cls": Counter},
        None,
    ),
    "user_class_operators": ("suite2", _user_operators, _VEC_CALLS, None, None),
    "list_reverse": ("suite2", _list_reverse, None, None, None),
    "sorted_dict": ("suite2", _sorted_dict, None, None, None),
    "namedtuple_replace": ("suite2", _namedtuple_replace, None, None, None),
    "delattr": ("suite2", _delattr, _BOX_CALLS, None, None),
    "module_buffer_inplace": (
        "suite2",
        BufMod(),
        (rand(4), rand(4), lambda: (torch.randn(1),)),
        None,
        None,
    ),
    "transformer_encoder_layer": (
        "suite2",
        torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0).eval(),
        (rand(2, 3, 8), rand(2, 3, 8), rand(2, 5, 8)),
        None,
        None,
    ),
    "transformer_encoder_layer_batch_first_train": (
        "suite2",
        torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True),
        (rand(2, 3, 8), rand(2, 3, 8), rand(3, 3, 8)),
        None,
        None,
    ),
    "activation_checkpointing": (
        "suite2",
        _activation_checkpoint,
        None,
        None,
        "torch.utils.checkpoint runs with capture off (torch_plugin.disable)",
    ),
}


def _params():
    out = []
    for name, (cls, *_, reason) in PROBES.items():
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(name, id=f"{cls}-{name}", marks=marks))
    return out


@pytest.mark.parametrize("name", _params())
def test_probe(name):
    _, fn, calls, observe, _ = PROBES[name]
    one_graph(fn, calls, observe)


# --------------------------------------------------------------------------- wrong results found


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
