"""torch_plugin.decompile(fn) and the bytecode log channel's Python source (issue #32): the
transformed code and every resume function, decompiled by the optional depyf, written to
files that compile and give eager's results; without depyf, the dis listing and the reason.

The tests that need Python source skip without depyf, and where depyf cannot decompile a
code on this Python (depyf 0.20 fails on some 3.12/3.13 bytecode: the skip says which)."""

import os

import pytest
import torch

import torch_plugin
from torch_plugin import decompiler
from torch_plugin.logs import set_logs

pytestmark = pytest.mark.usefixtures("fresh_capture")


def broken(x, y):
    a = torch.sin(x) + y
    print("graph break")
    b = torch.cos(a) * 2
    return b - x


def make_closure():
    scale = torch.tensor(3.0)

    def inner(x):
        a = x * scale
        print("graph break")
        return torch.relu(a) + scale

    return inner


class Breaking(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(5, 4)

    def forward(self, x):
        h = torch.tanh(self.lin(x))
        print("graph break")
        return h * 2


def _needs_source(out):
    pytest.importorskip("depyf")
    for c in out.codes:
        if not c.is_source:
            pytest.skip(f"depyf cannot decompile on this Python: {c.note}")


def _three(opt, ref, *shapes):
    for _ in range(3):
        args = [torch.randn(*s) for s in shapes]
        torch.testing.assert_close(opt(*args), ref(*args))


@pytest.mark.parametrize("kind", ["function", "closure"])
def test_decompiled_files_compile_and_match_eager(tmp_path, kind):
    fn = broken if kind == "function" else make_closure()
    nargs = fn.__code__.co_argcount
    opt = torch_plugin.optimize(fn, backend="eager")
    _three(opt, fn, *[(6,)] * nargs)
    out = torch_plugin.decompile(opt, dump_dir=str(tmp_path))
    _needs_source(out)
    assert out.dump_dir == str(tmp_path)
    (top,) = out.transformed()
    (resume,) = out.resume_functions()
    assert resume.parent == out.codes.index(top)
    assert resume.name.endswith(f"<resume at line {fn.__code__.co_firstlineno + 2}>")  # print
    assert "__torch_plugin_compiled_fn_" in top.text
    assert ("torch.cos(a)" if kind == "function" else "torch.relu(a)") in resume.text
    resumed = [c for c in out.codes if c.kind == "transformed" and c.parent is not None]
    assert len(resumed) == 1 and resumed[0].parent == out.codes.index(resume)
    for c in out.codes:  # every file compiles as it is, and names itself
        with open(c.path, encoding="utf-8") as f:
            text = f.read()
        compile(text, c.path, "exec")
        assert text.startswith("# torch_plugin.decompile: ")
        assert os.path.dirname(c.path) == str(tmp_path)
    # The transformed code loaded from its file (resume function from its file too) gives
    # eager's results on fresh inputs; so does the resume function's own transformed code.
    loaded = out.load()
    assert loaded.__code__.co_filename == top.path
    _three(loaded, fn, *[(6,)] * nargs)
    rest = out.load(resumed[0])
    for _ in range(3):
        x, a = torch.randn(6), torch.randn(6)
        rest_args = (x, None, a)  # the live locals and the print's result
        expected = (torch.cos(a) * 2 - x) if kind == "function" else torch.relu(a) + 3.0
        torch.testing.assert_close(rest(*rest_args), expected)


def test_a_tracer_steps_through_the_files(tmp_path):
    """What a debugger sees (sys.settrace, as pdb uses): line events in the transformed
    code's file, then in the resume function's file, at lines holding that code."""
    import sys

    opt = torch_plugin.optimize(broken, backend="eager")
    _three(opt, broken, (6,), (6,))
    out = torch_plugin.decompile(opt, dump_dir=str(tmp_path))
    _needs_source(out)
    (top,) = out.transformed()
    (resume,) = out.resume_functions()
    loaded = out.load()
    files = {top.path: [], resume.path: []}

    def tracer(frame, event, arg):
        if frame.f_code.co_filename in files:
            if event == "line":
                files[frame.f_code.co_filename].append(frame.f_lineno)
            return tracer
        return None

    x, y = torch.randn(6), torch.randn(6)
    sys.settrace(tracer)
    try:
        got = loaded(x, y)
    finally:
        sys.settrace(None)
    torch.testing.assert_close(got, broken(x, y))
    for path, lines in files.items():
        assert lines, path
        with open(path, encoding="utf-8") as f:
            text = f.read().splitlines()
        assert all(text[n - 1].strip() and not text[n - 1].startswith("#") for n in lines)
    with open(resume.path, encoding="utf-8") as f:
        assert "torch.cos(a)" in f.read().splitlines()[files[resume.path][0] - 1]


def test_decompile_a_module_and_each_entry(tmp_path):
    model = Breaking()
    opt = torch_plugin.optimize(model, backend="eager")
    _three(opt, model, (3, 5))
    _three(opt, model, (1, 5))  # a second entry for each frame (size 1 is static)
    out = torch_plugin.decompile(opt, dump_dir=str(tmp_path))
    assert [c.entry for c in out.transformed()] == [0, 1]
    _needs_source(out)
    # forward's transformed code takes self as its first positional parameter; entry 0 is
    # the most recently used (batch 1), entry 1 the first compiled (batch 3).
    for entry in out.transformed():
        for _ in range(3):
            x = torch.randn(1 if entry.entry == 0 else 3, 5)
            torch.testing.assert_close(out.load(entry)(model, x), model(x))


def test_without_depyf_the_dis_listing_and_the_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(decompiler, "_depyf", None)
    monkeypatch.setattr(decompiler, "_depyf_error", "depyf is not available (test)")
    opt = torch_plugin.optimize(broken, backend="eager")
    _three(opt, broken, (6,), (6,))
    out = torch_plugin.decompile(opt, dump_dir=str(tmp_path))
    assert len(out.codes) == 3
    for c in out.codes:
        assert c.tool == "dis" and c.note == "depyf is not available (test)"
        assert c.path.endswith(".txt") and "CALL" in c.text
    (resume,) = out.resume_functions()
    start = broken.__code__.co_firstlineno
    assert resume.text.startswith(
        f"# The rest of the function it resumes, as written ({__file__}, lines "
        f"{start + 2}-{start + 4}):\n#       print("
    )
    assert "#       b = torch.cos(a) * 2\n" in resume.text
    with pytest.raises(ValueError, match="no Python source for broken: depyf is not available"):
        out.load()
    assert "dis listing (depyf is not available (test))" in str(out)


def test_decompile_errors():
    with pytest.raises(
        ValueError,
        match=rf"broken \({__file__}:{broken.__code__.co_firstlineno}\) has no compiled entry",
    ):
        torch_plugin.decompile(torch_plugin.optimize(broken, backend="eager"))
    with pytest.raises(TypeError, match="expects a Python function"):
        torch_plugin.decompile(torch.sin)


def test_bytecode_log_channel_shows_python_source(capsys):
    saved = torch_plugin.config.logs
    set_logs("bytecode")
    try:
        opt = torch_plugin.optimize(broken, backend="eager")
        _three(opt, broken, (6,), (6,))
    finally:
        set_logs(saved)
    err = capsys.readouterr().err
    assert "[torch_plugin.bytecode] original bytecode of broken" in err
    assert "transformed bytecode of broken" in err
    if not decompiler.depyf_available():
        assert "transformed code of broken" in err and "no Python source (depyf" in err
        return
    if "decompiled by depyf:" not in err and "depyf cannot decompile" in err:
        pytest.skip("depyf cannot decompile on this Python")
    assert "transformed code of broken" in err and "decompiled by depyf:" in err
    assert "resume function of broken.<resume at line" in err
    assert "def broken(x, y):" in err and "__torch_plugin_compiled_fn_" in err
