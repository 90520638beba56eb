"""The C++ layering of DESIGN.md's "Layout": passes and the runtime both build on
csrc/ir and not on each other; the IR includes neither; libs know nothing of the
IR. A grep of the #include lines (no build needed): a failure names the file, the
line and the rule it breaks."""

import re
from pathlib import Path

CSRC = Path(__file__).resolve().parents[3] / "csrc"

# csrc/ folder -> the csrc/ parts its files must not include, and why.
FORBIDDEN: dict[str, dict[str, str]] = {
    "ir": {
        "compiler/": "the IR builds on neither the compiler nor the runtime",
        "runtime/": "the IR builds on neither the compiler nor the runtime",
        "libs/": "the IR includes nothing else of the project",
        "ops/": "the IR includes nothing else of the project",
        "capture/": "the IR includes nothing else of the project",
        "python/": "the IR includes nothing else of the project",
    },
    "compiler/passes": {
        "runtime/": "passes build on csrc/ir, not on the runtime",
        "ops/": "passes build on csrc/ir, not on the ops",
        "libs/": "passes build on csrc/ir, not on library wrappers",
        "compiler/codegen/cpp/": "passes reach renderers through codegen/renderer.h",
        "compiler/codegen/cuda/": "passes reach renderers through codegen/renderer.h",
    },
    "compiler/codegen": {
        "runtime/": "codegen builds on csrc/ir, not on the runtime",
        "ops/": "codegen builds on csrc/ir, not on the ops",
        "libs/": "codegen builds on csrc/ir, not on library wrappers",
        "compiler/passes/": "codegen renders fusion groups; the passes call it, not the reverse",
    },
    # One renderer per target, side by side (codegen/renderer.h chooses by device).
    "compiler/codegen/cpp": {
        "compiler/codegen/cuda/": "renderers do not include each other",
    },
    "compiler/codegen/cuda": {
        "compiler/codegen/cpp/": "renderers do not include each other",
    },
    "runtime": {
        "compiler/": "the runtime builds on csrc/ir, not on the compiler or its passes",
        "capture/": "the runtime knows nothing of capture",
        "python/": "the runtime holds no Python bindings",
        "ops/": "the ops build on the runtime (executor_op runs the executor), not the reverse",
    },
    "libs": {
        "ir/": "libs know nothing of the IR",
        "compiler/": "libs know nothing of the IR or the compiler",
        "runtime/": "libs are thin wrappers below the runtime",
        "ops/": "libs are thin wrappers below the ops",
    },
}

INCLUDE = re.compile(r'^\s*#\s*include\s*["<]([^">]+)[">]')
SOURCES = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh"}


def violations() -> list[str]:
    found = []
    for folder, rules in FORBIDDEN.items():
        root = CSRC / folder
        assert root.is_dir(), f"csrc/{folder} is missing: update FORBIDDEN"
        for path in sorted(p for p in root.rglob("*") if p.suffix in SOURCES):
            for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                for prefix, why in rules.items():
                    if m.group(1).startswith(prefix):
                        rel = path.relative_to(CSRC.parent)
                        found.append(f"{rel}:{lineno}: #include {m.group(1)!r}: {why}")
    return found


def test_layering() -> None:
    bad = violations()
    assert not bad, "forbidden includes (DESIGN.md, Layout):\n" + "\n".join(bad)


def test_include_pattern() -> None:
    # The pattern matches the forms the sources use.
    assert INCLUDE.match('#include "runtime/step.h"').group(1) == "runtime/step.h"
    assert INCLUDE.match("#  include <compiler/ir.h>").group(1) == "compiler/ir.h"
    assert INCLUDE.match('// #include "runtime/step.h"') is None
