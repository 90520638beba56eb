"""Objects of user classes constructed inside captured code (variables/new_object.py, issue
#12): no graph break; the object exists for real only when it escapes (returned, stored where
the caller sees it, live at a graph break), then once, with its final attributes. Each case
runs over several calls against eager and compares what the caller can observe: outputs,
the objects' attributes, identities, module state."""

from __future__ import annotations

import collections
import collections.abc
import typing

import pytest
import torch

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture")


class Cache:
    growth = 2.0  # class data, guarded through the class

    def __init__(self, scale, **kwargs):
        self.scale = scale
        self.items = []
        self.extra = dict(kwargs)

    def update(self, t):
        self.items.append(t * self.scale)
        return self.items[-1]

    @property
    def total(self):
        return sum(self.items)

    def __len__(self):
        return len(self.items)


class Pair(Cache):
    def __init__(self, a, b):
        super().__init__(scale=1.5, tag="pair")
        self.a, self.b = a, b
        self.owner = self  # a cycle


def _no_breaks():
    assert torch_plugin.stats.graph_breaks == [], torch_plugin.stats.graph_breaks


def test_returned_object_is_built_with_its_final_attributes():
    def f(x):
        c = Cache(3.0, mode="sum")
        c.update(x)
        c.update(x + 1)
        c.scale = c.scale * c.growth
        c.later = c.total
        return c, len(c), c

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(3):
        x = torch.randn(4)
        got, want = opt(x), f(x)
        assert type(got[0]) is Cache and got[0] is got[2]  # one object, as in eager
        assert got[1] == want[1] == 2
        assert got[0].scale == want[0].scale and got[0].extra == want[0].extra
        assert list(vars(got[0])) == list(vars(want[0]))  # same attributes, same order
        for a, b in zip(got[0].items, want[0].items):
            torch.testing.assert_close(a, b)
        torch.testing.assert_close(got[0].later, want[0].later)
    _no_breaks()
    assert torch_plugin.stats.graphs_compiled == 1


def test_object_stored_on_a_module_and_returned_is_one_object():
    class M(torch.nn.Module):
        def forward(self, x):
            self.cache = Pair(x, x * 2)
            self.cache.update(x.sin())
            return self.cache

    m, ref = M(), M()
    opt = torch_plugin.optimize("eager")(m)
    for _ in range(3):
        x = torch.randn(3)
        got, want = opt(x), ref(x)
        assert got is m.cache and got.owner is got  # the cycle is rebuilt
        assert isinstance(got, Cache) and got.extra == want.extra == {"tag": "pair"}
        torch.testing.assert_close(got.b, want.b)
        torch.testing.assert_close(got.items[0], want.items[0])
    _no_breaks()


def test_object_that_does_not_escape_leaves_nothing_behind():
    def f(x):
        c = Cache(0.5)
        for _ in range(3):
            x = c.update(x)
        return x + c.total

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(3):
        x = torch.randn(5)
        torch.testing.assert_close(opt(x), f(x))
    _no_breaks()


def test_object_live_across_a_graph_break():
    def f(x):
        c = Cache(2.0)
        c.update(x)
        print("break")  # a graph break: c is built for real here, then used by CPython
        c.update(x * 3)
        return c.total, c

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(3):
        x = torch.randn(4)
        got, want = opt(x), f(x)
        torch.testing.assert_close(got[0], want[0])
        assert type(got[1]) is Cache and len(got[1].items) == 2


def test_class_attribute_change_recompiles():
    def f(x):
        return x * Cache(1.0).growth

    opt = torch_plugin.optimize("eager")(f)
    try:
        for growth in (2.0, 2.0, 5.0):
            Cache.growth = growth
            x = torch.randn(3)
            torch.testing.assert_close(opt(x), f(x))
    finally:
        Cache.growth = 2.0
    assert torch_plugin.stats.graphs_compiled == 2


class WithSetattr:
    def __init__(self, v):
        self.v = v

    def __setattr__(self, name, value):
        object.__setattr__(self, name, value * 2 if name == "v" else value)


class Slotted:
    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v


@pytest.mark.parametrize("cls", [WithSetattr, Slotted])
def test_classes_not_modelled_still_match_eager(cls):
    def f(x):
        obj = cls(x)
        return obj.v + 1

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(opt(x), f(x))


class Layers(collections.abc.Sequence):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i >= self.n:
            raise IndexError(i)
        return i * 10


def test_sequence_subclass_iterates_by_its_length():
    def f(x):
        return [x + v for v in Layers(3)]

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(2):
        x = torch.randn(2)
        for a, b in zip(opt(x), f(x)):
            torch.testing.assert_close(a, b)
    _no_breaks()


def _decoder(name):
    transformers = pytest.importorskip("transformers")
    small = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 64, "vocab_size": 100}  # fmt: skip
    if name == "llama":
        cfg = transformers.LlamaConfig(num_key_value_heads=2, **small)
        return transformers.LlamaModel(cfg)
    cfg = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=100, n_positions=64)
    return transformers.GPT2Model(cfg)


@pytest.mark.parametrize("name", ["llama", "gpt2"])
def test_hf_decoder_with_its_default_cache_is_one_graph(name):
    """use_cache=True (the default): the DynamicCache the model builds is returned as a real
    cache holding the same keys and values as eager's; one graph, no break, and the second
    call with new inputs of the same shapes compiles nothing."""
    torch.manual_seed(0)
    model = _decoder(name).eval()
    opt = torch_plugin.optimize("eager")(model)
    with torch.no_grad():
        for call in range(3):
            ids = torch.randint(0, 100, (2, 7))
            got, want = opt(input_ids=ids), model(input_ids=ids)
            torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state)
            gc, wc = got.past_key_values, want.past_key_values
            assert type(gc) is type(wc) and len(gc.layers) == len(wc.layers) == 2
            assert gc.get_seq_length() == wc.get_seq_length() == 7
            for gl, wl in zip(gc.layers, wc.layers):
                torch.testing.assert_close(gl.keys, wl.keys)
                torch.testing.assert_close(gl.values, wl.values)
            if call == 0:
                compiled = torch_plugin.stats.graphs_compiled
    _no_breaks()
    assert compiled == 1 and torch_plugin.stats.graphs_compiled == 1


class Head(torch.nn.Module):
    """DistilBERT's classifier head builds its activation in forward (``nn.ReLU()(x)``)."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = torch.nn.ReLU()(self.proj(x))
        h = torch.nn.GELU(approximate="tanh")(h)
        return torch.nn.Dropout(p=0.0)(h)


def test_torch_nn_activation_built_in_forward_is_its_functional_call():
    torch.manual_seed(0)
    model = Head()
    opt = torch_plugin.optimize("eager")(model)
    for _ in range(3):
        x = torch.randn(4, 8)
        torch.testing.assert_close(opt(x), model(x))
    _no_breaks()
    assert torch_plugin.stats.graphs_compiled == 1


def test_module_built_in_captured_code_is_never_shared_between_calls():
    def make(x):
        act = torch.nn.ReLU()
        return act(x), act

    opt = torch_plugin.optimize("eager")(make)
    modules = []
    for _ in range(3):
        x = torch.randn(5)
        y, act = opt(x)
        torch.testing.assert_close(y, torch.relu(x))
        assert type(act) is torch.nn.ReLU
        modules.append(act)
    assert len({id(m) for m in modules}) == 3  # a new module per call, as in eager


def test_module_with_parameters_built_in_forward_still_matches_eager():
    def f(x):
        torch.manual_seed(1)
        lin = torch.nn.Linear(4, 2)  # parameters drawn at random: not built at capture
        return lin(x)

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(2):
        x = torch.randn(3, 4)
        torch.testing.assert_close(opt(x), f(x))


_WithDefaults = collections.namedtuple("_WithDefaults", "a b c", defaults=(1, None))


class _TypedWithDefault(typing.NamedTuple):
    x: torch.Tensor
    k: int = 3


def test_namedtuples_with_defaults_in_one_graph():
    """``namedtuple(..., defaults=...)`` and a ``typing.NamedTuple`` with a default built in
    the captured code (issue #12); changing the defaults afterwards recompiles."""

    def f(t):
        p = _WithDefaults(t)
        q = _TypedWithDefault(t * 2)
        r = _WithDefaults(t, c="z")
        return p, q, q.x * q.k + p.b, r

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(2):
        t = torch.randn(2)
        got, want = opt(t), f(t)
        assert [type(v) for v in got] == [type(v) for v in want]
        torch.testing.assert_close(got[2], want[2])
        assert (got[0].b, got[0].c, got[3].c, got[1].k) == (want[0].b, want[0].c, "z", 3)
    assert torch_plugin.stats.graph_breaks == []
    assert torch_plugin.stats.graphs_compiled == 1
    old = _WithDefaults.__new__.__defaults__
    _WithDefaults.__new__.__defaults__ = (5, None)
    try:
        t = torch.randn(2)
        torch.testing.assert_close(opt(t)[2], f(t)[2])
    finally:
        _WithDefaults.__new__.__defaults__ = old
