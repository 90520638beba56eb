"""What a compiled graph keeps alive (stages.lower, Lowered.again): once its executor is
built, the ATen FX graph AOTAutograd traced (its nodes and their FakeTensors) is freed when
the lowered graph rebuilds from its cacheable form; lowering again after a frozen parameter
changed rebuilds from that form. A graph without one (a tensor constant that is not a
parameter, a node with a body: here forced by a patched ``graph_format.entry_of``) keeps its
ATen graph and lowers it again. Differential: every call against eager, before and after
in-place weight changes, and the IR text lowered again equals the first lowering's."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from torch_plugin.compiler import stages


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.norm = torch.nn.LayerNorm(16)
        self.fc2 = torch.nn.Linear(16, 8)
        self.register_buffer("c", torch.randn(8))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor]:
        return (self.fc2(torch.nn.functional.gelu(self.norm(self.fc1(x)))) + self.c,)


@pytest.fixture(name="aten_graphs")
def _aten_graphs(monkeypatch: pytest.MonkeyPatch) -> list:
    """Weak references to every ATen FX graph lowered during the test."""
    refs: list = []
    lower = stages.lower

    def record(gm, *args, **kwargs):
        refs.append(weakref.ref(gm))
        return lower(gm, *args, **kwargs)

    monkeypatch.setattr(stages, "lower", record)
    return refs


def _check(compiled, model) -> None:
    for _ in range(2):
        x = torch.randn(4, 8)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x)[0], model(x)[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cacheable", [True, False])
def test_aten_graph_is_freed_and_lowering_again_matches(
    cacheable, aten_graphs, graphs, compile_plugin, monkeypatch, tmp_path
) -> None:
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(tmp_path))  # traced, not a cache hit
    if not cacheable:
        monkeypatch.setattr(stages.graph_format, "entry_of", lambda *args: None)
    torch.manual_seed(0)
    model = Block().eval()
    with torch.no_grad():
        compiled = compile_plugin(model, torch.randn(4, 8))
    _check(compiled, model)
    gc.collect()
    assert len(aten_graphs) == 1 and len(graphs) == 1
    # Freed when the graph has a cacheable form, else kept to lower again.
    assert (aten_graphs[0]() is None) == cacheable
    first_ir = graphs[0].ir

    with torch.no_grad():
        model.fc1.weight.mul_(-1.5)  # in place: the frozen-argument check lowers again
    _check(compiled, model)
    assert graphs[0].ir == first_ir  # same graph, lowered again for the new version
    with torch.no_grad():
        model.norm.bias.add_(0.25)
        model.fc2.weight.copy_(torch.randn(8, 16))
        model.c.fill_(-3.0)
    _check(compiled, model)
    # The IR of the lowered graph, lowered again on access, is the first lowering's.
    assert str(graphs[0].ir_graph) == first_ir
