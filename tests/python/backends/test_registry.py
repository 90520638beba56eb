"""Tests for torch_plugin/backends/registry.py (names, modes) and torch_plugin/contract.py
(call_backend, BackendCompilerFailed)."""

import subprocess
import sys
import textwrap

import pytest
import torch

from torch_plugin import config
from torch_plugin.backends import registry
from torch_plugin.backends.registry import (
    backend_with_mode,
    list_backends,
    lookup_backend,
    register_backend,
)
from torch_plugin.contract import BackendCompilerFailed, call_backend


def test_builtin_backends_are_listed_sorted():
    names = list_backends()
    assert {"eager", "aot_eager", "inductor"} <= set(names)
    assert names == sorted(names)


def test_importing_backend_modules_registers_nothing():
    code = (
        "import torch_plugin.backends.registry as r\n"
        "import torch_plugin.backends.eager, torch_plugin.backends.aot_eager, "
        "torch_plugin.backends.inductor\n"
        "assert r._BACKENDS == {}, r._BACKENDS\n"
        "assert {'aot_eager', 'eager', 'inductor'} <= set(r.list_backends()), r.list_backends()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_lookup_by_name_and_callable():
    from torch_plugin.backends.eager import eager

    assert lookup_backend("eager") is eager

    def mine(gm, example_inputs):
        return gm.forward

    assert lookup_backend(mine) is mine


def test_unknown_name_lists_known_backends():
    with pytest.raises(ValueError) as info:
        lookup_backend("no_such_backend")
    message = str(info.value)
    assert "'no_such_backend'" in message
    assert "'aot_eager', 'eager', 'inductor'" in message


@pytest.mark.parametrize("bad", [42, None, ["eager"]])
def test_non_callable_backend_names_its_type(bad):
    with pytest.raises(TypeError, match=type(bad).__name__):
        lookup_backend(bad)


def test_register_as_plain_decorator():
    @register_backend
    def my_plain_backend(gm, example_inputs):
        return gm.forward

    assert lookup_backend("my_plain_backend") is my_plain_backend
    assert "my_plain_backend" in list_backends()


def test_register_as_decorator_with_name():
    @register_backend(name="named_backend")
    def fn(gm, example_inputs):
        return gm.forward

    assert lookup_backend("named_backend") is fn
    assert "fn" not in list_backends()


def test_register_as_call():
    def fn(gm, example_inputs):
        return gm.forward

    assert register_backend(fn, "called_backend") is fn
    assert lookup_backend("called_backend") is fn
    assert register_backend(fn, "called_backend") is fn  # again: no-op


def test_register_taken_name_raises():
    def fn(gm, example_inputs):
        return gm.forward

    with pytest.raises(ValueError, match="'eager' is already registered"):
        register_backend(fn, "eager")


def test_register_non_callable_raises():
    with pytest.raises(TypeError, match="str"):
        register_backend("eager", "another")


def test_registered_backend_is_used_by_call_backend(pointwise_graph):
    seen = []

    @register_backend(name="recording")
    def recording(gm, example_inputs):
        seen.append((gm, example_inputs))
        return gm.forward

    x, y = torch.randn(4), torch.randn(4)
    compiled = call_backend(
        lookup_backend("recording"),
        pointwise_graph,
        (x, y),
        backend_name="recording",
        graph_name="g",
    )
    assert seen[0][0] is pointwise_graph
    assert isinstance(seen[0][1], list) and seen[0][1][0] is x
    torch.testing.assert_close(compiled(x, y), torch.cos(x) + torch.sin(y))


def _failing_backend(gm, example_inputs):
    raise RuntimeError("no kernel for this op")


def test_failing_backend_names_backend_and_graph(pointwise_graph):
    x, y = torch.randn(4), torch.randn(4)
    with pytest.raises(BackendCompilerFailed) as info:
        call_backend(
            _failing_backend,
            pointwise_graph,
            [x, y],
            backend_name="failing",
            graph_name="'cos_plus_sin' (test.py:12)",
        )
    err = info.value
    message = str(err)
    assert "backend 'failing'" in message
    assert "'cos_plus_sin' (test.py:12)" in message
    assert f"({len(pointwise_graph.graph.nodes)} nodes)" in message
    assert "RuntimeError: no kernel for this op" in message
    assert isinstance(err.__cause__, RuntimeError) and err.inner_exception is err.__cause__
    assert (err.backend_name, err.num_nodes) == ("failing", len(pointwise_graph.graph.nodes))


def test_suppress_errors_warns_and_runs_eagerly(monkeypatch, pointwise_graph):
    monkeypatch.setattr(config, "suppress_errors", True)
    x, y = torch.randn(4), torch.randn(4)
    with pytest.warns(UserWarning, match="backend 'failing' failed to compile graph g") as record:
        compiled = call_backend(
            _failing_backend, pointwise_graph, [x, y], backend_name="failing", graph_name="g"
        )
    assert "suppress_errors" in str(record[0].message)
    x, y = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(compiled(x, y), torch.cos(x) + torch.sin(y), atol=0, rtol=0)


def test_suppress_errors_fallback_ignores_backend_rewrites(monkeypatch, pointwise_graph):
    """A backend that rewrites the graph and then fails must not change the fallback."""
    monkeypatch.setattr(config, "suppress_errors", True)

    def rewrite_then_fail(gm, example_inputs):
        output = next(n for n in gm.graph.nodes if n.op == "output")
        output.args = ((output.args[0], output.args[0]),)
        gm.recompile()
        raise RuntimeError("late failure")

    x, y = torch.randn(4), torch.randn(4)
    with pytest.warns(UserWarning, match="late failure"):
        compiled = call_backend(
            rewrite_then_fail, pointwise_graph, [x, y], backend_name="r", graph_name="g"
        )
    out = compiled(x, y)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, torch.cos(x) + torch.sin(y), atol=0, rtol=0)


@pytest.mark.parametrize("suppress", [False, True])
def test_backend_returning_non_callable_raises(monkeypatch, pointwise_graph, suppress):
    monkeypatch.setattr(config, "suppress_errors", suppress)
    with pytest.raises(TypeError, match="backend 'bad' returned int"):
        call_backend(
            lambda gm, inputs: 3,
            pointwise_graph,
            [torch.randn(2)] * 2,
            backend_name="bad",
            graph_name="g",
        )


def test_unknown_backend_name_in_call_backend(pointwise_graph):
    with pytest.raises(ValueError, match="unknown backend"):
        call_backend(
            lookup_backend("nope"), pointwise_graph, [], backend_name="nope", graph_name="g"
        )


def test_call_backend_takes_a_compiler_not_a_name(pointwise_graph):
    """Names are resolved above capture (the registry); the contract takes callables only."""
    with pytest.raises(TypeError, match="lookup_backend"):
        call_backend("eager", pointwise_graph, [], backend_name="eager", graph_name="g")


def test_modes_are_declared_by_registrations():
    from torch_plugin.backends.inductor import inductor_reduce_overhead
    from torch_plugin.backends.plugin import plugin, plugin_reduce_overhead

    assert backend_with_mode("plugin", None) is plugin
    assert backend_with_mode("plugin", "default") is plugin
    assert backend_with_mode("plugin", "reduce-overhead") is plugin_reduce_overhead
    assert backend_with_mode(plugin, "reduce-overhead") is plugin_reduce_overhead
    assert backend_with_mode("inductor", "reduce-overhead") is inductor_reduce_overhead

    def fast(gm, example_inputs):
        return gm.forward

    def mine(gm, example_inputs):
        return gm.forward

    register_backend(mine, "with_modes", modes={"fast": fast})
    assert backend_with_mode("with_modes", "fast") is fast
    with pytest.raises(ValueError, match="only 'with_modes' takes a mode"):
        backend_with_mode("eager", "fast")


def test_registry_state_is_restored_between_tests():
    assert "my_plain_backend" not in registry._BACKENDS


@pytest.mark.parametrize("verbose", [False, True])
def test_verbose_logs_backend_compiles(monkeypatch, caplog, pointwise_graph, verbose):
    monkeypatch.setattr(config, "verbose", verbose)
    with caplog.at_level("INFO", logger="torch_plugin.contract"):
        call_backend(
            lookup_backend("eager"), pointwise_graph, [], backend_name="eager", graph_name="g"
        )
    logged = [r.getMessage() for r in caplog.records if r.name == "torch_plugin.contract"]
    if verbose:
        assert len(logged) == 1 and logged[0].startswith("backend 'eager' compiled graph g (")
    else:
        assert logged == []


def test_torch_compile_finds_plugin_without_importing_torch_plugin():
    """The torch_dynamo_backends entry point (pyproject.toml): a fresh process that never
    imports torch_plugin itself compiles with torch.compile(backend="plugin")."""
    code = textwrap.dedent(
        """
        import sys, torch
        assert "torch_plugin" not in sys.modules
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU()).eval()
        compiled = torch.compile(model, backend="plugin")
        with torch.no_grad():
            for _ in range(2):
                x = torch.randn(4, 8)
                torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
        print("plugin backend loaded:", "torch_plugin.backends.plugin" in sys.modules)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
        check=False,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "plugin backend loaded: True" in out.stdout
