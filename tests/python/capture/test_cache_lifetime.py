"""Compiled frames do not keep the user's objects alive.

A first capture is specialized to the module it ran on: the guards compare the module and
its parameters by identity (ID_MATCH) and the compiled graph holds the parameters. Before,
the guard held a strong reference to each such object and the compiled graph stayed
installed in the module's globals, so a model handed to ``optimize`` lived (with its
weights, and under FSDP2 its process groups) until ``torch_plugin.reset()``; torch.compile
frees it. Now an ID_MATCH on an object that supports weak references watches its lifetime:
when it dies the entry is dropped and the compiled graph with it
(csrc/capture/guards.h, ``RootGuardManager::watch_lifetime``).

The tests free models and check, through weak references, that the model and its weights
are gone; that a new model of the same class (often at the address of the dead one) never
runs the dead model's entry, compared with an eager twin over calls; and that dropped
entries no longer count against ``config.cache_size_limit``.
"""

from __future__ import annotations

import copy
import gc
import sys
import warnings
import weakref

import pytest
import torch
from torch import nn

import torch_plugin
from torch_plugin import _C

pytestmark = pytest.mark.usefixtures("fresh_capture")

BACKENDS = ["eager", "aot_eager", "plugin"]


class Net(nn.Module):
    def __init__(self, graph_break: bool = False) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(8)
        self.b = nn.Linear(8, 3)
        self.graph_break = graph_break

    def forward(self, x):
        x = self.bn(self.a(x)).relu()
        if self.graph_break:
            print(end="")  # a graph break: the rest runs in a resume function
        return self.b(x)


def _collect() -> None:
    # Two passes: the first runs the weak-reference callbacks that drop the entries, whose
    # compiled graphs (GraphModule <-> Graph cycles) the second pass frees.
    gc.collect()
    gc.collect()


def _global_state() -> tuple:
    return (torch.is_grad_enabled(), torch.get_default_dtype(), torch.is_autocast_enabled("cpu"))


def _train_compiled(backend: str, graph_break: bool, steps: int = 3):
    """Trains a fresh Net compiled with ``backend`` next to an eager twin; checks each
    step; returns weak references to the compiled model and its weights."""
    torch.manual_seed(len(backend))
    model = Net(graph_break)
    twin = copy.deepcopy(model)
    compiled = torch_plugin.optimize(backend)(model)
    for step in range(steps):
        x = torch.randn(6, 8)
        state = _global_state()
        got, want = compiled(x), twin(x)
        assert _global_state() == state
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
        got.square().mean().backward()
        want.square().mean().backward()
        for (name, p), q in zip(model.named_parameters(), twin.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
        for (name, buf), other in zip(model.named_buffers(), twin.buffers()):
            assert torch.equal(buf, other), (step, name)
    refs = [weakref.ref(model), *(weakref.ref(p) for p in model.parameters())]
    return refs


def _live_entries() -> int:
    from torch_plugin.capture.convert_frame import seen_code_objects

    return sum(len(_C.cache_entries(code)) for code in list(seen_code_objects))


def _installed_globals() -> list[str]:
    names = []
    for mod in (sys.modules[__name__], sys.modules["torch.nn.modules.module"]):
        names += [k for k in vars(mod) if k.startswith("__torch_plugin_")]
    return names


@pytest.mark.parametrize("graph_break", [False, True], ids=["one_graph", "graph_break"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_deleted_model_and_weights_are_freed(backend, graph_break):
    stats = torch_plugin.capture.convert_frame.stats
    before = stats.graphs_compiled
    refs = _train_compiled(backend, graph_break)
    assert stats.graphs_compiled - before == (2 if graph_break else 1)
    _collect()
    alive = [r() is not None for r in refs]
    assert not any(alive), f"model / parameters still alive after del: {alive}"
    assert _live_entries() == 0, "the dead model's entries were dropped"
    assert not _installed_globals(), "its compiled graphs were uninstalled"


@pytest.mark.parametrize("backend", BACKENDS)
def test_new_model_never_runs_a_dead_models_entry(backend):
    """Models built and dropped in a loop (a sweep) often reuse the dead model's address;
    each one must compute with its own weights, buffers and mode, as its eager twin."""
    compiled_frames = []
    for i in range(6):
        torch.manual_seed(100 + i)
        model = Net()
        if i % 2:
            model.eval()
        twin = copy.deepcopy(model)
        fn = torch_plugin.optimize(backend)(model)
        for _ in range(2):
            x = torch.randn(5, 8)
            torch.testing.assert_close(fn(x), twin(x), rtol=1e-4, atol=1e-5)
        for buf, other in zip(model.buffers(), twin.buffers()):
            assert torch.equal(buf, other), i
        compiled_frames.append(_live_entries())
        del model, twin, fn
        _collect()
    # Every model compiled its own entry; the dead ones were dropped, so only the live
    # model's entry is there while it runs.
    assert compiled_frames == [compiled_frames[0]] * 6, compiled_frames
    assert _live_entries() == 0


def test_dropped_entries_do_not_count_against_the_cache_size_limit(monkeypatch):
    monkeypatch.setattr(torch_plugin.config, "cache_size_limit", 2)
    before = torch_plugin.capture.convert_frame.stats.graphs_compiled
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the cache_size_limit warning would fail here
        for i in range(5):
            torch.manual_seed(i)
            model = Net().eval()
            twin = copy.deepcopy(model)
            fn = torch_plugin.optimize("eager")(model)
            x = torch.randn(4, 8)
            torch.testing.assert_close(fn(x), twin(x))
            del model, twin, fn
            _collect()
    assert torch_plugin.capture.convert_frame.stats.graphs_compiled - before == 5
    from torch_plugin.capture.convert_frame import seen_code_objects

    assert not any(_C.is_code_run_only(code) for code in list(seen_code_objects))


def test_live_model_keeps_its_entry_and_an_invalidated_tree_says_why():
    model = Net().eval()
    twin = copy.deepcopy(model)
    fn = torch_plugin.optimize("aot_eager")(model)
    x = torch.randn(4, 8)
    fn(x)
    _collect()
    from torch_plugin.capture.convert_frame import seen_code_objects

    [guard] = [g for code in list(seen_code_objects) for _, g in _C.cache_entries(code)]
    assert not guard.invalidated
    compiled = torch_plugin.capture.convert_frame.stats.graphs_compiled
    torch.testing.assert_close(fn(x), twin(x))  # reused, not recompiled
    assert torch_plugin.capture.convert_frame.stats.graphs_compiled == compiled
    model.a = nn.Linear(8, 8)  # the old Linear (ID_MATCHed) dies
    _collect()
    assert guard.invalidated
    assert _live_entries() == 0
    assert "deleted" in guard.failure_reason((model, x), globals(), __builtins__, None)
    twin.a = copy.deepcopy(model.a)
    torch.testing.assert_close(fn(x), twin(x))


def test_objects_without_weak_references_are_still_held():
    """An ID_MATCH on an object that cannot be weakly referenced keeps it (so its id is
    never reused while the entry lives)."""
    root = _C.RootGuardManager()
    token = object()  # plain object(): no weak references
    root.global_("token").add_id_match(token, "G['token'] is token")
    before = sys.getrefcount(token)
    del root
    assert sys.getrefcount(token) == before - 1
