"""torch.save / torch.load of exported graphs with torch.load's defaults (weights_only=True).

Each export is saved to a file, loaded with ``torch.load(path)`` and compared with the
exported module and with eager on fresh inputs; parameters keep their values, Parameter-ness,
requires_grad and sharing. Refused content fails at save time, naming the node or module.
"""

import collections
import os
import subprocess
import sys
import tempfile
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_plugin
from torch_plugin.exported import serialization
from torch_plugin.exported.serialization import ExportLoadError, ExportSaveError

pytestmark = pytest.mark.usefixtures("fresh_capture")

Result = collections.namedtuple("Result", "total scaled")


def _assert_same(got, want):
    if isinstance(want, torch.Tensor):
        torch.testing.assert_close(got, want)
    elif hasattr(want, "to_tuple"):  # a ModelOutput
        assert type(got) is type(want) and list(got.keys()) == list(want.keys())
        for k in want:
            _assert_same(got[k], want[k])
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for a, b in zip(got, want):
            _assert_same(a, b)
    elif isinstance(want, dict):
        assert type(got) is type(want) and list(got) == list(want)
        for k in want:
            _assert_same(got[k], want[k])
    elif hasattr(want, "layers"):  # an HF DynamicCache
        assert type(got) is type(want) and len(got.layers) == len(want.layers)
        for a, b in zip(got.layers, want.layers):
            _assert_same((a.keys, a.values), (b.keys, b.values))
    else:
        assert got == want


def _round_trip(gm, tmp_path, name="exported.pt"):
    path = tmp_path / name
    torch.save(gm, path)
    loaded = torch.load(path)  # torch.load's defaults: weights_only=True
    assert isinstance(loaded, torch_plugin.exported.graph_module.ExportedGraph)
    return loaded, path


def _check(fn, make_inputs, tmp_path, calls=3):
    """Export ``fn`` on inputs from ``make_inputs()``, save, load; compare on fresh inputs."""
    args, kwargs = make_inputs()
    gm, _ = torch_plugin.export(fn, *args, **kwargs)
    loaded, path = _round_trip(gm, tmp_path)
    with torch.no_grad():
        for _ in range(calls):
            args, kwargs = make_inputs()
            want = fn(*args, **kwargs)
            _assert_same(gm(*args, **kwargs), want)
            _assert_same(loaded(*args, **kwargs), want)
    _check_state(gm, loaded)
    return gm, loaded, path


def _check_state(gm, loaded):
    params, loaded_params = dict(gm.named_parameters()), dict(loaded.named_parameters())
    assert list(params) == list(loaded_params)
    for name, p in params.items():
        q = loaded_params[name]
        assert type(q) is torch.nn.Parameter and q.requires_grad == p.requires_grad
        torch.testing.assert_close(q, p, rtol=0, atol=0)
    buffers, loaded_buffers = dict(gm.named_buffers()), dict(loaded.named_buffers())
    assert list(buffers) == list(loaded_buffers)
    for name, b in buffers.items():
        assert type(loaded_buffers[name]) is torch.Tensor
        assert loaded_buffers[name].dtype == b.dtype
        torch.testing.assert_close(loaded_buffers[name], b, rtol=0, atol=0)
    assert [n for n, _ in gm.named_modules()] == [n for n, _ in loaded.named_modules()]
    for (_, a), (_, b) in zip(gm.named_modules(), loaded.named_modules()):
        assert a.training == b.training
    assert loaded.code == gm.code


# --- exports that round-trip -------------------------------------------------------------
def _plain(pair, opts, scale=2.0, *, shift):
    a, b = pair
    return {"sum": (a + b) * scale, "prod": a * b * opts["w"] + shift}, (a - b).sin()


def test_function_with_tuple_dict_and_keyword_inputs(tmp_path):
    def inputs():
        return ((torch.randn(3), torch.randn(3)), {"w": torch.randn(3)}), {
            "scale": 3.0,
            "shift": torch.randn(3),
        }

    _check(_plain, inputs, tmp_path)


def _optional(x, bias=None, mode="add"):
    out = x * 2 if bias is None else x + bias
    return out if mode == "add" else -out


def test_none_and_string_arguments(tmp_path):
    _check(_optional, lambda: ((torch.randn(3),), {"bias": None, "mode": "neg"}), tmp_path)


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.lin = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)
        self.drop = nn.Dropout(0.1)
        self.conv = nn.Conv1d(8, 8, 3, padding=1)
        self.act = nn.GELU(approximate="tanh")
        self.register_buffer("steps", torch.tensor(3))  # an integer buffer
        self.register_buffer("scale", torch.full((8,), 0.5), persistent=False)
        self.frozen = nn.Parameter(torch.randn(8), requires_grad=False)

    def forward(self, ids, x):
        h = self.emb(ids) + self.lin(x)
        h = self.conv(h.transpose(1, 2)).transpose(1, 2)
        h = self.act(self.drop(self.norm(h))) * self.steps * self.scale + self.frozen
        # tied output layer: the embedding's weight, used by a function too
        return F.linear(h, self.emb.weight), h.to(torch.float64).sum(dim=-1, keepdim=True)


def test_module_with_parameters_buffers_and_shared_weight(tmp_path):
    torch.manual_seed(0)
    model = _Net().eval()

    def inputs():
        return (torch.randint(0, 10, (2, 5)), torch.randn(2, 5, 8)), {}

    gm, loaded, _ = _check(model, inputs, tmp_path)
    assert [b.dtype for b in loaded.buffers() if b.dim() == 0] == [torch.int64]
    # a tensor referenced twice (the embedding's weight: by a call_module and a get_attr
    # node) loads as one tensor
    shared = [p for p in gm.parameters() if p is model.emb.weight]
    assert shared
    emb = next(m for m in loaded.modules() if isinstance(m, nn.Embedding))
    emb_weight = emb.weight
    ids = {id(p) for _, p in loaded.named_parameters(remove_duplicate=False)}
    assert id(emb_weight) in ids
    assert sum(1 for p in loaded.parameters() if p is emb_weight) == 1
    assert len(list(loaded.parameters())) == len(list(gm.parameters()))
    # non-persistent buffers stay non-persistent
    assert set(loaded.state_dict()) == set(gm.state_dict())
    # a call_module'd torch.nn module keeps its attributes
    assert (emb_weight.shape, model.emb.num_embeddings) == ((10, 8), 10)
    assert {k: v for k, v in vars(emb).items() if not k.startswith("_")} == {
        k: v for k, v in vars(model.emb).items() if not k.startswith("_")
    }


def test_batchnorm_model_in_eval(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1)
    )
    with torch.no_grad():  # running statistics that differ from the defaults
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
    model.eval()
    _check(model, lambda: ((torch.randn(2, 3, 8, 8),), {}), tmp_path)


def _returns_namedtuple(x, y):
    return Result(x.sum() + y.sum(), x * 2)


def test_namedtuple_return(tmp_path):
    _, loaded, _ = _check(
        _returns_namedtuple, lambda: ((torch.randn(4), torch.randn(4)), {}), tmp_path
    )
    assert type(loaded(torch.randn(4), torch.randn(4))) is Result


def _setitem(x, v):
    y = x.clone()
    y[1] = v
    y[:, 0] = 0.5
    return y * 2


def test_tensor_item_assignment(tmp_path):
    _, loaded, _ = _check(_setitem, lambda: ((torch.randn(3, 4), torch.randn(4)), {}), tmp_path)
    assert "tensor_setitem" in loaded.code


def test_dtype_device_slice_and_ellipsis_constants(tmp_path):
    def f(x):
        y = x[..., 1:3].to(torch.float16).to(device="cpu", dtype=torch.float64)
        z = torch.zeros(2, dtype=torch.int32, layout=torch.strided)
        return y.contiguous(memory_format=torch.contiguous_format), z, x.new_ones((2,)).long()

    _check(f, lambda: ((torch.randn(2, 4),), {}), tmp_path)


def test_weights_only_false_and_guards_after_load(tmp_path):
    gm, _ = torch_plugin.export(
        _plain, (torch.randn(3), torch.randn(3)), {"w": torch.randn(3)}, shift=torch.randn(3)
    )
    path = tmp_path / "g.pt"
    torch.save(gm, path)
    loaded = torch.load(path, weights_only=False)
    args = ((torch.randn(3), torch.randn(3)), {"w": torch.randn(3)})
    shift = torch.randn(3)
    _assert_same(loaded(*args, shift=shift), _plain(*args, shift=shift))
    if hasattr(gm, "_export_guards"):  # the guards come back and still check
        assert type(torch.load(path)._export_guards) is type(gm._export_guards)
        with pytest.raises(Exception, match="L\\['pair'\\]"):
            torch.load(path)((torch.randn(4), torch.randn(4)), {"w": torch.randn(4)}, shift=shift)


def test_hf_bert_model_output(tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        vocab_size=100,
    )  # fmt: skip
    model = transformers.BertModel(config).eval()
    _, loaded, _ = _check(
        model, lambda: ((), {"input_ids": torch.randint(0, 100, (2, 8))}), tmp_path
    )
    out = loaded(input_ids=torch.randint(0, 100, (2, 8)))
    assert type(out) is transformers.modeling_outputs.BaseModelOutputWithPoolingAndCrossAttentions


def test_hf_llama_with_cache(tmp_path):
    """A decoder with use_cache=True returns a DynamicCache (an object built by the graph)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        vocab_size=100, num_key_value_heads=2,
    )  # fmt: skip
    model = transformers.LlamaModel(config).eval()
    _, loaded, _ = _check(model, lambda: ((torch.randint(3, 100, (2, 8)),), {}), tmp_path, calls=2)
    assert type(loaded(torch.randint(3, 100, (2, 8))).past_key_values).__name__ == "DynamicCache"


class _Box:
    def __init__(self, t):
        self.t = t


def _returns_object(x):
    return _Box(x + 1), {"y": x * 2}


def test_returned_object_built_by_the_code(tmp_path):
    gm, _ = torch_plugin.export(_returns_object, torch.randn(2))
    loaded, _ = _round_trip(gm, tmp_path)
    boxes = []
    for _ in range(2):
        x = torch.randn(2)
        box, d = loaded(x)
        assert type(box) is _Box and list(d) == ["y"]
        torch.testing.assert_close(box.t, x + 1)
        torch.testing.assert_close(d["y"], x * 2)
        boxes.append(box)
    assert boxes[0] is not boxes[1]  # built anew by each call


def test_namedtuple_input(tmp_path):
    def f(r, k=1):
        return r.total * r.scaled + k

    def inputs():
        return (Result(torch.randn(3), torch.randn(3)),), {"k": 2}

    _check(f, inputs, tmp_path)


def test_pytree_specs_in_payloads_round_trip():
    import torch.utils._pytree as pytree

    value = ((Result(1, [2, 3]), {"a": collections.OrderedDict(b=4)}), {"k": (5,)})
    spec = pytree.tree_structure(value)
    encoded = serialization.encode_value({"spec": spec, "t": torch.float16}, "test")
    decoded = serialization.decode_value(encoded)
    assert decoded["spec"] == spec and decoded["t"] is torch.float16


# --- loading in another process ------------------------------------------------------------
def _run(code: str) -> subprocess.CompletedProcess:
    # The child imports the torch_plugin under test (installed, or the source tree with its
    # built extension), from a neutral directory.
    here = os.path.dirname(os.path.dirname(os.path.abspath(torch_plugin.__file__)))
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, check=False,
        timeout=300, cwd=tempfile.gettempdir(),
    )  # fmt: skip


def test_load_in_a_fresh_process(tmp_path):
    torch.manual_seed(0)
    model = _Net().eval()
    ids, x = torch.randint(0, 10, (2, 5)), torch.randn(2, 5, 8)
    gm, _ = torch_plugin.export(model, ids, x)
    torch.save(gm, tmp_path / "net.pt")
    with torch.no_grad():
        torch.save({"ids": ids, "x": x, "want": model(ids, x)}, tmp_path / "io.pt")
    proc = _run(
        f"""
        import torch, torch_plugin
        gm = torch.load({str(tmp_path / "net.pt")!r})
        io = torch.load({str(tmp_path / "io.pt")!r})
        with torch.no_grad():
            got = gm(io["ids"], io["x"])
        for a, b in zip(got, io["want"]):
            torch.testing.assert_close(a, b)
        print("OK", type(gm).__name__)
        """
    )
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stderr


def test_load_without_importing_torch_plugin_names_the_global(tmp_path):
    gm, _ = torch_plugin.export(_setitem, torch.randn(3, 4), torch.randn(4))
    torch.save(gm, tmp_path / "g.pt")
    proc = _run(f"import torch; torch.load({str(tmp_path / 'g.pt')!r})")
    assert proc.returncode != 0
    assert "UnpicklingError" in proc.stderr
    assert "torch_plugin.exported.serialization.load_exported" in proc.stderr


# --- refused at save time ------------------------------------------------------------------
def _user_function(x):
    return x + 1


class _UserModule(nn.Module):
    def forward(self, x):
        return x * 3


def _simple(x):
    return torch.relu(x) + 1


def test_unsupported_function_target_fails_at_save(tmp_path):
    gm, _ = torch_plugin.export(_simple, torch.randn(3))
    node = next(n for n in gm.graph.nodes if n.op == "call_function" and n.target is torch.relu)
    node.target = _user_function
    gm.recompile()
    with pytest.raises(ExportSaveError, match=rf"node {node.name} .*_user_function.* allowlist"):
        torch.save(gm, tmp_path / "bad.pt")
    assert not (tmp_path / "bad.pt").exists() or (tmp_path / "bad.pt").stat().st_size >= 0


def test_dangerous_torch_functions_are_refused(tmp_path):
    for fn in (torch.load, torch.save, os.system, eval):
        gm, _ = torch_plugin.export(_simple, torch.randn(3))
        node = next(n for n in gm.graph.nodes if n.op == "call_function")
        node.target = fn
        with pytest.raises(ExportSaveError, match="not in the allowlist"):
            torch.save(gm, tmp_path / "bad.pt")


def test_user_defined_module_fails_at_save(tmp_path):
    gm, _ = torch_plugin.export(_simple, torch.randn(3))
    gm.add_module("mine", _UserModule())
    with pytest.raises(
        ExportSaveError, match=r"module mine is of class .*_UserModule.*not a torch.nn"
    ):
        torch.save(gm, tmp_path / "bad.pt")


def test_module_hooks_fail_at_save(tmp_path):
    model = nn.Sequential(nn.Embedding(4, 2))
    gm, _ = torch_plugin.export(model, torch.tensor([1, 2]))
    name, emb = next((n, m) for n, m in gm.named_modules() if isinstance(m, nn.Embedding))
    emb.register_forward_hook(lambda *a: None)
    with pytest.raises(ExportSaveError, match=rf"module {name} .*has hooks .*_forward_hooks"):
        torch.save(gm, tmp_path / "bad.pt")


def test_dunder_method_fails_at_save(tmp_path):
    gm, _ = torch_plugin.export(_simple, torch.randn(3))
    x = next(n for n in gm.graph.nodes if n.op == "placeholder")
    with gm.graph.inserting_after(x):
        gm.graph.call_method("__reduce_ex__", (x, 2))
    with pytest.raises(ExportSaveError, match="__reduce_ex__"):
        torch.save(gm, tmp_path / "bad.pt")


# --- refused at load time (a tampered file) ------------------------------------------------
def _payload():
    gm, _ = torch_plugin.export(_simple, torch.randn(3))
    return serialization.reduce_exported(gm)[1][0]


@pytest.mark.parametrize(
    "ref",
    [
        ("function", "torch.load"),
        ("function", "torch.serialization.os.system"),
        ("function", "builtins.eval"),
        ("function", "torch.Tensor.__reduce_ex__"),
        ("function", "torch.ops.load_library"),
        ("class", "subprocess", "Popen"),
        ("class", "os", "system"),
    ],
)
def test_tampered_payload_fails_at_load(ref):
    payload = _payload()
    node = next(n for n in payload["graph"]["nodes"] if n[0] == "call_function")
    node[2] = ref
    with pytest.raises(ExportLoadError):
        serialization.load_exported(payload)


def test_tampered_names_fail_at_load():
    payload = _payload()
    node = next(n for n in payload["graph"]["nodes"] if n[0] == "call_function")
    node[1] = "x = __import__('os')"
    with pytest.raises(ExportLoadError, match="not a valid identifier"):
        serialization.load_exported(payload)
    payload = _payload()
    payload["graph"]["codegen"]["orig_args"] = ["a=print('hi')"]
    with pytest.raises(ExportLoadError, match="not a valid identifier"):
        serialization.load_exported(payload)


def test_payload_holds_only_weights_only_types():
    def walk(v):
        if isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            assert type(v) is dict
            for k, x in v.items():
                walk(k)
                walk(x)
        else:
            assert type(v) in (type(None), bool, int, float, str, torch.Tensor, nn.Parameter), v

    walk(_payload())
