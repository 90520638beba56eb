"""Attention in traced CUDA training graphs: the leaf op's backward (issue #30).

:mod:`torch_plugin.compiler.attention` traces ``scaled_dot_product_attention`` as the leaf
op ``torch_plugin::scaled_dot_product_attention``, which calls ATen's op on real tensors so
that the dispatcher picks the fused (flash / memory-efficient / cuDNN) kernel, as eager's
call does; traced with FakeTensors the ATen op would pick the unfused math path. For a
training graph the leaf op needs a derivative: :func:`register` gives it one through
``torch.library.register_autograd``, whose backward is a second leaf op,
``torch_plugin::scaled_dot_product_attention_backward``. At run time that op recomputes the
attention with autograd on (ATen's op: the same fused kernel eager's forward picks) and runs
its backward (the fused kernel's backward), so AOTAutograd's backward graph holds one opaque
call where tracing would have written the math path out. The cost: the forward attention
runs twice (once in the forward graph, once in the backward op), where eager saves its
log-sum-exp instead; the fused kernels still beat the math path's materialised scores.

A mask broadcast along its last dim (stride 0: Hugging Face's BERT and GPT-2 masks) is
copied contiguously before the recomputation, as the leaf op's forward copies it (its C++
kernel, ``ops/attention_op.cpp``): with the broadcast mask ATen picked the math path for the
recomputation and its backward (BERT-base fp32 training on an H200: no memory-efficient
backward kernel among the step's 1191 kernels, ``reduce_kernel`` 122 times, 12 recomputations
costing about 1.3 ms of host time each), where the forward had run the memory-efficient kernel.

The backward op runs inside the compiled backward graph, where autograd's dispatch keys may
be excluded (below an autograd kernel): it re-enables them for its own recomputation
(``torch._C._ForceDispatchKeyGuard``) and turns grad mode on.

Key parts: :func:`register` (idempotent; called by :mod:`.attention` on import),
:func:`attention_backward` (the backward op's implementation).
"""

from __future__ import annotations

from typing import Any

import torch

_registered = False


@torch.library.custom_op("torch_plugin::scaled_dot_product_attention_backward", mutates_args=())
def attention_backward(
    grad_out: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None,
    is_causal: bool,
    scale: float | None,
    enable_gqa: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of ``scaled_dot_product_attention(query, key, value, attn_mask,
    is_causal=..., scale=..., enable_gqa=...)`` (no dropout) for ``grad_out``, each
    contiguous, in the dtype of its input."""
    exclude = torch._C._dispatch_tls_local_exclude_set()
    exclude = exclude.remove(torch._C.DispatchKey.AutogradFunctionality).remove(
        torch._C.DispatchKey.ADInplaceOrView
    )
    include = torch._C._dispatch_tls_local_include_set()
    if _column_broadcast(attn_mask):
        # As the leaf op's forward does (ops/attention_op.cpp): a mask broadcast along its
        # last dim makes ATen pick the math path, where the forward ran a fused kernel.
        attn_mask = attn_mask.contiguous()
    with torch._C._ForceDispatchKeyGuard(include, exclude), torch.enable_grad():
        q, k, v = (t.detach().requires_grad_() for t in (query, key, value))
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask, 0.0, is_causal, scale=scale, enable_gqa=enable_gqa
        )
        grads = torch.autograd.grad(out, (q, k, v), grad_out)
    return tuple(g.contiguous() for g in grads)  # type: ignore[return-value]


def _column_broadcast(mask: torch.Tensor | None) -> bool:
    """Whether ``mask``'s last dim is broadcast (stride other than 1 over more than one
    element): Hugging Face's ``sdpa_mask`` expands a [1, 1, L, 1] comparison to [B, 1, L, S].
    The fused attention kernels take a mask only with a unit last-dim stride."""
    return mask is not None and mask.dim() > 0 and mask.size(-1) > 1 and mask.stride(-1) != 1


@attention_backward.register_fake
def _attention_backward_fake(grad_out, query, key, value, attn_mask, is_causal, scale, gqa):
    return tuple(torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (query, key, value))


def _setup_context(ctx: Any, inputs: tuple, keyword_only_inputs: dict, output: Any) -> None:
    query, key, value, attn_mask, _dropout_p, is_causal = inputs
    ctx.save_for_backward(query, key, value, attn_mask)
    ctx.is_causal = is_causal
    ctx.scale = keyword_only_inputs.get("scale")
    ctx.enable_gqa = keyword_only_inputs.get("enable_gqa", False)


def _backward(ctx: Any, grad_out: torch.Tensor) -> tuple:
    query, key, value, attn_mask = ctx.saved_tensors
    gq, gk, gv = torch.ops.torch_plugin.scaled_dot_product_attention_backward(
        grad_out.contiguous(), query, key, value, attn_mask, ctx.is_causal, ctx.scale,
        ctx.enable_gqa,
    )  # fmt: skip
    # None for the mask (the leaf takes only a mask that needs no gradient:
    # attention.leaf_arguments), dropout_p and is_causal.
    return gq, gk, gv, None, None, None


def register() -> None:
    """Give ``torch_plugin::scaled_dot_product_attention`` its derivative (once)."""
    global _registered
    if _registered:
        return
    torch.library.register_autograd(
        "torch_plugin::scaled_dot_product_attention", _backward, setup_context=_setup_context
    )
    _registered = True
