"""Folded constants are shared across compilations of the same frozen parameters.

A graph with symbolic sizes is compiled once per concrete size (size_variants.py); each
variant runs the pass pipeline again, and constant folding used to make a new copy of every
folded weight per variant (a dtype conversion under autocast: ViT-B/16's 165 MB of bf16
weights per batch size). The constant-folding pass memoizes its results by the identity and
version of their inputs (csrc/compiler/passes/constant_folding.cpp): variants share one
folded tensor, and a parameter changed in place is folded again (its version changed).
Differential: every call is compared with eager."""

from __future__ import annotations

import torch

import torch_plugin


class CastWeight(torch.nn.Module):
    """A weight converted to another dtype in forward: folded at compile time."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(32, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.w.to(torch.float64)) + 1.0


def _folded(graph) -> list[torch.Tensor]:
    """The float64 [32, 16] constants of a compiled graph's executor (the folded weight)."""
    return [
        t
        for t in graph.executor.constants()
        if t.dtype == torch.float64 and tuple(t.shape) == (32, 16)
    ]


def test_size_variants_share_a_folded_weight(graphs) -> None:
    torch.manual_seed(0)
    torch_plugin.reset()
    model = CastWeight().eval()
    compiled = torch_plugin.optimize("plugin", dynamic=True)(model)
    with torch.no_grad():
        for batch in (3, 5, 7, 5):
            x = torch.randn(batch, 32, dtype=torch.float64)
            torch.testing.assert_close(compiled(x), model(x))
    folded = [t for g in graphs for t in _folded(g)]
    assert len(graphs) >= 3 and len(folded) >= 3, (len(graphs), len(folded))
    assert len({t.untyped_storage().data_ptr() for t in folded}) == 1, "a copy per variant"
    # The module's own weight is not the folded tensor (another dtype): one extra copy in all.
    assert folded[0].untyped_storage().data_ptr() != model.w.untyped_storage().data_ptr()


def test_a_parameter_changed_in_place_is_folded_again(graphs) -> None:
    torch.manual_seed(0)
    torch_plugin.reset()
    model = CastWeight().eval()
    compiled = torch_plugin.optimize("plugin", dynamic=True)(model)
    with torch.no_grad():
        for batch in (3, 5):
            x = torch.randn(batch, 32, dtype=torch.float64)
            torch.testing.assert_close(compiled(x), model(x))
        before = {t.untyped_storage().data_ptr() for g in graphs for t in _folded(g)}
        model.w.mul_(-2.0)  # a new version: the folded copy of the old values must not serve
        for batch in (7, 3, 5):
            x = torch.randn(batch, 32, dtype=torch.float64)
            torch.testing.assert_close(compiled(x), model(x))
    after = {t.untyped_storage().data_ptr() for g in graphs[-1:] for t in _folded(g)}
    assert after and not (after & before), "the folded copy of the old weight was reused"


def test_inference_mode_parameters_are_not_frozen() -> None:
    """Parameters made under ``torch.inference_mode`` have no version counter, so a write to
    them cannot be seen: they stay graph inputs (no folded copy that could go stale), and
    results match eager call after call, also after such a write."""
    torch.manual_seed(0)
    torch_plugin.reset()
    with torch.inference_mode():
        model = CastWeight().eval()
        compiled = torch_plugin.optimize("plugin", dynamic=True)(model)
        for batch in (3, 5, 3):
            x = torch.randn(batch, 32, dtype=torch.float64)
            torch.testing.assert_close(compiled(x), model(x))
        model.w.mul_(-2.0)  # no version bump for an inference tensor
        for batch in (5, 3):
            x = torch.randn(batch, 32, dtype=torch.float64)
            torch.testing.assert_close(compiled(x), model(x))
