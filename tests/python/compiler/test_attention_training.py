"""The leaf attention op's derivative (torch_plugin.compiler.attention_training): traced by
AOTAutograd under LeafAttention, the forward graph holds the leaf op and the backward graph
its backward op; both run through the plugin compiler (here on the CPU, where the leaf op
calls ATen's CPU kernel) and give eager's output and gradients, over several calls, with a
causal mask, an additive mask, GQA and autocast's casts outside the op."""

from __future__ import annotations

import pytest
import torch
from torch._functorch.aot_autograd import aot_function

from torch_plugin.compiler import training
from torch_plugin.compiler.attention import LeafAttention
from torch_plugin.compiler.attention_training import attention_backward
from torch_plugin.compiler.decompositions import decomposition_table

F = torch.nn.functional


def _compiled(fn, graphs):
    def compiler(gm, inputs):
        graphs.append(gm)
        compiled = training.backward_compiler(gm, inputs)  # the training stages' compile
        assert getattr(compiled, "unlowered", None) is None  # lowered, not run as ATen graph
        return compiled

    return aot_function(
        fn, fw_compiler=compiler, bw_compiler=compiler, decompositions=decomposition_table()
    )


CASES = {
    "plain": ({}, (2, 4, 8, 16), 4),
    "causal": ({"is_causal": True}, (2, 4, 8, 16), 4),
    "mask": ({"mask": True}, (2, 4, 8, 16), 4),
    "gqa": ({"enable_gqa": True}, (2, 4, 8, 16), 2),
    "scale": ({"scale": 0.3}, (1, 2, 5, 8), 2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_leaf_attention_gradients_equal_eager(case):
    kw, (b, h, seq, d), kv_heads = CASES[case]
    kw = dict(kw)
    use_mask = kw.pop("mask", False)
    torch.manual_seed(0)
    w = torch.randn(d, d, requires_grad=True)

    def attention(w, x, k, v, *mask):  # mask: none, or one (None is no graph input)
        q = x @ w  # a weight's gradient flows through the leaf op
        m = mask[0] if mask else None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, **kw).square().sum()

    graphs: list = []
    compiled = None
    for call in range(3):
        x = torch.randn(b, h, seq, d)
        k = torch.randn(b, kv_heads, seq, d, requires_grad=True)
        v = torch.randn(b, kv_heads, seq, d, requires_grad=True)
        mask = (torch.randn(seq, seq),) if use_mask else ()
        loss = attention(w, x, k, v, *mask)
        want = torch.autograd.grad(loss, (w, k, v))
        if compiled is None:
            with LeafAttention("cpu"):
                compiled = _compiled(attention, graphs)
                got_loss = compiled(w, x, k, v, *mask)
        else:
            got_loss = compiled(w, x, k, v, *mask)
        got = torch.autograd.grad(got_loss, (w, k, v))
        torch.testing.assert_close(got_loss, loss, rtol=1e-5, atol=1e-5)
        for name, a, g in zip(("w", "k", "v"), want, got):
            torch.testing.assert_close(g, a, rtol=1e-4, atol=1e-4, msg=f"call {call} {name}")
    ops = [str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"]
    assert "torch_plugin.scaled_dot_product_attention.default" in ops
    assert "torch_plugin.scaled_dot_product_attention_backward.default" in ops
    assert not any("_softmax" in o for o in ops)  # not the math path


@pytest.mark.parametrize("masked", [False, True])
def test_multi_head_attention_forward_reaches_the_leaf(masked):
    """``F.multi_head_attention_forward`` (nn.MultiheadAttention's, need_weights=False) under
    LeafAttention: its attention call becomes the leaf op, in the forward graph and its
    derivative in the backward graph (before, the mode never saw it: the mode is off while it
    handles the outer call, and the attention was traced as ATen's op), with eager's output
    and gradients over three calls; ``torch.nn.functional`` is left as it was."""
    torch.manual_seed(0)
    e, heads, seq, batch = 16, 4, 5, 3
    w_in = torch.randn(3 * e, e, requires_grad=True)
    b_in = torch.randn(3 * e, requires_grad=True)
    w_out = torch.randn(e, e, requires_grad=True)
    b_out = torch.randn(e, requires_grad=True)
    params = (w_in, b_in, w_out, b_out)

    def attention(x, w_in, b_in, w_out, b_out, *mask):
        out, weights = F.multi_head_attention_forward(
            x, x, x, e, heads, w_in, b_in, None, None, False, 0.0, w_out, b_out,
            training=True, need_weights=False, attn_mask=mask[0] if mask else None,
        )  # fmt: skip
        assert weights is None
        return out.square().sum()

    graphs: list = []
    compiled = None
    for call in range(3):
        x = torch.randn(seq, batch, e)
        mask = (torch.randn(seq, seq),) if masked else ()
        loss = attention(x, *params, *mask)
        want = torch.autograd.grad(loss, params)
        if compiled is None:
            with LeafAttention("cpu"):
                compiled = _compiled(attention, graphs)
                got_loss = compiled(x, *params, *mask)
        else:
            got_loss = compiled(x, *params, *mask)
        got = torch.autograd.grad(got_loss, params)
        torch.testing.assert_close(got_loss, loss, rtol=1e-5, atol=1e-4)
        for name, a, g in zip(("w_in", "b_in", "w_out", "b_out"), want, got):
            torch.testing.assert_close(g, a, rtol=1e-4, atol=1e-4, msg=f"call {call} {name}")
    ops = [str(n.target) for gm in graphs for n in gm.graph.nodes if n.op == "call_function"]
    assert "torch_plugin.scaled_dot_product_attention.default" in ops, ops
    assert "torch_plugin.scaled_dot_product_attention_backward.default" in ops, ops
    # neither the math path nor an ATen attention op
    assert not any(o.startswith("aten.") and ("softmax" in o or "attention" in o) for o in ops)
    assert F.scaled_dot_product_attention is torch._C._nn.scaled_dot_product_attention
    assert F.has_torch_function is torch.overrides.has_torch_function


def test_backward_op_under_no_grad_and_below_autograd():
    """The backward op recomputes with autograd even when called with grad mode off."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 6, 8) for _ in range(3))
    go = torch.randn(2, 2, 6, 8)
    qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
    want = torch.autograd.grad(F.scaled_dot_product_attention(qq, kk, vv), (qq, kk, vv), go)
    with torch.no_grad():
        got = attention_backward(go, q, k, v, None, False, None, False)
    for a, g in zip(want, got):
        torch.testing.assert_close(g, a)
        assert g.is_contiguous()


@pytest.mark.parametrize("kind", ["bool", "additive"])
def test_backward_op_recomputes_with_a_contiguous_mask(kind, monkeypatch):
    """A mask broadcast along its last dim (Hugging Face's [1, 1, L, 1] comparison expanded
    to [B, 1, L, S]) reaches the recomputation contiguous, as the leaf op's forward passes it
    (ATen's fused kernels refuse a last-dim stride other than 1: the recomputation had run the
    math path); the gradients are eager's, over several draws."""
    seen = []
    sdpa = F.scaled_dot_product_attention

    def recording(q, k, v, attn_mask=None, *args, **kwargs):
        seen.append(None if attn_mask is None else attn_mask.stride())
        return sdpa(q, k, v, attn_mask, *args, **kwargs)

    for draw in range(3):
        torch.manual_seed(draw)
        b, h, seq, d = 2, 3, 7, 8
        q, k, v = (torch.randn(b, h, seq, d) for _ in range(3))
        go = torch.randn(b, h, seq, d)
        keep = torch.rand(b, 1, seq, 1) > 0.3
        keep[:, :, 0] = True  # no row fully masked
        mask = keep if kind == "bool" else torch.where(keep, 0.0, -1e4)
        mask = mask.expand(b, 1, seq, seq)
        assert mask.stride(-1) == 0
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        want = torch.autograd.grad(sdpa(qq, kk, vv, attn_mask=mask), (qq, kk, vv), go)
        monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
        got = attention_backward(go, q, k, v, mask, False, None, False)
        monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa)
        assert seen[-1] is not None and seen[-1][-1] == 1, seen
        for a, g in zip(want, got):
            torch.testing.assert_close(g, a)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_multihead_attention_training_compiled_on_cuda(precision, fresh_capture):
    """``nn.MultiheadAttention`` in a CUDA training graph: its attention the leaf op (not
    cuDNN's or flash's kernel, whose int results the compiler does not take: ViT-B/16's bf16
    training graph ran as its eager graph; nor the memory-efficient one, whose CPU philox
    tensors failed its backward graph); both graphs compiled, not run op by op, and the
    output and every gradient equal eager's over three steps."""
    import copy

    import torch_plugin
    from torch_plugin.compiler import pipeline

    torch.manual_seed(0)
    ref = torch.nn.Sequential(
        torch.nn.Linear(32, 64),
        torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True),
    ).cuda()
    model = copy.deepcopy(ref)
    fast = torch_plugin.optimize(model, backend="plugin")
    eager_before, unlowered = pipeline.counters["eager_graphs"], dict(training.counters)
    bf16 = precision == "bf16"
    tol = {"rtol": 3e-2, "atol": 3e-2} if bf16 else {"rtol": 2e-3, "atol": 2e-3}
    for step in range(3):
        x = torch.randn(4, 10, 32, device="cuda")
        with torch.autocast("cuda", torch.bfloat16, enabled=bf16):
            want, got = ref(x), fast(x)
        want.float().square().mean().backward()
        got.float().square().mean().backward()
        torch.testing.assert_close(got, want, **tol, msg=f"step {step}: output")
        for (name, p), q in zip(ref.named_parameters(), model.parameters()):
            torch.testing.assert_close(q.grad, p.grad, **tol, msg=f"step {step}: {name}.grad")
            p.grad = q.grad = None
    assert torch_plugin.stats.graphs_compiled > 0
    assert pipeline.counters["eager_graphs"] == eager_before, "a graph ran as the eager graph"
    assert dict(training.counters) == unlowered, "a training graph ran op by op"
