"""Shared helpers of the "plugin" compiler tests: compile through the backend directly
(``plugin(gm, example_inputs)``), so these tests do not depend on capture."""

from collections.abc import Callable
from typing import Any

import pytest
import torch


def compile_plugin(fn: Callable[..., Any], *example_inputs: Any) -> Callable[..., Any]:
    from torch_plugin.backends.plugin import plugin

    gm = fn if isinstance(fn, torch.fx.GraphModule) else torch.fx.symbolic_trace(fn)
    return plugin(gm, list(example_inputs))


def assert_close(got: Any, want: Any, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert_close(g, w, rtol, atol)
        return
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)


@pytest.fixture(name="graphs")
def _graphs(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every CompiledGraph built during the test."""
    from torch_plugin.compiler import stages as compile_mod

    built: list = []
    init = compile_mod.CompiledGraph.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(compile_mod.CompiledGraph, "__init__", record)
    return built


@pytest.fixture(name="compile_plugin")
def _compile_plugin_fixture() -> Callable[..., Any]:
    return compile_plugin


@pytest.fixture(name="assert_close")
def _assert_close_fixture() -> Callable[..., None]:
    return assert_close


@pytest.fixture(autouse=True)
def _verify_ir(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_PLUGIN_VERIFY", "1")
