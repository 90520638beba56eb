"""optimize() in torch.compile's shape (issue #32): every form of the call, the rule that
tells a positional backend from the function to compile, fullgraph/nopython, disable and
TORCH_PLUGIN_DISABLE, torch._dynamo's shape markers, torch.compiler.disable, and
config.error_on_recompile.

Each form runs three calls on fresh random inputs against eager and checks which backend
compiled how many graphs (a backend that counts its graphs), so a form that silently runs
uncompiled, or compiles with the wrong backend, fails.
"""

import pytest
import torch

import torch_plugin
from torch_plugin import config
from torch_plugin.api import BackendOrFunction

pytestmark = pytest.mark.usefixtures("fresh_capture")


class Counting:
    """A backend that counts the graphs it compiles (runs them as they are)."""

    def __init__(self):
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


def two_args(x, y):
    return torch.sin(x) * y + 1


def one_arg(x):
    return torch.cos(x) - x


def three_args(x, y, z):
    return x * y + z


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(6, 3)

    def forward(self, x):
        return torch.relu(self.lin(x))


def _inputs(fn):
    n = fn.__code__.co_argcount if hasattr(fn, "__code__") else 1
    return [torch.randn(4, 6) for _ in range(n)]


def check_three_calls(opt, ref, nargs):
    for _ in range(3):
        args = [torch.randn(4, 6) for _ in range(nargs)]
        torch.testing.assert_close(opt(*args), ref(*args), rtol=1e-5, atol=1e-6)


@pytest.fixture
def counting_plugin(monkeypatch):
    """ "plugin" replaced by a counting backend (the forms are about capture, not the
    compiler; the real "plugin" is tested with options in tests/python/backends)."""
    from torch_plugin.backends import registry

    registry.list_backends()
    counter = Counting()
    monkeypatch.setattr(registry, "_BACKENDS", {**registry._BACKENDS, "plugin": counter})
    return counter


# --- the forms ------------------------------------------------------------------------------


@pytest.mark.parametrize("fn, nargs", [(one_arg, 1), (two_args, 2), (three_args, 3)])
def test_bare_decorator(counting_plugin, fn, nargs):
    opt = torch_plugin.optimize(fn)  # what @optimize does
    check_three_calls(opt, fn, nargs)
    assert counting_plugin.graphs == 1
    assert opt.__name__ == fn.__name__ and opt.__doc__ == fn.__doc__


@pytest.mark.parametrize("fn, nargs", [(one_arg, 1), (two_args, 2)])
def test_decorator_with_parentheses(counting_plugin, fn, nargs):
    opt = torch_plugin.optimize()(fn)
    check_three_calls(opt, fn, nargs)
    assert counting_plugin.graphs == 1


def test_decorator_syntax(counting_plugin):
    @torch_plugin.optimize
    def f(x, y):
        return torch.tanh(x) + y

    @torch_plugin.optimize(dynamic=False)
    def g(x):
        return x * 3

    check_three_calls(f, lambda x, y: torch.tanh(x) + y, 2)
    check_three_calls(g, lambda x: x * 3, 1)
    assert counting_plugin.graphs == 2


def test_module_positional_is_always_the_model(counting_plugin):
    net = Net()
    opt = torch_plugin.optimize(net)
    assert isinstance(opt, torch_plugin.OptimizedModule)
    with torch.no_grad():
        check_three_calls(opt, net, 1)
    assert counting_plugin.graphs == 1
    assert list(opt.state_dict()) == list(net.state_dict())


@pytest.mark.parametrize("target", ["function", "module"])
def test_backend_keyword_then_apply(target):
    counter = Counting()
    ref = two_args if target == "function" else Net()
    opt = torch_plugin.optimize(backend=counter)(ref)
    with torch.no_grad():
        check_three_calls(opt, ref, 2 if target == "function" else 1)
    assert counter.graphs == 1


@pytest.mark.parametrize("target", ["function", "module"])
def test_model_and_backend_keyword(target):
    counter = Counting()
    ref = two_args if target == "function" else Net()
    opt = torch_plugin.optimize(ref, backend=counter)
    with torch.no_grad():
        check_three_calls(opt, ref, 2 if target == "function" else 1)
    assert counter.graphs == 1


def test_context_manager():
    counter = Counting()
    with torch_plugin.optimize(backend=counter):
        x, y = torch.randn(3), torch.randn(3)
        out = two_args(x, y)
    torch.testing.assert_close(out, two_args(x, y))
    assert counter.graphs == 1


def test_string_positional_is_the_backend():
    opt = torch_plugin.optimize("eager")(two_args)
    check_three_calls(opt, two_args, 2)
    assert torch_plugin.stats.graphs_compiled == 1


def test_positional_backend_applied_to_a_function_or_module():
    counter = Counting()
    ctx = torch_plugin.optimize(counter)  # unregistered, two arguments: decided at first use
    assert isinstance(ctx, BackendOrFunction)
    opt = ctx(two_args)
    check_three_calls(opt, two_args, 2)
    net = Net()
    with torch.no_grad():
        check_three_calls(ctx(net), net, 1)  # still the backend
    assert counter.graphs == 2


def test_positional_backend_as_decorator():
    counter = Counting()

    @torch_plugin.optimize(counter)
    def f(x):
        return x.exp()

    check_three_calls(f, torch.exp, 1)
    assert counter.graphs == 1


def test_positional_backend_as_context_manager():
    counter = Counting()
    with torch_plugin.optimize(counter):
        x, y = torch.randn(3), torch.randn(3)
        out = two_args(x, y)
    torch.testing.assert_close(out, two_args(x, y))
    assert counter.graphs == 1


def test_positional_two_argument_function_called_with_tensors_is_compiled(counting_plugin):
    opt = torch_plugin.optimize(two_args)
    assert isinstance(opt, BackendOrFunction)
    check_three_calls(opt, two_args, 2)
    assert counting_plugin.graphs == 1
    assert "function" in repr(opt)
    with pytest.raises(TypeError, match="taken as the function"), opt:
        pass


def test_registered_backend_callable_positional_is_the_backend():
    from torch_plugin.backends.eager import eager

    ctx = torch_plugin.optimize(eager)
    assert not isinstance(ctx, BackendOrFunction)
    check_three_calls(ctx(two_args), two_args, 2)
    assert torch_plugin.stats.graphs_compiled == 1


def test_one_argument_function_is_never_a_backend(counting_plugin):
    opt = torch_plugin.optimize(one_arg)
    assert not isinstance(opt, BackendOrFunction) and callable(opt)
    check_three_calls(opt, one_arg, 1)
    assert counting_plugin.graphs == 1


def test_undecided_method_is_the_function(counting_plugin):
    class M(torch.nn.Module):
        @torch_plugin.optimize
        def forward(self, x):
            return x * 2 + 1

    m = M()
    check_three_calls(m, lambda x: x * 2 + 1, 1)
    assert counting_plugin.graphs == 1


def test_undecided_function_called_from_a_captured_caller(counting_plugin):
    """Captured code calling a BackendOrFunction: a graph break at the call (the translator
    inlines only plain optimized functions), which runs it in CPython, where it is compiled
    by its own backend; the results are eager's."""
    inner = torch_plugin.optimize(two_args)  # undecided

    def outer(x, y):
        return inner(x, y) * 2

    opt = torch_plugin.optimize("eager")(outer)
    check_three_calls(opt, lambda x, y: two_args(x, y) * 2, 2)
    assert counting_plugin.graphs == 1  # inner, by "plugin" (here the counting backend)


def test_two_backends_raise():
    with pytest.raises(TypeError, match="two backends"):
        torch_plugin.optimize("eager", backend="aot_eager")


@pytest.mark.parametrize("bad", [42, 1.5, torch.randn(2)])
def test_bad_positional_raises(bad):
    with pytest.raises(TypeError, match="positional argument"):
        torch_plugin.optimize(bad)


# --- fullgraph / nopython -------------------------------------------------------------------


def breaks(x):
    y = x + 1
    print("graph break")
    return y * 2


@pytest.mark.parametrize(
    "kwargs", [{"fullgraph": True}, {"nopython": True}, {"fullgraph": True, "nopython": True}]
)
def test_fullgraph_and_its_alias_raise_at_a_graph_break(kwargs):
    opt = torch_plugin.optimize(breaks, backend="eager", **kwargs)
    with pytest.raises(torch_plugin.CaptureError):
        opt(torch.randn(3))


def test_fullgraph_false_breaks_the_graph(capsys):
    opt = torch_plugin.optimize(breaks, backend="eager", fullgraph=False)
    for _ in range(3):
        x = torch.randn(3)
        torch.testing.assert_close(opt(x), (x + 1) * 2)
    assert torch_plugin.stats.graphs_compiled == 2


def test_fullgraph_and_nopython_disagree():
    with pytest.raises(TypeError, match="alias"):
        torch_plugin.optimize(backend="eager", fullgraph=True, nopython=False)
    with pytest.raises(TypeError, match="fullgraph"):
        torch_plugin.optimize(backend="eager", fullgraph="yes")
    with pytest.raises(TypeError, match="disable"):
        torch_plugin.optimize(backend="eager", disable=1)


# --- disable and TORCH_PLUGIN_DISABLE -------------------------------------------------------


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_disable_returns_the_model_unchanged(monkeypatch, how):
    if how == "environment":
        monkeypatch.setenv("TORCH_PLUGIN_DISABLE", "1")
    kwargs = {"disable": True} if how == "argument" else {}
    counter = Counting()
    net = Net()
    assert torch_plugin.optimize(two_args, backend=counter, **kwargs) is two_args
    assert torch_plugin.optimize(net, backend=counter, **kwargs) is net
    assert torch_plugin.optimize(backend=counter, **kwargs)(one_arg) is one_arg
    deferred = torch_plugin.optimize(counter, **kwargs)
    assert deferred(one_arg) is one_arg  # the positional backend, applied: nothing wraps
    undecided = torch_plugin.optimize(two_args, **kwargs)
    check_three_calls(undecided, two_args, 2)
    with torch_plugin.optimize(backend=counter, **kwargs):
        two_args(torch.randn(3), torch.randn(3))
    assert counter.graphs == 0 and torch_plugin.stats.graphs_compiled == 0


def test_disable_still_checks_its_arguments(monkeypatch):
    monkeypatch.setenv("TORCH_PLUGIN_DISABLE", "1")
    with pytest.raises(ValueError, match="unknown backend"):
        torch_plugin.optimize(backend="nope")
    monkeypatch.setenv("TORCH_PLUGIN_DISABLE", "0")
    counter = Counting()
    check_three_calls(torch_plugin.optimize(one_arg, backend=counter), one_arg, 1)
    assert counter.graphs == 1


def test_disable_environment_under_torch_compile(monkeypatch):
    """TORCH_PLUGIN_DISABLE=1 under torch.compile(backend="plugin"): the backend hands each
    graph back uncompiled (the compiler never runs), mode and options still checked."""
    from torch._dynamo.backends import registry as dynamo_registry

    from torch_plugin.backends import plugin as plugin_backend

    if "plugin" not in dynamo_registry.list_backends(exclude_tags=()):
        # Not installed (no entry point): what the entry point would register.
        monkeypatch.setitem(dynamo_registry._BACKENDS, "plugin", None)
        monkeypatch.setitem(dynamo_registry._COMPILER_FNS, "plugin", plugin_backend.plugin)
    compiled = []
    real = plugin_backend.compile_captured
    monkeypatch.setattr(
        plugin_backend,
        "compile_captured",
        lambda *a, **k: compiled.append(1) or real(*a, **k),
    )
    monkeypatch.setenv("TORCH_PLUGIN_DISABLE", "1")
    torch._dynamo.reset()
    opt = torch.compile(two_args, backend="plugin", mode="max-autotune")
    check_three_calls(opt, two_args, 2)
    assert compiled == []
    torch._dynamo.reset()
    with pytest.raises(Exception, match="unknown option"):
        torch.compile(two_args, backend="plugin", options={"nope": 1})(*_inputs(two_args))
    monkeypatch.setenv("TORCH_PLUGIN_DISABLE", "0")
    torch._dynamo.reset()
    check_three_calls(torch.compile(two_args, backend="plugin"), two_args, 2)
    assert compiled == [1]
    torch._dynamo.reset()


# --- torch.compiler.disable and torch._dynamo.disable --------------------------------------


@pytest.mark.parametrize("marker", ["torch.compiler.disable", "torch._dynamo.disable"])
def test_torch_disable_markers_are_honoured(marker):
    seen = []

    def leaf(x):
        seen.append(torch.compiler.is_compiling())
        return x + 1

    leaf = (
        torch.compiler.disable(leaf)
        if marker == "torch.compiler.disable"
        else (torch._dynamo.disable(leaf))
    )

    def f(x):
        return leaf(x.sin()) * 2

    opt = torch_plugin.optimize(f, backend="eager")
    check_three_calls(opt, lambda x: (x.sin() + 1) * 2, 1)
    assert torch_plugin.stats.graphs_compiled == 2  # before and after the disabled call
    assert len(seen) == 3  # it ran in CPython at every call


# --- torch._dynamo's shape markers ----------------------------------------------------------


def scale(x):
    return torch.sin(x) * x.shape[0]


@pytest.mark.parametrize(
    "mark, dynamic, compiles",
    [
        (None, False, 3),
        (torch._dynamo.mark_dynamic, False, 1),
        (torch._dynamo.maybe_mark_dynamic, False, 1),
        (torch._dynamo.mark_dynamic, None, 1),
        (torch_plugin.mark_dynamic, False, 1),
        (torch._dynamo.mark_static, True, 3),
        (torch._dynamo.mark_static, None, 3),
        (None, True, 1),
    ],
    ids=["none", "mark_dynamic", "maybe_mark_dynamic", "mark_dynamic-auto", "ours",
         "mark_static-dynamic", "mark_static-auto", "dynamic"],
)  # fmt: skip
def test_dynamo_shape_markers(mark, dynamic, compiles):
    counter = Counting()
    opt = torch_plugin.optimize(scale, backend=counter, dynamic=dynamic)
    for n in (3, 5, 7):
        x = torch.randn(n, 4)
        if mark is not None:
            mark(x, 0)
        torch.testing.assert_close(opt(x), scale(x))
    assert counter.graphs == compiles


def test_mark_dynamic_wins_over_mark_static():
    counter = Counting()
    opt = torch_plugin.optimize(scale, backend=counter, dynamic=False)
    for n in (3, 5, 7):
        x = torch.randn(n, 4)
        torch._dynamo.mark_static(x, 0)
        torch._dynamo.mark_dynamic(x, -2)  # the same dim, negative
        torch.testing.assert_close(opt(x), scale(x))
    assert counter.graphs == 1


# --- torch._dynamo.mark_dynamic's min/max -------------------------------------------------


def branchy(x):
    if x.shape[0] > 6:  # a guard that holds for part of the range only
        return x + 1
    return x - 1


BRANCH_LINE = branchy.__code__.co_firstlineno + 1


def _marked(n, lo=2, hi=8):
    x = torch.randn(n, 4)
    torch._dynamo.mark_dynamic(x, 0, min=lo, max=hi)
    return x


def test_mark_dynamic_range_within_compiles_once():
    counter = Counting()
    opt = torch_plugin.optimize(scale, backend=counter, dynamic=False)
    for n in (3, 8, 2, 5):
        x = _marked(n)
        torch.testing.assert_close(opt(x), scale(x))
    assert counter.graphs == 1
    # An unbounded mark (min/max None) puts no range on the dim: branchy compiles.
    # The range is part of the entry's guards (as in torch.compile): a marked size outside
    # it compiles again and raises there; an unmarked one compiles again and runs.
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    with pytest.raises(ConstraintViolationError, match=r"= 20 is not in the range \[2, 8\]"):
        opt(_marked(20))
    x = torch.randn(20, 4)
    torch.testing.assert_close(opt(x), scale(x))
    assert counter.graphs == 2  # the unmarked size compiled again; the refused one never did
    torch._dynamo.reset()
    g = torch.compile(scale, backend="eager")  # the reference
    g(_marked(5))
    with pytest.raises(ConstraintViolationError):
        g(_marked(20))
    torch._dynamo.reset()
    x = torch.randn(5, 4)
    torch._dynamo.mark_dynamic(x, 0)
    torch.testing.assert_close(torch_plugin.optimize(branchy, backend="eager")(x), branchy(x))


@pytest.mark.parametrize("n", [10, 1])
def test_mark_dynamic_size_outside_the_range_raises_like_torch_compile(n):
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    with pytest.raises(ConstraintViolationError):  # torch.compile's error, the reference
        torch.compile(scale, backend="eager")(_marked(n))
    torch._dynamo.reset()
    opt = torch_plugin.optimize(scale, backend="eager")
    with pytest.raises(ConstraintViolationError) as err:
        opt(_marked(n))
    text = str(err.value)
    assert f"L['x'].size()[0] = {n} is not in the range [2, 8]" in text
    assert "2 <= L['x'].size()[0] <= 8" in text
    assert f'File "{__file__}", line {scale.__code__.co_firstlineno}' in text
    x = torch.randn(n, 4)  # unmarked: compiles and runs as before
    torch.testing.assert_close(opt(x), scale(x))


@pytest.mark.parametrize("n", [5, 7])
def test_mark_dynamic_range_narrowed_by_the_code_raises(n):
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    with pytest.raises(ConstraintViolationError):
        torch.compile(branchy, backend="eager")(_marked(n))
    torch._dynamo.reset()
    counter = Counting()
    opt = torch_plugin.optimize(branchy, backend=counter)
    with pytest.raises(ConstraintViolationError) as err:
        opt(_marked(n))
    text = str(err.value)
    guard = "L['x'].size()[0] <= 6" if n <= 6 else "L['x'].size()[0] > 6"
    assert "Constraints violated (L['x'].size()[0])" in text
    assert "2 <= L['x'].size()[0] <= 8 (given to torch._dynamo.mark_dynamic)" in text
    assert f"generated guard {guard}" in text
    assert f'File "{__file__}", line {BRANCH_LINE}, in branchy' in text
    assert counter.graphs == 1  # checked after the backend (its guards count too)
    x = _marked(n, lo=2, hi=6) if n <= 6 else _marked(n, lo=7, hi=None)
    torch.testing.assert_close(opt(x), branchy(x))  # a range the guard holds for: no error
    assert counter.graphs == 2  # the refused entry was not kept


def test_mark_dynamic_range_specialized_raises():
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError

    def sized(x):
        return x * 2, int(x.shape[0])  # the int escapes: the size is specialized

    with pytest.raises(ConstraintViolationError, match=r"specialized to 5.*\n.*line"):
        torch_plugin.optimize(sized, backend="eager")(_marked(5))


# --- error_on_recompile --------------------------------------------------------------------


def add(x, n):
    return x + n


def test_error_on_recompile_names_the_failed_guard(monkeypatch):
    monkeypatch.setattr(config, "error_on_recompile", True)
    opt = torch_plugin.optimize(add, backend="eager", dynamic=False)
    for _ in range(3):
        x = torch.randn(3)
        torch.testing.assert_close(opt(x, 2), x + 2)  # the first compile is no recompile
    with pytest.raises(torch_plugin.RecompileError, match=r"recompiling add .*L\['n'\] == 2"):
        opt(torch.randn(3), 3)
    monkeypatch.setattr(config, "error_on_recompile", False)
    torch.testing.assert_close(opt(x, 3), x + 3)
    assert torch_plugin.stats.graphs_compiled == 2


def test_error_on_recompile_is_a_checked_flag():
    with pytest.raises(TypeError):
        config.error_on_recompile = "yes"


# --- a backend that returns a non-callable -------------------------------------------------


def test_backend_returning_non_callable_raises_type_error_through_optimize(monkeypatch):
    # Also as users run (not under the test suite's debug_raise_internal_errors).
    monkeypatch.setattr(config, "debug_raise_internal_errors", False)

    def broken(gm, example_inputs):
        return 3

    opt = torch_plugin.optimize(broken)(two_args)
    with pytest.raises(TypeError, match=r"backend 'broken' returned int for graph two_args"):
        opt(torch.randn(3), torch.randn(3))


def test_explain_unwraps_an_undecided_optimized_function():
    report = torch_plugin.explain(torch_plugin.optimize(two_args), torch.randn(3), torch.randn(3))
    assert report.graph_count == 1 and report.graph_break_count == 0
