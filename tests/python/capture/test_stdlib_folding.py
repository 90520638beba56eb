"""Standard-library helpers that capture runs for real on constant arguments (copy, dataclasses,
inspect, ...; capture/skipfiles.py ``_PURE_STDLIB``) never fold a user object's or module's
attributes into the capture: such an object is a constant by identity only, so
``copy.deepcopy(config)`` or ``dataclasses.asdict(config)`` folded once gave the first call's
attributes on every later call (a silent wrong result once the caller changed the config).
Type-only helpers (``dataclasses.fields``, ``inspect.isclass``, ...) still fold."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture")


class Config:
    def __init__(self):
        self.scale = 2.0
        self.shift = 1.0
        self.names = ["a"]


@dataclasses.dataclass
class DataConfig:
    scale: float = 2.0
    shift: float = 1.0


CONFIG = Config()
DATA = DataConfig()


def _deepcopy(x):
    c = copy.deepcopy(CONFIG)
    return x * c.scale + c.shift + len(c.names)


def _copy(x):
    c = copy.copy(CONFIG)
    return x * c.scale - c.shift


def _asdict(x):
    d = dataclasses.asdict(DATA)
    return x * d["scale"] + d["shift"]


def _astuple_replace(x):
    scale, shift = dataclasses.astuple(dataclasses.replace(DATA, shift=3.0))
    return x * scale + shift


def _mutations():
    """Changes to the globals between calls (None: none)."""

    def scale():
        CONFIG.scale = 5.0
        DATA.scale = 5.0

    def shift_and_names():
        CONFIG.shift = -4.0
        CONFIG.names.append("b")
        DATA.shift = -4.0

    return [None, None, scale, shift_and_names]


@pytest.fixture(autouse=True)
def _fresh_globals():
    global CONFIG, DATA
    CONFIG, DATA = Config(), DataConfig()
    yield
    CONFIG, DATA = Config(), DataConfig()


@pytest.mark.parametrize("backend", ["eager", "plugin"])
@pytest.mark.parametrize("fn", [_deepcopy, _copy, _asdict, _astuple_replace])
def test_folded_helpers_follow_attribute_changes(fn, backend):
    opt = torch_plugin.optimize(backend)(fn)
    for change in _mutations():
        if change is not None:
            change()
        x = torch.randn(4)
        torch.testing.assert_close(opt(x), fn(x))


def test_type_only_helpers_still_fold_on_user_objects():
    def fn(x):
        names = [f.name for f in dataclasses.fields(DATA)]
        if dataclasses.is_dataclass(DATA) and "scale" in names:
            return x * DATA.scale
        return x

    opt = torch_plugin.optimize("eager")(fn)
    for change in _mutations():
        if change is not None:
            change()
        x = torch.randn(4)
        torch.testing.assert_close(opt(x), fn(x))
    report = torch_plugin.explain(fn, torch.randn(4))
    assert report.graph_break_count == 0, report.break_reasons


def test_deep_copies_fold_with_the_objects_state_guarded():
    """copy.deepcopy / dataclasses.asdict of a plain object still fold (one graph, HF's
    get_text_config idiom), with every attribute they read guarded: a change recompiles."""
    for fn in (_deepcopy, _asdict):
        torch_plugin.reset()
        report = torch_plugin.explain(fn, torch.randn(4))
        assert report.graph_break_count == 0, report.break_reasons
        opt = torch_plugin.optimize("eager")(fn)
        x = torch.randn(4)
        torch.testing.assert_close(opt(x), fn(x))
        before = torch_plugin.stats.graphs_compiled
        CONFIG.names.append("c")  # what _deepcopy reads
        DATA.shift += 1.0  # what _asdict reads
        torch.testing.assert_close(opt(x), fn(x))
        assert torch_plugin.stats.graphs_compiled == before + 1


class _WithTensor:
    def __init__(self):
        self.table = torch.ones(3)
        self.scale = 2.0


HOLDER = _WithTensor()


def test_deep_copy_of_an_object_holding_a_tensor_is_not_folded():
    def fn(x):
        c = copy.deepcopy(HOLDER)
        return x * c.scale + c.table.sum()

    opt = torch_plugin.optimize("eager")(fn)
    for step in range(3):
        if step == 2:
            HOLDER.table.mul_(3)
        x = torch.randn(4)
        torch.testing.assert_close(opt(x), fn(x))


def test_shallow_copy_shares_attribute_values_with_the_original():
    """copy.copy never folds on a user object: the copy's list is the original's, and an
    append through the copy must reach it."""

    def fn(x):
        c = copy.copy(CONFIG)
        c.names.append("z")
        return x * len(CONFIG.names)

    opt = torch_plugin.optimize("eager")(fn)
    want_names = list(CONFIG.names)
    for _ in range(3):
        x = torch.randn(4)
        got = opt(x)
        want_names.append("z")
        torch.testing.assert_close(got, x * len(want_names))
        assert CONFIG.names == want_names


@dataclasses.dataclass
class _Output:
    """Built anew on every call; its __post_init__ reads the fields, then breaks the graph."""

    value: torch.Tensor
    extra: torch.Tensor | None = None

    def __post_init__(self):
        self.total = self.value.sum() * len(dataclasses.fields(self))
        print(end="")  # a graph break in an inlined call: this frame is captured on its own


def test_fields_of_a_new_object_guards_its_type_not_its_identity():
    """``dataclasses.fields(self)`` on an object built per call (HF ModelOutput.__post_init__
    after a graph break) must not guard the object's identity: the guard could never hold
    again, and every call recompiled the frame until cache_size_limit."""
    from torch_plugin.capture import convert_frame

    def f(x):
        y = x.cos()
        print(end="")
        out = _Output(y * 2)
        return out.total + out.value

    records = []
    convert_frame.listeners.append(records.append)
    try:
        opt = torch_plugin.optimize("eager")(f)
        for _ in range(4):
            x = torch.randn(5)
            torch.testing.assert_close(opt(x), f(x))
    finally:
        convert_frame.listeners.remove(records.append)
    post_init = [r for r in records if r.code is _Output.__post_init__.__code__]
    assert len(post_init) == 1, [r.guards for r in post_init]


# --- list.sort and OrderedDict construction (issue #12, item 12 and 1) ----------------------
_SORTED_GLOBAL = [3, 1, 2]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_list_sort_of_constants_stays_in_the_graph(backend):
    def f(x):
        local = [5, 2, 9, 1]
        local.sort()
        names = ["b", "a", "c"]
        names.sort(reverse=True)
        return x * local[0] + local[-1], names

    opt = torch_plugin.optimize(backend)(f)
    for _ in range(3):
        x = torch.randn(3)
        (got, gn), (want, wn) = opt(x), f(x)
        torch.testing.assert_close(got, want)
        assert gn == wn == ["c", "b", "a"]
    assert torch_plugin.stats.graph_breaks == []


def test_sorting_a_global_list_is_replayed():
    def f(x):
        _SORTED_GLOBAL.sort()
        return x * _SORTED_GLOBAL[0]

    opt = torch_plugin.optimize("eager")(f)
    for i in range(3):
        _SORTED_GLOBAL[:] = [3 + i, 1 + i, 2 + i]
        x = torch.randn(2)
        torch.testing.assert_close(opt(x), x * (1 + i))
        assert _SORTED_GLOBAL == [1 + i, 2 + i, 3 + i]  # sorted in place, as in eager


def test_list_sort_with_a_key_or_tensors_breaks_and_matches_eager():
    def f(x):
        words = ["bb", "a"]
        words.sort(key=len)
        return x * len(words[0]), sorted([1, 0])

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(2):
        x = torch.randn(3)
        (got, gs), (want, ws) = opt(x), f(x)
        torch.testing.assert_close(got, want)
        assert gs == ws


def test_ordereddict_built_in_captured_code():
    import collections

    def f(x):
        d = collections.OrderedDict(b=x * 2)
        d["a"] = x + 1
        return d

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(3):
        x = torch.randn(3)
        got, want = opt(x), f(x)
        assert type(got) is collections.OrderedDict and list(got) == list(want) == ["b", "a"]
        for k in want:
            torch.testing.assert_close(got[k], want[k])
    assert torch_plugin.stats.graph_breaks == []
