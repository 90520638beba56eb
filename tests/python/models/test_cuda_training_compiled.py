"""GPU training through the plugin compiler (issue #30): three whole training steps (forward,
loss, backward, optimizer.step(), zero_grad() inside one optimize() region) of a small
ResNet-18, a small BERT and a small GPT-2 on CUDA, fp32 (TF32 off) and bf16 autocast,
against the same steps in eager on a copy of the model: the loss, every gradient (read
before the step), every parameter, the optimizer state (exp_avg, exp_avg_sq, step /
momentum_buffer) and every buffer after each step. Dropout is off (deterministic steps).
The training graphs must be compiled (not the eager-graph fallback) and the optimizer steps
after the first must run compiled. Skipped without a GPU.

ResNet-18 under bf16 autocast is also compared by a noise-aware rule
(:func:`_close_or_as_accurate`). A batch-normed network's bf16 gradients move by tens of
percent for any change of rounding. Measured on the GPU (issue #30's diagnostic, batch 4,
32x32, SGD steps from one state): eager run channels-last instead of contiguous differs from
eager contiguous by up to 67% median per-tensor gradient error at a step, parameters perturbed
by 1e-6 by 59-80%, eager bf16 from fp32 by 59-98%. The compiled graph runs its convolutions
channels-last and equals eager channels-last (the same loss to 7 digits, the same gradient
errors, at every step); the first activation that differs from eager contiguous is the first
convolution's, in 8-11 of 65536 elements by one bf16 ulp. A bound of 5% against eager holds
only where the compiled kernels round exactly as eager's contiguous ones. So each bf16 step
also runs in fp32 from the same state (the oracle), and a value passes when it is within the
tolerance of eager's, or when its RMS error against the oracle is at most twice eager's plus
1% (the rule of torch._dynamo's AMP accuracy check, ``same(..., fp64_ref)``). That case runs at
batch 16, 64x64, where eager's own RMS error against fp32 is a third of the gradient's RMS
(0.33 median on the GPU), so a wrong gradient (zero: 1.0; negated, or another batch's: more)
cannot pass; at batch 4, 32x32 (0.6-1.0) zero gradients passed the rule on the CPU."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch

import torch_plugin
from torch_plugin.compiler import optimizer_step, pipeline, training

torchvision = pytest.importorskip("torchvision")
transformers = pytest.importorskip("transformers")

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.usefixtures("fresh_capture"),
]

# Errors relative to each tensor's largest magnitude. fp32 (TF32 off): the compiler's
# products and fused kernels round differently from eager's; bf16 autocast: bf16 products.
TOL = {
    "fp32": {"loss": 1e-4, "grad": 1e-3, "param": 1e-4},
    "bf16": {"loss": 2e-2, "grad": 5e-2, "param": 1e-2},
}
TOL["fp16"] = TOL["bf16"]  # fp16 autocast, ResNet-18 only (test_resnet18_fp16_autocast)


def _resnet18(batch=4, size=32):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None, num_classes=10)
    return model, lambda: (
        (torch.randn(batch, 3, size, size, device="cuda"),),
        torch.randint(0, 10, (batch,), device="cuda"),
    )


def _bert():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(
        vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        max_position_embeddings=64,
    )  # fmt: skip
    model = transformers.BertForSequenceClassification(cfg)
    return model, lambda: (
        (torch.randint(0, 128, (4, 16), device="cuda"),),
        torch.randint(0, 2, (4,), device="cuda"),
    )


def _gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=128, n_positions=64, n_embd=64, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    model = transformers.GPT2LMHeadModel(cfg)
    model.config.use_cache = False  # no key/value cache objects in the outputs
    return model, lambda: ((torch.randint(0, 128, (4, 16), device="cuda"),), None)


def _loss(out, target):
    logits = out if isinstance(out, torch.Tensor) else out.logits
    logits = logits.float()
    if target is None:  # language modelling: next token of the input itself
        return logits.mean() + logits.square().mean()
    return torch.nn.functional.cross_entropy(logits, target)


def _train_step(model, opt, precision):
    def step(args, target):
        dtype = torch.float16 if precision == "fp16" else torch.bfloat16
        with torch.autocast("cuda", dtype, enabled=precision != "fp32"):
            out = model(*args)
        loss = _loss(out, target)
        loss.backward()
        opt.step()
        opt.zero_grad()
        return loss

    return step


def _record_grads(model) -> dict:
    """Each parameter's gradient as accumulated by backward (before the step and zero_grad),
    recorded by a hook registered outside the optimized code (reading ``p.grad`` inside it
    would leave the rest of the frame uncaptured)."""
    grads: dict = {}
    for name, p in model.named_parameters():
        # disabled: the hook runs inside backward(), inside the optimized code's call
        hook = torch_plugin.disable(lambda q, name=name: grads.__setitem__(name, q.grad.clone()))
        p.register_post_accumulate_grad_hook(hook)
    return grads


def _close(got, want, tol, what, floor=1e-6, oracle=None):
    """``got`` within ``tol`` of ``want`` relative to ``want``'s largest magnitude, or to
    ``floor`` when larger (a gradient that is zero up to rounding, such as attention's key
    bias's, is compared at the scale of the model's gradients). With ``oracle`` (the same
    value computed in fp32), :func:`_close_or_as_accurate`."""
    assert got.dtype == want.dtype and got.shape == want.shape, what
    if oracle is not None:
        return _close_or_as_accurate(got, want, oracle, tol, what, floor)
    want, got = want.double(), got.double()
    scale = max(want.abs().max().item(), floor)
    err = (got - want).abs().max().item()
    assert err <= tol * scale, f"{what}: max error {err:.3g} vs scale {scale:.3g}"


def _close_or_as_accurate(got, want, oracle, tol, what, floor):
    """``got`` (compiled, bf16 autocast) within ``tol`` of ``want`` (eager) as :func:`_close`
    checks, or at most twice as far from ``oracle`` (the fp32 step from the same state) as
    ``want`` is, in RMS, plus 1% of the oracle's RMS (or of ``floor``): torch._dynamo's AMP
    accuracy rule. The module docstring says why a batch-normed network needs it."""
    g, w, o = got.double(), want.double(), oracle.double()
    scale = max(w.abs().max().item(), floor)
    err = (g - w).abs().max().item()
    if err <= tol * scale:
        return
    rms = lambda t: t.square().mean().sqrt().item()
    e_got, e_want = rms(g - o), rms(w - o)
    bound = 2 * e_want + 1e-2 * max(rms(o), floor)
    assert e_got <= bound, (
        f"{what}: max error {err:.3g} vs scale {scale:.3g} against eager, and RMS error "
        f"{e_got:.3g} against fp32 where eager's is {e_want:.3g} (bound {bound:.3g})"
    )


@pytest.fixture(autouse=True)
def _no_tf32(no_tf32):
    """TF32 off for every test here (conftest.no_tf32)."""


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("make,opt_name", [(_resnet18, "sgd"), (_bert, "adamw"), (_gpt2, "adam")])
def test_training_steps_compiled_match_eager(make, opt_name, precision):
    # bf16/fp16 ResNet-18: compared with the noise-aware rule, at batch 16, 64x64 (the module
    # docstring); fp32 stays at batch 4, 32x32, where a 1e-6 change of the weights moves no
    # fp32 gradient by more than 1e-3 (on the CPU; at batch 16, 64x64 a convolution weight's
    # gradient in layer2 or layer4 moves by 8%)
    noisy = make is _resnet18 and precision != "fp32"
    model, inputs = make(batch=16, size=64) if noisy else make()
    ref = model.cuda().train()
    got = copy.deepcopy(ref)
    opts = {
        "sgd": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4),
        # eps 1e-4: a gradient that is zero up to rounding (attention's key bias) would
        # otherwise be normalised to +-lr by its rounding noise, in eager and compiled alike
        "adam": lambda p: torch.optim.Adam(p, lr=1e-3, eps=1e-4),
        "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3, weight_decay=0.01, eps=1e-4),
    }[opt_name]
    # bf16/fp16 ResNet-18: each step also in fp32 from eager's state
    orc = copy.deepcopy(ref) if noisy else None
    o_ref, o_got = opts(ref.parameters()), opts(got.parameters())
    o_orc = opts(orc.parameters()) if noisy else None
    optimizers = [o for o in (o_ref, o_got, o_orc) if o is not None]
    sched = [torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.5) for o in optimizers]
    g_ref, g_got = _record_grads(ref), _record_grads(got)
    g_orc = _record_grads(orc) if noisy else None
    eager_step = _train_step(ref, o_ref, precision)
    oracle_step = _train_step(orc, o_orc, "fp32") if noisy else None
    compiled_step = torch_plugin.optimize(_train_step(got, o_got, precision), backend="plugin")
    tol = TOL[precision]
    eager_before = pipeline.counters["eager_graphs"]
    unlowered_before = dict(training.counters)
    steps_before = optimizer_step.counters["compiled_steps"]
    for step in range(3):
        torch.manual_seed(100 + step)
        args, target = inputs()
        g_ref.clear()
        g_got.clear()
        if noisy:
            g_orc.clear()
            oracle_step(args, target)
        loss_ref = eager_step(args, target)
        loss_got = compiled_step(args, target)
        _close(loss_got.detach(), loss_ref.detach(), tol["loss"], f"step {step} loss")
        assert g_ref.keys() == g_got.keys(), f"step {step}: parameters with gradients"
        grad_scale = max(a.abs().max().item() for a in g_ref.values())
        for name, a in g_ref.items():
            what = f"step {step} grad of {name}"
            oracle = g_orc[name] if noisy else None
            _close(g_got[name], a, tol["grad"], what, 1e-2 * grad_scale, oracle)
        for p in got.parameters():
            assert p.grad is None, "zero_grad ran"
        params_orc = orc.parameters() if noisy else itertools.repeat(None)
        for (name, p), q, r in zip(ref.named_parameters(), got.parameters(), params_orc):
            # parameters are O(1) (LayerNorm weights are 1): compared at that scale at least
            _close(q, p, tol["param"], f"step {step} {name}", 1.0, r)
            for k, v in o_ref.state[p].items():
                what = f"step {step} {name} state {k}"
                oracle = o_orc.state[r][k] if noisy else None
                _close(o_got.state[q][k], v, tol["grad"], what, 1e-2 * grad_scale, oracle)
        buffers_orc = orc.buffers() if noisy else itertools.repeat(None)
        for (name, b), c, r in zip(ref.named_buffers(), got.buffers(), buffers_orc):
            _close(c, b, tol["param"], f"step {step} buffer {name}", oracle=r)
        # Each step starts from eager's weights, buffers and optimizer state (copied in
        # place): a few steps of these models amplify rounding differences.
        with torch.no_grad():
            for model, opt in ((got, o_got), (orc, o_orc)) if noisy else ((got, o_got),):
                for p, q in zip(ref.parameters(), model.parameters()):
                    q.copy_(p)
                    for k, v in o_ref.state[p].items():
                        opt.state[q][k].copy_(v)
                for b, c in zip(ref.buffers(), model.buffers()):
                    c.copy_(b)
        for s in sched:
            s.step()
    assert torch_plugin.stats.graphs_compiled > 0
    # Every training graph compiled (batch norm under bf16 autocast included): attention (no
    # dropout here) is the leaf op with its derivative (attention_training), in fp32 and bf16
    # alike; the log (torch_plugin.backends.plugin) names what did not lower if this fails.
    assert pipeline.counters["eager_graphs"] == eager_before, "a training graph ran as eager"
    # ... and none ran as its ATen graph: a bf16/fp16 backward graph on CUDA included (before,
    # every autocast backward graph did: training._reduced_precision refused them)
    assert dict(training.counters) == unlowered_before, "a training graph ran op by op"
    # the first step creates the optimizer state in eager; the other two compile
    assert optimizer_step.counters["compiled_steps"] - steps_before == 2


def test_resnet18_fp16_autocast():
    """fp16 autocast (no gradient scaler: eager's and the compiled gradients underflow
    alike) with batch norm: compiled, and compared as bf16 is."""
    test_training_steps_compiled_match_eager(_resnet18, "sgd", "fp16")
