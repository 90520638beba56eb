"""The glue around nn.MultiheadAttention on CUDA (issue #29): the packed in-projection split
into q, k, v products (split_projection), the autocast bmm of the transposed query made one
cuBLASLt product (broadcast_matmul), layout copies as generated kernels, squeeze.dims as a view
step. Against eager over three calls with fresh inputs, asserting the executor's steps
(GPU only; the rewrites themselves are tested without a GPU in
tests/cpp/compiler/test_broadcast_matmul.cpp)."""

from __future__ import annotations

import pytest
import torch

import torch_plugin

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.usefixtures("fresh_capture"),
]


class MhaBlock(torch.nn.Module):
    """A pre-norm self-attention block as torchvision's ViT writes it (batch_first), with
    bf16 autocast inside forward when ``autocast``."""

    def __init__(self, dim: int, heads: int, autocast: bool):
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.attn = torch.nn.MultiheadAttention(dim, heads, batch_first=True)
        self.autocast = autocast

    def forward(self, x):
        with torch.autocast("cuda", torch.bfloat16, enabled=self.autocast):
            y = self.norm(x)
            y, _ = self.attn(y, y, y, need_weights=False)
            return x + 0.5 * y  # one kernel (a lone add would be an ATen call)


def steps_of(graphs) -> list[str]:
    return [s.split(": ", 1)[-1] for g in graphs for s in g.describe().splitlines()]


def close(got: torch.Tensor, want: torch.Tensor, tol: float) -> None:
    scale = max(1.0, want.abs().max().item())
    err = (got.float() - want.float()).abs().max().item()
    assert err <= tol * scale, f"max error {err:.3g} > {tol:.0e} * {scale:.3g}"


def optimize(fn):
    """The plugin backend, always running the compiled graph (reduce-overhead: no timing
    against the eager graph, which could otherwise be kept and tested instead)."""
    return torch_plugin.optimize("plugin", mode="reduce-overhead")(fn)


def run_three(model, make, tol):
    fast = optimize(model)
    with torch.no_grad():
        for _ in range(3):
            x = make()
            close(fast(x), model(x), tol)


# (dim, heads, batch, seq): batch 1 (the addmm path) and > 1 (the bmm path under autocast);
# dim 10 gives bf16 row blocks of W that start off 16 bytes; the packed products of at least
# 2^21 elements are split into q, k, v (256 x 16 x 200, 250 x 12 x 250: misaligned, not split).
MHA_CASES = [
    (48, 4, 1, 13),
    (48, 4, 3, 13),
    (20, 5, 2, 7),
    (10, 2, 3, 11),
    (256, 8, 1, 2800),
    (256, 8, 16, 200),
    (250, 5, 12, 250),
]


def splits(dim: int, batch: int, seq: int) -> bool:
    """Whether split_projection splits the bf16 in-projection on CUDA: 16-byte aligned row
    blocks of W and a packed product of at least 2^21 elements."""
    return dim * dim * 2 % 16 == 0 and batch * seq * 3 * dim >= 2**21


@pytest.mark.parametrize(("dim", "heads", "batch", "seq"), MHA_CASES)
def test_mha_autocast_bf16_matches_eager(graphs, dim, heads, batch, seq):
    torch.manual_seed(0)
    model = MhaBlock(dim, heads, autocast=True).cuda().eval()
    run_three(model, lambda: torch.randn(batch, seq, dim, device="cuda"), 3e-2)
    steps = steps_of(graphs)
    text = "\n".join(steps)
    linears = [s for s in steps if s.startswith("cublaslt linear_pointwise")]
    # q, k, v and the out-projection, or the packed product and the out-projection.
    assert len(linears) == (4 if splits(dim, batch, seq) else 2), text
    for op in ("aten::bmm", "aten::expand", "aten::squeeze", "aten::add.Tensor"):
        assert f"fallback {op}" not in text, text
    # The heads' copy is gone (split) or a kernel; so is the query's copy.
    assert "fallback aten::clone" not in text, text


@pytest.mark.parametrize("batch", [1, 4])
def test_mha_fp32_matches_eager(graphs, batch):
    torch.manual_seed(0)
    model = MhaBlock(32, 4, autocast=False).cuda().eval()
    run_three(model, lambda: torch.randn(batch, 6, 32, device="cuda"), 1e-3)
    assert "fallback aten::clone" not in "\n".join(steps_of(graphs))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_transformer_encoder_layer_matches_eager(graphs, dtype):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(
        48, 4, dim_feedforward=96, dropout=0.0, batch_first=True
    )
    layer = layer.cuda().eval()

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer = layer

        def forward(self, x):
            with torch.autocast("cuda", torch.bfloat16, enabled=dtype == torch.bfloat16):
                return self.layer(x)

    model = Wrap()
    tol = 1e-3 if dtype == torch.float32 else 3e-2
    run_three(model, lambda: torch.randn(3, 11, 48, device="cuda"), tol)
    assert graphs


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_strided_clone_is_a_kernel(graphs, dtype):
    """The ViT layout copy [197, B, 3, 768] -> [3, 197, B, 768] (shrunk) and the attention
    output's [B, H, L, D] -> [L, B, H, D]: a generated kernel each, exact."""

    def f(a, o):
        heads = a.unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()
        return heads, o.permute(2, 0, 1, 3).contiguous()

    def make():
        return (
            torch.randn(13, 3, 3, 40, device="cuda").to(dtype),
            torch.randn(3, 4, 13, 8, device="cuda").to(dtype),
        )

    fast = optimize(f)
    with torch.no_grad():
        for _ in range(3):
            args = make()
            for got, want in zip(fast(*args), f(*args)):
                assert got.stride() == want.stride()
                assert torch.equal(got, want)
    text = "\n".join(steps_of(graphs))
    assert "fallback aten::clone" not in text, text
    assert "view aten::squeeze.dims" in text, text
    assert sum(s.startswith("kernel") for s in steps_of(graphs)) >= 2, text
