"""Reads that capture turns into guarded constants instead of graph breaks (issue #12):
the process environment (``os.environ.get``, ``os.environ[k]``, ``k in os.environ``,
``os.getenv``), ``torch.finfo``/``torch.iinfo`` attributes, dataclass ``Field`` attributes,
and slices of ``nn.ModuleList``/``nn.Sequential``. Each case runs over several calls
against eager (compiling, cached, and a call whose guard fails and recompiles) and checks
the graph and break counts."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture")

_VAR = "TORCH_PLUGIN_TEST_CONSTANT_READS"


@pytest.fixture
def env_var():
    old = os.environ.pop(_VAR, None)
    yield _VAR
    os.environ.pop(_VAR, None)
    if old is not None:
        os.environ[_VAR] = old


def _environ_get(x):
    if os.environ.get(_VAR, "0") == "1":
        return x * 2
    return x + 1


def _environ_contains_and_item(x):
    if _VAR in os.environ:
        return x * float(os.environ[_VAR])
    return x - 1


def _getenv(x):
    return x + len(os.getenv(_VAR, ""))


@pytest.mark.parametrize("fn", [_environ_get, _environ_contains_and_item, _getenv])
def test_environment_reads_are_guarded_constants(fn, env_var):
    opt = torch_plugin.optimize("eager")(fn)
    # unset, unset again (cached), set (guard fails: recompiles), set to another value,
    # unset again (the first entry serves it)
    for value in (None, None, "1", "3", None):
        if value is None:
            os.environ.pop(env_var, None)
        else:
            os.environ[env_var] = value
        x = torch.randn(4)
        torch.testing.assert_close(opt(x), fn(x))
    assert torch_plugin.stats.graph_breaks == []
    assert torch_plugin.stats.graphs_compiled == 3


def test_environment_read_with_a_key_known_only_at_run_time_breaks(env_var):
    def f(x, key):
        return x + len(os.environ.get(key, ""))

    opt = torch_plugin.optimize("eager")(f)
    os.environ[env_var] = "abc"
    for _ in range(2):
        x = torch.randn(3)
        torch.testing.assert_close(opt(x, env_var), f(x, env_var))


def test_finfo_and_iinfo_attributes_are_constants():
    def f(x, mask):
        big = torch.finfo(x.dtype).min
        top = torch.iinfo(torch.int32).max
        return x.masked_fill(mask, big), torch.tensor(top)

    opt = torch_plugin.optimize("eager")(f)
    for dtype in (torch.float32, torch.float32, torch.float16):  # the last recompiles
        x = torch.randn(5).to(dtype)
        mask = torch.rand(5) < 0.5
        for got, want in zip(opt(x, mask), f(x, mask)):
            torch.testing.assert_close(got, want)
    assert torch_plugin.stats.graph_breaks == []
    assert torch_plugin.stats.graphs_compiled == 2


@dataclasses.dataclass
class _Options:
    scale: float = 2.5
    shift: float = -1.0


def test_dataclass_field_attributes_are_read():
    def f(x):
        fields = {field.name: field.default for field in dataclasses.fields(_Options)}
        return x * fields["scale"] + fields["shift"]

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(3):
        x = torch.randn(4)
        torch.testing.assert_close(opt(x), f(x))
    assert torch_plugin.stats.graph_breaks == []


class _Stack(torch.nn.Module):
    def __init__(self, container: type, n: int = 4) -> None:
        super().__init__()
        layers = [torch.nn.Linear(6, 6) for _ in range(n)]
        self.layers = (
            torch.nn.ModuleList(layers) if container is torch.nn.ModuleList else container(*layers)
        )
        self.used = n - 1

    def forward(self, x):
        for layer in self.layers[: self.used]:
            x = torch.relu(layer(x))
        tail = self.layers[1:][::2]  # a slice of a slice
        assert isinstance(tail, type(self.layers))
        x = x + len(tail)
        x = tail[-1](x)
        if isinstance(self.layers, torch.nn.Sequential):
            x = self.layers[2:](x)  # a Sequential slice is callable
        return x


@pytest.mark.parametrize("container", [torch.nn.ModuleList, torch.nn.Sequential])
def test_module_container_slices_are_inlined(container):
    torch.manual_seed(0)
    model = _Stack(container)
    opt = torch_plugin.optimize("eager")(model)
    for _ in range(3):
        x = torch.randn(2, 6)
        torch.testing.assert_close(opt(x), model(x))
    assert torch_plugin.stats.graph_breaks == []
    assert torch_plugin.stats.graphs_compiled == 1
    with torch.no_grad():  # the children are guarded through the parent: new weights show
        model.layers[0].weight.mul_(2)
    x = torch.randn(2, 6)
    torch.testing.assert_close(opt(x), model(x))
