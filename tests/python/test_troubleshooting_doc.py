"""Run every ```python example of docs/troubleshooting.md, each as its own file.

Each example runs in a fresh namespace, written to a temporary file so that capture sees real
source lines. An example whose first line is ``# doc-test: requires torch_plugin.<name>`` is
skipped while ``torch_plugin`` has no attribute ``<name>`` (for features still being built).
"""

import re
import runpy
from pathlib import Path

import pytest

import torch_plugin

DOC = Path(__file__).resolve().parents[2] / "docs" / "troubleshooting.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
_REQUIRES = re.compile(r"#\s*doc-test:\s*requires\s+torch_plugin\.(\w+)")
# "f(x)  # [torch_plugin.recompiles] recompiling ...": a log line shown after a statement.
_LOG_COMMENT = re.compile(r"^\S.*?\s#\s(\[torch_plugin\.\w+\] .*)$", re.MULTILINE)


def examples() -> list[tuple[int, str]]:
    """(line number in the doc, code) of each ```python block."""
    text = DOC.read_text()
    return [(text.count("\n", 0, m.start()) + 2, m[1]) for m in _BLOCK.finditer(text)]


def test_the_doc_has_examples():
    assert len(examples()) >= 8


@pytest.fixture(autouse=True)
def _clean_state():
    saved_logs = torch_plugin.config.logs
    torch_plugin.set_logs()
    torch_plugin.reset()
    yield
    torch_plugin.reset()
    torch_plugin.set_logs(saved_logs)


@pytest.mark.parametrize(
    ("line", "code"), examples(), ids=lambda v: f"line{v}" if isinstance(v, int) else ""
)
def test_example(line, code, tmp_path, capsys):
    first = code.splitlines()[0] if code else ""
    required = _REQUIRES.search(first)
    if required and not hasattr(torch_plugin, required[1]):
        pytest.skip(f"torch_plugin.{required[1]} does not exist yet")
    path = tmp_path / f"troubleshooting_line{line}.py"
    path.write_text(code)
    runpy.run_path(str(path), run_name="__doc_example__")
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    # A log line the doc shows after a statement, in full (no "..."), is the line printed.
    for shown in _LOG_COMMENT.findall(code):
        if "..." not in shown:
            assert shown in out.err, (shown, out.err)


def test_graph_break_types_table_matches_the_registry():
    """The table between the graph-break-types markers is the registry's own rendering, so the
    docs and ``torch_plugin.capture.graph_break_types`` cannot drift apart."""
    from torch_plugin.capture.graph_break_types import GRAPH_BREAK_TYPES, markdown_table

    text = DOC.read_text()
    m = re.search(
        r"<!-- graph-break-types:begin -->\n(.*?)\n<!-- graph-break-types:end -->", text, re.DOTALL
    )
    assert m is not None, "docs/troubleshooting.md lost its graph-break types table"
    assert m[1] == markdown_table(), (
        "regenerate the table: python -c 'from torch_plugin.capture.graph_break_types import "
        "markdown_table; print(markdown_table())'"
    )
    for t in GRAPH_BREAK_TYPES:
        assert f"| {t.id} | {t.name} |" in m[1]
