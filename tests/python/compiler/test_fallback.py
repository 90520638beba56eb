"""Layer 1 of the "plugin" compiler: every graph runs, each op through the ATen fallback."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _fallback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_PLUGIN_LIBRARY_PATTERNS", "0")
    monkeypatch.setenv("TORCH_PLUGIN_FUSION", "0")


def test_pointwise_reduction_matmul(compile_plugin, assert_close):
    def f(x, y):
        return torch.softmax(x @ y, -1).sum(0) + torch.relu(x).mean()

    c = compile_plugin(f, torch.randn(5, 7), torch.randn(7, 3))
    for _ in range(2):
        x, y = torch.randn(5, 7), torch.randn(7, 3)
        assert_close(c(x, y), f(x, y))


def test_multi_output_and_views(compile_plugin, assert_close):
    def f(x):
        a, b = torch.split(x, [2, 3], dim=1)
        v, i = torch.max(x, dim=0)
        return a.t() * 2, b.reshape(-1), v, i, x[:, 1:3].contiguous()

    x = torch.randn(4, 5)
    assert_close(compile_plugin(f, x)(x), f(x))


def test_non_contiguous_output_strides_kept(compile_plugin, assert_close):
    def f(x):
        return x.t() + 1

    x = torch.randn(3, 4)
    out = compile_plugin(f, x)(x)
    assert out.stride() == f(x).stride()
    assert_close(out, f(x))


def test_training_gradients_match(compile_plugin, assert_close):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    x = torch.randn(4, 6)
    gm = torch.fx.symbolic_trace(model)
    c = compile_plugin(gm, x)
    (c(x) ** 2).sum().backward()
    got = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    (model(x) ** 2).sum().backward()
    assert_close(got, [p.grad for p in model.parameters()])


def test_frozen_parameter_change_recompiles(compile_plugin, assert_close):
    model = torch.nn.Linear(3, 3).eval()
    x = torch.randn(2, 3)
    with torch.no_grad():
        c = compile_plugin(torch.fx.symbolic_trace(model), x)
        assert_close(c(x), model(x))
        model.weight.add_(1.0)  # in place: same object, new version
        assert_close(c(x), model(x))


@pytest.mark.parametrize("how", ["config", "env", None])
def test_always_run_compiled_skips_the_speed_choice(how, monkeypatch):
    """config.always_run_compiled (or TORCH_PLUGIN_ALWAYS_RUN_COMPILED=1) keeps the compiled
    graph where the speed choice against the eager graph would have taken eager (the timing
    is faked: eager 1 ms, compiled 2 ms)."""
    import torch_plugin
    from torch_plugin.compiler import pipeline

    monkeypatch.delenv("TORCH_PLUGIN_ALWAYS_RUN_COMPILED", raising=False)
    if how == "config":
        monkeypatch.setattr(torch_plugin.config, "always_run_compiled", True)
    elif how == "env":
        monkeypatch.setenv("TORCH_PLUGIN_ALWAYS_RUN_COMPILED", "1")
    calls = []

    def compiled(*args):
        calls.append("compiled")

    def eager(*args):
        calls.append("eager")

    timed = iter([1.0, 2.0])  # eager first, then compiled
    monkeypatch.setattr(pipeline, "median_cuda_ms", lambda *_a, **_k: next(timed))
    chosen = pipeline._faster_of(compiled, eager, [torch.zeros(1)], {"pure": True})
    assert chosen is (eager if how is None else compiled)
    assert calls == ([] if how else ["eager", "compiled", "compiled", "compiled"])
