"""nn.Module registries read inside captured code: ``children()``, ``modules()``,
``parameters()`` and the other tree walks (timm's RegNet iterates ``self.children()``), and
what such reads depend on. Each test compares with eager over calls; the module is changed
between calls (a module appended to a Sequential, a hook registered on an inner module) and
the compiled code must notice: before these guards existed, both gave the old answer."""

from __future__ import annotations

from typing import Dict, List, Optional  # noqa: UP035 (typing's aliases are what is tested)

import pytest
import torch
from torch import nn

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture")


def _global_state() -> tuple:
    return (torch.is_grad_enabled(), torch.get_default_dtype(), torch.is_autocast_enabled("cpu"))


def _check(opt, model, make_input, calls=3):
    for _ in range(calls):
        x = make_input()
        state = _global_state()
        got = opt(x)
        assert _global_state() == state, "the compiled call changed global torch state"
        torch.testing.assert_close(got, model(x))


class Walks(nn.Module):
    """Uses every tree walk in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x):
        for child in self.children():
            x = child(x)
        for name, child in self.named_children():
            if name == "a":
                x = x + child(x)
        n_modules = len(list(self.modules()))
        names = [n for n, _ in self.named_modules()]
        total = sum(p.sum() for p in self.parameters())
        weights = {n: p for n, p in self.named_parameters() if n.endswith("weight")}
        first = next(self.parameters())
        (buf,) = list(self.buffers())
        (name_buf,) = [n for n, _ in self.named_buffers()]
        y = x * buf + total + first.mean() + weights["b.0.weight"].sum()
        return y * n_modules + len(names) + len(name_buf)


def test_tree_walks_match_eager_in_one_graph():
    torch.manual_seed(0)
    model = Walks()
    opt = torch_plugin.optimize("eager")(model)
    _check(opt, model, lambda: torch.randn(3, 4))
    assert torch_plugin.stats.graph_breaks == []
    assert torch_plugin.stats.graphs_compiled == 1


def test_parameters_walk_sees_an_in_place_update():
    """The walked parameters are the module's own tensors (get_attr), not copies: an
    optimizer step between calls shows."""
    torch.manual_seed(0)
    model = Walks()
    opt = torch_plugin.optimize("eager")(model)
    x = torch.randn(3, 4)
    torch.testing.assert_close(opt(x), model(x))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.5)
    torch.testing.assert_close(opt(x), model(x))
    assert torch_plugin.stats.graphs_compiled == 1


def test_walk_with_arguments():
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))

        def forward(self, x):
            own = list(self.parameters(recurse=False))
            named = [n for n, _ in self.inner.named_parameters(prefix="p")]
            return x * (len(own) + len(named))

    model = M()
    opt = torch_plugin.optimize("eager")(model)
    _check(opt, model, lambda: torch.randn(2))


def test_appending_to_a_sequential_after_capture_recompiles():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    opt = torch_plugin.optimize("eager")(model)
    _check(opt, model, lambda: torch.randn(2, 4))
    model.append(nn.Linear(4, 4))
    _check(opt, model, lambda: torch.randn(2, 4))
    del model[0]
    _check(opt, model, lambda: torch.randn(2, 4))
    # Three compiles; the third is not counted as a recompile: the deleted Linear was
    # guarded by identity, so its death dropped both earlier entries.
    assert torch_plugin.stats.graphs_compiled == 3


def test_changing_a_module_list_read_by_children_recompiles():
    class Stack(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(4, 4)])

        def forward(self, x):
            for layer in self.layers.children():
                x = layer(x)
            return x, len(self.layers)

    torch.manual_seed(0)
    model = Stack()
    opt = torch_plugin.optimize("eager")(model)
    x = torch.randn(2, 4)
    torch.testing.assert_close(opt(x), model(x))
    model.layers.append(nn.Linear(4, 4))
    torch.testing.assert_close(opt(x), model(x))
    model.layers.insert(0, nn.Tanh())
    torch.testing.assert_close(opt(x), model(x))


def test_adding_to_a_module_dict_recompiles():
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.heads = nn.ModuleDict({"a": nn.Linear(4, 2)})

        def forward(self, x):
            return [head(x) for head in self.heads.values()]

    torch.manual_seed(0)
    model = M()
    opt = torch_plugin.optimize("eager")(model)
    x = torch.randn(2, 4)
    torch.testing.assert_close(opt(x), model(x))
    model.heads["b"] = nn.Linear(4, 3)
    torch.testing.assert_close(opt(x), model(x))


@pytest.mark.parametrize("kind", ["forward", "forward_pre", "global_forward"])
def test_hook_registered_after_capture_runs(kind):
    """A hook added to an inner module after its call was inlined into a graph: the next
    call must run it, as eager does."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = torch_plugin.optimize("eager")(model)
    _check(opt, model, lambda: torch.randn(2, 4))
    if kind == "forward":
        handle = model[1].register_forward_hook(lambda m, i, out: out * 3)
    elif kind == "forward_pre":
        handle = model[2].register_forward_pre_hook(lambda m, args: (args[0] + 1,))
    else:
        handle = nn.modules.module.register_module_forward_hook(lambda m, i, out: out + 1)
    try:
        _check(opt, model, lambda: torch.randn(2, 4))
    finally:
        handle.remove()
    # removed again: the first entry's guards pass again
    _check(opt, model, lambda: torch.randn(2, 4))


def test_hook_on_a_submodule_of_a_call_module_leaf():
    """A torch.nn module recorded as one call_module node (TransformerEncoderLayer runs its
    own submodules): a hook registered later on one of those submodules must run."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0).eval()
    model = nn.Sequential(layer)
    opt = torch_plugin.optimize("eager")(model)
    with torch.no_grad():
        _check(opt, model, lambda: torch.randn(3, 2, 8))
        handle = layer.linear2.register_forward_hook(lambda m, i, out: out * 0)
        try:
            _check(opt, model, lambda: torch.randn(3, 2, 8))
        finally:
            handle.remove()


def test_type_annotations_built_in_forward():
    """``torch.jit.annotate(List[Tensor], [])`` (timm's CrossViT) and typing subscripts are
    values of the capture, not graph breaks."""

    def f(x):
        outs = torch.jit.annotate(List[torch.Tensor], [])  # noqa: UP006
        table: Dict[str, Optional[int]] = {}  # noqa: UP006, UP045
        for i in range(2):
            outs.append(x * i)
        hint = tuple[int, ...]
        return torch.stack(outs), table, hint

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(2):
        x = torch.randn(3)
        got, want = opt(x), f(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:]
    assert torch_plugin.stats.graph_breaks == []
