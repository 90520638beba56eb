"""torch_plugin.export: one standalone FX graph for a whole call, checked against eager."""

import collections
import io

import pytest
import torch

import torch_plugin

torchvision = pytest.importorskip("torchvision")

Pair = collections.namedtuple("Pair", "first second")


pytestmark = pytest.mark.usefixtures("fresh_capture", "tensor_branches_break")


def bar(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


def test_export_raises_on_graph_break_with_reason_and_line():
    with pytest.raises(
        torch_plugin.CaptureError, match=r"data-dependent(.|\n)*test_export.py(.|\n)*b.sum\(\) < 0"
    ):
        torch_plugin.export(bar, torch.randn(3), torch.randn(3))


def test_export_keeps_input_and_output_structure():
    def f(inp, scale=2):
        return {"s": inp["x"] * scale, "pair": Pair(inp["y"][0] + 1, [inp["y"][1].relu(), 3])}

    inp = {"x": torch.randn(2), "y": (torch.randn(2), torch.randn(2))}
    gm, guards = torch_plugin.export(f, inp, scale=3)
    assert any("L['inp']['x']" in g for g in guards)
    new = {"x": torch.randn(2), "y": (torch.randn(2), torch.randn(2))}
    got, want = gm(new, scale=3), f(new, scale=3)
    assert isinstance(got["pair"], Pair) and got["pair"].second[1] == 3
    torch.testing.assert_close(got["s"], want["s"])
    torch.testing.assert_close(got["pair"].first, want["pair"].first)
    torch.testing.assert_close(got["pair"].second[0], want["pair"].second[0])


def test_export_resnet18_matches_eager_and_round_trips(tmp_path):
    model = torchvision.models.resnet18(weights=None).eval()
    gm, _ = torch_plugin.export(model, torch.randn(1, 3, 64, 64))
    assert isinstance(gm, torch.fx.GraphModule)
    assert {n for n, _ in model.named_parameters()} and sum(1 for _ in gm.parameters()) == sum(
        1 for _ in model.parameters()
    )
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(gm(x), model(x))
        path = tmp_path / "resnet18_export.pt"
        torch.save(gm, path)
        loaded = torch.load(path, weights_only=False)
        torch.testing.assert_close(loaded(x), model(x))


def test_exported_graph_runs_without_hook():
    from torch_plugin import _C

    def f(x):
        return torch.sin(x) * 2

    gm, _ = torch_plugin.export(f, torch.randn(4))
    assert _C.get_eval_frame_callback() is None
    x = torch.randn(4)
    torch.testing.assert_close(gm(x), f(x))
    buf = io.BytesIO()
    torch.save(gm, buf)
    buf.seek(0)
    torch.testing.assert_close(torch.load(buf, weights_only=False)(x), f(x))


def test_export_rejects_side_effects():
    def f(x, out):
        out.append(x * 2)
        return x + 1

    with pytest.raises(torch_plugin.ExportError, match="mutates state"):
        torch_plugin.export(f, torch.randn(2), [])


class _Flag:
    def __init__(self):
        self.active = False
        self.value = None


FLAG = _Flag()


def _set_and_reset(x):
    FLAG.active = True  # set and reset inside the call (HF's CompileableContextVar)
    FLAG.value = 3
    y = x * 2
    FLAG.active = False
    FLAG.value = None
    return y


def _leaves_flag_set(x):
    FLAG.active = True
    return x * 2


def test_export_accepts_state_restored_within_the_call():
    gm, _ = torch_plugin.export(_set_and_reset, torch.randn(3))
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(gm(x), _set_and_reset(x))
    assert FLAG.active is False and FLAG.value is None


def test_export_names_the_state_a_caller_would_see():
    try:
        with pytest.raises(torch_plugin.ExportError, match=r"setattr .*\.active"):
            torch_plugin.export(_leaves_flag_set, torch.randn(3))
    finally:
        FLAG.active = False


class _Box:
    def __init__(self, t):
        self.t = t


def test_export_builds_a_returned_object_anew_on_each_call():
    gm, _ = torch_plugin.export(lambda x: (_Box(x + 1), x * 2), torch.randn(2))
    boxes = []
    for _ in range(3):
        x = torch.randn(2)
        box, y = gm(x)
        assert type(box) is _Box
        torch.testing.assert_close(box.t, x + 1)
        torch.testing.assert_close(y, x * 2)
        boxes.append(box)
    assert len({id(b) for b in boxes}) == 3  # one object per call, as in eager


def test_export_hf_bert_matches_eager():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        vocab_size=100,
    )  # fmt: skip
    model = transformers.BertModel(config).eval()
    gm, _ = torch_plugin.export(model, input_ids=torch.randint(0, 100, (2, 8)))
    with torch.no_grad():
        for _ in range(2):
            ids = torch.randint(0, 100, (2, 8))
            got, want = gm(input_ids=ids), model(input_ids=ids)
            torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state)
            torch.testing.assert_close(got.pooler_output, want.pooler_output)
