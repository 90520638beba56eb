"""docs/internals names only files and modules that exist (issue #26: docs and code must not drift).

Every backticked span in docs/internals/*.md is read for names of the project's own things:

- paths: a word with a ``/`` or with a source suffix (``csrc/runtime/executor.h``,
  ``runtime/cpu``, ``compiler/stages.py``, ``eval_frame.{h,cpp}``). A path that starts at a
  top-level folder (``csrc/``, ``torch_plugin/``, ``tests/``, ``benchmarks/``, ``docs/``) must
  exist there; a shorter one must exist under one of the project's folders (it is written
  relative to the page's subject). ``{a,b}`` is expanded, ``*`` and ``<name>`` are wildcards.
- dotted names of the package (``torch_plugin.compiler.stages``,
  ``torch_plugin.contract.call_backend``): the longest prefix that is a module must exist and
  the rest must be a name defined in it.
- names of the extension (``_C._compiler.GraphCall``, ``_C._runtime.configure``): each part
  after ``_C`` must be declared in ``torch_plugin/_C.pyi``.

Files of other projects that the pages mention (CPython's headers, system libraries) are
listed in EXTERNAL. Also checked: links between the pages (and the headings they point at),
and the Python dependency rules that docs/internals/README.md states (PYTHON_RULES).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "internals"
ROOTS = ("csrc/", "torch_plugin/", "tests/", "benchmarks/", "docs/", "examples/")
SUFFIXES = (".py", ".pyi", ".cpp", ".h", ".cu", ".cuh", ".md", ".txt", ".toml")
# Other projects' files the pages name.
EXTERNAL = {
    "internal/pycore_frame.h",
    "cuda.h",
    "torch/_dynamo",
    "torch/csrc/dynamo",
    "graph_break_registry.json",
    "libnvrtc.so",
    "libcuda.so",
    "libstdc++.so",
    "libcaffe2_nvrtc.so",
    "libdnnl.so",
    "libsycl.so",
    "libtbb.so",
    "libsvml.so",
    "/opt/gcc/bin/g++",
    "/tmp",
    "~/.cache/torch_plugin",
}
SPAN = re.compile(r"`([^`\n]+)`")
WORD = re.compile(r"[A-Za-z0-9_.{},*<>/~+-]+")
DOTTED = re.compile(r"(?<![\w.])torch_plugin(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
EXTENSION = re.compile(r"(?<![\w.])_C(?:\.(?!pyi\b)[A-Za-z_][A-Za-z0-9_]*)+")


def _expand(word: str) -> list[str]:
    """``a.{h,cpp}`` -> [``a.h``, ``a.cpp``] (any number of brace groups)."""
    parts = re.split(r"\{([^{}]*)\}", word)
    literal, choices = parts[0::2], [p.split(",") for p in parts[1::2]]
    out = []
    for picks in itertools.product(*choices):
        text = literal[0]
        for pick, rest in zip(picks, literal[1:]):
            text += pick + rest
        out.append(text)
    return out


def _folder_names() -> set[str]:
    """Names of the project's folders (the first part of a relative path must be one)."""
    names = set()
    for top in ("csrc", "torch_plugin", "tests", "benchmarks", "docs"):
        names.add(top)
        names.update(p.name for p in (REPO / top).rglob("*") if p.is_dir())
    return names - {"__pycache__"}


FOLDERS = _folder_names()


def _is_path(word: str) -> bool:
    if word.startswith(("http", "-")) or "://" in word or "::" in word:
        return False
    if "/" in word:
        first = word.split("/")[0]
        return word.startswith(ROOTS) or first in FOLDERS or word.endswith(SUFFIXES)
    return word.endswith(SUFFIXES) and not word.startswith(".")


TOPS = ("csrc", "torch_plugin", "tests", "benchmarks", "docs", "examples")


def _is_build_output(path: str) -> bool:
    """``torch_plugin/<name>.so`` is a build output (absent from a clean clone): it counts
    when a CMake target in the tree declares ``OUTPUT_NAME "<name>"``."""
    m = re.fullmatch(r"torch_plugin/(\w+)\.so", path)
    if not m:
        return False
    cmake = "".join(
        p.read_text() for p in [REPO / "CMakeLists.txt", *REPO.glob("csrc/**/CMakeLists.txt")]
    )
    return f'OUTPUT_NAME "{m.group(1)}"' in cmake


def _exists(path: str) -> bool:
    """Whether ``path`` names something in the tree: exactly, from a top-level folder; else
    anywhere under one (a path relative to a page's subject, or a bare file name). Also
    accepted: a stem (``libs/cublaslt`` for cublaslt.h/.cpp) and ``module.name``
    (``variables/builder.wrap_value``)."""
    rooted = path.startswith(ROOTS)
    path = path.rstrip("/").rstrip(".,;:")
    if not path:
        return True
    if _is_build_output(path):
        return True
    if path in TOPS:
        return (REPO / path).is_dir()
    pattern = re.sub(r"<[^<>]*>", "*", path)
    candidates = [pattern, pattern + ".*"]
    head, dot, _ = pattern.rpartition(".")
    if dot and "/" not in pattern[len(head) :]:
        candidates.append(head + ".py")
    for candidate in candidates:
        if rooted:
            if any(REPO.glob(candidate)):
                return True
            continue
        for top in TOPS:
            if (REPO / top).is_dir() and any((REPO / top).glob("**/" + candidate)):
                return True
    return False


def _external(word: str) -> bool:
    return any(word == e or word.startswith(e) for e in EXTERNAL)


def doc_paths() -> list[tuple[str, str]]:
    """(page, path) for every path-like word in a backticked span."""
    found = []
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        # Fenced blocks are diagrams and shell lines: only their backticked spans count.
        text = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
        for span in SPAN.findall(text):
            for word in WORD.findall(span):
                word = word.rstrip(".,;:")
                if _is_path(word) and not _external(word):
                    found.extend((page.name, p) for p in _expand(word))
    return found


def _module_file(dotted: str) -> Path | None:
    rel = Path(*dotted.split("."))
    for candidate in (REPO / rel.with_suffix(".py"), REPO / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _defines(source: str, name: str) -> bool:
    return bool(
        re.search(
            rf"^\s*(?:def|class|async def)\s+{name}\b|^\s*{name}\s*[:=]|"
            rf"^\s*(?:from\s+\S+\s+)?import\s+.*\b{name}\b|^\s*self\.{name}\s*[:=]|"
            rf"\bdef\s+{name}\b|^\s+{name}\s*[:=]",
            source,
            flags=re.MULTILINE,
        )
    )


def dotted_names() -> list[tuple[str, str]]:
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for span in SPAN.findall(page.read_text()):
            found.extend((page.name, m.group(0)) for m in DOTTED.finditer(span))
    return found


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        module = ".".join(parts[:n])
        path = _module_file(module)
        if path is None:
            continue
        rest = parts[n:]
        if not rest:
            return True
        return _defines(path.read_text(), rest[0])
    return False


def extension_names() -> list[tuple[str, str]]:
    found = []
    for page in sorted(DOCS.glob("*.md")):
        for span in SPAN.findall(page.read_text()):
            found.extend((page.name, m.group(0)) for m in EXTENSION.finditer(span))
    return found


def test_paths_in_internals_docs_exist():
    missing = [f"{page}: {path}" for page, path in doc_paths() if not _exists(path)]
    assert not missing, "docs/internals names paths that do not exist:\n" + "\n".join(missing)


def test_package_names_in_internals_docs_exist():
    missing = [f"{page}: {name}" for page, name in dotted_names() if not _resolves(name)]
    assert not missing, "docs/internals names modules or names that do not exist:\n" + "\n".join(
        missing
    )


def _extension_declared() -> set[str]:
    """The names the extension declares: identifiers of _C.pyi and the quoted names the
    bindings (csrc/python) give pybind11."""
    names = set(
        re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*)\b", (REPO / "torch_plugin" / "_C.pyi").read_text())
    )
    for path in (REPO / "csrc" / "python").glob("*.cpp"):
        names.update(re.findall(r'"([A-Za-z_][A-Za-z0-9_]*)"', path.read_text()))
    return names


def test_extension_names_in_internals_docs_are_declared():
    declared = _extension_declared()
    missing = [
        f"{page}: {name}"
        for page, name in extension_names()
        if not all(part in declared for part in name.split(".")[1:])
    ]
    assert not missing, "docs/internals names _C parts the extension lacks:\n" + "\n".join(missing)


def test_the_checks_see_a_missing_path(tmp_path, monkeypatch):
    """The checks themselves: braces expand, short paths resolve under the bases, an absent
    file and an absent name are reported."""
    assert _expand("eval_frame.{h,cpp}") == ["eval_frame.h", "eval_frame.cpp"]
    assert _exists("csrc/runtime/executor.h")
    assert _exists("runtime/cpu") and _exists("libs/cublaslt") and _exists("fusion.cpp")
    assert _exists("variables/builder.wrap_value") and _exists("codegen/cuda/cuda_renderer.h")
    assert not _exists("csrc/runtime/epilogue.h")
    assert not _exists("torch_plugin/compiler/compile.py")
    assert _resolves("torch_plugin.contract.call_backend")
    assert not _resolves("torch_plugin.backends.registry.UNVERSIONED_PARAMETERS")
    assert _is_path("csrc/ir/op_table.h") and _is_path("stages.py")
    assert not _is_path("1/sqrt") and not _is_path("fp32/bf16")


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.DOTALL | re.MULTILINE)
    return {_slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, flags=re.MULTILINE)}


def test_links_between_pages_resolve():
    """Relative links of docs/internals (to a page, and to a heading of it) resolve."""
    broken = []
    for page in sorted(DOCS.glob("*.md")):
        for target in LINK.findall(page.read_text()):
            if "://" in target:
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, "broken links in docs/internals:\n" + "\n".join(broken)


# The Python dependency rules docs/internals/README.md states (section "Python"): a module
# under the key may import, of the project, only modules under these prefixes.
PYTHON_RULES = {
    "torch_plugin.capture": ("torch_plugin.capture", "torch_plugin.contract",
                             "torch_plugin.config", "torch_plugin.logs", "torch_plugin.trace",
                             "torch_plugin.decompiler"),
    "torch_plugin.compiler": ("torch_plugin.compiler", "torch_plugin.contract",
                              "torch_plugin.config", "torch_plugin.trace"),
    "torch_plugin.contract": ("torch_plugin.config",),
    "torch_plugin.logs": ("torch_plugin.config", "torch_plugin.decompiler"),
    "torch_plugin.trace": ("torch_plugin.config", "torch_plugin.logs", "torch_plugin.decompiler"),
    "torch_plugin.decompiler": (),
    "torch_plugin.decompile": ("torch_plugin.capture", "torch_plugin.decompiler"),
    "torch_plugin.report": (),
    "torch_plugin.config": (),
    "torch_plugin.distributed": ("torch_plugin.distributed", "torch_plugin.contract",
                                 "torch_plugin.config"),
}  # fmt: skip


def test_python_layers_as_documented():
    """What README.md says each layer may import is what it imports (imports inside
    functions included; the extension _C is not a module of the graph)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_architecture import import_graph

    def under(module: str, prefix: str) -> bool:
        return module == prefix or module.startswith(prefix + ".")

    broken = []
    for module, imported in sorted(import_graph().items()):
        for layer, allowed in PYTHON_RULES.items():
            if under(module, layer):
                broken += [
                    f"{module} -> {target}"
                    for target in sorted(imported)
                    if not any(under(target, a) for a in allowed)
                ]
    assert not broken, (
        "imports against the rules of docs/internals/README.md (update the code or the "
        "page and PYTHON_RULES together):\n" + "\n".join(broken)
    )
