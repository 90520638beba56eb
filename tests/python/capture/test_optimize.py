"""End-to-end capture tests: functions and modules through torch_plugin.optimize on CPU.

Every test compares against eager PyTorch on fresh random inputs and checks the number of
graphs captured (torch_plugin.stats), so capture that silently falls back is caught.
"""

import threading

import pytest
import torch

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture", "tensor_branches_break")


def cos_sin(x, y):
    a = torch.cos(x)
    b = torch.sin(y)
    return a + b


class TwoLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(8, 16)
        self.l2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


def test_function_is_one_graph():
    opt = torch_plugin.optimize("eager")(cos_sin)
    for _ in range(3):
        x, y = torch.randn(4, 8), torch.randn(4, 8)
        torch.testing.assert_close(opt(x, y), cos_sin(x, y), rtol=0, atol=0)
    assert torch_plugin.stats.graphs_compiled == 1
    assert torch_plugin.stats.frames_failed == 0


def test_module_is_one_graph_and_keeps_state_dict():
    m = TwoLinear()
    om = torch_plugin.optimize("eager")(m)
    x = torch.randn(3, 8)
    torch.testing.assert_close(om(x), m(x), rtol=0, atol=0)
    assert torch_plugin.stats.graphs_compiled == 1
    assert list(om.state_dict()) == list(m.state_dict())
    assert om.l1 is m.l1
    assert [p for p in om.parameters()] == [p for p in m.parameters()]


def test_parameter_update_is_seen():
    m = TwoLinear()
    om = torch_plugin.optimize("eager")(m)
    x = torch.randn(3, 8)
    om(x)
    with torch.no_grad():
        m.l1.weight.add_(1.0)
    torch.testing.assert_close(om(x), m(x), rtol=0, atol=0)
    assert torch_plugin.stats.graphs_compiled == 1


@pytest.mark.parametrize(
    "change",
    [
        lambda x: x.double(),
        lambda x: torch.randn(7, 8),
        lambda x: x.t().contiguous().t(),
        lambda x: x.clone().requires_grad_(True),
    ],
    ids=["dtype", "shape", "strides", "requires_grad"],
)
def test_changed_input_recompiles(change):
    opt = torch_plugin.optimize("eager")(cos_sin)
    x = torch.randn(8, 8)
    opt(x, x)
    x2 = change(x)
    torch.testing.assert_close(opt(x2, x2), cos_sin(x2, x2))
    assert torch_plugin.stats.graphs_compiled == 2
    assert torch_plugin.stats.recompiles == 1


def test_training_flag_recompiles():
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5))
    om = torch_plugin.optimize("eager")(m)
    x = torch.randn(2, 4)
    m.eval()
    torch.testing.assert_close(om(x), m(x))
    m.train()
    torch.manual_seed(0)
    out = om(x)
    torch.manual_seed(0)
    torch.testing.assert_close(out, m(x))
    assert torch_plugin.stats.graphs_compiled == 2


def test_grad_mode_recompiles():
    m = TwoLinear()
    om = torch_plugin.optimize("eager")(m)
    x = torch.randn(2, 8)
    assert om(x).requires_grad
    with torch.no_grad():
        assert not om(x).requires_grad
    assert torch_plugin.stats.graphs_compiled == 2


def test_python_constant_global_is_guarded():
    g = cos_sin.__globals__
    g["SCALE_FOR_TEST"] = 2.0

    def f(x):
        return x * SCALE_FOR_TEST  # noqa: F821

    opt = torch_plugin.optimize("eager")(f)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), x * 2.0)
    g["SCALE_FOR_TEST"] = 3.0
    torch.testing.assert_close(opt(x), x * 3.0)
    assert torch_plugin.stats.graphs_compiled == 2
    del g["SCALE_FOR_TEST"]


def test_closure_constant_is_guarded():
    def make(scale):
        def f(x):
            return x * scale

        return f

    f2, f3 = make(2), make(3)
    x = torch.randn(3)
    torch.testing.assert_close(torch_plugin.optimize("eager")(f2)(x), x * 2)
    torch.testing.assert_close(torch_plugin.optimize("eager")(f3)(x), x * 3)


def test_user_exception_propagates_with_traceback():
    def bad(x):
        return torch.mm(x, x)  # 1-d: mm raises at capture time and at run time

    opt = torch_plugin.optimize("eager")(bad)
    with pytest.raises(RuntimeError) as info:
        opt(torch.randn(3))
    assert any(frame.name == "bad" for frame in info.traceback)


def test_exception_from_compiled_graph_propagates():
    def f(x, y):
        return x + y

    opt = torch_plugin.optimize("eager")(f)
    opt(torch.randn(2), torch.randn(2))
    assert torch_plugin.stats.graphs_compiled == 1
    with pytest.raises(RuntimeError):
        opt(torch.randn(2), torch.randn(3))


def test_nested_optimized_calls():
    inner = torch_plugin.optimize("eager")(cos_sin)

    def outer(x):
        return inner(x, x) * 2

    opt = torch_plugin.optimize("eager")(outer)
    x = torch.randn(5)
    torch.testing.assert_close(opt(x), cos_sin(x, x) * 2)
    assert torch_plugin.stats.graphs_compiled == 1


def test_context_manager_and_disable():
    calls = []

    @torch_plugin.disable
    def side(x):
        calls.append(1)
        return x + 1

    def f(x):
        return torch.relu(x) * 2

    x = torch.randn(4)
    with torch_plugin.optimize("eager"):
        torch.testing.assert_close(f(x), torch.relu(x) * 2)
        torch.testing.assert_close(side(x), x + 1)
    assert torch_plugin.stats.graphs_compiled == 1
    assert calls == [1]


def test_control_flow_on_shapes_constants_and_containers():
    def f(x, ys, cfg):
        out = []
        for i, y in enumerate(ys):
            if x.shape[0] > 2 and cfg["act"] == "relu":
                out.append(torch.relu(x + y * i))
            else:
                out.append(x - y)
        total = sum(out)
        return {"total": total, "parts": tuple(out), "n": len(out)}

    opt = torch_plugin.optimize("eager")(f)
    x = torch.randn(4)
    ys = [torch.randn(4), torch.randn(4)]
    for cfg in ({"act": "relu"}, {"act": "none"}):
        got, want = opt(x, ys, cfg), f(x, ys, cfg)
        assert got["n"] == want["n"]
        torch.testing.assert_close(got["total"], want["total"])
        torch.testing.assert_close(got["parts"], want["parts"])
    assert torch_plugin.stats.graphs_compiled == 2


def test_kwargs_varargs_and_defaults():
    def f(x, *rest, scale=2.0, **extra):
        y = x * scale
        for r in rest:
            y = y + r
        if extra.get("bias") is not None:
            y = y + extra["bias"]
        return y

    opt = torch_plugin.optimize("eager")(f)
    x, r, b = torch.randn(3), torch.randn(3), torch.randn(3)
    torch.testing.assert_close(opt(x, r, r, scale=3.0, bias=b), f(x, r, r, scale=3.0, bias=b))
    torch.testing.assert_close(opt(x), f(x))


def test_module_containers_are_inlined():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)])
            self.heads = torch.nn.ModuleDict(
                {"a": torch.nn.Linear(4, 2), "b": torch.nn.Linear(4, 3)}
            )
            self.seq = torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Linear(4, 4))

        def forward(self, x):
            for blk in self.blocks:
                x = blk(x)
            x = self.seq(x)
            return {k: head(x) for k, head in self.heads.items()}

    m = Net()
    om = torch_plugin.optimize("eager")(m)
    x = torch.randn(2, 4)
    got, want = om(x), m(x)
    assert got.keys() == want.keys()
    for k in want:
        torch.testing.assert_close(got[k], want[k])
    assert torch_plugin.stats.graphs_compiled == 1


def test_is_compiling_is_true_while_captured():
    def f(x):
        if torch.compiler.is_compiling():
            return x + 1
        return x - 1

    opt = torch_plugin.optimize("eager")(f)
    x = torch.randn(3)
    torch.testing.assert_close(opt(x), x + 1)
    torch.testing.assert_close(f(x), x - 1)


def test_data_dependent_branch_runs_unmodified_without_graph_breaks(monkeypatch):
    monkeypatch.setattr(torch_plugin.config, "graph_breaks", False)

    def f(x):
        if x.sum() > 0:
            return x * 2
        return x * -1

    opt = torch_plugin.optimize("eager")(f)
    for sign in (1, -1):
        x = torch.rand(4) * sign
        torch.testing.assert_close(opt(x), f(x))
    assert torch_plugin.stats.graphs_compiled == 0
    assert torch_plugin.stats.failures and "data-dependent" in torch_plugin.stats.failures[0][1]


def test_print_runs_unmodified_without_graph_breaks(capsys, monkeypatch):
    monkeypatch.setattr(torch_plugin.config, "graph_breaks", False)

    def f(x):
        print("hello")
        return x + 1

    opt = torch_plugin.optimize("eager")(f)
    x = torch.randn(2)
    torch.testing.assert_close(opt(x), x + 1)
    assert capsys.readouterr().out == "hello\n"
    assert torch_plugin.stats.graphs_compiled == 0


def test_nopython_raises_with_location():
    def f(x):
        return x.item()

    opt = torch_plugin.optimize("eager", nopython=True)(f)
    with pytest.raises(torch_plugin.CaptureError, match="test_optimize.py"):
        opt(torch.randn(1))


def test_threads_each_get_correct_results():
    opt = torch_plugin.optimize("eager")(cos_sin)
    errors = []

    def worker(shape):
        try:
            for _ in range(20):
                x, y = torch.randn(shape), torch.randn(shape)
                torch.testing.assert_close(opt(x, y), cos_sin(x, y))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=((n, 3),)) for n in (2, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_backends_aot_eager_training():
    m = TwoLinear()
    om = torch_plugin.optimize("aot_eager")(m)
    x = torch.randn(4, 8)
    om(x).sum().backward()
    grads = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    m(x).sum().backward()
    for g, p in zip(grads, m.parameters()):
        torch.testing.assert_close(g, p.grad)
    assert torch_plugin.stats.graphs_compiled == 1


def test_unknown_backend_and_bad_type():
    with pytest.raises(ValueError, match="eager"):
        torch_plugin.optimize("no-such-backend")
    with pytest.raises(TypeError):
        torch_plugin.optimize(42)


def test_cache_size_limit_warns_once_and_runs_unmodified(monkeypatch):
    monkeypatch.setattr(torch_plugin.config, "cache_size_limit", 2)

    def f(x):
        return x * 2

    # Static shapes, so that each size is a new entry (dynamic shapes would serve them all).
    opt = torch_plugin.optimize("eager", dynamic=False)(f)
    with pytest.warns(UserWarning, match="cache_size_limit=2") as record:
        for n in range(1, 6):
            x = torch.randn(n)
            torch.testing.assert_close(opt(x), x * 2)
    assert len([w for w in record if "cache_size_limit" in str(w.message)]) == 1
    assert torch_plugin.stats.graphs_compiled == 2


def test_backend_error_names_backend_and_function():
    def broken_backend(gm, example_inputs):
        raise RuntimeError("boom")

    opt = torch_plugin.optimize(broken_backend)(cos_sin)
    with pytest.raises(torch_plugin.BackendCompilerFailed, match="broken_backend.*cos_sin"):
        opt(torch.randn(2), torch.randn(2))


def test_suppress_errors_falls_back_to_eager(monkeypatch):
    monkeypatch.setattr(torch_plugin.config, "suppress_errors", True)

    def broken_backend(gm, example_inputs):
        raise RuntimeError("boom")

    opt = torch_plugin.optimize(broken_backend)(cos_sin)
    x, y = torch.randn(3), torch.randn(3)
    with pytest.warns(UserWarning, match="boom"):
        torch.testing.assert_close(opt(x, y), cos_sin(x, y))


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: (torch.nn.BatchNorm1d(6), torch.randn(5, 6)), id="bn1d_2d"),
        pytest.param(lambda: (torch.nn.BatchNorm1d(6), torch.randn(5, 6, 7)), id="bn1d_3d"),
        pytest.param(lambda: (torch.nn.BatchNorm2d(6), torch.randn(2, 6, 5, 3)), id="bn2d"),
        pytest.param(
            lambda: (
                torch.nn.BatchNorm2d(6),
                torch.randn(2, 6, 5, 3).to(memory_format=torch.channels_last),
            ),
            id="bn2d_channels_last",
        ),
        pytest.param(
            lambda: (torch.nn.BatchNorm2d(6), torch.randn(2, 6, 5, 3).bfloat16()), id="bn2d_bf16"
        ),
        pytest.param(
            lambda: (torch.nn.BatchNorm2d(6), torch.randn(2, 6, 10, 3)[:, :, ::2]), id="strided"
        ),
        pytest.param(lambda: (torch.nn.BatchNorm3d(6), torch.randn(2, 6, 3, 4, 5)), id="bn3d"),
    ],
)
def test_eval_batch_norm_example_value_matches_eager(make):
    """Eval-mode BatchNorm's captured output metadata (a shape rule, not a FakeTensor run)
    has the sizes, strides and dtype of the real output."""
    bn, x = make()
    with torch.no_grad():
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)
    bn.eval()
    seen = []

    def backend(gm, example_inputs):
        seen.extend(n.meta["example_value"] for n in gm.graph.nodes if n.op == "call_module")
        return gm.forward

    model = torch.nn.Sequential(bn)  # bn as a submodule: a call_module node
    with torch.no_grad():
        got = torch_plugin.optimize(backend)(model)(x)
        want = bn(x)
    torch.testing.assert_close(got, want)
    (example,) = seen
    assert example.shape == want.shape
    assert example.dtype == want.dtype
    assert example.stride() == want.stride()


def test_eval_batch_norm_with_wrong_channel_count_raises_as_eager():
    model = torch.nn.Sequential(torch.nn.BatchNorm2d(6)).eval()
    x = torch.randn(2, 5, 4, 4)
    with pytest.raises(RuntimeError) as want:
        model(x)
    with pytest.raises(RuntimeError) as got:
        torch_plugin.optimize("eager")(model)(x)
    assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]
