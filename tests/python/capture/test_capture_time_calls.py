"""Calls captured code makes that run at capture time or vanish, checked against eager over
several calls (issue #12): writes to a ``copy.deepcopy`` made in the captured code (HF
configs' ``get_text_config``: ``delattr``/``setattr`` on the copy), ``setattr`` on a user
object, ``functools.lru_cache`` helpers, ``torch._dynamo.assume_constant_result`` functions,
``importlib.util.find_spec``/``importlib.metadata.version``, and ``logger.debug`` when the
logger drops the record. Each compares outputs, the user's objects after the call and the
graphs and breaks counted."""

from __future__ import annotations

import copy
import functools
import importlib.metadata
import importlib.util
import logging

import pytest
import torch

import torch_plugin

pytestmark = pytest.mark.usefixtures("fresh_capture")


def _no_breaks():
    assert torch_plugin.stats.graph_breaks == [], torch_plugin.stats.graph_breaks


class Config:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class MappedConfig(Config):
    """A config whose ``__setattr__`` maps names (as HF's ``attribute_map`` does); traced."""

    attribute_map = {"layers": "num_layers"}  # noqa: RUF012 - as HF's configs declare it

    def __setattr__(self, key, value):
        key = self.attribute_map.get(key, key)
        super().__setattr__(key, value)


def _renamed(config):
    out = copy.deepcopy(config)
    for key in ("dec_scale", "dec_layers", "shift"):  # HF iterates config.to_dict()
        if key.startswith("dec_") and hasattr(out, key):
            value = getattr(out, key)
            delattr(out, key)
            setattr(out, key[4:], value)
    return out


@pytest.mark.parametrize("cls", [Config, MappedConfig])
def test_writes_to_a_deep_copy_stay_in_the_capture(cls):
    config = cls(dec_scale=3.0, dec_layers=2, shift=1.0)

    def f(x):
        c = _renamed(config)
        n = c.num_layers if cls is MappedConfig else c.layers
        return x * c.scale * n + c.shift

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(3):
        x = torch.randn(4)
        torch.testing.assert_close(opt(x), f(x))
    _no_breaks()
    assert torch_plugin.stats.graphs_compiled == 1
    # the user's config is untouched (only the copy was written)
    assert vars(config) == {"dec_scale": 3.0, "dec_layers": 2, "shift": 1.0}
    # a changed config recompiles and is read anew
    config.dec_scale = 5.0
    x = torch.randn(4)
    torch.testing.assert_close(opt(x), f(x))


def test_a_written_copy_that_escapes_is_not_shared_between_calls():
    config = Config(dec_scale=2.0)

    def f(x):
        c = _renamed(config)
        return x * c.scale, c

    opt = torch_plugin.optimize("eager")(f)
    outs = []
    for _ in range(3):
        x = torch.randn(3)
        (y, c), (y_ref, c_ref) = opt(x), f(x)
        torch.testing.assert_close(y, y_ref)
        assert vars(c) == vars(c_ref) == {"scale": 2.0}
        outs.append(c)
    # each call hands out its own copy, as eager does
    assert len({id(c) for c in outs}) == 3
    # the escape is refused (the frame runs as it is), never shared state
    assert any("escapes" in str(f) for f in torch_plugin.stats.failures)


def test_setattr_on_a_user_object_is_replayed_on_each_call():
    class State:
        pass

    state = State()

    def f(x):
        setattr(state, "last", x.sum())  # noqa: B010 - the builtin is what is tested
        setattr(state, "count", 7)  # noqa: B010
        return x + 1

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(3):
        x = torch.randn(5)
        torch.testing.assert_close(opt(x), x + 1)
        torch.testing.assert_close(state.last, x.sum())
        assert state.count == 7
    _no_breaks()


_calls = []


@functools.lru_cache
def _cached_scale(name):
    _calls.append(name)
    return {"a": 2.0, "b": 3.0}[name]


def test_lru_cache_helper_is_inlined():
    def f(x):
        return x * _cached_scale("a") + _cached_scale("b")

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(3):
        x = torch.randn(4)
        torch.testing.assert_close(opt(x), x * 2.0 + 3.0)
    _no_breaks()


_probed = []


@torch._dynamo.assume_constant_result
def _platform_factor():
    _probed.append(1)
    return 4.0


def test_assume_constant_result_runs_at_capture_time():
    def f(x):
        return x * _platform_factor()

    opt = torch_plugin.optimize("eager")(f)
    _probed.clear()
    for _ in range(3):
        x = torch.randn(4)
        torch.testing.assert_close(opt(x), x * 4.0)
    _no_breaks()
    assert len(_probed) == 1  # once, while capturing; a constant from then on


def test_package_probes_are_constants():
    def f(x):
        if importlib.util.find_spec("torch") is None:
            return x - 1
        if importlib.util.find_spec("surely_not_a_package_tp") is not None:
            return x - 2
        major = int(importlib.metadata.version("torch").split(".")[0])
        return x * major

    opt = torch_plugin.optimize("eager")(f)
    for _ in range(3):
        x = torch.randn(4)
        torch.testing.assert_close(opt(x), f(x))
    _no_breaks()


log = logging.getLogger("torch_plugin_tests.capture_time_calls")


def test_dropped_log_call_vanishes_and_enabling_the_logger_recompiles(caplog):
    def f(x):
        log.debug("scaling %s", "x")
        return x * 2

    log.setLevel(logging.WARNING)
    opt = torch_plugin.optimize("eager")(f)
    try:
        for _ in range(3):
            x = torch.randn(4)
            torch.testing.assert_close(opt(x), x * 2)
        _no_breaks()
        assert torch_plugin.stats.graphs_compiled == 1
        # turned on later: the guard on the logger's level fails and the record is emitted
        log.setLevel(logging.DEBUG)
        with caplog.at_level(logging.DEBUG, logger=log.name):
            x = torch.randn(4)
            torch.testing.assert_close(opt(x), x * 2)
        assert [r.getMessage() for r in caplog.records if r.name == log.name] == ["scaling x"]
    finally:
        log.setLevel(logging.NOTSET)
