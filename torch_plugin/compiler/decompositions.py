"""The decomposition table the "plugin" backend gives AOTAutograd.

PyTorch's core ATen decompositions (``torch._decomp.core_aten_decompositions``), minus the
ops this compiler lowers natively — those it maps to a library call (oneDNN), fuses as a
whole (softmax, norms), or runs through ATen faster than their decomposition would.

Random ops: by default (``config.fallback_random`` off) ``native_dropout`` and
``bernoulli.p`` decompose into ``rand_like`` and pointwise ops (:data:`RANDOM_DECOMPOSITIONS`),
which the compiler generates in kernels with its Philox generator
(csrc/compiler/codegen/random_ops.h); with ``fallback_random`` (``TORCH_PLUGIN_FALLBACK_RANDOM=1``)
they and ``bernoulli`` stay whole, ATen calls drawing eager's numbers.

Key parts:
- :data:`NATIVE`: the op packets kept whole; :data:`NATIVE_CUDA`: on CUDA.
- :data:`RANDOM_DECOMPOSITIONS`: random ops as ``rand_like`` and pointwise ops.
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


# Kept whole on CUDA only, where ATen's kernel beats the decomposition (training graphs of
# issue #30; H200, batch 32, CUDA time per step): the batch norm backward (decomposed: two
# ATen sums and generated kernels per norm; whole: ResNet-50 fp32 23.2 -> 21.5 ms), and the
# embedding backward (decomposed: index_put with accumulate, whose sort-free kernel took
# 1.9 ms of BERT-base's 21 ms; whole: ATen's embedding_dense_backward, as eager).
NATIVE_CUDA = NATIVE | frozenset({aten.native_batch_norm_backward, aten.embedding_dense_backward})


# Random ops that eager draws with its own kernels: kept whole with fallback_random.
_EAGER_RANDOM = frozenset({aten.native_dropout, aten.bernoulli})


def _native_dropout(input: torch.Tensor, p: float, train: bool | None):
    """``aten.native_dropout`` as ATen computes it (``train=None`` trains, as ATen's kernels):
    ``(x * keep * (1 / (1 - p)), keep)`` with ``keep = rand > p``, the uniform numbers drawn
    in float32 whatever x's dtype (a bf16 uniform has 8 bits: p would be rounded to 1/256)."""
    if train is False or p == 0:
        return (input, torch.ones_like(input, dtype=torch.bool))
    if p == 1:
        return (torch.zeros_like(input), torch.zeros_like(input, dtype=torch.bool))
    if not input.dtype.is_floating_point:
        return NotImplemented
    keep = torch.rand_like(input, dtype=torch.float32) > p
    return (keep * input * float(1.0 / (1.0 - p)), keep)


def _bernoulli_p(self: torch.Tensor, p: float, *, generator: Any = None):
    """``aten.bernoulli.p``: 1 where a float32 uniform number is below p, in self's dtype.
    A call with its own generator stays whole (NotImplemented)."""
    if generator is not None:
        return NotImplemented
    return (torch.rand_like(self, dtype=torch.float32) < p).to(self.dtype)


RANDOM_DECOMPOSITIONS: dict[Any, Any] = {
    aten.native_dropout.default: _native_dropout,
    aten.bernoulli.p: _bernoulli_p,
}


def decomposition_table(cuda: bool = False) -> dict[Any, Any]:
    """OpOverload → decomposition for every core-ATen decomposition not in :data:`NATIVE`
    (``cuda``: not in :data:`NATIVE_CUDA`, for graphs on a CUDA device), and the random ops'
    (:data:`RANDOM_DECOMPOSITIONS`) unless ``config.fallback_random`` (or
    ``TORCH_PLUGIN_FALLBACK_RANDOM=1``) asks for eager's random numbers."""
    from torch_plugin import config

    return _table(bool(config.compiler_environment()["fallback_random"]), cuda)


@functools.cache
def _table(fallback_random: bool, cuda: bool = False) -> dict[Any, Any]:
    from torch._decomp import core_aten_decompositions

    native = NATIVE_CUDA if cuda else NATIVE
    table = {
        op: fn
        for op, fn in core_aten_decompositions().items()
        if op.overloadpacket not in native
        and not (fallback_random and op.overloadpacket in _EAGER_RANDOM)
    }
    if not fallback_random:
        table.update(RANDOM_DECOMPOSITIONS)
    return table
