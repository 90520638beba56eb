"""Graph breaks: compile the graph so far, run the unsupported instruction natively, resume.

Each test runs its function through the differential harness (tests/fuzz/differential.py:
eager PyTorch vs the "eager", "aot_eager" and "plugin" backends over a compiling, a cached
and a recompiling call, every observable compared), then checks how many graphs and breaks
capture produced.
"""

import pytest
import torch
from differential import World, check, run_case

import torch_plugin


def rand(*shapes):
    """An argument tuple built lazily (the harness seeds the RNG before each call): one
    tensor per shape; an int ``n`` is the 1-d shape ``(n,)``."""
    return lambda: tuple(torch.randn(*(s if isinstance(s, tuple) else (s,))) for s in shapes)


pytestmark = pytest.mark.usefixtures("fresh_capture", "tensor_branches_break")


def bar(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def test_bar_three_graphs_over_both_signs():
    check(bar, rand(10, 10), lambda: (torch.randn(10), -torch.rand(10)), rand(12, 12))
    opt = torch_plugin.optimize("eager")(bar)
    x, y = torch.randn(10), torch.rand(10) + 0.1
    torch.testing.assert_close(opt(x, y), bar(x, y))
    torch.testing.assert_close(opt(x, -y), bar(x, -y))
    # graph 1: up to the branch; graph 2: `b * -1` then `x * b`; graph 3: `x * b`
    assert torch_plugin.stats.graphs_compiled == 3
    assert len(torch_plugin.stats.graph_breaks) == 1
    qualname, reason, location = torch_plugin.stats.graph_breaks[0]
    assert "data-dependent" in reason and "test_graph_breaks.py" in location


def f1(x, y):
    return -y if x.sum() < 0 else y


def test_conditional_expression_both_signs():
    check(f1, rand(5, 5), lambda: (-torch.rand(5), torch.randn(5)), rand(6, 6))
    opt = torch_plugin.optimize("eager")(f1)
    for sign in (1, -1):
        x, y = torch.rand(5) * sign, torch.randn(5)
        torch.testing.assert_close(opt(x, y), f1(x, y))


def test_int_argument():
    def f2(x, y):
        return x + y

    check(f2, (torch.randn(3), 2), (torch.randn(3), 2), (torch.randn(3), 3))
    opt = torch_plugin.optimize("eager")(f2)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x, 2), x + 2)
    torch.testing.assert_close(opt(x, 3), x + 3)


def test_numpy_scipy_roundtrip():
    scipy_fft = pytest.importorskip("scipy.fft")

    def f3(x):
        x = x * 2
        x = scipy_fft.dct(x.numpy())
        x = torch.from_numpy(x)
        x = x * 2
        return x

    opt = torch_plugin.optimize("eager")(f3)
    for _ in range(3):
        x = torch.randn(8)
        torch.testing.assert_close(opt(x), f3(x))
    assert torch_plugin.stats.graph_breaks


def test_print_in_the_middle(capsys):
    def f(x):
        y = torch.relu(x)
        print("value computed")
        return y * 2

    opt = torch_plugin.optimize("eager")(f)
    x = torch.randn(4)
    torch.testing.assert_close(opt(x), torch.relu(x) * 2)
    assert capsys.readouterr().out == "value computed\n"
    assert torch_plugin.stats.graphs_compiled == 2


def test_item_and_tolist():
    def f(x):
        s = x.sum().item()
        y = x * s
        return y + torch.tensor(x.tolist()).sum()

    check(f, rand(3), rand(3), rand(4))
    opt = torch_plugin.optimize("eager")(f)
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(opt(x), f(x))


def test_break_inside_inlined_function():
    def helper(x):
        y = x.cos()
        print("inside helper")
        return y + 1

    def f(x):
        a = x.sin()
        b = helper(a)
        return b * a

    check(f, rand(5), rand(5), rand(6))
    opt = torch_plugin.optimize("eager")(f)
    x = torch.randn(5)
    torch.testing.assert_close(opt(x), f(x))
    assert torch_plugin.stats.graph_breaks


def test_break_inside_loop_keeps_semantics():
    def f(xs):
        total = torch.zeros(3)
        for i, x in enumerate(xs):
            total = total + x * i
            if x.sum() > 0:
                break
        return total

    check(
        f,
        lambda: ([torch.randn(3) for _ in range(4)],),
        lambda: ([torch.randn(3) for _ in range(4)],),
        lambda: ([torch.randn(3) for _ in range(5)],),
    )
    opt = torch_plugin.optimize("eager")(f)
    for _ in range(4):
        xs = [torch.randn(3) for _ in range(4)]
        torch.testing.assert_close(opt(xs), f(xs))


def test_break_inside_with_no_grad_keeps_semantics():
    def f(x):
        with torch.no_grad():
            y = x * 2
            print("in no_grad")
            z = y + 1
        return z, torch.is_grad_enabled()

    grad = lambda: (torch.randn(3, requires_grad=True),)
    check(f, grad, grad, lambda: (torch.randn(4, requires_grad=True),))
    opt = torch_plugin.optimize("eager")(f)
    x = torch.randn(3, requires_grad=True)
    got, want = opt(x), f(x)
    torch.testing.assert_close(got[0], want[0])
    assert got[0].requires_grad == want[0].requires_grad
    assert got[1] == want[1] is True


def test_break_inside_try_keeps_semantics():
    def f(x):
        y = x + 1
        try:
            y = y * float(x.sum() > 100)
            raise ValueError("boom")
        except ValueError:
            y = y - 1
        return y

    check(f, rand(3), rand(3), rand(4))
    opt = torch_plugin.optimize("eager")(f)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), f(x))


def test_user_exception_after_break_propagates():
    def f(x):
        y = x * 2
        if y.sum() > -1e9:
            raise KeyError("from user code")
        return y

    opt = torch_plugin.optimize("eager")(f)
    with pytest.raises(KeyError, match="from user code"):
        opt(torch.randn(2))


def test_module_with_break_in_forward():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Linear(4, 4)
            self.b = torch.nn.Linear(4, 4)

        def forward(self, x):
            h = self.a(x)
            if h.mean() > 0:
                h = torch.relu(h)
            return self.b(h)

    def build():
        torch.manual_seed(0)
        mod = M()
        return World(mod, [rand((2, 4)), rand((2, 4)), rand((3, 4))], {"m": mod})

    assert run_case(build) == []
    m = M()
    om = torch_plugin.optimize("eager")(m)
    for _ in range(4):
        x = torch.randn(2, 4)
        torch.testing.assert_close(om(x), m(x))


def test_graph_breaks_flag_off_runs_unmodified(monkeypatch):
    monkeypatch.setattr(torch_plugin.config, "graph_breaks", False)
    opt = torch_plugin.optimize("eager")(bar)
    x, y = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(opt(x, y), bar(x, y))
    assert torch_plugin.stats.graphs_compiled == 0


def test_nopython_raises_on_bar():
    opt = torch_plugin.optimize("eager", nopython=True)(bar)
    with pytest.raises(torch_plugin.CaptureError, match="data-dependent"):
        opt(torch.randn(3), torch.randn(3))


def test_bool_of_tensor_and_logging_call(caplog):
    import logging

    logger = logging.getLogger("user.model")

    def f(x):
        y = x * 3
        logger.warning("seen %d elements", y.numel())
        if bool(y.mean() > 0):
            return y - 1
        return y + 1

    opt = torch_plugin.optimize("eager")(f)
    for sign in (1, -1):
        x = torch.rand(4) * sign + 0.01 * sign
        with caplog.at_level(logging.WARNING, logger="user.model"):
            torch.testing.assert_close(opt(x), f(x))
    assert any("seen 4 elements" in r.getMessage() for r in caplog.records)
    assert torch_plugin.stats.graph_breaks


class Recorder:
    def __init__(self):
        self.events = []

    def __enter__(self):
        self.events.append("enter")
        return self

    def __exit__(self, *exc):
        self.events.append("exit")
        return False


def test_user_context_manager_keeps_semantics():
    def f(x, rec):
        y = x + 1
        with rec:
            y = y * 2
        return y - 1

    check(
        f,
        lambda: (torch.randn(3), Recorder()),
        lambda: (torch.randn(3), Recorder()),
        lambda: (torch.randn(4), Recorder()),
    )
    rec_opt, rec_eager = Recorder(), Recorder()
    x = torch.randn(3)
    torch.testing.assert_close(torch_plugin.optimize("eager")(f)(x, rec_opt), f(x, rec_eager))
    assert rec_opt.events == rec_eager.events == ["enter", "exit"]


def test_break_in_submodule_forward():
    class Inner(torch.nn.Module):
        def forward(self, x):
            if x.max() > 0:
                return x * 2
            return x

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.inner = Inner()

        def forward(self, x):
            return self.inner(self.lin(x)) + 1

    def build():
        torch.manual_seed(0)
        mod = Outer()
        return World(mod, [rand((2, 3)), rand((2, 3)), rand((4, 3))], {"m": mod})

    assert run_case(build) == []
    m = Outer()
    om = torch_plugin.optimize("eager")(m)
    for _ in range(3):
        x = torch.randn(2, 3)
        torch.testing.assert_close(om(x), m(x))
    assert torch_plugin.stats.graph_breaks


def test_unsupported_bytecode_breaks_and_stays_correct():
    def f(x):
        y = x.cos()
        s = {int(v) for v in range(3)}  # set comprehension: not modelled, runs in CPython
        return y * len(s)

    check(f, rand(3), rand(3), rand(4))
    opt = torch_plugin.optimize("eager")(f)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), f(x))


def test_disabled_function_is_a_graph_break():
    calls = []

    @torch_plugin.disable
    def side(t):
        calls.append(t.shape)
        return t + 1

    def f(x):
        y = x * 2
        z = side(y)
        return z * 3

    opt = torch_plugin.optimize("eager")(f)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), (x * 2 + 1) * 3)
    assert calls == [torch.Size([3])]
    assert torch_plugin.stats.graphs_compiled == 2
    assert "torch_plugin.disable" in torch_plugin.stats.graph_breaks[0][1]
