"""The graph-break registry (torch_plugin/capture/graph_break_types.py): every place capture
gives up names a registered type, and every registered type is used by some place."""

import ast
import re
from pathlib import Path

import pytest
import torch

import torch_plugin
from torch_plugin.capture import graph_break_types as gbt
from torch_plugin.capture.exc import GraphBreakReason, Unsupported, unimplemented

# a branch on a tensor is these tests' graph break (conftest.py)
pytestmark = pytest.mark.usefixtures("tensor_branches_break")

CAPTURE = Path(gbt.__file__).resolve().parent
REGISTERED = {name for name, value in vars(gbt).items() if isinstance(value, gbt.GraphBreakType)}


def _type_names(node: ast.expr) -> set[str]:
    """The registry names an argument expression refers to (``gbt.X``, or a conditional
    choosing between such names)."""
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "gbt"
    }


def _break_sites():
    """(file:line, type names) of every unimplemented(...) call and Unsupported(...)
    construction in torch_plugin/capture."""
    for path in sorted(CAPTURE.rglob("*.py")):
        if path.name == "exc.py":
            continue  # defines unimplemented() and Unsupported, passing the type through
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
                continue
            where = f"{path.relative_to(CAPTURE)}:{node.lineno}"
            if node.func.id == "unimplemented":
                yield where, _type_names(node.args[0]) if len(node.args) == 2 else set()
            elif node.func.id == "Unsupported":
                kw = [k.value for k in node.keywords if k.arg == "gb_type"]
                yield where, _type_names(kw[0]) if kw else set()


def test_every_break_names_a_registered_type():
    sites = list(_break_sites())
    assert len(sites) > 200  # the scan sees the call sites
    untyped = [where for where, names in sites if not names]
    assert untyped == [], "graph breaks without a type (unimplemented(gbt.X, context))"
    unknown = {where: names - REGISTERED for where, names in sites if names - REGISTERED}
    assert unknown == {}


def test_every_registered_type_is_used():
    used = set().union(*(names for _, names in _break_sites()))
    assert REGISTERED - used == set()


def test_ids_are_fixed_format_unique_and_listed():
    ids = [t.id for t in gbt.GRAPH_BREAK_TYPES]
    assert all(re.fullmatch(r"GB\d{3}", i) for i in ids)
    assert len(ids) == len(set(ids)) == len(REGISTERED)
    assert ids == sorted(ids)
    assert all(t.name and t.explanation and t.hint for t in gbt.GRAPH_BREAK_TYPES)
    assert gbt.lookup("GB001") is gbt.DATA_DEPENDENT


def test_the_reason_carries_its_type():
    try:
        unimplemented(gbt.DATA_DEPENDENT, "data-dependent branch")
    except Unsupported as e:
        assert e.gb_type is gbt.DATA_DEPENDENT
        assert e.reason == "data-dependent branch" and str(e) == "data-dependent branch"
        assert isinstance(e.reason, GraphBreakReason) and e.reason.gb_type is gbt.DATA_DEPENDENT
        assert "GB001" in e.describe() and gbt.DATA_DEPENDENT.hint in e.describe()


def _branchy(a, b):
    x = a + 1
    if b.sum() < 0:
        b = b * -1
    return x * b


def test_explain_shows_the_id_and_hint():
    out = torch_plugin.explain(_branchy, torch.randn(4), torch.randn(4))
    (br,) = out.break_reasons
    assert br.gb_type is gbt.DATA_DEPENDENT
    text = str(out)
    assert f"[GB001 {gbt.DATA_DEPENDENT.name}] hint: {gbt.DATA_DEPENDENT.hint}" in text


def test_the_graph_breaks_log_shows_the_id(capsys):
    saved = torch_plugin.config.logs
    torch_plugin.reset()
    torch_plugin.set_logs("graph_breaks")
    try:
        torch_plugin.optimize("eager")(_branchy)(torch.randn(4), torch.randn(4))
    finally:
        torch_plugin.set_logs(saved)
        torch_plugin.reset()
    err = capsys.readouterr().err
    assert "graph break in _branchy: data-dependent" in err
    assert f"[{gbt.DATA_DEPENDENT.summary()}]" in err
