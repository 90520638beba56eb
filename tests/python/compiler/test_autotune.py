"""mode="max-autotune" of the "plugin" compiler (issue #32): each inference graph with a
convolution or matrix product is built with its library plan and with generated kernels
around ATen's products (library patterns off), both are timed, and the faster runs
(torch_plugin.compiler.autotune). The timer is replaced here so that each side wins in turn;
every test compares the compiled model with eager over three calls (compiling, cached, a new
batch size)."""

import logging

import pytest
import torch

import torch_plugin
from torch_plugin.compiler import autotune, stages
from torch_plugin.compiler import options as options_mod

pytestmark = pytest.mark.usefixtures("fresh_capture")

LOG = "torch_plugin.backends.plugin"


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
    ).eval()


def three_calls(opt, ref, make=lambda n: (torch.randn(n, 8),)):
    with torch.no_grad():
        for n in (4, 4, 6):
            args = make(n)
            want = ref(*[a.clone() for a in args])
            torch.testing.assert_close(opt(*args), want, rtol=1e-4, atol=1e-5)


@pytest.fixture
def builds(monkeypatch):
    """``library_patterns`` of the options at each ATen graph the compiler lowers."""
    seen = []
    real = stages.compile_graph

    def spy(*args, **kwargs):
        seen.append(options_mod.current().library_patterns)
        return real(*args, **kwargs)

    monkeypatch.setattr(stages, "compile_graph", spy)
    return seen


def fake_timer(monkeypatch, library_ms: float, kernels_ms: float) -> list:
    """Make the library plan take ``library_ms`` and generated kernels ``kernels_ms`` (the
    timer is called for the library plan first); returns the list of timed calls."""
    timed = []

    def median_ms(call, cuda):
        call()  # the build runs (and must not fail)
        timed.append(call)
        return library_ms if len(timed) % 2 == 1 else kernels_ms

    monkeypatch.setattr(autotune, "_median_ms", median_ms)
    return timed


@pytest.mark.parametrize(
    "library_ms, kernels_ms, chosen",
    [(1.0, 2.0, "library plan"), (2.0, 1.0, "generated kernels")],
)
def test_the_faster_build_runs_and_matches_eager(
    monkeypatch, caplog, builds, library_ms, kernels_ms, chosen
):
    timed = fake_timer(monkeypatch, library_ms, kernels_ms)
    model = mlp()
    opt = torch_plugin.optimize(model, mode="max-autotune", options={"graph_cache": False})
    with caplog.at_level(logging.INFO, logger=LOG):
        three_calls(opt, model)
    lines = [r.getMessage() for r in caplog.records if "max-autotune" in r.getMessage()]
    want = (
        f"plugin: max-autotune: library plan {library_ms:.3f} ms, generated kernels "
        f"{kernels_ms:.3f} ms: running the {chosen}"
    )
    assert want in lines, lines
    assert len(timed) % 2 == 0 and timed
    # each compile (the first batch size, then the new one) builds both, library plan first
    assert builds[:2] == [True, False], builds
    assert True in builds[2:] and False in builds[2:], builds


def test_a_failing_second_build_keeps_the_library_plan(monkeypatch, caplog):
    from torch_plugin.compiler import pipeline

    timed = fake_timer(monkeypatch, 2.0, 1.0)

    def broken(*args):
        raise RuntimeError("lowering bug")

    monkeypatch.setattr(pipeline, "_without_library_patterns", broken)
    model = mlp()
    opt = torch_plugin.optimize(model, mode="max-autotune", options={"graph_cache": False})
    with caplog.at_level(logging.INFO, logger=LOG):
        three_calls(opt, model)
    assert not timed
    assert "the build without library patterns failed (lowering bug)" in caplog.text


def test_a_graph_without_a_product_is_built_once(monkeypatch, caplog, builds):
    timed = fake_timer(monkeypatch, 1.0, 2.0)

    def f(x):
        return torch.relu(x * 2 + 1).sum(-1)

    opt = torch_plugin.optimize(f, mode="max-autotune", options={"graph_cache": False})
    with caplog.at_level(logging.INFO, logger=LOG):
        three_calls(opt, f)
    assert not timed and set(builds) == {True}
    assert "plugin: max-autotune: one build (no convolution or matrix product)" in caplog.text


def test_library_patterns_off_builds_once(monkeypatch, caplog, builds):
    timed = fake_timer(monkeypatch, 1.0, 2.0)
    model = mlp()
    opt = torch_plugin.optimize(
        model, mode="max-autotune", options={"graph_cache": False, "library_patterns": False}
    )
    with caplog.at_level(logging.INFO, logger=LOG):
        three_calls(opt, model)
    assert not timed and set(builds) == {False}
    assert "one build (library_patterns is off)" in caplog.text


def test_a_graph_that_mutates_its_input_is_not_timed(monkeypatch, caplog, builds):
    """Timing runs the graph again on its example inputs: not for a graph that writes one."""
    timed = fake_timer(monkeypatch, 2.0, 1.0)
    w = torch.randn(8, 4)

    def f(x):
        x.mul_(2)
        return x @ w

    opt = torch_plugin.optimize(f, mode="max-autotune", options={"graph_cache": False})
    with caplog.at_level(logging.INFO, logger=LOG), torch.no_grad():
        for n in (4, 4, 6):
            x = torch.randn(n, 8)
            x_eager = x.clone()
            torch.testing.assert_close(opt(x), f(x_eager), rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(x, x_eager)  # written once, as in eager
    assert not timed
    assert "max-autotune: not timing generated kernels (" in caplog.text


def test_a_training_graph_is_built_once(monkeypatch, builds):
    timed = fake_timer(monkeypatch, 2.0, 1.0)
    model = mlp().train()
    opt = torch_plugin.optimize(model, mode="max-autotune", options={"graph_cache": False})
    x = torch.randn(4, 8)
    opt(x).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    model(x).sum().backward()
    for got, p in zip(grads, model.parameters()):
        torch.testing.assert_close(got, p.grad, rtol=1e-4, atol=1e-5)
    assert not timed and set(builds) == {True}


def test_the_choice_is_in_the_trace_and_the_report(monkeypatch, tmp_path):
    from torch_plugin import report, trace

    fake_timer(monkeypatch, 2.0, 1.0)
    trace_dir = tmp_path / "trace"
    monkeypatch.setattr(trace, "_dir", str(trace_dir))
    monkeypatch.setattr(trace, "_enabled", True)
    monkeypatch.setattr(trace, "_file", None)
    model = mlp()
    opt = torch_plugin.optimize(model, mode="max-autotune", options={"graph_cache": False})
    three_calls(opt, model)
    trace._file.close()
    events = report.load(str(trace_dir))
    chosen = [e for e in events if e["event"] == "autotune"]
    assert chosen and all(e["frame"] is not None for e in chosen)
    assert chosen[0]["library_ms"] == 2.0 and chosen[0]["kernels_ms"] == 1.0
    assert chosen[0]["chosen"] == "generated kernels"
    with open(report.write(str(trace_dir)), encoding="utf-8") as f:
        page = f.read()
    assert page.count("<b>max-autotune</b>: library plan 2.000 ms, generated kernels 1.000 ms: "
                      "running the generated kernels") == len(chosen)  # fmt: skip


def test_copy_graph_shares_the_parameters():
    """The second build compiles a copy of the graph whose parameters are the model's own
    tensors (the frozen-parameter guards watch those)."""
    model = mlp()
    gm = torch.fx.symbolic_trace(model)
    copy = autotune.copy_graph(gm)
    assert copy.graph is not gm.graph
    assert [id(p) for p in copy.parameters()] == [id(p) for p in model.parameters()]
    x = torch.randn(3, 8)
    torch.testing.assert_close(copy(x), model(x))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graph_is_timed_both_ways_and_matches_eager(caplog, builds):
    """On CUDA, with the real timer: both builds (cuBLASLt with its epilogue, and ATen's
    products with generated kernels) run and are timed; whichever wins matches eager."""
    model = mlp().cuda()
    opt = torch_plugin.optimize(model, mode="max-autotune", options={"graph_cache": False})
    with caplog.at_level(logging.INFO, logger=LOG):
        three_calls(opt, model, make=lambda n: (torch.randn(n, 8, device="cuda"),))
    assert builds[:2] == [True, False], builds
    assert "plugin: max-autotune: library plan " in caplog.text, caplog.text
