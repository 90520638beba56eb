"""The C++ sources' folders include each other one way (issue #26).

Each folder under ``csrc/`` is a node; ``#include "..."`` of a file in another folder is an edge.
The graph must have no circle: dependencies run down the pipeline (ir, then the compiler's passes
and codegen; libs, then the runtime and its device folders, then ops; python on top). A circle
means two folders can no longer be built, tested or understood one without the other.

Device-neutral files choose no device with the preprocessor: a device adds its renderer, its
runtime steps (registered in runtime/step_registry.h) and its ops beside the others, and CMake
decides which of those files are built.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

CSRC = Path(__file__).resolve().parents[2] / "csrc"
INCLUDE = re.compile(r'\s*#\s*include\s*"([^"]+)"')
KNOWN_CIRCLES: list[set[str]] = []
DEVICE_MACRO = re.compile(r"^\s*#\s*(if|ifdef|ifndef|elif)\b.*\b(TORCH_PLUGIN_HAVE_\w+|__CUDACC__)")
# Device-neutral: these folders' own files (not their device subfolders), and the module.
DEVICE_NEUTRAL = ["runtime", "ops", "compiler/passes", "compiler/codegen", "python/module.cpp"]
# Files allowed to choose a device with the preprocessor (none).
KNOWN_DEVICE_CHOICES: set[str] = set()


def include_graph(root: Path = CSRC) -> dict[str, dict[str, list[str]]]:
    """folder -> {included folder: ["file -> include", ...]}, folders relative to ``root``."""
    edges: dict[str, dict[str, list[str]]] = {}
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".h", ".cpp", ".cu", ".cuh"):
            continue
        folder = path.parent.relative_to(root).as_posix()
        for line in path.read_text(errors="replace").splitlines():
            m = INCLUDE.match(line)
            if not m:
                continue
            for candidate in (path.parent / m.group(1), root / m.group(1)):
                if candidate.exists():
                    target = Path(os.path.normpath(candidate)).parent.relative_to(root).as_posix()
                    if target != folder:
                        why = f"{path.relative_to(root).as_posix()} -> {m.group(1)}"
                        edges.setdefault(folder, {}).setdefault(target, []).append(why)
                    break
    return edges


def circles(edges: dict[str, dict[str, list[str]]]) -> list[set[str]]:
    """The strongly connected components of more than one folder (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_include_circle_between_csrc_folders():
    edges = include_graph()
    unexpected = [c for c in circles(edges) if c not in KNOWN_CIRCLES]
    report = []
    for component in unexpected:
        report.append(f"circle {sorted(component)}:")
        for a in sorted(component):
            for b in sorted(component):
                if b in edges.get(a, {}):
                    report.append(f"  {a} -> {b}: {edges[a][b][:3]}")
    assert not unexpected, "\n".join(report)


def test_python_bindings_on_top():
    """Nothing outside csrc/python includes csrc/python (pybind11 stays in the binding layer)."""
    edges = include_graph()
    below = sorted(f for f, targets in edges.items() if "python" in targets and f != "python")
    assert not below, {f: edges[f]["python"] for f in below}


def test_no_device_ifdef_in_device_neutral_files():
    found = []
    for part in DEVICE_NEUTRAL:
        path = CSRC / part
        files = [path] if path.is_file() else sorted(path.glob("*.[ch]*"))
        for f in files:
            rel = f.relative_to(CSRC).as_posix()
            if rel in KNOWN_DEVICE_CHOICES:
                continue
            for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
                if DEVICE_MACRO.match(line):
                    found.append(f"csrc/{rel}:{n}: {line.strip()}")
    assert not found, "device #if in device-neutral files:\n" + "\n".join(found)


def test_finds_a_circle():
    """The check itself: a two-folder circle is found."""
    edges = {"a": {"b": ["a/x.h -> b/y.h"]}, "b": {"a": ["b/y.h -> a/x.h"]}, "c": {"a": []}}
    assert circles(edges) == [{"a", "b"}]
