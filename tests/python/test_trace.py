"""torch_plugin.trace (TORCH_PLUGIN_TRACE=DIR), torch_plugin.report and the progress lines of
long compiles."""

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

import torch_plugin
from torch_plugin import config, decompiler, report, trace
from torch_plugin.logs import set_logs

# a branch on a tensor is these tests' graph break (conftest.py)
pytestmark = pytest.mark.usefixtures("tensor_branches_break")

SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    import torch_plugin
    torch_plugin.config.capture_tensor_branches = False  # the branch is the graph break

    def f(x, y):
        a = torch.relu(x * 2 + 1)
        if y.sum() > 0:
            a = a - 1
        return a.sum(-1)

    g = torch_plugin.optimize(backend=sys.argv[1])(f)
    ok = True
    for n in (4, 5, 5):
        x, y = torch.randn(n, 8), torch.randn(3).abs()
        ok = ok and torch.allclose(g(x, y), f(x, y))
        y = -y
        ok = ok and torch.allclose(g(x, y), f(x, y))
    print("matches eager:", ok)
    """
)
BREAK_SOURCE = "if y.sum() > 0:"
BREAK_LINE = SCRIPT.splitlines().index("    " + BREAK_SOURCE) + 1


def run_script(tmp_path, backend: str, trace_dir) -> subprocess.CompletedProcess:
    script = tmp_path / "script.py"  # a file, so the trace can show source lines
    script.write_text(SCRIPT)
    env = dict(os.environ)
    env.pop("TORCH_PLUGIN_TRACE", None)
    env.pop("TORCH_PLUGIN_LOGS", None)
    env.pop("TORCH_LOGS", None)
    if trace_dir is not None:
        env["TORCH_PLUGIN_TRACE"] = str(trace_dir)
    root = os.path.dirname(os.path.dirname(torch_plugin.__file__))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(script), backend],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )


def read_events(trace_dir) -> list[dict]:
    files = sorted(trace_dir.glob("trace-*.jsonl"))
    assert len(files) == 1, files  # one process, one file
    return [json.loads(line) for line in files[0].read_text().splitlines()]


@pytest.mark.parametrize("backend", ["eager", "plugin"])
def test_trace_of_a_graph_break_and_a_recompile(tmp_path, backend):
    trace_dir = tmp_path / "trace"
    proc = run_script(tmp_path, backend, trace_dir)
    assert proc.returncode == 0, proc.stderr
    assert "matches eager: True" in proc.stdout
    events = read_events(trace_dir)
    kinds = {e["event"] for e in events}
    assert {"frame", "frame_done", "stage", "graph", "guards", "graph_break", "recompile"} <= kinds
    script = str(tmp_path / "script.py")

    breaks = [e for e in events if e["event"] == "graph_break"]
    assert breaks
    for b in breaks:
        assert (b["file"], b["line"], b["function"]) == (script, BREAK_LINE, "f")
        assert b["source"] == BREAK_SOURCE
        assert b["gb_id"] == "GB001" and "data-dependent" in b["reason"]

    # The size of x changed from 4 to 5: each frame (f and the resume functions of both
    # branches) recompiles once, naming the guard on a first size.
    recompiles = [e for e in events if e["event"] == "recompile"]
    resumes = {f"f.<resume at line {BREAK_LINE + 1}>", f"f.<resume at line {BREAK_LINE + 2}>"}
    assert sorted(r["name"] for r in recompiles) == sorted({"f", *resumes})
    for r in recompiles:
        assert ".size()[0] == 4 failed: got 5" in r["failed_guard"]
        assert r["file"] == script and r["entries"] == 1
    assert (
        "L['x'].size()[0] == 4" in next(r for r in recompiles if r["name"] == "f")["failed_guard"]
    )

    frames = [e for e in events if e["event"] == "frame"]
    done = {e["frame"]: e for e in events if e["event"] == "frame_done"}
    assert [f["frame"] for f in frames] == sorted(done)
    assert all(e["frame"] in done for e in events if e["event"] in ("graph", "stage", "guards"))
    graphs = [e for e in events if e["event"] == "graph"]
    assert any(g["part"] and "relu" in g["code"] for g in graphs)
    assert all(g["ops"] and g["nodes"] >= len(g["ops"]) + 1 for g in graphs)  # + output
    guards = [g for e in events if e["event"] == "guards" for g in e["guards"]]
    assert any(g.startswith("L['x']: tensor") for g in guards)

    stages = {e["name"] for e in events if e["event"] == "stage"}
    assert {"capture", "backend"} <= stages
    kernels = [e for e in events if e["event"] == "kernels"]
    if backend == "plugin":
        assert {"lower", "passes", "executor"} <= stages
        assert kernels and all(k["steps"] for k in kernels)
        assert any(step[0] == "kernel" for k in kernels for step in k["steps"])
        # Each generated kernel's source, cut out of the IR text (which names it instead).
        sources = [kernel for k in kernels for kernel in k["kernels"]]
        assert sources and all(
            f"<source of {x['name']}>" in k["ir"] for k in kernels for x in k["kernels"]
        )
        for x in sources:
            assert x["target"] == "cpp" and "fusion group" in x["group"]
            assert 'extern "C" void kernel(' in x["source"]
        cache = [e["hit"] for e in events if e["event"] == "graph_cache"]
        assert len(cache) == len(graphs)  # one look-up per graph compiled
        # relu(x * 2 + 1): the activation rule tries the relu and is rejected, with why
        decisions = [d for e in events if e["event"] == "patterns" for d in e["decisions"]]
        assert any(
            d["rule"] == "fuse_activation"
            and d["outcome"] == "rejected"
            and d["node"].startswith("aten::relu (%")
            and d["reason"] == "not after a library node"
            for d in decisions
        ), decisions
    else:
        assert not kernels
        assert not any(e["event"] == "patterns" for e in events)

    # The transformed code of every compiled frame, and at f's graph break its resume
    # functions, as Python source (depyf) or, without it, the dis listing with the reason.
    codes = [e for e in events if e["event"] == "bytecode"]
    assert {c["frame"] for c in codes} == {g["frame"] for g in graphs}
    f_codes = [c for c in codes if c["transformed"]["name"] == "f"]
    assert f_codes and all(
        sorted(r["name"] for r in c["resume"]) == sorted(resumes) for c in f_codes
    )
    for c in (x for e in codes for x in (e["transformed"], *e["resume"])):
        assert c["file"] == script and c["text"]
        if c["tool"] == "depyf":
            compile(module_text_of(c), "<test>", "exec")
        else:
            assert c["tool"] == "dis" and "depyf" in c["note"]
    if decompiler.depyf_available() and sys.version_info < (3, 12):
        assert all(c["transformed"]["tool"] == "depyf" for c in f_codes)
        assert "__torch_plugin_compiled_fn_" in f_codes[0]["transformed"]["text"]

    # The report page holds every frame, break (with its source line), failed guard and
    # kernel, and loads nothing from elsewhere.
    out = subprocess.run(
        [sys.executable, "-m", "torch_plugin.report", str(trace_dir)],
        check=False,
        capture_output=True,
        text=True,
        env=dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(
                [os.path.dirname(os.path.dirname(torch_plugin.__file__))]
                + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            ),
        ),
    )
    assert out.returncode == 0, out.stderr[-4000:]
    page_path = out.stdout.strip()
    assert page_path == str(trace_dir / "report.html")
    with open(page_path, encoding="utf-8") as f:
        page = f.read()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    for f in frames:
        assert f"Frame {f['frame']}: " + f["name"].replace("<", "&lt;").replace(">", "&gt;") in page
    assert page.count("<b>Graph break</b>") == len(breaks)
    assert "if y.sum() &gt; 0:" in page and f"line {BREAK_LINE}, in f" in page
    assert page.count("<b>Recompile</b>") == len(recompiles)
    assert "L[&#x27;x&#x27;].size()[0] == 4 failed" in page
    assert page.count("<h3>Kernels:") == len(kernels)
    if backend == "plugin":
        assert "<h3>Library patterns:" in page and "not after a library node" in page
    for k in kernels:
        for x in k["kernels"]:
            assert f"kernel <code>{x['name']}</code> (cpp): " in page
    assert page.count("<summary>Transformed code <code>") == len(codes)
    assert page.count("<summary>Resume function <code>") == sum(len(c["resume"]) for c in codes)
    misses = sum(1 for e in events if e["event"] == "graph_cache" and not e["hit"])
    assert " misses</td>" in page and f", {misses} misses" in page
    # the plot of compile time per frame: one bar per frame
    plot = page.split('aria-label="compile time per frame">')[1].split("</svg>")[0]
    assert plot.count("<rect ") == len(frames)
    for tag in ("<script", "<link", "<img", "src=", "@import", "url("):
        assert tag not in page


def module_text_of(c: dict) -> str:
    """A ``bytecode`` event's source as module text (a resume function's source declares
    the frame's free variables ``nonlocal``: wrapped as decompiler.module_text does)."""
    free = re.search(r"^\s*nonlocal (.+)$", c["text"], re.MULTILINE)
    if free is None:
        return c["text"]
    return f"def outer({free.group(1)}):\n" + textwrap.indent(c["text"], "    ")


def test_unwritable_trace_dir_warns_once_and_the_program_runs(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    proc = run_script(tmp_path, "eager", blocker / "trace")
    assert proc.returncode == 0, proc.stderr
    assert "matches eager: True" in proc.stdout
    assert proc.stderr.count("cannot write the compile trace") == 1, proc.stderr
    assert "tracing is off" in proc.stderr


def bar(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b


@pytest.fixture
def _clean(monkeypatch):
    saved = config.logs
    set_logs()
    torch_plugin.reset()
    yield monkeypatch
    torch_plugin.reset()
    set_logs(saved)


def test_tracing_off_writes_and_computes_nothing(_clean):
    if trace.enabled():
        pytest.skip("TORCH_PLUGIN_TRACE is set for this test run")
    monkeypatch = _clean

    def fail(*args, **kwargs):
        raise AssertionError("the trace was written while tracing is off")

    monkeypatch.setattr(trace, "_open", fail)
    monkeypatch.setattr(trace, "record", fail)
    a, b = torch.randn(6), torch.randn(6)
    opt = torch_plugin.optimize("eager")(bar)
    torch.testing.assert_close(opt(a, b), bar(a, b))
    torch.testing.assert_close(opt(a, -b), bar(a, -b))
    assert torch_plugin.stats.graphs_compiled >= 2


def test_progress_lines_after_the_threshold(_clean, capsys):
    monkeypatch = _clean
    a, b = torch.randn(6), torch.randn(6)
    set_logs("perf")
    monkeypatch.setattr(trace, "_PROGRESS_THRESHOLD_S", 0.0)
    torch.testing.assert_close(torch_plugin.optimize("eager")(bar)(a, b), bar(a, b))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("[torch_plugin.perf]")]
    assert any("bar: compiling for more than" in line for line in lines), err
    assert any(" capture " in line for line in lines) and any(" backend " in line for line in lines)
    assert any("bar: compiled in" in line for line in lines)
    assert any("bar.<resume at line" in line for line in lines)

    # A compile under the threshold prints nothing; without the channel and without a
    # terminal, nothing either.
    torch_plugin.reset()
    monkeypatch.setattr(trace, "_PROGRESS_THRESHOLD_S", 3600.0)
    torch_plugin.optimize("eager")(bar)(a, b)
    assert "torch_plugin" not in capsys.readouterr().err
    torch_plugin.reset()
    set_logs()
    monkeypatch.setattr(trace, "_PROGRESS_THRESHOLD_S", 0.0)
    torch_plugin.optimize("eager")(bar)(a, b)
    assert "torch_plugin" not in capsys.readouterr().err
    # Another channel on: the lines go to stderr, marked [torch_plugin].
    torch_plugin.reset()
    set_logs("recompiles")
    torch_plugin.optimize("eager")(bar)(a, b)
    err = capsys.readouterr().err
    assert "[torch_plugin] bar: compiling for more than" in err and "bar: compiled in" in err


def test_progress_lines_go_to_a_terminal_without_a_channel(_clean, monkeypatch):
    """With no log channel on, the progress lines of a long compile go to stderr when it is
    a terminal (issue #32), and nowhere when it is not."""
    import io

    class Terminal(io.StringIO):
        def __init__(self, tty: bool) -> None:
            super().__init__()
            self.tty = tty

        def isatty(self) -> bool:
            return self.tty

    monkeypatch.setattr(trace, "_PROGRESS_THRESHOLD_S", 0.0)
    a, b = torch.randn(6), torch.randn(6)
    for tty in (True, False):
        torch_plugin.reset()
        err = Terminal(tty)
        monkeypatch.setattr(sys, "stderr", err)
        torch.testing.assert_close(torch_plugin.optimize("eager")(bar)(a, b), bar(a, b))
        monkeypatch.setattr(sys, "stderr", sys.__stderr__)
        text = err.getvalue()
        if tty:
            assert "[torch_plugin] bar: compiling for more than" in text, text
            assert "[torch_plugin] bar: compiled in" in text, text
        else:
            assert "[torch_plugin]" not in text, text


def test_still_running_lines_while_one_stage_is_long(_clean, capsys):
    """A stage that runs long prints "still in" lines from a watcher thread, which is
    joined when the conversion ends; no watcher starts when no line is wanted."""
    monkeypatch = _clean

    def slow(gm, example_inputs):
        time.sleep(0.6)
        return gm.forward

    monkeypatch.setattr(trace, "_PROGRESS_THRESHOLD_S", 0.0)
    monkeypatch.setattr(trace, "_STILL_AFTER_S", 0.1)
    monkeypatch.setattr(trace, "_STILL_EVERY_S", 0.2)
    set_logs("perf")
    a, b = torch.randn(6), torch.randn(6)
    opt = torch_plugin.optimize(backend=slow)(bar)
    torch.testing.assert_close(opt(a, b), bar(a, b))
    err = capsys.readouterr().err
    still = [line for line in err.splitlines() if ": still in backend (graph 1), " in line]
    assert len(still) >= 2, err  # every 0.2 s of the 0.6 s stage
    assert all(line.startswith("[torch_plugin.perf] bar") for line in still)
    assert any("bar: compiled in" in line for line in err.splitlines())
    assert not [t for t in threading.enumerate() if t.name == "torch_plugin-progress"]

    def no_watcher(*args):
        raise AssertionError("a watcher started while no progress line is wanted")

    torch_plugin.reset()
    set_logs()
    monkeypatch.setattr(trace, "_Watcher", no_watcher)
    monkeypatch.setattr(trace, "_progress_wanted", lambda: False)
    torch.testing.assert_close(torch_plugin.optimize(backend=slow)(bar)(a, b), bar(a, b))
    assert "still in" not in capsys.readouterr().err


class _LinearAndMatmul(torch.nn.Module):
    """A linear layer (a constant weight once frozen: the library pattern fires) and a
    product with a weight the caller passes (not constant: the pattern is rejected)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 16)

    def forward(self, x, w):
        return torch.relu(self.lin(x)) + x @ w


def _trace_into(monkeypatch, trace_dir) -> None:
    """Trace this process into ``trace_dir`` (as TORCH_PLUGIN_TRACE=DIR at import would)."""
    monkeypatch.setattr(trace, "_dir", str(trace_dir))
    monkeypatch.setattr(trace, "_enabled", True)
    monkeypatch.setattr(trace, "_file", None)


@pytest.mark.skipif(not torch_plugin._C._compiler.has_onednn, reason="built without oneDNN")
def test_trace_and_report_name_library_patterns_fired_and_rejected(_clean, tmp_path):
    """Issue #32: the trace holds each library-pattern rule that fired or was rejected, with
    the constraint that failed; the report page shows them per frame and counts them."""
    monkeypatch = _clean
    monkeypatch.setenv("TORCH_PLUGIN_GRAPH_CACHE", "0")
    trace_dir = tmp_path / "trace"
    _trace_into(monkeypatch, trace_dir)
    net = _LinearAndMatmul().eval()
    opt = torch_plugin.optimize("plugin")(net)
    with torch.no_grad():
        for n in (4, 4, 6):
            x, w = torch.randn(n, 8), torch.randn(8, 16)
            torch.testing.assert_close(opt(x, w), net(x, w), rtol=1e-4, atol=1e-5)
    trace._file.close()
    events = read_events(trace_dir)
    patterns = [e for e in events if e["event"] == "patterns"]
    assert patterns and all(e["frame"] is not None for e in patterns)
    decisions = [d for e in patterns for d in e["decisions"]]
    for d in decisions:
        assert d["pass"] == "library_patterns" and d["device"] == "cpu", d
        assert re.fullmatch(r"csrc/compiler/passes/\w+\.cpp:\d+", d["source"]), d
        assert d["outcome"] in ("fired", "rejected"), d
        assert (d["reason"] == "") == (d["outcome"] == "fired"), d
    fired = {(d["rule"], d["node"].split(" ")[0]) for d in decisions if d["outcome"] == "fired"}
    assert ("matmul_to_library", "aten::addmm") in fired, decisions  # the linear layer
    rejected = [
        d for d in decisions if d["rule"] == "matmul_to_library" and d["outcome"] == "rejected"
    ]
    assert any(
        d["node"].startswith("aten::mm (%") and d["reason"] == "not a constant weight"
        for d in rejected
    ), decisions

    with open(report.write(str(trace_dir)), encoding="utf-8") as f:
        page = f.read()
    assert page.count("<h3>Library patterns:") == len({(e["pid"], e["frame"]) for e in patterns})
    n_fired = sum(d["outcome"] == "fired" for d in decisions)
    n_rejected = sum(d["outcome"] == "rejected" for d in decisions)
    assert f"<td>{n_fired} fired, {n_rejected} rejected, 0 off in this build</td>" in page
    assert "<td>matmul_to_library</td><td>rejected</td><td><code>aten::mm (%" in page
    assert "<td>not a constant weight</td>" in page


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_trace_names_cuda_library_patterns(_clean, tmp_path):
    """On CUDA the cuBLASLt rows fire (weights need not be constants there): the trace names
    them with the device."""
    monkeypatch = _clean
    monkeypatch.setenv("TORCH_PLUGIN_GRAPH_CACHE", "0")
    monkeypatch.setenv("TORCH_PLUGIN_ALWAYS_RUN_COMPILED", "1")
    trace_dir = tmp_path / "trace"
    _trace_into(monkeypatch, trace_dir)
    net = _LinearAndMatmul().cuda().eval()
    opt = torch_plugin.optimize("plugin")(net)
    with torch.no_grad():
        for _ in range(3):
            x, w = torch.randn(4, 8, device="cuda"), torch.randn(8, 16, device="cuda")
            torch.testing.assert_close(opt(x, w), net(x, w), rtol=1e-4, atol=1e-4)
    trace._file.close()
    decisions = [d for e in read_events(trace_dir) if e["event"] == "patterns"
                 for d in e["decisions"]]  # fmt: skip
    fired = {(d["rule"], d["node"].split(" ")[0], d["device"])
             for d in decisions if d["outcome"] == "fired"}  # fmt: skip
    assert ("cuda_matmul_to_library", "aten::addmm", "cuda") in fired, decisions


def test_report_without_a_trace(tmp_path, capsys):
    assert report.main([str(tmp_path)]) == 1
    assert "no trace-*.jsonl file" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError):
        report.write(str(tmp_path))


def _browser() -> str | None:
    return next(
        (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p),
        None,
    )


def test_report_renders_in_a_headless_browser(_clean, tmp_path):
    """The page opens in a real browser (Debian's chromium package: ``apt-get install
    chromium``); skipped where none is installed."""
    browser = _browser()
    if browser is None:
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    monkeypatch = _clean
    trace_dir = tmp_path / "trace"
    _trace_into(monkeypatch, trace_dir)
    a, b = torch.randn(6), torch.randn(6)
    torch.testing.assert_close(torch_plugin.optimize("eager")(bar)(a, b), bar(a, b))
    trace._file.close()
    page = report.write(str(trace_dir))
    shot = tmp_path / "shot.png"
    subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
         "--window-size=1200,1600", f"file://{page}"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 10_000
