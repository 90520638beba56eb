"""Attention in traced CUDA inference graphs: ``torch_plugin::scaled_dot_product_attention``.

``scaled_dot_product_attention`` is a CompositeImplicitAutograd op: when AOTAutograd traces
a graph, the op is replaced by the backend op it picks for the FakeTensors it traces with,
and that pick is not eager's. FakeTensors report the meta device inside kernels, so the
flash and memory-efficient kernels' device checks fail: fp32 attention is traced as the
unfused math path (QK^T, a ``_safe_softmax`` decomposed into six ops, PV: 331 kernels for
BERT-base where eager launches 155, 1.6 ms slower at batch 32 on an H100), and bf16
attention as ``_scaled_dot_product_cudnn_attention``, whose int results the compiler does
not take (GPT-2's whole graph then ran unlowered).

:class:`LeafAttention`, active while AOTAutograd traces a CUDA inference graph, turns each
call of ``torch.nn.functional.scaled_dot_product_attention`` made by the traced code into
the leaf op ``torch_plugin::scaled_dot_product_attention`` (csrc/ops/attention_op.cpp),
which calls the ATen op on real tensors at run time, so the dispatcher picks the fused
kernel as in eager; its output has one fixed layout. Under autocast the mode casts the
arguments as autocast casts the ATen op's. Calls it cannot take (dropout,
gradients, broadcast batch dimensions, another device) and attention inside other
functions (``nn.MultiheadAttention``'s ``multi_head_attention_forward``, whose own
``__torch_function__`` dispatch hides its inner calls from the mode) are traced as before.

Key parts:
- :class:`LeafAttention`: the torch-function mode.
- :func:`leaf_arguments`: whether a call can be the leaf op, and its arguments.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_SDPA = torch._C._nn.scaled_dot_product_attention


def _bind(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: Any = 0.0,
    is_causal: Any = False,
    *,
    scale: Any = None,
    enable_gqa: Any = False,
) -> tuple[Any, ...]:
    return query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa


def leaf_arguments(device_type: str, args: tuple, kwargs: dict) -> tuple[Any, ...] | None:
    """``(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)`` of a
    ``scaled_dot_product_attention(*args, **kwargs)`` call that the leaf op computes
    exactly: tensors on ``device_type``, query/key/value of one rank >= 2 with equal batch
    dimensions, ``dropout_p == 0``, no gradient needed; otherwise None."""
    try:
        q, k, v, mask, dropout_p, is_causal, scale, gqa = _bind(*args, **kwargs)
    except TypeError:
        return None
    tensors = [q, k, v] if mask is None else [q, k, v, mask]
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return None
    if any(t.device.type != device_type for t in tensors):
        return None
    if not (isinstance(dropout_p, (int, float)) and dropout_p == 0):
        return None
    if not all(isinstance(x, bool) for x in (is_causal, gqa)):
        return None
    if scale is not None and not isinstance(scale, (int, float)):
        return None
    if q.dim() < 2 or not (k.dim() == v.dim() == q.dim()):
        return None
    batch_dims = q.dim() - 3 if q.dim() >= 4 else q.dim() - 2
    if any(not (k.shape[d] == q.shape[d] == v.shape[d]) for d in range(batch_dims)):
        return None
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return None
    return q, k, v, mask, 0.0, is_causal, None if scale is None else float(scale), gqa


def _autocast(device_type: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``args`` cast as autocast casts the ATen op's (it is on autocast's lower-precision
    list: every floating-point tensor but float64 to the autocast dtype); the leaf op has no
    autocast kernel of its own."""
    if not torch.is_autocast_enabled(device_type):
        return args
    dtype = torch.get_autocast_dtype(device_type)

    def cast(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64:
            return t.to(dtype)
        return t

    return tuple(cast(a) if i < 4 else a for i, a in enumerate(args))


class LeafAttention(TorchFunctionMode):
    """Torch-function mode: ``scaled_dot_product_attention`` calls on ``device_type``
    tensors become ``torch_plugin::scaled_dot_product_attention`` (see the module doc);
    every other call runs unchanged."""

    def __init__(self, device_type: str = "cuda") -> None:
        super().__init__()
        self.device_type = device_type

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None):
        kwargs = kwargs or {}
        if func is _SDPA:
            leaf = leaf_arguments(self.device_type, args, kwargs)
            if leaf is not None:
                q, k, v, mask, dropout_p, is_causal, scale, gqa = _autocast(self.device_type, leaf)
                return torch.ops.torch_plugin.scaled_dot_product_attention(
                    q, k, v, mask, dropout_p, is_causal, scale=scale, enable_gqa=gqa
                )
        return func(*args, **kwargs)
