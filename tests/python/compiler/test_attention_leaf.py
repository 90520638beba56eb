"""torch_plugin::scaled_dot_product_attention and its use while tracing CUDA inference graphs
(torch_plugin.compiler.attention), checked on the CPU: the op against eager attention
(values and the fixed output layout), the torch-function mode that puts it into traced
graphs, and a graph holding it compiled by the "plugin" compiler against eager over several
calls. The CUDA side is in test_cuda_attention.py."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.nn.functional as F

from torch_plugin import _C  # noqa: F401 - registers the torch_plugin ops
from torch_plugin.compiler.attention import LeafAttention, fused_attention_to_leaf, leaf_arguments

op = torch.ops.torch_plugin.scaled_dot_product_attention


def _qkv(b=2, h=4, s=8, e=16, ev=16, hk=None, contiguous=False):
    hk = hk or h

    def make(heads, dim):
        t = torch.randn(b, s, heads, dim)
        return t.transpose(1, 2).contiguous() if contiguous else t.transpose(1, 2)

    return make(h, e), make(hk, e), make(hk, ev)


@pytest.mark.parametrize("contiguous", [False, True])
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"is_causal": True}, {"scale": 0.3}, {"mask": "float"}, {"mask": "bool"}],
)
def test_op_matches_aten_and_has_the_fixed_layout(contiguous, kwargs):
    torch.manual_seed(0)
    for _ in range(3):
        q, k, v = _qkv(contiguous=contiguous, ev=8)
        kw = dict(kwargs)
        mask = kw.pop("mask", None)
        if mask == "float":
            kw["attn_mask"] = torch.randn(2, 1, 8, 8)
        elif mask == "bool":
            kw["attn_mask"] = torch.rand(2, 4, 8, 8) > 0.3
        out = op(q, k, v, kw.get("attn_mask"), 0.0, kw.get("is_causal", False),
                 scale=kw.get("scale"))  # fmt: skip
        ref = F.scaled_dot_product_attention(q, k, v, **kw)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        _, h, s, ev = out.shape
        # [B, H, L, Ev] stored as [B, L, H, Ev]
        assert out.stride() == (s * h * ev, ev, h * ev, 1)


def test_op_grouped_query_and_3d():
    q, k, v = _qkv(h=4, hk=2)
    torch.testing.assert_close(
        op(q, k, v, enable_gqa=True), F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    )
    x = torch.randn(3, 5, 16)
    out = op(x, x, x)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(x, x, x))
    assert out.is_contiguous()


def test_op_refuses_dropout_and_broadcast_batches():
    q, k, v = _qkv()
    with pytest.raises(RuntimeError, match="dropout_p must be 0"):
        op(q, k, v, None, 0.1)
    with pytest.raises(RuntimeError, match="no broadcasting"):
        op(q, k[:1], v[:1])


def test_meta_kernel_reports_the_runtime_layout():
    q, k, v = _qkv(contiguous=True)
    real = op(q, k, v)
    meta = op(q.to("meta"), k.to("meta"), v.to("meta"))
    assert meta.shape == real.shape and meta.stride() == real.stride()


def test_leaf_arguments_refuse_what_the_op_cannot_compute():
    q, k, v = _qkv()
    assert leaf_arguments("cpu", (q, k, v), {}) is not None
    assert leaf_arguments("cuda", (q, k, v), {}) is None  # another device
    assert leaf_arguments("cpu", (q, k, v), {"dropout_p": 0.1}) is None
    assert leaf_arguments("cpu", (q, k[:1], v[:1]), {}) is None
    qg = q.clone().requires_grad_()
    # query/key/value needing gradients: the leaf op has a derivative (attention_training)
    assert leaf_arguments("cpu", (qg, k, v), {}) is not None
    mask = torch.zeros(q.shape[-2], k.shape[-2], requires_grad=True)
    assert leaf_arguments("cpu", (qg, k, v, mask), {}) is None  # a mask needing one: not
    with torch.no_grad():
        assert leaf_arguments("cpu", (qg, k, v, mask), {}) is not None


class _Block(torch.nn.Module):
    """Self-attention as HF models call it (F.scaled_dot_product_attention on head views)."""

    def __init__(self, dim=32, heads=4, dropout=0.0):
        super().__init__()
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.out = torch.nn.Linear(dim, dim)
        self.heads, self.dropout = heads, dropout

    def forward(self, x, mask):
        b, s, d, h = 2, 8, 32, self.heads  # constants: the test traces with torch.fx
        qkv = self.qkv(x)
        q = qkv[..., :d].view(b, s, h, d // h).transpose(1, 2)
        k = qkv[..., d : 2 * d].view(b, s, h, d // h).transpose(1, 2)
        v = qkv[..., 2 * d :].view(b, s, h, d // h).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, mask, dropout_p=self.dropout)
        return (self.out(o.transpose(1, 2).reshape(b, s, d)).relu() + x,)


def _aten_graph(model, inputs):
    from torch._functorch.aot_autograd import aot_module_simplified

    from torch_plugin.compiler.decompositions import decomposition_table

    graphs = []

    def keep(gm, example_inputs):
        graphs.append(gm)
        return gm

    gm = torch.fx.symbolic_trace(model)
    with torch.no_grad(), LeafAttention("cpu"):
        aot_module_simplified(gm, inputs, fw_compiler=keep, decompositions=decomposition_table())
    return graphs[0]


def _targets(gm):
    return {str(n.target) for n in gm.graph.nodes if n.op == "call_function"}


def test_tracing_puts_the_leaf_op_into_the_graph_and_compiles():
    from torch_plugin.compiler.stages import compile_graph

    torch.manual_seed(0)
    model = _Block().eval()
    x, mask = torch.randn(2, 8, 32), torch.randn(2, 1, 8, 8)
    gm = _aten_graph(model, [x, mask])
    assert "torch_plugin.scaled_dot_product_attention.default" in _targets(gm)
    params = [*model.parameters()]
    compiled = compile_graph(gm)
    assert getattr(compiled, "unlowered", None) is None  # lowered, not run as the ATen graph
    with torch.no_grad():
        for _ in range(3):  # compiling call, then cached calls on fresh inputs
            x, mask = torch.randn(2, 8, 32), torch.randn(2, 1, 8, 8)
            out = compiled([*params, x, mask])
            torch.testing.assert_close(out[0], model(x, mask)[0], rtol=1e-5, atol=1e-5)


def test_tracing_keeps_aten_attention_with_dropout():
    model = _Block(dropout=0.5).train()
    gm = _aten_graph(model, [torch.randn(2, 8, 32), torch.randn(2, 1, 8, 8)])
    assert "torch_plugin.scaled_dot_product_attention.default" not in _targets(gm)


def test_autocast_casts_the_leaf_ops_arguments_like_atens():
    """Under autocast the ATen op's floating arguments are cast to the autocast dtype; the
    leaf op (no autocast kernel) gets the same casts while tracing."""
    from torch_plugin.compiler.stages import compile_graph

    class Mixed(torch.nn.Module):
        def forward(self, q, k, v):
            return (F.scaled_dot_product_attention(q, k.to(torch.bfloat16), v) * 2,)

    torch.manual_seed(0)
    model = Mixed()
    inputs = list(_qkv())
    gm = torch.fx.symbolic_trace(model)
    from torch._functorch.aot_autograd import aot_module_simplified

    from torch_plugin.compiler.decompositions import decomposition_table

    graphs = []
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16), LeafAttention("cpu"):
        aot_module_simplified(
            gm, inputs, fw_compiler=lambda g, _: graphs.append(g) or g,
            decompositions=decomposition_table(),
        )  # fmt: skip
    assert "torch_plugin.scaled_dot_product_attention.default" in _targets(graphs[0])
    compiled = compile_graph(graphs[0])
    with torch.no_grad():
        for _ in range(3):
            inputs = list(_qkv())
            out = compiled(inputs)[0]
            with torch.autocast("cpu", torch.bfloat16):
                ref = model(*inputs)[0]
            assert out.dtype == ref.dtype == torch.bfloat16
            torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2)


def _fused_attention_graph(dropout_p=0.0, use_logsumexp=False, q_layout="blhe", batch=2):
    """An ATen graph calling _scaled_dot_product_efficient_attention, as AOTAutograd traces
    nn.MultiheadAttention's attention on CUDA, with meta["val"] from the op's meta kernel."""
    b, h, s, e = batch, 4, 8, 16
    g = torch.fx.Graph()
    names = ("q", "k", "v", "bias")
    shapes = {"q": (b, h, s, e), "k": (b, h, s, e), "v": (b, h, s, e), "bias": (b, h, s, s)}
    nodes, metas = [], []
    for n in names:
        node = g.placeholder(n)
        if n != "bias" and q_layout == "blhe":
            meta = torch.empty(b, s, h, e, device="meta").transpose(1, 2)
        else:
            meta = torch.empty(shapes[n], device="meta")
        node.meta["val"] = meta
        nodes.append(node)
        metas.append(meta)
    efficient = torch.ops.aten._scaled_dot_product_efficient_attention.default
    call = g.call_function(efficient, (*nodes, use_logsumexp, dropout_p))
    call.meta["val"] = efficient(*metas, use_logsumexp, dropout_p)
    out = g.call_function(operator.getitem, (call, 0))
    out.meta["val"] = call.meta["val"][0]
    results = [out]
    if use_logsumexp:
        lse = g.call_function(operator.getitem, (call, 1))
        lse.meta["val"] = call.meta["val"][1]
        results.append(lse)
    g.output(tuple(results))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def test_fused_attention_without_dropout_becomes_the_leaf_op():
    gm = _fused_attention_graph()
    assert fused_attention_to_leaf(gm) == 1
    assert "aten._scaled_dot_product_efficient_attention.default" not in _targets(gm)
    assert "torch_plugin.scaled_dot_product_attention.default" in _targets(gm)
    torch.manual_seed(0)
    for _ in range(3):  # fresh inputs each call; the rewritten graph runs the leaf op on CPU
        q, k, v = _qkv()
        bias = torch.randn(2, 4, 8, 8)
        (got,) = gm(q, k, v, bias)
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("memory", ["bhle", "lbhe", "lbhe batch 1"])
def test_fused_attention_with_another_dense_output_becomes_the_leaf_op_and_a_copy(memory):
    # cuDNN's attention returns the query's layout ([L, B, H, E] in memory inside
    # nn.MultiheadAttention under bf16 autocast); the leaf op's is [B, L, H, E]: a copy into
    # the output's layout follows it.
    batch = 1 if memory.endswith("batch 1") else 2
    gm = _fused_attention_graph(batch=batch)
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    val = node.meta["val"]
    b, h, s, e = val[0].shape
    if memory == "bhle":
        layout = torch.empty(b, h, s, e, device="meta")
    elif batch == 1:  # the batch dim's stride as cuDNN leaves it: not the packed one
        layout = torch.empty_strided((b, h, s, e), (e, e, h * e, 1), device="meta")
    else:
        layout = torch.empty(s, b, h, e, device="meta").permute(1, 2, 0, 3)
    node.meta["val"] = (layout, *val[1:])
    assert fused_attention_to_leaf(gm) == 1
    targets = _targets(gm)
    assert "torch_plugin.scaled_dot_product_attention.default" in targets
    assert "aten.clone.default" in targets
    torch.manual_seed(0)
    for _ in range(3):
        q, k, v = _qkv(batch)
        bias = torch.randn(batch, 4, 8, 8)
        (got,) = gm(q, k, v, bias)
        want = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        if batch == 1:
            assert got.stride()[1:] == layout.stride()[1:]
        else:
            assert got.stride() == layout.stride()
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("case", ["dropout", "logsumexp used", "other layout"])
def test_fused_attention_that_the_leaf_op_cannot_replace_stays(case):
    gm = _fused_attention_graph(
        dropout_p=0.1 if case == "dropout" else 0.0,
        use_logsumexp=case == "logsumexp used",
        q_layout="contiguous" if case == "other layout" else "blhe",
    )
    before = str(gm.graph)
    if case == "other layout":
        # the efficient op's meta output follows its own layout; force one with gaps (not
        # a permutation of a contiguous tensor)
        node = next(n for n in gm.graph.nodes if n.op == "call_function")
        val = node.meta["val"]
        b, h, s, e = val[0].shape
        odd = torch.empty(b, h, s, 2 * e, device="meta")[..., :e]
        node.meta["val"] = (odd, *val[1:])
    assert fused_attention_to_leaf(gm) == 0
    assert str(gm.graph) == before
