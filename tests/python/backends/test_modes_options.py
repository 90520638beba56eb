"""Modes and options of the backends (issue #32): optimize(mode=..., options=...) and
torch.compile(backend="plugin", mode=..., options=...).

Options are checked when optimize() is called; those of "plugin" override the environment for
the graphs that call compiles (also the work done later: a new size of a graph with symbolic
sizes, the backward graph), are part of the graph cache's key, and leave other calls alone.
Every test that runs a graph compares it with eager over three calls.
"""

import pytest
import torch

import torch_plugin
from torch_plugin import _C
from torch_plugin.backends.registry import backend_with_mode
from torch_plugin.compiler import graph_cache, stages
from torch_plugin.compiler import options as options_mod

PLUGIN_MODES = ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]


@pytest.fixture(autouse=True)
def _fresh(fresh_capture):
    yield


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)
    ).eval()


def three_calls(opt, ref, make=lambda: torch.randn(4, 8)):
    with torch.no_grad():
        for _ in range(3):
            x = make()
            torch.testing.assert_close(opt(x), ref(x), rtol=1e-4, atol=1e-5)


@pytest.fixture
def compiled_options(monkeypatch):
    """The :class:`Options` in effect at each ``stages.compile_graph`` (each ATen graph the
    "plugin" compiler lowers: inference, forward, backward, each size)."""
    seen = []
    real = stages.compile_graph

    def spy(*args, **kwargs):
        seen.append(options_mod.current())
        return real(*args, **kwargs)

    monkeypatch.setattr(stages, "compile_graph", spy)
    return seen


# --- modes ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", PLUGIN_MODES)
def test_plugin_modes_match_eager(mode, compiled_options):
    model = mlp()
    three_calls(torch_plugin.optimize(model, mode=mode, options={"graph_cache": False}), model)
    # max-autotune builds the graph a second time, without library patterns, and times both
    # (tests/python/compiler/test_autotune.py)
    autotune = mode.startswith("max-autotune")
    assert [o.library_patterns for o in compiled_options] == ([True, False] if autotune else [True])
    for o in compiled_options:
        assert o.cuda_graphs is (mode != "max-autotune-no-cudagraphs")


@pytest.mark.parametrize("backend", ["plugin", "inductor"])
@pytest.mark.parametrize("mode", PLUGIN_MODES)
def test_modes_resolve_at_optimize_time(backend, mode):
    assert callable(backend_with_mode(backend, mode))


def test_unknown_mode_lists_the_modes():
    with pytest.raises(ValueError, match="max-autotune-no-cudagraphs"):
        torch_plugin.optimize(mode="fastest")
    with pytest.raises(ValueError, match="only 'plugin' and 'inductor' take a mode"):
        torch_plugin.optimize(backend="eager", mode="max-autotune")
    with pytest.raises(TypeError, match="mode"):
        torch_plugin.optimize(mode=3)


def test_max_autotune_asks_cublaslt_for_more_candidates(monkeypatch):
    """The runtime options handed to C++ before each executor is built: 64 candidates for
    max-autotune's graphs, the environment's again for a later default compile."""
    monkeypatch.delenv("TORCH_PLUGIN_CUBLASLT_CANDIDATES", raising=False)
    handed = []
    real = _C._runtime.configure

    def spy(opts):
        handed.append(dict(opts))
        return real(opts)

    monkeypatch.setattr(_C._runtime, "configure", spy)
    model = mlp()
    three_calls(torch_plugin.optimize(model, mode="max-autotune"), model)
    assert handed and handed[-1]["cublaslt_candidates"] == "64"
    handed.clear()
    other = mlp()
    three_calls(torch_plugin.optimize(other), other)
    assert handed and handed[-1]["cublaslt_candidates"] == ""


# --- options: checked at optimize() ---------------------------------------------------------


@pytest.mark.parametrize(
    "options, error, match",
    [
        ({"fusoin": False}, ValueError, r"unknown option 'fusoin' \(did you mean 'fusion'\?\)"),
        ({"nope": 1}, ValueError, "options: freeze, library_patterns, fusion"),
        ({"fusion": 0}, TypeError, "'fusion' takes a bool"),
        ({"dump_dir": 3}, TypeError, "takes a str"),
        ({"cublaslt_candidates": "8"}, TypeError, "takes an int"),
        ({"cublaslt_candidates": True}, TypeError, "takes an int"),
        ({"cublaslt_candidates": 65}, ValueError, "1 to 64"),
        ({"cublaslt_tuning": "fast"}, ValueError, "'0', '1', 'verbose', 'gemm'"),
        ({"onednn_weights": "blocked"}, ValueError, "'borrowed', 'packed'"),
        (["fusion"], TypeError, "options must be a dict"),
    ],
)
def test_plugin_options_are_checked_at_optimize(options, error, match):
    with pytest.raises(error, match=match):
        torch_plugin.optimize(options=options)
    with pytest.raises(error, match=match):
        torch_plugin.optimize(mlp(), options=options)


def test_options_for_a_backend_that_takes_none():
    with pytest.raises(TypeError, match="backend 'eager' takes no options"):
        torch_plugin.optimize(backend="eager", options={"fusion": False})

    def plain(gm, example_inputs):
        return gm.forward

    with pytest.raises(TypeError, match="takes no options"):
        torch_plugin.optimize(backend=plain, options={"x": 1})


def test_unregistered_backend_with_an_options_parameter_receives_them():
    received = []

    def mine(gm, example_inputs, options=None):
        received.append(options)
        return gm.forward

    model = mlp()
    three_calls(torch_plugin.optimize(model, backend=mine, options={"anything": 1}), model)
    assert received == [{"anything": 1}]


def test_positional_backend_decided_by_options_it_alone_takes():
    """optimize(f, options=...) where "plugin" refuses the options but f as a backend takes
    them: f is the backend."""
    received = []

    def mine(gm, example_inputs, options=None):
        received.append(options)
        return gm.forward

    model = mlp()
    three_calls(torch_plugin.optimize(mine, options={"level": 2})(model), model)
    assert received == [{"level": 2}]


def test_inductor_options_are_checked():
    with pytest.raises(ValueError, match="not a torch._inductor.config entry"):
        torch_plugin.optimize(backend="inductor", options={"max_autotun": True})
    with pytest.raises(TypeError, match="takes a bool"):
        torch_plugin.optimize(backend="inductor", options={"max_autotune": "yes"})
    torch_plugin.optimize(backend="inductor", options={"triton.cudagraphs": False})


# --- options: applied to this call's graphs only -------------------------------------------


def test_options_reach_the_compiler_and_only_for_their_call(
    compiled_options, tmp_path, monkeypatch
):
    monkeypatch.setenv("TORCH_PLUGIN_GRAPH_CACHE", "0")  # every compile lowers its graph
    model = mlp()
    dump = tmp_path / "dump"
    opt = torch_plugin.optimize(
        model, options={"fusion": False, "dump_dir": str(dump), "graph_cache": False}
    )
    three_calls(opt, model)
    assert [(o.fusion, o.dump_dir) for o in compiled_options] == [(False, str(dump))]
    assert any(dump.iterdir())  # the pass pipeline wrote its dumps there
    assert options_mod.current().fusion is True  # nothing leaks after the call
    other = mlp()
    three_calls(torch_plugin.optimize(other), other)
    assert compiled_options[1].fusion is True and compiled_options[1].dump_dir == ""


def test_options_apply_to_the_backward_compiled_later(compiled_options):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch_plugin.optimize(model, options={"memory_planning": False})
    for _ in range(3):
        x = torch.randn(4, 8)
        model.zero_grad()
        opt(x).sum().backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        model(x).sum().backward()
        for g, p in zip(got, model.parameters()):
            torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)
    assert len(compiled_options) == 2  # the forward graph and, at the first backward, the backward
    assert all(o.memory_planning is False for o in compiled_options)


def test_options_apply_to_each_new_size(compiled_options):
    model = mlp()
    opt = torch_plugin.optimize(model, dynamic=True, options={"library_patterns": False})
    sizes = iter([3, 5, 7])
    three_calls(opt, model, make=lambda: torch.randn(next(sizes), 8))
    assert len(compiled_options) >= 3  # one static variant per size, compiled at its call
    assert all(o.library_patterns is False for o in compiled_options)


def test_options_are_part_of_the_graph_cache_key(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(tmp_path / "cache"))
    keys = []
    real = graph_cache.graph_key

    def spy(gm, example_inputs, params, options):
        keys.append((options["fusion"], real(gm, example_inputs, params, options)))
        return keys[-1][1]

    monkeypatch.setattr(graph_cache, "graph_key", spy)
    model = mlp()
    three_calls(torch_plugin.optimize(model, options={"fusion": False}), model)
    three_calls(torch_plugin.optimize(model), model)
    (off, key_off), (on, key_on) = keys
    assert (off, on) == (False, True) and key_off is not None and key_off != key_on


def test_same_options_share_compiled_entries():
    model = mlp()
    a = torch_plugin.optimize(model, options={"fusion": False})
    three_calls(a, model)
    b = torch_plugin.optimize(model, options={"fusion": False})
    three_calls(b, model)
    assert torch_plugin.stats.graphs_compiled == 1
    three_calls(torch_plugin.optimize(model, options={"fusion": True}), model)
    assert torch_plugin.stats.graphs_compiled == 2


# --- torch.compile passes mode and options through ------------------------------------------


@pytest.mark.parametrize(
    "how",
    [{"mode": "max-autotune"}, {"mode": "max-autotune-no-cudagraphs"},
     {"options": {"fusion": False, "graph_cache": False}}],
    ids=["max-autotune", "max-autotune-no-cudagraphs", "options"],
)  # fmt: skip
def test_torch_compile_passes_mode_or_options(how, compiled_options, monkeypatch):
    """torch.compile takes a mode or options (not both) and passes them to "plugin"."""
    monkeypatch.setenv("TORCH_PLUGIN_GRAPH_CACHE", "0")
    torch._dynamo.reset()
    model = mlp()
    three_calls(torch.compile(model, backend="plugin", **how), model)
    # max-autotune: the library plan, then the build without library patterns
    patterns = [True, False] if "mode" in how else [True]
    assert [o.library_patterns for o in compiled_options] == patterns
    for o in compiled_options:
        assert o.fusion is ("options" not in how)
        assert o.cuda_graphs is (how.get("mode") != "max-autotune-no-cudagraphs")
    torch._dynamo.reset()


def test_torch_compile_bad_option_names_the_valid_ones():
    torch._dynamo.reset()
    compiled = torch.compile(mlp(), backend="plugin", options={"nope": 1})
    with pytest.raises(Exception, match="unknown option 'nope'.*fusion"):
        compiled(torch.randn(4, 8))
    torch._dynamo.reset()


@pytest.mark.slow
def test_inductor_options_and_mode_reach_compile_fx(monkeypatch):
    from torch._inductor import compile_fx

    patches = []
    real = compile_fx.compile_fx

    def spy(gm, example_inputs, **kwargs):
        patches.append(kwargs.get("config_patches"))
        return real(gm, example_inputs, **kwargs)

    monkeypatch.setattr(compile_fx, "compile_fx", spy)

    def pointwise(x):  # no matrix product: max_autotune has nothing to benchmark
        return torch.sin(x) * 2 + 1

    opt = torch_plugin.optimize(
        pointwise,
        backend="inductor",
        mode="max-autotune-no-cudagraphs",
        options={"coordinate_descent_tuning": False},
    )
    three_calls(opt, pointwise)
    assert patches[0] == {"max_autotune": True, "coordinate_descent_tuning": False}
