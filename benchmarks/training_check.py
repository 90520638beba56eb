"""The check of ``benchmarks/training_step.py``: each variant's first training steps against
eager's, from the same start (issue #30).

A *state* is :func:`snapshot`'s ``(params, buffers, moments)``: CPU copies by name of the
model's parameters and buffers and of AdamW's first moments (``exp_avg``) after the FIRST
step (:func:`check_steps`). :func:`compare` turns a variant's state and losses against a
reference's into five figures; :func:`passes` is PyTorch's accuracy rule (its dynamo
benchmarks compare against an fp64 run): each figure of the variant against the precise
reference (fp32, no TF32, no autocast) is at most ``mult`` times eager's own against it plus
an absolute tolerance. Pure torch; no GPU needed.
"""

from __future__ import annotations

import math
import time

CHECK_STEPS = 3
# The check (see the module docstring): a variant's distance from the precise reference may be
# at most FLOOR_MULT times eager's own distance from it (the noise of the dtype's arithmetic:
# TF32 products, bf16 autocast) plus these absolute tolerances: tight for the first step's
# loss and gradients (from the common start), loose after 3 steps (Adam's update divides by
# the gradient's magnitude: an element whose gradient is at rounding level takes a full step
# of either sign, and the later steps start from those weights).
FLOOR_MULT = 3.0
TOLERANCES = {
    "fp32": {"loss_err": 1e-3, "moment_err": 1e-2, "loss3_err": 2e-3, "update_err": 0.2,
             "buffer_err": 5e-3},
    "bf16": {"loss_err": 1e-2, "moment_err": 5e-2, "loss3_err": 2e-2, "update_err": 0.4,
             "buffer_err": 2e-2},
}  # fmt: skip


def snapshot(model, moments: dict | None = None) -> tuple[dict, dict, dict]:
    """CPU copies of the model's parameters and buffers by name, with ``moments`` (a
    :func:`moments_of`, or none)."""
    params = {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters()}
    buffers = {n: b.detach().to("cpu", copy=True) for n, b in model.named_buffers()}
    return params, buffers, moments or {}


def moments_of(model, opt) -> dict:
    """CPU copies of AdamW's first moments (``exp_avg``) by parameter name."""
    out = {}
    for n, p in model.named_parameters():
        st = opt.state.get(p, {})
        if "exp_avg" in st:
            out[n] = st["exp_avg"].detach().to("cpu", copy=True)
    return out


def check_steps(step, model, opt, sync) -> tuple[tuple, list[float], float, float]:
    """Runs the check's steps: (the state after them, a :func:`snapshot` whose moments are
    those after the FIRST step; the losses; the first step's wall seconds; all steps' wall
    seconds, without the moments' copy). The first step's moments are its gradients from the
    common start; later steps' depend on the updates before them, where Adam gives an
    element with a gradient at rounding level a full step of either sign."""
    t0 = time.perf_counter()
    losses = [step()]
    sync()
    first = time.perf_counter() - t0
    t1 = time.perf_counter()
    m1 = moments_of(model, opt)
    copy = time.perf_counter() - t1
    losses += [step() for _ in range(CHECK_STEPS - 1)]
    sync()
    total = time.perf_counter() - t0 - copy
    return snapshot(model, m1), [x.item() for x in losses], first, total


def restore(model, state: tuple) -> None:
    """Writes the parameters and buffers of ``state`` (a :func:`snapshot`) back into the
    model's tensors in place, and drops the gradients."""
    import torch

    params, buffers = state[0], state[1]
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(params[n])
            p.grad = None
        for n, b in model.named_buffers():
            b.copy_(buffers[n])


def _rel(items, device: str) -> float:
    """|a - b| / |b| over all the ``(a, b, base)`` items together, ``a - base`` and ``b -
    base`` in place of ``a`` and ``b`` where ``base`` is not None; computed in float64 on
    ``device`` (the tensors are moved there one at a time). inf where an ``a`` is None or a
    value is not finite; 0 where both are all zeros."""
    num = den = 0.0
    for a, b, base in items:
        if a is None:
            return float("inf")
        a, b = a.to(device).double(), b.to(device).double()
        if base is not None:
            base = base.to(device).double()
            a, b = a - base, b - base
        num += (a - b).square().sum().item()
        den += b.square().sum().item()
    err = (num**0.5 / den**0.5) if den > 0 else (0.0 if num == 0 else float("inf"))
    return err if math.isfinite(err) else float("inf")


def compare(init, ref, got, ref_losses, got_losses, device: str = "cpu") -> dict:
    """The check's figures of a variant's state ``got`` after the check steps against a
    reference's ``ref``, both from ``init`` (:func:`check_steps`' snapshots): ``loss_err``
    (relative difference of the first loss: the forward from the common start),
    ``moment_err`` (|m - m_ref| / |m_ref| of AdamW's ``exp_avg`` after the first step over
    all parameters: the first gradients), ``loss3_err`` (largest relative difference of the
    later losses), ``update_err`` (|dW - dW_ref| / |dW_ref| over all parameters, dW = final -
    initial), ``buffer_err`` (largest relative difference of a floating buffer, BatchNorm's
    running statistics; an integer buffer that differs counts as inf). Non-finite values
    give inf. The sums run in float64 on ``device``."""
    import torch

    inf = float("inf")
    errs = []
    for a, b in zip(got_losses, ref_losses, strict=True):
        d = abs(a - b) / max(abs(b), 1e-12)
        errs.append(d if math.isfinite(d) else inf)
    p0 = init[0]
    update_err = _rel(((got[0][n], ref[0][n], p0[n]) for n in p0), device)
    moment_err = _rel(((got[2].get(n), m, None) for n, m in ref[2].items()), device)
    buffer_err = 0.0
    for n, b in ref[1].items():
        g = got[1][n]
        if not b.is_floating_point():
            buffer_err = max(buffer_err, 0.0 if torch.equal(g, b) else inf)
        else:
            buffer_err = max(buffer_err, _rel([(g, b, None)], device))
    return {"loss_err": errs[0] if errs else 0.0, "moment_err": moment_err,
            "loss3_err": max(errs[1:], default=0.0), "update_err": update_err,
            "buffer_err": buffer_err}  # fmt: skip


def passes(check: dict, floor: dict, tol: dict, mult: float = FLOOR_MULT) -> bool:
    """Whether each figure of ``check`` (a variant against the precise reference) is at most
    ``mult`` times ``floor``'s (eager against it) plus ``tol``'s."""
    return all(check[k] <= mult * floor[k] + tol[k] for k in tol)


def tolerances(dtype: str, scale: float = 1.0) -> dict:
    """The absolute tolerances of the check for ``dtype`` ("fp32" or "bf16"), times
    ``scale``."""
    return {k: v * scale for k, v in TOLERANCES[dtype].items()}
