"""torch_plugin.logs: channels from TORCH_PLUGIN_LOGS, set_logs and config.logs, printed to stderr."""

import inspect
import logging
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_plugin
from torch_plugin import config
from torch_plugin.logs import (
    CHANNELS,
    is_on,
    logger_for,
    parse_levels,
    parse_spec,
    records_wanted,
    set_logs,
)

# a branch on a tensor is these tests' graph break (conftest.py)
pytestmark = pytest.mark.usefixtures("tensor_branches_break")


@pytest.fixture(autouse=True)
def _reset():
    saved = config.logs
    set_logs()
    torch_plugin.reset()
    yield
    torch_plugin.reset()
    set_logs(saved)


def bar(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


BREAK_LINE = inspect.getsourcelines(bar)[1] + 2  # `if b.sum() < 0:`


def run_bar(*shapes):
    opt = torch_plugin.optimize("eager")(bar)
    for shape in shapes or [(4,)]:
        opt(torch.randn(shape), torch.randn(shape))


def test_parse_spec():
    assert parse_spec("graph_breaks,guards") == ("graph_breaks", "guards")
    assert parse_spec(" guards , graph_breaks ") == ("graph_breaks", "guards")  # CHANNELS order
    assert parse_spec("all") == CHANNELS
    assert parse_spec("+all") == tuple("+" + c for c in CHANNELS)
    assert parse_spec("all,-bytecode") == tuple(
        "-bytecode" if c == "bytecode" else c for c in CHANNELS
    )
    assert parse_spec("+graph") == ("+graph",)
    assert parse_spec("+graph,graph") == ("graph",)  # a later item overrides, as in TORCH_LOGS
    assert parse_spec(["recompiles", "graph"]) == ("recompiles", "graph")
    assert parse_spec("") == parse_spec(None) == ()
    with pytest.raises(ValueError, match="unknown torch_plugin log channel 'graphs'"):
        parse_spec("graphs")
    with pytest.raises(ValueError, match="unknown torch_plugin log channel 'graphs'"):
        parse_spec("+graphs")


def test_prefixes_are_torch_logs_levels():
    """``name`` is INFO, ``+name`` DEBUG, ``-name`` ERROR, as torch._logging reads
    TORCH_LOGS; ``all`` takes a prefix too."""
    from torch._logging._internal import _parse_log_settings

    torch_levels = _parse_log_settings("+dynamo,aot,-inductor").log_qname_to_level
    expected = {
        "+": torch_levels["torch._dynamo"],
        "": torch_levels["torch._functorch._aot_autograd"],
        "-": torch_levels["torch._inductor"],
    }
    assert expected == {"+": logging.DEBUG, "": logging.INFO, "-": logging.ERROR}
    assert parse_levels("+recompiles,guards,-bytecode") == {
        "recompiles": expected["+"],
        "guards": expected[""],
        "bytecode": expected["-"],
    }
    assert parse_levels("-all,+graph") == {
        c: logging.DEBUG if c == "graph" else logging.ERROR for c in CHANNELS
    }
    set_logs("+recompiles,guards,-bytecode")
    assert config.logs == ("+recompiles", "guards", "-bytecode")
    assert logger_for("recompiles").level == logging.DEBUG
    assert logger_for("guards").level == logging.INFO
    assert logger_for("bytecode").level == logging.ERROR
    assert logger_for("bytecode").propagate is False  # named: its own handler
    assert is_on("recompiles") and is_on("guards") and not is_on("bytecode")
    assert not is_on("graph")
    set_logs(config.logs)  # config.logs round-trips, prefixes kept
    assert config.logs == ("+recompiles", "guards", "-bytecode")
    set_logs("-bytecode")
    assert not is_on() and not records_wanted()


def test_set_logs_forms_and_config():
    set_logs("graph_breaks")
    assert config.logs == ("graph_breaks",)
    set_logs(graph=True, recompiles=True)
    assert config.logs == ("recompiles", "graph")
    set_logs("all", bytecode=False)
    assert "bytecode" not in config.logs and len(config.logs) == len(CHANNELS) - 1
    set_logs("+graph", graph=True, guards=True)  # True keeps the spec's level
    assert config.logs == ("guards", "+graph")
    set_logs()
    assert config.logs == ()
    with pytest.raises(ValueError, match="unknown"):
        set_logs(bogus=True)
    with pytest.raises(ValueError, match="unknown"):
        config.logs = "nope"
    assert config.logs == ()


def test_graph_breaks_channel(capsys):
    set_logs("graph_breaks")
    run_bar()
    err = capsys.readouterr().err
    assert "[torch_plugin.graph_breaks] graph break in bar: data-dependent branch" in err
    assert f'File "{__file__}", line {BREAK_LINE}, in bar' in err
    assert "if b.sum() < 0:" in err
    for other in ("guards", "recompiles", "bytecode", "graph]"):
        assert f"[torch_plugin.{other}" not in err


def test_frame_not_captured_goes_to_graph_breaks(capsys, monkeypatch):
    monkeypatch.setattr(config, "graph_breaks", False)
    set_logs("graph_breaks")
    run_bar()
    err = capsys.readouterr().err
    assert "[torch_plugin.graph_breaks] not capturing bar: data-dependent" in err
    assert f"line {BREAK_LINE}, in bar" in err


def test_guards_channel(capsys):
    set_logs("guards")
    run_bar((5,))
    err = capsys.readouterr().err
    assert f"[torch_plugin.guards] guards of a new entry for bar ({__file__}:" in err
    assert "L['a']: tensor dtype=torch.float32, device=cpu, size=[5]" in err
    assert "guards of a new entry for bar.<resume at line" in err
    assert "graph break in" not in err


def test_recompiles_channel(capsys):
    set_logs("recompiles")
    run_bar((4,))
    assert "recompil" not in capsys.readouterr().err  # the first call compiles, no recompile
    run_bar((7,))
    err = capsys.readouterr().err
    assert "[torch_plugin.recompiles] recompiling bar: L['a']" in err
    assert "expected size [4], got [7]" in err


def test_debug_recompiles_names_every_entry(capsys):
    """``+recompiles`` (TORCH_LOGS=recompiles_verbose) adds the failed guard of every
    compiled entry; ``recompiles`` names the first one only."""
    opt = torch_plugin.optimize("eager")(bar)

    def call(dtype):
        a, b = torch.randn(4, dtype=dtype), torch.randn(4, dtype=dtype)
        torch.testing.assert_close(opt(a, b), bar(a, b))

    set_logs("recompiles")
    call(torch.float32)
    call(torch.float64)
    call(torch.bfloat16)  # two entries fail
    err = capsys.readouterr().err
    assert err.count("[torch_plugin.recompiles] recompiling bar: ") == 2, err
    assert "entry 2 of bar" not in err
    torch_plugin.reset()
    set_logs("+recompiles")
    call(torch.float32)
    call(torch.float64)
    call(torch.bfloat16)
    err = capsys.readouterr().err
    assert err.count("[torch_plugin.recompiles] recompiling bar: ") == 2, err
    first = err.split("recompiling bar: ")[2].split("\n")[0]
    second = err.split("entry 2 of bar: ")[1].split("\n")[0]
    assert "float64" in first and "float32" in second, err


def test_debug_graph_breaks_add_the_traceback_and_minus_silences(capsys):
    set_logs("+graph_breaks")
    run_bar()
    err = capsys.readouterr().err
    assert "[torch_plugin.graph_breaks] graph break in bar: data-dependent branch" in err
    assert "Traceback (most recent call last)" in err
    torch_plugin.reset()
    set_logs("graph_breaks")
    run_bar()
    err = capsys.readouterr().err
    assert "graph break in bar" in err and "Traceback" not in err
    torch_plugin.reset()
    set_logs("-graph_breaks")  # only errors: a graph break is none
    run_bar()
    assert "[torch_plugin." not in capsys.readouterr().err


def test_bytecode_channel(capsys):
    set_logs("bytecode")
    run_bar()
    err = capsys.readouterr().err
    assert f"[torch_plugin.bytecode] original bytecode of bar ({__file__}:" in err
    assert "transformed bytecode of bar" in err
    assert "original bytecode of bar.<resume at line" in err
    original = err.split("original bytecode of bar (")[1].split("[torch_plugin.")[0]
    transformed = err.split("transformed bytecode of bar (")[1].split("[torch_plugin.")[0]
    # the original computes torch.abs itself; the transformed one calls the compiled graph
    assert "(abs)" in original and "(abs)" not in transformed
    assert "LOAD_FAST" in original and "LOAD_FAST" in transformed


def test_graph_channel(capsys):
    set_logs("graph")
    run_bar()
    err = capsys.readouterr().err
    assert "[torch_plugin.graph] FX graph of bar" in err and "part before a graph break" in err
    assert "torch.abs(l_a)" in err
    assert "FX graph of bar.<resume at line" in err
    assert "f32[4]" in err  # shapes are shown


def test_off_means_silent_and_restored(capsys):
    set_logs("all")
    assert records_wanted()
    assert logger_for("graph_breaks").propagate is False
    set_logs()
    assert not records_wanted()
    for channel in CHANNELS:
        logger = logger_for(channel)
        assert logger.propagate is True and logger.level == logging.NOTSET
        assert logger.handlers == []
    run_bar()
    assert "[torch_plugin." not in capsys.readouterr().err


def test_record_listener_only_for_record_channels():
    set_logs("graph_breaks,recompiles")
    assert not records_wanted()
    set_logs("graph_breaks,guards")
    assert records_wanted()


def test_config_assignment_switches_at_once(capsys):
    config.logs = "graph_breaks,guards"
    assert config.logs == ("graph_breaks", "guards")
    run_bar()
    err = capsys.readouterr().err
    assert "[torch_plugin.graph_breaks]" in err and "[torch_plugin.guards]" in err
    config.logs = ()
    torch_plugin.reset()
    run_bar()
    assert "[torch_plugin." not in capsys.readouterr().err


def test_passes_and_cache_channels(capsys, tmp_path, monkeypatch):
    """The "plugin" backend's channels: the IR around the pass pipeline, and each
    graph-cache look-up and store (a cold compile misses and stores, a warm one hits)."""
    monkeypatch.setenv("TORCH_PLUGIN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TORCH_PLUGIN_GRAPH_CACHE", "1")

    def f(x):
        return torch.relu(x * 2 + 1).sum(-1)

    set_logs("passes,cache")
    for _ in range(2):  # the second compile (after reset) is warm
        torch_plugin.reset()
        opt = torch_plugin.optimize(f)
        for _ in range(3):
            x = torch.randn(4, 8)
            torch.testing.assert_close(opt(x), f(x))
    err = capsys.readouterr().err
    passes = [line for line in err.splitlines() if line.startswith("[torch_plugin.passes]")]
    assert len(passes) == 2, err  # the warm compile runs the passes on the cached lowering
    assert all("pass pipeline: 4 IR nodes -> 1 (1 generated kernels) in " in p for p in passes)
    assert "aten::relu(" in err and "torch_plugin::fused(" in err
    assert "source=<source of fused_0>" in err  # the kernel's source is cut out
    cache = [line for line in err.splitlines() if line.startswith("[torch_plugin.cache]")]
    kinds = [line.split("graph cache: ")[1].split(" ")[0] for line in cache]
    assert kinds == ["miss", "stored", "hit"], cache
    assert all(str(tmp_path) in line for line in cache)
    set_logs()
    torch_plugin.reset()
    torch_plugin.optimize(f)(torch.randn(4, 8))
    assert "[torch_plugin." not in capsys.readouterr().err


@pytest.mark.skipif(not torch_plugin._C._compiler.has_onednn, reason="built without oneDNN")
def test_compiler_channels_kernels_and_patterns(capfd, monkeypatch):
    """The "plugin" compiler's channels, read from TORCH_PLUGIN_LOGS at each compile and
    written by C++ to stderr: each generated kernel with its fusion group and source, and
    each library-pattern rule that fires or is rejected, with its row and the constraint."""
    monkeypatch.setenv("TORCH_PLUGIN_GRAPH_CACHE", "0")
    lin = torch.nn.Linear(8, 16).eval()

    def f(x, w):
        return ((torch.relu(lin(x)) + x @ w) * 2).sigmoid()  # the last three: one kernel

    for spec, shown in [("kernels,patterns", True), ("-kernels,-patterns", False)]:
        monkeypatch.setenv("TORCH_PLUGIN_LOGS", spec)
        torch_plugin.reset()
        opt = torch_plugin.optimize("plugin")(f)
        with torch.no_grad():
            for _ in range(2):
                x, w = torch.randn(4, 8), torch.randn(8, 16)
                torch.testing.assert_close(opt(x, w), f(x, w), rtol=1e-4, atol=1e-5)
        err = capfd.readouterr().err
        if not shown:
            assert "[torch_plugin kernels]" not in err and "[torch_plugin patterns]" not in err
            continue
        rule = "[torch_plugin patterns] library_patterns: rule matmul_to_library ("
        assert rule + "csrc/compiler/passes/library_patterns.cpp:" in err, err
        assert ") fired at aten::addmm (%" in err, err
        assert "rejected at aten::mm (%" in err and ": not a constant weight" in err, err
        assert "[torch_plugin kernels] " in err and 'extern "C" void kernel(' in err, err


def test_torch_logs_component_table(monkeypatch):
    """Each TORCH_LOGS component that means something here gives its channel (config.
    TORCH_LOGS_COMPONENTS, docs/coming_from_torch_compile.md), with or without a prefix;
    torch's own components give none; TORCH_PLUGIN_LOGS comes last."""
    monkeypatch.setenv("TORCH_PLUGIN_LOGS", "")
    cases = {
        "graph_breaks": "graph_breaks",
        "+recompiles": "recompiles",
        "recompiles_verbose": "+recompiles",
        "-verbose_guards": "guards",
        "bytecode": "bytecode",
        "graph_code": "graph",
        "graph": "graph",
        "output_code": "kernels",
        "kernel_code": "kernels",
        "dynamo": "",
        "+inductor": "",
    }
    for torch_logs, spec in cases.items():
        monkeypatch.setenv("TORCH_LOGS", torch_logs)
        assert config.logs_spec() == spec, torch_logs
    monkeypatch.setenv("TORCH_LOGS", "output_code,graph_code")
    monkeypatch.setenv("TORCH_PLUGIN_LOGS", "-kernels")
    assert config.logs_spec() == "kernels,graph,-kernels"
    assert parse_spec(config.logs_spec()) == ("graph",)
    assert config.compiler_environment()["log_kernels"] is False


def test_set_logs_is_exported():
    assert torch_plugin.set_logs is set_logs


SCRIPT = textwrap.dedent(
    """
    import torch, torch_plugin
    torch_plugin.config.capture_tensor_branches = False  # the branch is the graph break

    def f(x):
        y = x + 1
        if y.sum() > 0:
            y = y * 2
        return y

    print("logs:", ",".join(torch_plugin.config.logs))
    torch_plugin.optimize("eager")(f)(torch.ones(3))
    """
)


def run_script(
    tmp_path, env_value: str, torch_logs: str | None = None
) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"  # a file, so the logs can show source lines
    script.write_text(SCRIPT)
    env = dict(os.environ, TORCH_PLUGIN_LOGS=env_value)
    env.pop("TORCH_LOGS", None)
    if torch_logs is not None:
        env["TORCH_LOGS"] = torch_logs
    root = os.path.dirname(os.path.dirname(torch_plugin.__file__))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(script)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_environment_variable_read_at_import(tmp_path):
    proc = run_script(tmp_path, "graph_breaks,graph")
    assert proc.returncode == 0, proc.stderr
    assert "logs: graph_breaks,graph" in proc.stdout
    assert "[torch_plugin.graph_breaks] graph break in f" in proc.stderr
    assert "if y.sum() > 0:" in proc.stderr
    assert "[torch_plugin.graph] FX graph of f" in proc.stderr
    assert "[torch_plugin.guards]" not in proc.stderr


def test_bad_environment_variable_warns_and_keeps_the_known_channels(tmp_path):
    proc = run_script(tmp_path, "graph_breaks,nonsense")
    assert proc.returncode == 0, proc.stderr
    assert "logs: graph_breaks\n" in proc.stdout
    assert "unknown log channel(s) 'nonsense' ignored; known: graph_breaks," in proc.stderr
    assert "[torch_plugin.graph_breaks] graph break in f" in proc.stderr


def test_compiler_channels_beside_python_channels(tmp_path):
    # "kernels" is the compiler's channel: accepted beside the others, not a Python logger
    proc = run_script(tmp_path, "graph_breaks, +kernels")
    assert proc.returncode == 0, proc.stderr
    assert "logs: graph_breaks\n" in proc.stdout
    assert "ignored" not in proc.stderr
    from torch_plugin import config

    for spec, want in [("kernels", True), ("+kernels", True), (" all", True),
                       ("all,-kernels", False), ("graph_breaks", False)]:  # fmt: skip
        assert config._spec_has(spec, "kernels") is want, spec


def test_torch_logs_components_that_mean_something_here(tmp_path):
    proc = run_script(tmp_path, "", torch_logs="+graph_breaks,recompiles,dynamo")
    assert proc.returncode == 0, proc.stderr
    assert "logs: graph_breaks,recompiles\n" in proc.stdout
    assert "[torch_plugin.graph_breaks] graph break in f" in proc.stderr
    # torch ignores a prefix on these components (its artifacts); recompiles_verbose is
    # +recompiles here; TORCH_PLUGIN_LOGS comes later and overrides
    proc = run_script(tmp_path, "-graph_breaks,-guards", torch_logs="-guards,recompiles_verbose")
    assert proc.returncode == 0, proc.stderr
    assert "logs: graph_breaks,recompiles\n" not in proc.stdout
    assert "logs: -graph_breaks,+recompiles,-guards\n" in proc.stdout
    assert "[torch_plugin." not in proc.stderr
    proc = run_script(tmp_path, "", torch_logs="-guards")
    assert "logs: guards\n" in proc.stdout and "[torch_plugin.guards]" in proc.stderr
