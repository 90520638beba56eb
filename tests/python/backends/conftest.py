"""Fixtures for the backend tests: small FX graphs made with torch.fx.symbolic_trace (no
capture involved), and a registry that each test may change freely."""

import pytest
import torch

from torch_plugin import config
from torch_plugin.backends import registry


@pytest.fixture(autouse=True)
def _isolated_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed the RNG; undo registrations and config changes made by the test."""
    torch.manual_seed(0)
    registry.list_backends()  # register the built-ins before taking the copy
    monkeypatch.setattr(registry, "_BACKENDS", dict(registry._BACKENDS))
    monkeypatch.setattr(registry, "_MODES", dict(registry._MODES))
    monkeypatch.setattr(registry, "_OPTIONS", dict(registry._OPTIONS))
    monkeypatch.setattr(config, "suppress_errors", False)


def cos_plus_sin(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    a = torch.cos(x)
    b = torch.sin(y)
    return a + b


class MLP(torch.nn.Module):
    """Reads a parameter and a buffer directly (get_attr nodes) and calls submodules
    (call_module nodes); returns a nested structure."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.rand(16) + 0.5)
        self.register_buffer("shift", torch.randn(16))
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> dict:
        h = torch.relu(self.fc1(x * self.scale + self.shift))
        out = self.fc2(h)
        return {"out": out, "parts": (h.sum(dim=1), torch.tanh(out))}


@pytest.fixture
def pointwise_graph() -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(cos_plus_sin)


@pytest.fixture
def mlp() -> MLP:
    return MLP()
