"""Attention in traced CUDA inference graphs: ``torch_plugin::scaled_dot_product_attention``.

``scaled_dot_product_attention`` is a CompositeImplicitAutograd op: when AOTAutograd traces
a graph, the op is replaced by the backend op it picks for the FakeTensors it traces with,
and that pick is not eager's. FakeTensors report the meta device inside kernels, so the
flash and memory-efficient kernels' device checks fail: fp32 attention is traced as the
unfused math path (QK^T, a ``_safe_softmax`` decomposed into six ops, PV: 331 kernels for
BERT-base where eager launches 155, 1.6 ms slower at batch 32 on an H100), and bf16
attention as ``_scaled_dot_product_cudnn_attention``, whose int results the compiler does
not take (GPT-2's whole graph then ran unlowered).

:class:`LeafAttention`, active while AOTAutograd traces a CUDA graph, turns each
call of ``torch.nn.functional.scaled_dot_product_attention`` made by the traced code into
the leaf op ``torch_plugin::scaled_dot_product_attention`` (csrc/ops/attention_op.cpp),
which calls the ATen op on real tensors at run time, so the dispatcher picks the fused
kernel as in eager; its output has one fixed layout. Under autocast the mode casts the
arguments as autocast casts the ATen op's. ``nn.MultiheadAttention``'s
``multi_head_attention_forward`` handles ``__torch_function__`` itself, and a mode is off
while it handles a call, so its inner attention call would never reach the mode: the mode
runs a copy of it whose attention call does (:meth:`LeafAttention._multi_head_attention`).
Calls it cannot take (dropout, a mask that needs a gradient, broadcast batch dimensions,
another device) are traced as before.

Attention the mode does not take still reaches the traced graph as one of ATen's fused
attention ops (``_scaled_dot_product_efficient_attention`` for fp32). Those ops carry the ``nondeterministic_seeded`` tag
because they may apply dropout, which keeps the graph from being timed against eager or
captured into a CUDA graph, and they return the backend's auxiliary results.
:func:`fused_attention_to_leaf` replaces each call made without dropout, whose other
results are unused and whose output has the leaf op's layout, by the leaf op: the same
attention, computed by the kernel eager's dispatcher picks, with no random numbers.

In a training graph the leaf op's derivative is a second leaf op that recomputes the
attention with ATen's fused kernel and runs its backward (:mod:`.attention_training`).

Key parts:
- :class:`LeafAttention`: the torch-function mode.
- :func:`leaf_arguments`: whether a call can be the leaf op, and its arguments.
- :func:`fused_attention_to_leaf`: the ATen-graph rewrite of fused attention ops.
- :func:`training_backends`: the backend choice while a CUDA training graph is traced.
"""

from __future__ import annotations

import operator
import types
from typing import Any

import torch
import torch.fx
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
    dimensions, ``dropout_p == 0``, no gradient needed for the mask (query, key and value may
    need one: the leaf op's derivative is :mod:`.attention_training`'s); otherwise None."""
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
    if torch.is_grad_enabled() and mask is not None and mask.requires_grad:
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
        from torch_plugin.compiler import attention_training

        attention_training.register()  # the leaf op's derivative, for training graphs

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: Any = None):
        kwargs = kwargs or {}
        if func is _SDPA:
            leaf = leaf_arguments(self.device_type, args, kwargs)
            if leaf is not None:
                q, k, v, mask, dropout_p, is_causal, scale, gqa = _autocast(self.device_type, leaf)
                return torch.ops.torch_plugin.scaled_dot_product_attention(
                    q, k, v, mask, dropout_p, is_causal, scale=scale, enable_gqa=gqa
                )
        if func is torch.nn.functional.multi_head_attention_forward:
            return self._multi_head_attention(func)(*args, **kwargs)
        return func(*args, **kwargs)

    def _multi_head_attention(self, mha: Any) -> Any:
        """``mha`` (``F.multi_head_attention_forward``) as a copy whose attention call reaches
        this mode. The mode is off while it handles a call (torch-function modes are popped
        for their handler), so the attention inside the original would be traced as ATen's
        fused op; and run with the mode on, the original would dispatch to the mode again
        (``has_torch_function``). The copy, called from the handler (the mode off, so its
        own ``has_torch_function`` check sees only what else overrides the call), has the
        same code with one global of its own: ``scaled_dot_product_attention``, this mode's
        handling of it. Nothing global is patched: other threads and later calls see
        ``torch.nn.functional`` unchanged. Made once per mode (a graph has one call per layer)."""
        cached = self.__dict__.get("_mha_copy")
        if cached is not None and cached[0] is mha:
            return cached[1]
        scope = dict(mha.__globals__)
        scope["scaled_dot_product_attention"] = lambda *a, **k: self.__torch_function__(
            _SDPA, (), a, k
        )
        copy = types.FunctionType(
            mha.__code__, scope, mha.__name__, mha.__defaults__, mha.__closure__
        )
        copy.__kwdefaults__ = mha.__kwdefaults__
        self._mha_copy = (mha, copy)
        return copy


def training_backends() -> Any:
    """Context manager for tracing a CUDA training graph: ATen's attention backend choice
    limited to the math path, for the attention calls :class:`LeafAttention` does not take
    (dropout, a mask that needs a gradient), which are then traced as products and a softmax
    the compiler lowers.

    Traced with FakeTensors, such attention becomes one of ATen's fused ops, which a
    training graph cannot keep: ``_scaled_dot_product_cudnn_attention`` (bf16) and
    ``_scaled_dot_product_flash_attention`` return ints (``max_q``, ``max_k``), which the
    compiler does not take (ViT-B/16's bf16 training graph ran as its eager graph, issue
    #30); ``_scaled_dot_product_efficient_attention`` (fp32) returns its philox seed and
    offset as CPU tensors at run time where the FakeTensors say CUDA, so its backward graph
    failed ("input is on cpu"). The setting is global while active
    (``torch.nn.attention.sdpa_kernel``), and only FakeTensors run under it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.MATH])


# ATen's fused attention ops and the name of their mask argument (None: they take none).
_FUSED_ATTENTION = {
    "aten::_scaled_dot_product_efficient_attention": "attn_bias",
    "aten::_scaled_dot_product_flash_attention": None,
    "aten::_scaled_dot_product_cudnn_attention": "attn_bias",
}


def _leaf_layout(shape: torch.Size) -> tuple[int, ...]:
    """Strides of the leaf op's output of ``shape`` ([B, H, L, Ev]): a contiguous
    [B, L, H, Ev] (csrc/ops/attention_op.cpp)."""
    _, h, seq, ev = shape
    return (seq * h * ev, ev, h * ev, 1)


def _dense_order(t: torch.Tensor) -> list[int] | None:
    """The dims of ``t`` outermost first in memory when ``t`` is a permutation of a
    contiguous tensor (``t.permute(order)`` is contiguous), else None. Strides of size-1
    dims are not compared (they address nothing; batch 1 gives them any value)."""
    order = sorted(range(t.dim()), key=lambda d: (-t.stride(d), d))
    packed = torch.empty([t.shape[d] for d in order], device="meta").permute(
        [order.index(d) for d in range(t.dim())]
    )
    same = all(a == b for a, b, n in zip(packed.stride(), t.stride(), t.shape) if n != 1)
    return order if same else None


def fused_attention_to_leaf(gm: torch.fx.GraphModule) -> int:
    """Rewrites ``gm`` (an ATen inference graph with ``meta["val"]`` on its nodes) in place:
    each call of a fused attention op of ATen (efficient, flash, cuDNN) with
    ``dropout_p == 0``, 4-d query/key/value of equal batch and head counts, no use of any
    result but the output, and an output in the leaf op's layout or another dense layout
    becomes a call of ``torch_plugin::scaled_dot_product_attention`` (see the module doc),
    followed in the second case by a copy into the output's layout (permute to its memory
    order, contiguous clone, permute back). Returns the number
    of calls rewritten; calls that do not qualify are left as they are."""
    leaf = torch.ops.torch_plugin.scaled_dot_product_attention.default
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if node.target._schema.name not in _FUSED_ATTENTION:
            continue
        mask_name = _FUSED_ATTENTION[node.target._schema.name]
        normalized = node.normalized_arguments(gm, normalize_to_only_use_kwargs=True)
        if normalized is None:
            continue
        bound = normalized.kwargs  # every argument by schema name, defaults filled in
        if bound.get("dropout_p") != 0:
            continue
        if bound.get("return_debug_mask") or not isinstance(bound.get("is_causal"), bool):
            continue
        scale = bound.get("scale")
        if scale is not None and not isinstance(scale, (int, float)):
            continue
        users = list(node.users)
        if not all(u.target is operator.getitem and u.args[1] == 0 for u in users):
            continue
        q, k, v = (bound[n] for n in ("query", "key", "value"))
        vals = [getattr(x, "meta", {}).get("val") for x in (q, k, v)]
        out = node.meta.get("val")
        if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in vals):
            continue
        if any(t.shape[:2] != vals[0].shape[:2] for t in vals):
            continue
        if not isinstance(out, (tuple, list)) or not isinstance(out[0], torch.Tensor):
            continue
        # The leaf op's layout, or another dense layout (cuDNN's output follows the query's:
        # [L, B, H, E] in memory inside nn.MultiheadAttention), which a copy gives.
        relayout = tuple(out[0].stride()) != _leaf_layout(out[0].shape)
        order = _dense_order(out[0]) if relayout else None
        if relayout and order is None:
            continue
        mask = bound.get(mask_name) if mask_name else None
        with gm.graph.inserting_before(node):
            call = gm.graph.call_function(
                leaf,
                (q, k, v, mask, 0.0, bound["is_causal"]),
                {"scale": None if scale is None else float(scale), "enable_gqa": False},
            )
            result = call
            if order is not None:
                # permute to the memory order, copy contiguously, permute back
                aten = torch.ops.aten
                inverse = [order.index(d) for d in range(len(order))]
                moved = gm.graph.call_function(aten.permute.default, (call, order))
                packed = gm.graph.call_function(
                    aten.clone.default, (moved,), {"memory_format": torch.contiguous_format}
                )
                result = gm.graph.call_function(aten.permute.default, (packed, inverse))
                leaf_val = out[0].as_strided(out[0].shape, _leaf_layout(out[0].shape))
                moved.meta["val"] = leaf_val.permute(order)
                packed.meta["val"] = moved.meta["val"].clone(memory_format=torch.contiguous_format)
                result.meta["val"] = packed.meta["val"].permute(inverse)
        call.meta["val"] = (
            out[0].as_strided(out[0].shape, _leaf_layout(out[0].shape)) if relayout else out[0]
        )
        for user in users:
            user.replace_all_uses_with(result)
            gm.graph.erase_node(user)
        gm.graph.erase_node(node)
        rewritten += 1
    if rewritten:
        gm.graph.lint()
        gm.recompile()
    return rewritten
