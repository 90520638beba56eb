"""torch_plugin/config.py: the one module that reads the environment."""

import pwd

import pytest

from torch_plugin import config
from torch_plugin.compiler import options

RUNTIME_VARS = {
    "CXX": "cxx",
    "TORCH_PLUGIN_ONEDNN_LIBRARY": "onednn_library",
    "TORCH_PLUGIN_ONEDNN_WEIGHTS": "onednn_weights",
    "TORCH_PLUGIN_CUBLASLT_TUNING": "cublaslt_tuning",
    "TORCH_PLUGIN_CUBLASLT_CANDIDATES": "cublaslt_candidates",
    "TORCH_PLUGIN_CUDNN_THREADS": "cudnn_threads",
}


@pytest.fixture
def bare_env(monkeypatch):
    for var in [*RUNTIME_VARS, "TORCH_PLUGIN_CACHE_DIR", "XDG_CACHE_HOME"]:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def test_runtime_options_keys_and_defaults(bare_env):
    bare_env.setenv("HOME", "/home/someone")
    assert config.runtime_options() == {
        "cache_dir": "/home/someone/.cache/torch_plugin",
        "cxx": "",
        "onednn_library": "",
        "onednn_weights": "",
        "cublaslt_tuning": "",
        "cublaslt_candidates": "",
        "cudnn_threads": "",
    }


def test_runtime_options_are_the_raw_environment(bare_env):
    for i, var in enumerate(RUNTIME_VARS):
        bare_env.setenv(var, f"value {i}")
    opts = config.runtime_options()
    assert {key: opts[key] for key in RUNTIME_VARS.values()} == {
        key: f"value {i}" for i, key in enumerate(RUNTIME_VARS.values())
    }


def test_cache_root_as_the_cpp_kernel_cache_resolves_it(bare_env):
    bare_env.setenv("HOME", "/h")
    assert config.cache_root() == "/h/.cache/torch_plugin"
    bare_env.setenv("HOME", "")  # empty is unset: the password database's home folder
    assert config.cache_root() == pwd.getpwuid(__import__("os").getuid()).pw_dir + (
        "/.cache/torch_plugin"
    )
    bare_env.setenv("XDG_CACHE_HOME", "/x")
    assert config.cache_root() == "/x/torch_plugin"
    bare_env.setenv("TORCH_PLUGIN_CACHE_DIR", "/c")
    assert config.cache_root() == "/c" == config.runtime_options()["cache_dir"]


def test_compiler_options_come_from_config(bare_env, tmp_path):
    bare_env.setenv("TORCH_PLUGIN_CACHE_DIR", str(tmp_path / "cache"))
    bare_env.setenv("TORCH_PLUGIN_FUSION", "0")
    bare_env.setenv("TORCH_PLUGIN_LOGS", "graph,kernels")
    env = config.compiler_environment()
    assert env["fusion"] is False and env["log_kernels"] is True
    opts = options.current()
    assert opts == options.Options(**env)
    assert opts.cache_dir == str(tmp_path / "cache")


def test_flag_typo_is_an_error_naming_the_flag(monkeypatch):
    with pytest.raises(AttributeError, match="'cach_size_limit'; did you mean 'cache_size_limit'"):
        config.cach_size_limit = 2
    assert not hasattr(config, "cach_size_limit")


@pytest.mark.parametrize(
    ("name", "bad", "error"),
    [
        ("cache_size_limit", "3", TypeError),
        ("cache_size_limit", True, TypeError),
        ("cache_size_limit", -1, ValueError),
        ("size_variant_limit", 0, ValueError),
        ("suppress_errors", 1, TypeError),
        ("graph_breaks", "no", TypeError),
    ],
)
def test_flag_of_the_wrong_type_fails_at_assignment(name, bad, error):
    before = getattr(config, name)
    with pytest.raises(error, match=f"torch_plugin.config.{name}"):
        setattr(config, name, bad)
    assert getattr(config, name) == before


def test_flags_take_values_of_their_type(monkeypatch):
    monkeypatch.setattr(config, "cache_size_limit", 3)
    assert config.cache_size_limit == 3
    monkeypatch.setattr(config, "suppress_errors", True)
    assert config.suppress_errors is True
    # the module's functions may still be replaced (test harnesses do)
    monkeypatch.setattr(config, "cache_root", lambda: "/elsewhere")
    assert config.cache_root() == "/elsewhere"


@pytest.mark.parametrize(
    ("value", "disabled"),
    [(None, False), ("0", False), ("", False), ("off", False), ("1", True), ("yes", True)],
)
def test_torch_plugin_disable_is_read_at_each_call(monkeypatch, value, disabled):
    if value is None:
        monkeypatch.delenv("TORCH_PLUGIN_DISABLE", raising=False)
    else:
        monkeypatch.setenv("TORCH_PLUGIN_DISABLE", value)
    assert config.optimization_disabled() is disabled
    assert "TORCH_PLUGIN_DISABLE" in config.__doc__


def test_options_override_the_environment_in_their_block_only(bare_env, tmp_path):
    """optimize(options=...)'s overrides (torch_plugin.compiler.options.overridden): over the
    environment's values inside the block, the runtime ones as the strings C++ reads."""
    bare_env.setenv("TORCH_PLUGIN_CACHE_DIR", str(tmp_path / "cache"))
    bare_env.setenv("TORCH_PLUGIN_FUSION", "0")
    with options.overridden(options.check({"fusion": True, "cublaslt_candidates": 32})):
        assert options.current().fusion is True
        assert options.runtime_overrides() == {"cublaslt_candidates": "32"}
        runs_later = options.bound(lambda: (options.current().fusion, options.runtime_overrides()))
    assert options.current().fusion is False and options.runtime_overrides() == {}
    assert runs_later() == (True, {"cublaslt_candidates": "32"})
    assert options.current().fusion is False
