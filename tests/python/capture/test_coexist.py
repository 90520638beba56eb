"""Coexisting with torch.compile (Dynamo), whose PEP 523 hook can be installed beside ours.

- A torch.compile'd function called inside an optimized region runs under torch.compile's
  own hook (our translator makes the call a graph break; the hook runs Dynamo's wrapper and
  every frame it starts uncaptured).
- An optimized function called inside torch.compile runs as ours: Dynamo calls our wrapper
  as an opaque (disabled) function, and the wrapper turns Dynamo's callback off inside.
- Functions marked ``torch.compiler.disable`` / ``torch._dynamo.disable`` / ``skip`` are
  never captured: calling one is a graph break and its effects happen.

Every case is compared with eager over several calls on fresh inputs, effects included.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing

import torch_plugin
from torch_plugin import _C

BACKEND_PAIRS = [("eager", "eager"), ("aot_eager", "aot_eager"), ("eager", "aot_eager")]


@pytest.fixture(autouse=True)
def fresh():
    torch_plugin.reset()
    torch._dynamo.reset()
    yield
    torch_plugin.reset()
    torch._dynamo.reset()
    assert _C.get_eval_frame_callback() is None
    assert torch._C._dynamo.eval_frame.get_eval_frame_callback() is None


def dynamo_counter(backend: str):
    return torch._dynamo.testing.CompileCounterWithBackend(backend)


def has_entries(fn) -> bool:
    return bool(_C.cache_entries(fn.__code__))


# --- torch.compile inside torch_plugin.optimize


@pytest.mark.parametrize("ours,theirs", BACKEND_PAIRS)
def test_torch_compile_inside_optimize(ours, theirs):
    log = []
    counter = dynamo_counter(theirs)

    def inner(x):
        return torch.sin(x) * 2 + 1

    compiled_inner = torch.compile(inner, backend=counter)

    def outer(x):
        y = compiled_inner(x.cos())
        log.append(y.shape[0])
        return y - x

    opt = torch_plugin.optimize(ours)(outer)
    for n in (4, 4, 4, 6):
        x = torch.randn(n)
        torch.testing.assert_close(opt(x), torch.sin(x.cos()) * 2 + 1 - x)
    assert log == [4, 4, 4, 6]
    assert counter.frame_count >= 1  # torch.compile compiled inner itself
    assert not has_entries(inner)  # ... and torch_plugin did not
    assert has_entries(outer)
    assert any("torch.compile" in reason for _, reason, _ in torch_plugin.stats.graph_breaks)


@pytest.mark.parametrize("ours,theirs", BACKEND_PAIRS[:2])
def test_torch_compile_with_graph_break_inside_optimize(ours, theirs, capsys):
    counter = dynamo_counter(theirs)

    @torch.compile(backend=counter)
    def inner(x):
        y = x * 3
        print("inner", y.shape[0])  # a graph break in torch.compile
        return y.relu()

    @torch_plugin.optimize(ours)
    def outer(x):
        a = inner(x + 1)
        print("outer")  # a graph break in ours
        return a.sum() + inner(a).sum()

    for _ in range(3):
        x = torch.randn(5)
        a = ((x + 1) * 3).relu()
        torch.testing.assert_close(outer(x), a.sum() + (a * 3).relu().sum())
    assert capsys.readouterr().out == "inner 5\nouter\ninner 5\n" * 3
    assert counter.frame_count >= 2


def test_compiled_modules_inside_optimize():
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    compiled_a = torch.compile(a, backend="eager")
    b.compile(backend="eager")  # nn.Module.compile

    @torch_plugin.optimize("eager")
    def f(x):
        return compiled_a(x).relu() + b(x)

    for _ in range(3):
        x = torch.randn(2, 4)
        torch.testing.assert_close(f(x), a(x).relu() + b._call_impl(x))
    assert not has_entries(type(a).forward)
    reasons = [reason for _, reason, _ in torch_plugin.stats.graph_breaks]
    assert any("wrapped by torch.compile" in r for r in reasons)


# --- torch_plugin.optimize inside torch.compile


@pytest.mark.parametrize("ours,theirs", BACKEND_PAIRS)
def test_optimize_inside_torch_compile(ours, theirs):
    log = []
    counter = dynamo_counter(theirs)

    def inner(x):
        log.append("inner")
        return torch.tanh(x) + x

    opt_inner = torch_plugin.optimize(ours)(inner)

    @torch.compile(backend=counter)
    def outer(x):
        return opt_inner(x * 2).sum(0) - 1

    for n in (3, 3, 3, 5):
        x = torch.randn(n, 2)
        torch.testing.assert_close(outer(x), (torch.tanh(x * 2) + x * 2).sum(0) - 1)
    assert log == ["inner"] * 4  # list.append replayed by our capture each call
    assert has_entries(inner)  # ours captured inner ...
    assert counter.frame_count >= 1  # ... and torch.compile the rest of outer


def test_optimized_module_inside_torch_compile():
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 3)
    opt_lin = torch_plugin.optimize("eager")(lin)

    @torch.compile(backend="eager")
    def f(x):
        return opt_lin(x).sigmoid()

    for _ in range(3):
        x = torch.randn(2, 3)
        torch.testing.assert_close(f(x), lin(x).sigmoid())


def test_nesting_four_deep(capsys):
    @torch_plugin.optimize("eager")
    def level3(x):
        print("level3")
        return x.exp()

    @torch.compile(backend="eager")
    def level2(x):
        return level3(x + 1) * 2

    @torch_plugin.optimize("aot_eager")
    def level1(x):
        y = level2(x.abs())
        print("level1")
        return y.mean()

    @torch.compile(backend="aot_eager")
    def level0(x):
        return level1(x) + level1(-x)

    for _ in range(3):
        x = torch.randn(4)
        expect = ((x.abs() + 1).exp() * 2).mean() * 2
        torch.testing.assert_close(level0(x), expect)
    assert capsys.readouterr().out == "level3\nlevel1\n" * 6


def test_optimize_context_inside_torch_compile_region():
    """``with torch_plugin.optimize(...)`` turns Dynamo's callback off until it exits."""
    dynamo_cb = torch._C._dynamo.eval_frame.get_eval_frame_callback
    seen = []
    prior = torch._C._dynamo.eval_frame.set_eval_frame(False)  # as torch._dynamo.run does
    try:
        with torch_plugin.optimize("eager"):
            seen.append(dynamo_cb())
        seen.append(dynamo_cb())
    finally:
        torch._C._dynamo.eval_frame.set_eval_frame(prior)
    assert seen == [None, False]


# --- functions PyTorch marks disabled


def _helper(x):
    return x * 10


def _make_disabled(kind, log):
    def d(x):
        log.append("d")
        print("in d")
        return _helper(x) + 1

    if kind == "compiler.disable":
        return torch.compiler.disable(d), d
    if kind == "dynamo.disable":
        return torch._dynamo.disable(d), d
    if kind == "compiler.disable(recursive=False)":
        return torch.compiler.disable(d, recursive=False), d
    assert kind == "dynamo.skip"
    return torch._dynamo.decorators.skip(d), d


DISABLE_KINDS = [
    "compiler.disable",
    "dynamo.disable",
    "compiler.disable(recursive=False)",
    "dynamo.skip",
]


@pytest.mark.parametrize("kind", DISABLE_KINDS)
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_disabled_function_inside_optimize(kind, backend, capsys):
    log = []
    disabled, original = _make_disabled(kind, log)

    @torch_plugin.optimize(backend)
    def f(x):
        y = disabled(x.sin())
        log.append("f")
        return y * 2

    for i in range(3):
        x = torch.randn(4)
        torch.testing.assert_close(f(x), (x.sin() * 10 + 1) * 2)
        assert log == ["d", "f"] * (i + 1)
    assert capsys.readouterr().out == "in d\n" * 3
    assert not has_entries(original)  # never captured
    reasons = [reason for _, reason, _ in torch_plugin.stats.graph_breaks]
    assert any("torch.compiler.disable" in r for r in reasons)
    # Recursive disable: what d calls is not captured either; otherwise it is.
    assert has_entries(_helper) == (kind in ("compiler.disable(recursive=False)", "dynamo.skip"))


@pytest.mark.parametrize("kind", DISABLE_KINDS[:2])
def test_disabled_function_optimized_directly(kind):
    log = []
    disabled, original = _make_disabled(kind, log)
    opt = torch_plugin.optimize("eager")(disabled)
    for i in range(3):
        x = torch.randn(3)
        torch.testing.assert_close(opt(x), x * 10 + 1)
    assert log == ["d"] * 3
    assert not has_entries(original) and not has_entries(_helper)


def test_disabled_method_inside_optimize():
    class Counter:
        def __init__(self) -> None:
            self.calls = 0

        @torch.compiler.disable
        def bump(self, x):
            self.calls += 1
            return x + self.calls

    c = Counter()

    @torch_plugin.optimize("eager")
    def f(x):
        return c.bump(x * 2) - 1

    for i in range(1, 4):
        x = torch.randn(2)
        torch.testing.assert_close(f(x), x * 2 + i - 1)
    assert c.calls == 3
    assert not has_entries(Counter.bump._torchdynamo_orig_callable)


def test_disabled_module_inside_optimize():
    torch.manual_seed(0)
    lin = torch.nn.Linear(2, 2)
    disabled = torch.compiler.disable(lin)  # a torch._dynamo OptimizedModule

    @torch_plugin.optimize("eager")
    def f(x):
        return disabled(x.relu()) + 1

    for _ in range(3):
        x = torch.randn(3, 2)
        torch.testing.assert_close(f(x), lin(x.relu()) + 1)
    assert not has_entries(type(lin).forward)


# --- the hook chain


def test_hook_chain_through_torch_compile_does_not_recurse():
    """Ours installed, Dynamo's installed on top (chaining to ours), ours switched off and on
    again: ours now chains to Dynamo's, which chains to ours. Frames must still run once."""
    script = textwrap.dedent(
        """
        import torch
        from torch_plugin import _C

        def f(x):
            return x + 1

        cb = lambda frame: None
        set_dynamo = torch._C._dynamo.eval_frame.set_eval_frame
        _C.set_eval_frame_callback(cb)
        dynamo_prior = set_dynamo(False)  # run-only: Dynamo's hook installed on top of ours
        _C.set_eval_frame_callback(None)
        _C.set_eval_frame_callback(cb)
        assert f(torch.ones(2)).tolist() == [2.0, 2.0]
        _C.set_eval_frame_callback(None)
        set_dynamo(dynamo_prior)
        assert f(torch.ones(2)).tolist() == [2.0, 2.0]
        print("ok")
        """
    )
    env = dict(os.environ, OMP_NUM_THREADS="1")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(torch_plugin.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([repo, env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "ok"


def test_torch_compile_entry_points_are_marked_uncaptured():
    compiled = torch.compile(lambda x: x * 2, backend="eager")
    disabled = torch.compiler.disable(lambda x: x - 2)

    @torch_plugin.optimize("eager")
    def f(x):
        return disabled(compiled(x))

    x = torch.randn(3)
    torch.testing.assert_close(f(x), x * 2 - 2)
    assert _C.is_code_uncaptured(compiled.__code__)
    assert _C.is_code_uncaptured(disabled.__code__)
    torch_plugin.reset()
    assert not _C.is_code_uncaptured(compiled.__code__)
