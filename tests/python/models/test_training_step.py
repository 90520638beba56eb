"""Training steps through the compiled model equal eager's.

Each case builds a model with random weights (no downloads) in train mode (BatchNorm
updates its running statistics; dropout probabilities are 0 so the steps are
deterministic), copies it per backend, and runs a few steps of forward, loss, backward and
an SGD update on both the copy compiled with ``torch_plugin.optimize(backend)`` and an
eager copy, on fresh random inputs each step (each step starts from eager's weights). After every step it compares the outputs,
the loss, every parameter's gradient and every buffer (``num_batches_tracked`` included),
so a running-statistics update done once at capture instead of in the graph, a dropped
in-place op or a wrong gradient shows up.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

import torch_plugin

torchvision = pytest.importorskip("torchvision")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("fresh_capture")

# plugin computes with oneDNN kernels and fused reductions: rounding differs from eager's
TOL = {"eager": 1e-5, "aot_eager": 1e-4, "plugin": 2e-3}


def _flat(out) -> list[torch.Tensor]:
    """The tensors of a model's output, in a fixed order (tensors, tuples, ModelOutputs,
    named tuples)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, transformers.utils.ModelOutput):
        return [t for v in out.values() for t in _flat(v)]
    if isinstance(out, (tuple, list)):
        return [t for v in out for t in _flat(v)]
    if isinstance(out, dict):
        return [t for v in out.values() for t in _flat(v)]
    return []


def _loss(out) -> torch.Tensor:
    """The model's own loss when it returns one, plus a weighted sum of every floating
    output (fixed weights, so no gradient is an all-ones accident)."""
    total = 0.0
    for i, t in enumerate(_flat(out)):
        if t.is_floating_point() and t.requires_grad:
            g = torch.Generator().manual_seed(1000 + i)
            total = total + (t.float() * torch.randn(t.shape, generator=g)).mean()
    return total


@dataclasses.dataclass
class Case:
    model: torch.nn.Module
    inputs: callable  # step -> (args, kwargs)


def _assert_close(expected, actual, tol, what):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, what
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol, msg=lambda m: f"{what}: {m}")


def _run_steps(case: Case, backend: str, steps: int = 3):
    eager_model = case.model
    model = copy.deepcopy(eager_model)
    opt = torch_plugin.optimize(backend)(model)
    sgd = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (eager_model, model)]
    tol = TOL[backend]
    for step in range(steps):
        torch.manual_seed(step)
        args, kwargs = case.inputs(step)
        ref = eager_model(*args, **kwargs)
        got = opt(*args, **kwargs)
        ref_out, got_out = _flat(ref), _flat(got)
        assert len(ref_out) == len(got_out)
        for i, (r, g) in enumerate(zip(ref_out, got_out)):
            _assert_close(r, g, tol, f"step {step} output {i}")
        _loss(ref).backward()
        _loss(got).backward()
        for (name, p), (_, q) in zip(eager_model.named_parameters(), model.named_parameters()):
            if p.grad is None:
                assert q.grad is None, f"step {step}: {name} has a gradient only when compiled"
                continue
            assert q.grad is not None, f"step {step}: no gradient for {name}"
            _assert_close(p.grad, q.grad, tol * 10, f"step {step} grad of {name}")
        for (name, b), (_, c) in zip(eager_model.named_buffers(), model.named_buffers()):
            _assert_close(b, c, tol, f"step {step} buffer {name}")
        for s in sgd:
            s.step()
            s.zero_grad()
        # Start the next step from eager's weights and buffers (copied in place, so the
        # compiled code must read the updated tensors): a training run of a model with
        # BatchNorm over a few samples is chaotic, a 1e-6 difference in one step's
        # gradients (plugin's rounding) becomes 10% in the next one's.
        with torch.no_grad():
            for p, q in zip(eager_model.parameters(), model.parameters()):
                q.copy_(p)
            for b, c in zip(eager_model.buffers(), model.buffers()):
                c.copy_(b)
    # Frames that run unmodified (HF's loss construction, logging) are allowed: this test
    # is about the values; but something must have been compiled.
    assert torch_plugin.stats.graphs_compiled > 0
    return model


# --- torchvision --------------------------------------------------------------------------
def _image_inputs(shape):
    return lambda step: ((torch.randn(*shape),), {})


def resnet18():
    torch.manual_seed(0)
    return Case(
        torchvision.models.resnet18(weights=None, num_classes=10).train(),
        _image_inputs((2, 3, 64, 64)),
    )


def mobilenet_v3_large():
    torch.manual_seed(0)
    return Case(
        torchvision.models.mobilenet_v3_large(weights=None, num_classes=10, dropout=0.0).train(),
        _image_inputs((2, 3, 64, 64)),
    )


def swin_t():
    torch.manual_seed(0)
    model = torchvision.models.swin_t(weights=None, num_classes=10).train()
    for m in model.modules():  # swin_t fixes stochastic_depth_prob=0.2: random in training
        if isinstance(m, torchvision.ops.StochasticDepth):
            m.p = 0.0
    return Case(model, _image_inputs((1, 3, 64, 64)))


def googlenet():
    torch.manual_seed(0)
    return Case(
        torchvision.models.googlenet(
            weights=None,
            num_classes=10,
            aux_logits=False,
            init_weights=True,
            transform_input=False,
            dropout=0.0,
        ).train(),
        _image_inputs((2, 3, 64, 64)),
    )


# --- transformers (tiny configs, random weights) ------------------------------------------
def _ids(vocab, batch=2, seq=12):
    return torch.randint(0, vocab, (batch, seq))


def bert():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        vocab_size=200,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = transformers.BertForMaskedLM(cfg).train()

    def inputs(step):
        ids = _ids(200)
        mask = torch.ones_like(ids)
        mask[1, 9:] = 0
        return (ids,), {"attention_mask": mask, "labels": _ids(200)}

    return Case(model, inputs)


def gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=200,
        n_positions=64,
        n_embd=64,
        n_layer=2,
        n_head=4,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    model = transformers.GPT2LMHeadModel(cfg).train()

    def inputs(step):
        ids = _ids(200)
        return (ids,), {"labels": ids, "use_cache": False}

    return Case(model, inputs)


def clip():
    torch.manual_seed(0)
    cfg = transformers.CLIPConfig(
        text_config={
            "vocab_size": 200,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "max_position_embeddings": 32,
            "attention_dropout": 0.0,
        },
        vision_config={
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "image_size": 32,
            "patch_size": 8,
            "attention_dropout": 0.0,
        },
        projection_dim=16,
    )
    model = transformers.CLIPModel(cfg).train()

    def inputs(step):
        return (), {
            "input_ids": _ids(200, 2, 8),
            "pixel_values": torch.randn(2, 3, 32, 32),
            "return_loss": True,
        }

    return Case(model, inputs)


def t5():
    torch.manual_seed(0)
    cfg = transformers.T5Config(
        vocab_size=200,
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        dropout_rate=0.0,
        decoder_start_token_id=0,
        pad_token_id=0,
    )
    model = transformers.T5ForConditionalGeneration(cfg).train()

    def inputs(step):
        return (), {"input_ids": _ids(200, 2, 10), "labels": _ids(200, 2, 7), "use_cache": False}

    return Case(model, inputs)


SLOW = pytest.mark.slow
BACKENDS = ["eager", "aot_eager", "plugin"]


def _params():
    fast = {
        ("resnet18", "eager"),
        ("resnet18", "aot_eager"),
        ("resnet18", "plugin"),
        ("mobilenet_v3_large", "eager"),
        ("googlenet", "eager"),
        ("bert", "eager"),
        ("bert", "aot_eager"),
        ("gpt2", "eager"),
        ("gpt2", "aot_eager"),
    }
    for make in (resnet18, mobilenet_v3_large, swin_t, googlenet, bert, gpt2, clip, t5):
        for backend in BACKENDS:
            marks = [] if (make.__name__, backend) in fast else [SLOW]
            yield pytest.param(make, backend, id=f"{make.__name__}-{backend}", marks=marks)


@pytest.mark.parametrize("make,backend", list(_params()))
def test_training_steps_match_eager(make, backend):
    case = make()
    model = _run_steps(case, backend)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            assert m.num_batches_tracked.item() == 3  # once per step, never at capture
