"""The decomposition table the "plugin" backend gives AOTAutograd.

PyTorch's core ATen decompositions (``torch._decomp.core_aten_decompositions``), minus the
ops this compiler lowers natively — those it maps to a library call (oneDNN), fuses as a
whole (softmax, norms), or runs through ATen faster than their decomposition would.

Key parts:
- :data:`NATIVE`: the op packets kept whole.
- :func:`decomposition_table`.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

aten = torch.ops.aten

NATIVE = frozenset(
    {
        # libraries: oneDNN convolution and matmul with post-ops
        aten.convolution, aten.addmm, aten.mm, aten.bmm, aten.baddbmm, aten.linear,
        # folded into convolutions (freezing) or run by ATen
        aten._native_batch_norm_legit_no_training,
        # fused as a whole by the code generator, or faster in ATen than decomposed
        aten._softmax, aten._log_softmax, aten.native_layer_norm, aten.gelu, aten.silu,
        aten.hardswish, aten.hardsigmoid, aten.hardtanh, aten.mish, aten.sigmoid, aten.tanh,
        aten.max_pool2d_with_indices, aten.avg_pool2d, aten._adaptive_avg_pool2d,
        aten.embedding, aten.index_select, aten.cat, aten.stack, aten.split_with_sizes,
        aten.unbind, aten.mean, aten.var_mean, aten.native_dropout, aten.logsumexp,
        aten._scaled_dot_product_flash_attention_for_cpu,
        # one op-table row each (generated kernels), where the decomposition needs
        # comparisons and where, or loses ATen's -0.0 (frac). (hardshrink and
        # softshrink arrive decomposed all the same: their Python autograd kernels.)
        aten.softplus, aten.threshold, aten.celu, aten.lerp, aten.xlogy, aten.logit,
        aten.frac,
        # a reduction row of its own (its decomposition is not(any(not x)))
        aten.all,
    }
)  # fmt: skip


@functools.cache
def decomposition_table() -> dict[Any, Any]:
    """OpOverload → decomposition for every core-ATen decomposition not in :data:`NATIVE`."""
    from torch._decomp import core_aten_decompositions

    return {
        op: fn for op, fn in core_aten_decompositions().items() if op.overloadpacket not in NATIVE
    }
