# ruff: noqa: PLC3002, B009, C405, B033, PLC0208, FURB192 - the constructs under test
"""Issue #31: Python semantics captured as one graph, class by class (builtins and C methods,
sets, operators on containers and user objects, fullgraph frames without tensor operations,
functools.partial attributes).

Every case runs through the differential harness (tests/fuzz/differential.py: eager, then
the "eager", "aot_eager" and "plugin" backends, three calls: compile, cached, recompile;
result, arguments, observed globals, identity, RNG and global torch state compared), and
once more under ``nopython=True`` (torch.compile's fullgraph), which must capture it with
no graph break. Cases that must stay graph breaks (an order capture cannot know) are
checked to break and still equal eager.
"""

from __future__ import annotations

import collections
import functools
import itertools
import operator
import typing

import pytest
import torch
from differential import check
from one_graph import check_one_graph

import torch_plugin
from torch_plugin.capture import convert_frame

pytestmark = pytest.mark.usefixtures("fresh_capture")


def rand(*shape):
    return lambda: (torch.randn(*shape),)


CALLS = (rand(3), rand(3), rand(4))


def one_graph(fn, *calls, observe=None, graphs=1):
    """``fn`` equals eager on every backend (check) and is one graph under nopython."""
    check_one_graph(fn, *(calls or CALLS), observe=observe, graphs=graphs)


# --------------------------------------------------------------------------- module state


def _usr(a, b=2):
    return a * b


NT = collections.namedtuple("NT", ["a", "b"])
T = typing.TypeVar("T")
P = functools.partial(_usr, b=3)
PT = functools.partial(torch.add, alpha=2)
G_SET = {1, 2, 3}
G_LIST = [1, 2, 3]


class Vec:
    """A user class with Python operators (inlined, never run for real at capture)."""

    def __init__(self, v, scale=1):
        self.v = v
        self.scale = scale

    def __add__(self, other):
        if isinstance(other, Vec):
            return Vec(self.v + other.v, self.scale + other.scale)
        return NotImplemented

    def __radd__(self, other):
        return Vec(self.v + other, self.scale)

    def __mul__(self, k):
        return Vec(self.v * k, self.scale * k)

    def __neg__(self):
        return Vec(-self.v, -self.scale)

    def __eq__(self, other):
        return isinstance(other, Vec) and self.scale == other.scale

    def __lt__(self, other):
        return self.scale < other.scale

    def __iter__(self):
        return iter([self.v, self.v * self.scale])

    def __len__(self):
        return 2

    def __contains__(self, k):
        return k == self.scale

    def __str__(self):
        return f"Vec({self.scale})"

    __hash__ = None


# --------------------------------------------------------------------------- class 1


BUILTINS = {
    "reduce": lambda x: functools.reduce(operator.add, [x, x * 2, x * 3]),
    "reduce_lambda_initial": lambda x: functools.reduce(lambda a, b: a * b + 1, [x, x], x),
    "reduce_generator": lambda x: functools.reduce(operator.mul, (x + i for i in range(3))),
    "fromkeys_shares_value": lambda x: dict.fromkeys(["a", "b"], x + 1),
    "fromkeys_default": lambda x: (dict.fromkeys("ab"), x + 1),
    "unbound_set_add": lambda x: (lambda s: (set.add(s, 4), len(s) * x)[1])({1, 2}),
    "unbound_dict_setitem": lambda x: (lambda d: (dict.__setitem__(d, "k", x + 1), d)[1])({}),
    "unbound_list_append": lambda x: (lambda lst: (list.append(lst, x + 1), lst)[1])([x]),
    "str_join": lambda x: (str.join("-", ["a", "b"]), x + 1),
    "chain_from_iterable": lambda x: sum(itertools.chain.from_iterable([[x, x], [x * 2]])),
    "chain_from_iterable_generator": lambda x: list(
        itertools.chain.from_iterable([x + i] * i for i in range(3))
    ),
    "combinations": lambda x: [a * b for a, b in itertools.combinations([x, x + 1, x + 2], 2)],
    "combinations_with_replacement": lambda x: (
        len(list(itertools.combinations_with_replacement(range(3), 2))) * x
    ),
    "permutations": lambda x: [a - b for a, b in itertools.permutations([x, x * 2])],
    "permutations_r": lambda x: len(list(itertools.permutations(range(4), 2))) * x,
    "namedtuple_instance": lambda x: NT(x, 2).a * NT(x, b=3).b,
    "namedtuple_replace": lambda x: NT(x, 2)._replace(b=5).b * NT(x, 2)._replace(a=x + 1).a,
    "namedtuple_asdict_fields": lambda x: (NT(x + 1, 2)._asdict(), NT._fields == NT(x, 1)._fields),
    "typevar_key": lambda x: {T: x}[T] + 1,
}


@pytest.mark.parametrize("name", sorted(BUILTINS))
def test_builtins_and_c_methods(name):
    one_graph(BUILTINS[name])


# --------------------------------------------------------------------------- class 2


def _global_set_mutation(x):
    G_SET.add(4)
    G_SET.discard(1)
    G_SET.update([7])
    return x * len(G_SET), 7 in G_SET


SETS = {
    "set_of_list": lambda x: len(set([1, 2, 2])) * x,
    "set_literal": lambda x: (lambda s: len(s) * x)({1, 2, 3, 2}),
    "set_comprehension": lambda x: len({i % 2 for i in range(5)}) * x,
    "set_update_instruction": lambda x: len({*[1, 2], *[2, 3]}) * x,
    "set_of_tensors_identity": lambda x: len({x, x, x + 1}) * x,
    "tensor_in_set": lambda x: x * (x in {x}) + (x + 1 in {x}),
    "set_operators": lambda x: (
        x * len(({1, 2} | {3}) & {1, 3})
        + len({1, 2} - {2})
        + len({1} ^ {2})
        + ({1} <= {1, 2})
        + ({1, 2} > {1})
    ),
    "set_methods": lambda x: (
        {1, 2}.union([3]),
        {1, 2}.intersection({2}),
        {1, 2}.isdisjoint({3}),
        {1}.issubset(range(3)),
        x + 1,
    ),
    "frozenset_ops": lambda x: (frozenset([1, 2]) | {3}, {3} | frozenset([1]), x + 1),
    "set_returned": lambda x: ({1, 2, "a"}, x + 1),
    "set_of_one_tensor_returned": lambda x: {x + 1},
    "iterate_constant_set": lambda x: sum(x * i for i in {3, 1, 2}),
    "sorted_set": lambda x: sorted({3, 1, 2}) and x * sorted({"b", "a"}).index("b"),
    "global_set": lambda x: x * len(G_SET) + (2 in G_SET),
    "global_set_mutation": _global_set_mutation,
    # each call changes G_SET: the guard must not compare the live set with itself
    "global_set_grows": lambda x: (G_SET.add(len(G_SET) + 10), x * len(G_SET))[1],
    "set_equality": lambda x: x * ({1, 2} == {2, 1}) + ({1} != frozenset([1])),
    "keys_or_keys": lambda x: x * len({"a": 1}.keys() | {"b": 2}.keys()),
    "keys_and_set": lambda x: ({"a": 1, "b": 2}.keys() & {"a"}, x + 1),
}


def _set_inplace_identity(x):
    s = {1}
    t = s
    s |= {5}
    s -= {1}
    s.add(len(t))
    return s is t, t, x + 1


SETS["set_inplace_keeps_identity"] = _set_inplace_identity


@pytest.mark.parametrize("name", sorted(SETS))
def test_sets(name):
    one_graph(SETS[name], observe={"globals": globals()})


def test_iterating_a_set_of_tensors_breaks_the_graph():
    """The order of a set of tensors depends on their addresses: a graph break, equal to
    eager (here order-independent, so the results compare)."""

    def f(x):
        total = x * 0
        for t in {x, x + 1}:
            total = total + t
        return total

    check(f, *CALLS)
    torch_plugin.reset()
    torch_plugin.optimize("eager")(f)(torch.randn(3))
    reasons = [r for _, r, _ in convert_frame.stats.graph_breaks + convert_frame.stats.failures]
    assert any("order" in str(r) for r in reasons), reasons


# --------------------------------------------------------------------------- class 3


def _tuple_iadd(x):
    t = ()
    t += (x,)
    t += (x + 1,)
    return t


def _list_reverse(x, lst):
    lst.reverse()
    mine = [x, x * 2]
    mine.reverse()
    return mine[0] + lst[0]


def _sorted_key_inlined(x):
    shapes = [x[:1], x, x[:2]]
    return sorted(shapes, key=lambda t: -t.shape[0])[0] + 1


def _user_ops(x, v):
    w = v + v
    u = -(v * 2)
    return (w.v + u.v + x, w == v, v < w, str(w), len(v), 2 in v, w.scale, sum(v))


def _user_radd(x, v):
    return (x + v).v, (1 + v).scale


OPERATORS = {
    "empty_tuple_plus": lambda x: ((() + (x,)) + ())[0] + 1,
    "list_times_n": lambda x: sum([x] * 3) + len([1] * 2),
    "tuple_iadd": _tuple_iadd,
    "next_range_iterator": lambda x: x * next(iter(range(3, 5))),
    "next_list_iterator": lambda x: next(iter([x, 2])) + 1,
    "sorted_key": lambda x: x * sorted([3, 1, 2], key=lambda v: -v)[0],
    "sorted_key_reverse_stable": lambda x: (
        sorted([(1, "a"), (0, "b"), (1, "c")], key=lambda p: p[0], reverse=True),
        x + 1,
    ),
    "sorted_key_inlined_on_tensors": _sorted_key_inlined,
    "sorted_dict": lambda x: (sorted({"b": 1, "a": 2}), x + 1),
    "min_max_key": lambda x: max([x[:1], x, x[:2]], key=len) * min([3, 1, 2], key=lambda v: -v),
    "max_default": lambda x: x * max([], default=4),
    "abs_tensor": lambda x: abs(x),
    "max_of_numbers": lambda x: x * max(1, 2.5, 2) + min(3, -1),
}


@pytest.mark.parametrize("name", sorted(OPERATORS))
def test_operators_on_containers(name):
    one_graph(OPERATORS[name])


def test_list_reverse_of_an_input():
    one_graph(
        _list_reverse,
        lambda: (torch.randn(3), [torch.randn(3), torch.randn(3)]),
        lambda: (torch.randn(3), [torch.randn(3), torch.randn(3)]),
        lambda: (torch.randn(4), [torch.randn(4), torch.randn(4)]),
    )


def test_user_operators_are_inlined_not_run_at_capture():
    """``v + v`` on a user object ran ``Vec.__add__`` for real at capture time and baked its
    result into the graph: the second call, with another ``scale``, returned the first's."""
    one_graph(
        _user_ops,
        lambda: (torch.randn(3), Vec(torch.randn(3), 2)),
        lambda: (torch.randn(3), Vec(torch.randn(3), 3)),
        lambda: (torch.randn(4), Vec(torch.randn(4), 5)),
    )


def test_reflected_user_operator():
    one_graph(
        _user_radd,
        lambda: (torch.randn(3), Vec(torch.randn(3), 2)),
        lambda: (torch.randn(3), Vec(torch.randn(3), 3)),
        lambda: (torch.randn(4), Vec(torch.randn(4), 5)),
    )


def test_list_plus_tuple_raises_as_in_eager():
    def f(x):
        return [x] + (x,)

    check(f, *CALLS)


# --------------------------------------------------------------------------- class 4


CALLED = []


def _no_tensor_op(a, b):
    CALLED.append(a)
    return a + b, {"n": b}


def test_fullgraph_frame_without_tensor_operations_runs():
    """torch.compile(fullgraph=True) runs such a function (no graph); so does nopython."""
    check(_no_tensor_op, (2, 3), (2, 3), (4, 5), observe={"globals": globals()})
    torch_plugin.reset()
    opt = torch_plugin.optimize("eager", nopython=True)(_no_tensor_op)
    assert opt(2, 3) == (5, {"n": 3})
    assert opt(4, 1) == (5, {"n": 1})
    CALLED.clear()


def test_export_without_tensor_operations_says_so():
    with pytest.raises(torch_plugin.ExportError, match="no tensor operation"):
        torch_plugin.export(_no_tensor_op, 2, 3)
    CALLED.clear()


# --------------------------------------------------------------------------- class 5


PARTIALS = {
    "func": lambda x: P.func(x, 2),
    "args_keywords": lambda x: x * len(P.args) + P.keywords["b"],
    "call": lambda x: P(x) + P(x, b=1),
    "call_torch_partial": lambda x: PT(x, x),
    "hasattr": lambda x: x * hasattr(P, "func") + hasattr(P, "nope") + hasattr(PT, "keywords"),
    "getattr": lambda x: getattr(P, "func")(x) + getattr(P, "nope", 7),
    "local_keywords": lambda x: functools.partial(_usr, b=4).keywords["b"] * x,
    "local_func_args": lambda x: (
        functools.partial(torch.mul, x).func(x, 2) + functools.partial(torch.mul, x).args[0]
    ),
    "flattened": lambda x: (
        functools.partial(functools.partial(_usr, x), b=2).args[0] is x,
        functools.partial(functools.partial(_usr, x), b=2)(),
    ),
    "local_setattr_getattr": lambda x: (
        lambda p: (setattr(p, "tag", x + 1), p.tag * getattr(p, "tag") + hasattr(p, "tag"))[1]
    )(functools.partial(_usr)),
    "callable": lambda x: x * callable(P) + callable(functools.partial(_usr, 1)),
}


@pytest.mark.parametrize("name", sorted(PARTIALS))
def test_partial_attributes(name):
    one_graph(PARTIALS[name])


def test_partial_keywords_are_guarded():
    """A partial's keywords dict is mutable: a change recompiles instead of using the
    value seen at capture."""

    def f(x):
        return P(x)

    opt = torch_plugin.optimize("eager", nopython=True)(f)
    x = torch.randn(3)
    try:
        torch.testing.assert_close(opt(x), f(x))
        P.keywords["b"] = 5
        torch.testing.assert_close(opt(x), x * 5)
    finally:
        P.keywords["b"] = 3


def test_setattr_on_a_global_partial_is_replayed():
    def f(x):
        P.tag = x + 1
        return P.tag * 2, hasattr(P, "tag")

    opt = torch_plugin.optimize("eager", nopython=True)(f)
    x = torch.randn(3)
    try:
        out, has = opt(x)
        assert has is True
        torch.testing.assert_close(P.tag, x + 1)
        torch.testing.assert_close(out, (x + 1) * 2)
    finally:
        del P.tag
