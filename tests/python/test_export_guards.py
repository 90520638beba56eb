"""Exported graphs check their guards on every call (issue #25).

Each guard kind is violated one at a time (the call raises ExportGuardError naming the input,
the value seen and the value assumed) and respected (the result equals eager on fresh random
inputs, over several calls), on a plain function, an nn.Module and an HF model called with
keyword arguments and returning a ModelOutput; then after a torch.save / torch.load round trip
with torch.load's defaults. Export depends only on its arguments: a fresh process and a
process where optimize() already saw other sizes give the same graph and guards.
"""

import subprocess
import sys
import textwrap

import pytest
import torch

import torch_plugin
from torch_plugin.exported.guards import ExportGuardError

pytestmark = pytest.mark.usefixtures("fresh_capture")


def branchy(x, y, n, mode="add", scale=None):
    if x.shape[0] > 2:
        z = x * 2
    else:
        z = x - 1
    if mode == "add":
        z = z + y * n
    else:
        z = z - y * n
    if scale is not None:
        z = z * scale
    return z


def _args(batch=4, dtype=torch.float32):
    return (torch.randn(batch, 3, dtype=dtype), torch.randn(batch, 3, dtype=dtype), 2)


def _round_trip(gm, tmp_path, name="g.pt"):
    path = tmp_path / name
    torch.save(gm, path)
    return torch.load(path)  # torch.load's defaults: weights_only=True


def _respected(gm, fn, make, calls=3):
    for _ in range(calls):
        args, kwargs = make()
        torch.testing.assert_close(gm(*args, **kwargs), fn(*args, **kwargs))


# (name, call args, call kwargs, text the error must contain)
def _violations():
    x, y, n = _args()
    return [
        ("size", (torch.randn(1, 3), torch.randn(1, 3), n), {}, "L['x'].size()[0]"),
        ("dtype", (x.double(), y.double(), n), {}, "torch.float64"),
        ("stride", (torch.randn(3, 4).t(), y, n), {}, "stride"),
        ("device", (x.to("meta"), y, n), {}, "device"),
        ("requires_grad", (x.clone().requires_grad_(), y, n), {}, "requires_grad"),
        ("int constant", (x, y, 3), {}, "L['n'] == 2"),
        ("str constant", (x, y, n), {"mode": "sub"}, "L['mode'] == 'add'"),
        ("None constant", (x, y, n), {"mode": "add", "scale": 2.0}, "L['scale']"),
        ("broadcast relation", (x, torch.randn(1, 3), n), {}, "L['y']"),
    ]


@pytest.mark.parametrize("round_trip", [False, True], ids=["exported", "saved_and_loaded"])
def test_function_guards_violated_and_respected(tmp_path, round_trip):
    gm, guards = torch_plugin.export(branchy, *_args(), mode="add", scale=None)
    assert "L['n'] == 2" in guards
    if round_trip:
        gm = _round_trip(gm, tmp_path)
    _respected(gm, branchy, lambda: (_args(), {"mode": "add", "scale": None}))
    for name, args, kwargs, text in _violations():
        kwargs = {"mode": "add", "scale": None, **kwargs}
        with pytest.raises(ExportGuardError, match="did not assume") as info:
            gm(*args, **kwargs)
        assert text in str(info.value), (name, str(info.value))
        assert "mark_dynamic" in str(info.value)  # says how to export for other inputs


def test_structure_of_nested_inputs_is_guarded(tmp_path):
    def f(inp, pair):
        return inp["a"] * pair[0] + pair[1]

    def make():
        return (({"a": torch.randn(2)}, (torch.randn(2), torch.randn(2))), {})

    (args, _), _ = make(), None
    gm, _ = torch_plugin.export(f, *args)
    for g in (gm, _round_trip(gm, tmp_path)):
        _respected(g, f, make)
        a, b = torch.randn(2), torch.randn(2)
        for bad in [
            ({"a": a}, [a, b]),  # list for tuple
            ({"a": a}, (a, b, b)),  # longer tuple
            ({"a": a, "b": b}, (a, b)),  # extra key
        ]:
            with pytest.raises(ExportGuardError, match="another structure"):
                g(*bad)
        with pytest.raises(ExportGuardError, match=r"type\(L\['inp'\]\['a'\]\) is torch.Tensor"):
            g({"a": (a,)}, (a, b))  # a container where the capture read a tensor


def test_symbolic_sizes_check_their_relations(tmp_path):
    x, y = torch.randn(5, 3), torch.randn(5, 3)
    torch_plugin.mark_dynamic(x, 0)
    torch_plugin.mark_dynamic(y, 0)
    gm, guards = torch_plugin.export(branchy, x, y, 2)
    assert any("L['x'].size()[0] > 2" in g for g in guards)
    for g in (gm, _round_trip(gm, tmp_path)):
        _respected(g, branchy, lambda: (_args(batch=7), {}))
        _respected(g, branchy, lambda: (_args(batch=3), {}))
        with pytest.raises(ExportGuardError, match=r"L\['x'\].size\(\)\[0\]"):
            g(*_args(batch=2))  # the other branch of `x.shape[0] > 2`
        with pytest.raises(ExportGuardError, match=r"L\['y'\]"):
            g(torch.randn(6, 3), torch.randn(7, 3), 2)  # the sizes' equality


def test_dynamic_true_makes_every_dim_symbolic():
    gm, _ = torch_plugin.export(branchy, *_args(batch=4), dynamic=True)
    _respected(gm, branchy, lambda: (_args(batch=9), {}))
    with pytest.raises(ExportGuardError):
        gm(*_args(batch=2))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 4)
        self.bn = torch.nn.BatchNorm1d(4)

    def forward(self, x, *, bias=None):
        out = self.bn(self.lin(x)).relu()
        return out if bias is None else out + bias


def test_module_guards_violated_and_respected(tmp_path):
    torch.manual_seed(0)
    model = Net().eval()
    gm, _ = torch_plugin.export(model, torch.randn(8, 3))
    unchecked = "\n".join(gm._export_guards.unchecked)
    assert "L['self']" in unchecked and "global torch state" in unchecked
    for g in (gm, _round_trip(gm, tmp_path)):
        with torch.no_grad():
            _respected(g, model, lambda: ((torch.randn(8, 3),), {}))
        with pytest.raises(ExportGuardError, match=r"L\['x'\].size\(\)\[0\] == 8"):
            g(torch.randn(5, 3))
        with pytest.raises(ExportGuardError, match="torch.float32"):
            g(torch.randn(8, 3, dtype=torch.float64))
        with pytest.raises(TypeError):  # a keyword the export did not see
            g(torch.randn(8, 3), bias=torch.randn(4))
    # the module's integer buffer is the graph's own and was not touched by capture
    assert int(model.bn.num_batches_tracked) == 0


def test_hf_model_with_kwargs_and_model_output(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        vocab_size=100,
    )  # fmt: skip
    model = transformers.BertModel(config).eval()

    def make(batch=2, seq=8):
        ids = torch.randint(0, 100, (batch, seq))
        return (), {"input_ids": ids, "attention_mask": torch.ones(batch, seq, dtype=torch.long)}

    _, kwargs = make()
    gm, _ = torch_plugin.export(model, **kwargs)
    for g in (gm, _round_trip(gm, tmp_path)):
        with torch.no_grad():
            for _ in range(2):
                _, kw = make()
                got, want = g(**kw), model(**kw)
                assert type(got) is type(want)
                torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state)
                torch.testing.assert_close(got.pooler_output, want.pooler_output)
            _, kw = make(seq=5)
            with pytest.raises(ExportGuardError, match=r"\['input_ids'\]"):
                g(**kw)
            _, kw = make()
            kw["attention_mask"] = kw["attention_mask"].float()
            with pytest.raises(ExportGuardError, match=r"\['attention_mask'\]"):
                g(**kw)


_SCRIPT = textwrap.dedent(
    """
    import sys, torch, torch_plugin

    def f(x):
        return torch.relu(x) * x.shape[0]

    if sys.argv[1] == "after_optimize":
        opt = torch_plugin.optimize("eager")(f)
        for n in (2, 3, 4):  # automatic dynamic: a symbolic batch from the second size on
            opt(torch.randn(n, 3))
    gm, guards = torch_plugin.export(f, torch.randn(4, 3))
    print(gm.code)
    print(guards)
    if sys.argv[1] == "after_optimize":
        opt(torch.randn(5, 3))  # optimize() still works after the export
    """
)


def test_export_depends_only_on_its_arguments(tmp_path):
    script = tmp_path / "export_state.py"
    script.write_text(_SCRIPT)
    outs = [
        subprocess.run(
            [sys.executable, str(script), mode], capture_output=True, text=True, check=True
        ).stdout
        for mode in ("fresh", "after_optimize")
    ]
    assert outs[0] == outs[1]
    assert "'*'" not in outs[0]  # static: no symbolic size

    # ... and in this process, in either order of calls
    def f(x):
        return torch.relu(x) * x.shape[0]

    first, g1 = torch_plugin.export(f, torch.randn(4, 3))
    opt = torch_plugin.optimize("eager")(f)
    for n in (2, 3, 4):
        opt(torch.randn(n, 3))
    second, g2 = torch_plugin.export(f, torch.randn(4, 3))
    assert first.code == second.code and g1 == g2


def test_guard_check_ignores_fx_retracing():
    gm, _ = torch_plugin.export(branchy, *_args())
    traced = torch.fx.symbolic_trace(gm, concrete_args={"arg2": 2})
    x, y, n = _args()
    torch.testing.assert_close(traced(x, y, n), branchy(x, y, n))
