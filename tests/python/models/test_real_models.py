"""Real models with random weights (no downloads): each is captured as exactly one graph,
matches eager, and a second call with new inputs of the same shape does not recompile."""

import pytest
import torch

import torch_plugin

torchvision = pytest.importorskip("torchvision")
transformers = pytest.importorskip("transformers")

TOL = {"eager": 1e-5, "inductor": 1e-3}


pytestmark = pytest.mark.usefixtures("fresh_capture")


def _resnet18():
    torch.manual_seed(0)
    return (
        torchvision.models.resnet18(weights=None).eval(),
        lambda: (torch.randn(2, 3, 64, 64),),
        {},
    )


def _bert():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        vocab_size=500,
    )
    model = transformers.BertModel(cfg).eval()

    def inputs():
        ids = torch.randint(0, 500, (2, 12))
        mask = torch.ones(2, 12, dtype=torch.long)
        mask[1, 8:] = 0
        return (ids,), {"attention_mask": mask}

    return model, inputs, {}


def _outputs(out):
    if isinstance(out, torch.Tensor):
        return [out]
    return [out.last_hidden_state, out.pooler_output]


@pytest.mark.parametrize("backend", ["eager", pytest.param("inductor", marks=pytest.mark.slow)])
@pytest.mark.parametrize("make", [_resnet18, _bert], ids=["resnet18", "bert"])
def test_model_one_graph_matches_eager(make, backend):
    model, make_inputs, _ = make()
    om = torch_plugin.optimize(backend)(model)
    with torch.no_grad():
        for _ in range(2):
            inputs = make_inputs()
            args, kwargs = (
                inputs if isinstance(inputs[-1], dict) and len(inputs) == 2 else (inputs, {})
            )
            got, want = om(*args, **kwargs), model(*args, **kwargs)
            assert type(got) is type(want)
            for g, w in zip(_outputs(got), _outputs(want)):
                scale = max(w.abs().max().item(), 1.0)
                assert (g - w).abs().max().item() <= TOL[backend] * scale
    assert torch_plugin.stats.graphs_compiled == 1, torch_plugin.stats.failures
    assert torch_plugin.stats.recompiles == 0
    assert torch_plugin.stats.frames_failed == 0, torch_plugin.stats.failures


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_resnet18_cuda(backend):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval().cuda()
    om = torch_plugin.optimize(backend)(model)
    with torch.no_grad():
        for _ in range(2):
            x = torch.randn(4, 3, 224, 224, device="cuda")
            got, want = om(x), model(x)
            scale = max(want.abs().max().item(), 1.0)
            assert (got - want).abs().max().item() <= TOL[backend] * scale
    assert torch_plugin.stats.graphs_compiled == 1
    assert torch_plugin.stats.recompiles == 0
