"""Side effects of captured code are replayed after the graph, in program order, so the state a
user can observe afterwards equals eager's. Each test runs its function through the
differential harness (tests/fuzz/differential.py: eager PyTorch vs the "eager", "aot_eager"
and "plugin" backends over a compiling, a cached and a recompiling call, comparing results,
arguments, globals, objects, module state and identity), then checks what is specific to it.
"""

import pytest
import torch
from differential import World, check, run_case

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture")


def test_list_append_on_input_list_keeps_identity():
    def f(x, out):
        y = x * 2
        out.append(y)
        out.append(y + 1)
        return out

    check(
        f,
        lambda: (torch.randn(3), []),
        lambda: (torch.randn(3), []),
        lambda: (torch.randn(3), [torch.zeros(1)]),  # another length: recompiles
    )
    x = torch.randn(3)
    out = []
    opt = torch_plugin.optimize("eager")(f)
    res = opt(x, out)
    assert res is out and len(out) == 2
    torch.testing.assert_close(out[0], x * 2)
    torch.testing.assert_close(out[1], x * 2 + 1)
    out2 = [torch.zeros(1)]
    res2 = opt(x, out2)  # a different list of another length: recompiles, mutates out2
    assert res2 is out2 and len(out2) == 3
    assert torch_plugin.stats.frames_failed == 0


def test_dict_mutation_on_input_dict():
    def f(x, cache):
        cache["a"] = x.sin()
        cache.pop("old")
        return cache["a"] * 2

    check(
        f,
        lambda: (torch.randn(4), {"old": 1}),
        lambda: (torch.randn(4), {"old": 1}),
        lambda: (torch.randn(5), {"old": 2, "new": 3}),
    )
    x = torch.randn(4)
    cache = {"old": 1}
    got = torch_plugin.optimize("eager")(f)(x, cache)
    torch.testing.assert_close(got, x.sin() * 2)
    assert list(cache) == ["a"]
    torch.testing.assert_close(cache["a"], x.sin())


class Counter:
    def __init__(self):
        self.calls = 0
        self.last = None


def test_attribute_writes_on_objects_and_modules():
    lin = torch.nn.Linear(3, 3)

    def f(x, counter, mod):
        counter.calls = counter.calls + 1
        y = mod(x)
        counter.last = y
        mod.cached = y * 2
        return counter.calls

    c0 = Counter()
    check(  # one counter and module over the calls: counter.calls changes (guard)
        f,
        lambda: (torch.randn(2, 3), c0, lin),
        lambda: (torch.randn(2, 3), c0, lin),
        lambda: (torch.randn(4, 3), c0, lin),
    )
    x = torch.randn(2, 3)
    c = Counter()
    opt = torch_plugin.optimize("eager")(f)
    assert opt(x, c, lin) == 1
    assert c.calls == 1
    torch.testing.assert_close(c.last, lin(x))
    torch.testing.assert_close(lin.cached, lin(x) * 2)
    assert opt(x, c, lin) == 2  # the guard on counter.calls recompiles; state stays right
    assert c.calls == 2


STEP = 0


def test_global_write():
    def f(x):
        global STEP
        STEP = STEP + 1
        return x + STEP

    global STEP
    STEP = 0
    check(
        f,
        lambda: (torch.randn(2),),
        lambda: (torch.randn(2),),
        lambda: (torch.randn(3),),
        observe={"globals": globals()},
    )
    assert STEP == 0  # the harness restores the globals it compared
    x = torch.randn(2)
    opt = torch_plugin.optimize("eager")(f)
    torch.testing.assert_close(opt(x), x + 1)
    assert STEP == 1
    torch.testing.assert_close(opt(x), x + 2)
    assert STEP == 2


def test_nonlocal_write_per_closure():
    def make():
        total = torch.zeros(2)

        def add(x):
            nonlocal total
            total = total + x
            return total

        return add

    check(make(), lambda: (torch.ones(2),), lambda: (torch.randn(2),), lambda: (torch.randn(2),))
    a, b = make(), make()
    opt_a, opt_b = torch_plugin.optimize("eager")(a), torch_plugin.optimize("eager")(b)
    x = torch.ones(2)
    opt_a(x)
    opt_a(x)
    opt_b(x)
    torch.testing.assert_close(a.__closure__[0].cell_contents, torch.full((2,), 2.0))
    torch.testing.assert_close(b.__closure__[0].cell_contents, torch.ones(2))


def test_inplace_op_on_input_and_buffer():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(1))

        def forward(self, x):
            self.count.add_(1)
            x.mul_(2)
            return x + self.count

    def build():
        mod = M()
        return World(mod, [lambda: (torch.randn(3),)] * 2 + [lambda: (torch.randn(4),)], {"m": mod})

    assert run_case(build) == []
    m = M()
    om = torch_plugin.optimize("eager")(m)
    x = torch.randn(3)
    x_ref = x.clone()
    out = om(x)
    torch.testing.assert_close(x, x_ref * 2)
    torch.testing.assert_close(m.count, torch.ones(1))
    torch.testing.assert_close(out, x_ref * 2 + 1)


def test_side_effects_in_order_with_aliasing_and_graph_break():
    def f(x, log, obj):
        shared = [x * 2]
        log.append(shared)
        obj.last = shared
        shared.append(x * 3)
        print("break here")
        log.append(len(shared))
        return shared

    check(
        f,
        lambda: (torch.randn(2), [], Counter()),
        lambda: (torch.randn(2), [], Counter()),
        lambda: (torch.randn(3), [1], Counter()),
    )
    x = torch.randn(2)
    log, obj = [], Counter()
    log_e, obj_e = [], Counter()
    got = torch_plugin.optimize("eager")(f)(x, log, obj)
    want = f(x, log_e, obj_e)
    assert len(got) == len(want) == 2
    assert log[0] is obj.last is got  # aliasing kept across the three places
    assert log[1] == log_e[1] == 2
    torch.testing.assert_close(got, want)
    assert torch_plugin.stats.graph_breaks
