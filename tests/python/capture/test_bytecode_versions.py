"""The per-version bytecode layer (torch_plugin/capture/bytecode_compat.py).

Each program below is written so that CPython 3.13 compiles it to the instructions 3.13
added or changed (checked with ``dis`` there: a case that stops producing its instruction
fails rather than passing vacuously); on 3.11/3.12 the same source exercises the older
forms. Every case runs through the differential harness (eager vs the "eager", "aot_eager"
and "plugin" backends over a compiling, a cached and a recompiling call) and is captured as
one graph with no graph break and no recompile on the second call; the graph-break cases
check that the break lands on the instruction that decides a tensor's truth.
"""

from __future__ import annotations

import dis
import glob
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch
from differential import check

import torch_plugin
from torch_plugin.capture.bytecode_compat import local_accesses
from torch_plugin.python_versions import (
    SUPPORTED_VERSIONS,
    check_supported,
    is_free_threaded_build,
)

pytestmark = pytest.mark.usefixtures("fresh_capture", "tensor_branches_break")
PY313 = sys.version_info >= (3, 13)


def rand(*shapes):
    return lambda: tuple(torch.randn(s) for s in shapes)


def swap_and_pairs(x, y):
    a, b = x, y  # LOAD_FAST_LOAD_FAST, STORE_FAST_STORE_FAST
    a, b = b, a
    return a * 2 - b


def keywords(x, y):
    z = torch.clamp(x, min=-0.5, max=0.5)  # CALL_KW
    return torch.cat([z, y], dim=0).sum(dim=0, keepdim=True)


def method_and_global_calls(x):
    return torch.relu(x).mul(3).add(x.abs(), alpha=2)  # LOAD_ATTR method bit, NULL layout


def fstrings(x):
    n = x.shape[0]
    tag = f"{n!r:>4}|{n}|{n:03d}"  # CONVERT_VALUE, FORMAT_WITH_SPEC, FORMAT_SIMPLE
    return x * len(tag)


def closures_and_defaults(x):
    scale = 3.0

    def inner(t, k=2, *, shift=1.0):  # MAKE_FUNCTION + SET_FUNCTION_ATTRIBUTE 1/2/8
        return t * scale * k + shift

    return inner(x) + inner(x, 4, shift=0.5)


def comprehension(x):
    parts = [x * i for i in range(3)]  # inlined: LOAD_FAST_AND_CLEAR, STORE_FAST_LOAD_FAST
    total = parts[0]
    for p in parts[1:]:  # FOR_ITER, END_FOR, POP_TOP
        total = total + p
    return total


def constant_truth(x, n):
    if n and x.dim() == 1:  # TO_BOOL on an int, COMPARE_OP with its bool bit
        x = x + n
    if not n > 2:
        x = x * 2
    return x


def star_call(x, *args, **kwargs):
    return torch.stack((x, *args), **kwargs)  # CALL_FUNCTION_EX with the 3.13 NULL


CASES = [
    (swap_and_pairs, rand(4, 4), {"LOAD_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST"}),
    (keywords, rand(3, 3), {"CALL_KW"}),
    (method_and_global_calls, rand(5), {"LOAD_ATTR"}),
    (fstrings, rand(6), {"CONVERT_VALUE", "FORMAT_WITH_SPEC", "FORMAT_SIMPLE"}),
    (closures_and_defaults, rand(3), {"SET_FUNCTION_ATTRIBUTE"}),
    (comprehension, rand(4), {"LOAD_FAST_AND_CLEAR", "STORE_FAST_LOAD_FAST", "END_FOR"}),
    (constant_truth, lambda: (torch.randn(3), 3), {"TO_BOOL", "COMPARE_OP"}),
]


def _opnames(fn) -> set[str]:
    names = set()
    todo = [fn.__code__]
    while todo:
        code = todo.pop()
        names |= {i.opname for i in dis.get_instructions(code)}
        todo += [c for c in code.co_consts if hasattr(c, "co_code")]
    return names


def _second(call):
    """The same call with fresh values of the same shapes (a cache hit)."""
    return lambda: tuple(torch.randn(a.shape) if isinstance(a, torch.Tensor) else a for a in call())


@pytest.mark.parametrize("fn, call, ops", CASES, ids=[c[0].__name__ for c in CASES])
def test_one_graph_matches_eager(fn, call, ops):
    if PY313:
        missing = ops - _opnames(fn)
        assert not missing, f"{fn.__name__} no longer compiles to {missing} on 3.13"
    check(fn, call, _second(call), lambda: tuple(a * 2 for a in call()))
    torch_plugin.reset()
    opt = torch_plugin.optimize("eager")(fn)
    for args in (call(), _second(call)()):
        torch.testing.assert_close(opt(*args), fn(*args))
    s = torch_plugin.stats
    assert (s.graphs_compiled, s.recompiles, list(s.graph_breaks)) == (1, 0, [])


def test_star_call_matches_eager():
    check(
        star_call,
        lambda: (torch.randn(3), torch.randn(3)),
        lambda: (torch.randn(3), torch.randn(3)),
        lambda: (torch.randn(4), torch.randn(4), torch.randn(4)),
        kwargs=[{"dim": 0}, {"dim": 0}, {"dim": 1}],
    )


def tensor_truth(x, y):
    z = x * 2
    if z.sum() > 0:  # 3.13: COMPARE_OP with the bool bit decides a tensor's truth
        return z + y
    return z - y


def tensor_truth_direct(x, y):
    z = x.sum() - 1
    if z:  # 3.13: TO_BOOL on a tensor
        return x + y
    return x - y


@pytest.mark.parametrize("fn", [tensor_truth, tensor_truth_direct])
def test_data_dependent_branch_breaks_at_the_truth_test(fn):
    check(fn, rand(5, 5), lambda: (-torch.rand(5) - 1, torch.randn(5)), rand(6, 6))
    torch_plugin.reset()
    opt = torch_plugin.optimize("eager")(fn)
    for sign in (1, -1):
        x, y = torch.rand(5) * sign + sign, torch.randn(5)
        torch.testing.assert_close(opt(x, y), fn(x, y))
    assert len(torch_plugin.stats.graph_breaks) == 1
    _, reason, _ = torch_plugin.stats.graph_breaks[0]
    assert "data-dependent" in reason


def test_superinstruction_liveness():
    """STORE_FAST_LOAD_FAST (i, i) writes i before reading it: i is not live before it."""

    class Inst:
        def __init__(self, opname, argval):
            self.opname, self.argval = opname, argval

    assert local_accesses(Inst("STORE_FAST_LOAD_FAST", ("i", "j"))) == [
        ("write", "i"),
        ("read", "j"),
    ]
    assert local_accesses(Inst("LOAD_FAST_LOAD_FAST", ("a", "b"))) == [
        ("read", "a"),
        ("read", "b"),
    ]
    assert local_accesses(Inst("STORE_FAST_STORE_FAST", ("a", "b"))) == [
        ("write", "a"),
        ("write", "b"),
    ]
    assert local_accesses(Inst("LOAD_FAST", "x")) == [("read", "x")]
    assert local_accesses(Inst("LOAD_CONST", 1)) == []


def test_unsupported_python_is_a_clear_import_error():
    for version in SUPPORTED_VERSIONS:
        check_supported(version)
    for version in ((3, 10), (3, 14), (4, 0)):
        with pytest.raises(ImportError, match=r"supports CPython 3\.11, 3\.12, 3\.13"):
            check_supported(version)
    assert sys.version_info[:2] in SUPPORTED_VERSIONS


_OLD_PYTHONS = sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[0-9].*/bin/python")))
_UNSUPPORTED = [
    p for p in _OLD_PYTHONS if not any(f"/{a}.{b}." in p for a, b in SUPPORTED_VERSIONS)
]


@pytest.mark.skipif(not _UNSUPPORTED, reason="no unsupported CPython 3.1x under ~/.pyenv")
def test_import_on_a_real_unsupported_python_names_the_supported_versions():
    """The check runs before anything version-specific is imported (torch, the extension),
    and torch_plugin/__init__.py parses on the older Python: an ImportError, not a crash or
    a SyntaxError."""
    root = Path(torch_plugin.__file__).resolve().parent.parent
    result = subprocess.run(
        [_UNSUPPORTED[0], "-c", "import torch_plugin"],
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: torch_plugin supports CPython 3.11, 3.12, 3.13;"), last


_GENERIC_SOURCE = """
def generic_inner(x):
    y = x * 2
    def g[T](a: T) -> T:  # <generic parameters of g>: CALL_INTRINSIC_1/2
        return a + 1
    return g(y).sin()

def except_star(x):
    try:
        y = x * 2
    except* ValueError:  # the handler holds CALL_INTRINSIC_2 (PREP_RERAISE_STAR)
        y = x
    return y + 1
"""


@pytest.mark.skipif(sys.version_info < (3, 12), reason="PEP 695 syntax and 3.12 intrinsics")
@pytest.mark.parametrize("name", ["generic_inner", "except_star"])
def test_intrinsics_of_generics_and_except_star(name):
    """CALL_INTRINSIC_2 has no handler: the code that holds it (a generic function's
    type-parameter scope, an ``except*`` handler) is run at capture or never reached, so the
    function is still one graph matching eager."""
    ns = {"torch": torch}
    exec(compile(_GENERIC_SOURCE, "<generics>", "exec"), ns)  # noqa: S102 - 3.12 syntax
    fn = ns[name]
    assert "CALL_INTRINSIC_2" in _opnames(fn)
    check(fn, rand(4), rand(4), rand(5))
    torch_plugin.reset()
    opt = torch_plugin.optimize("eager")(fn)
    for x in (torch.randn(4), torch.randn(4)):
        torch.testing.assert_close(opt(x), fn(x))
    s = torch_plugin.stats
    assert (s.graphs_compiled, s.recompiles, list(s.graph_breaks)) == (1, 0, [])


def test_free_threaded_python_is_a_clear_import_error():
    """A free-threaded build (PEP 703, 3.13t) is refused at import, naming the supported
    builds; the interpreter running this test is not one (the extension was built for it)."""
    assert not is_free_threaded_build()
    check_supported(sys.version_info, free_threaded=False)
    for version in SUPPORTED_VERSIONS:
        with pytest.raises(ImportError, match=r"default build, with the GIL;.* free-threaded"):
            check_supported(version, free_threaded=True)
    # An unsupported version is named as such first, free-threaded or not.
    with pytest.raises(ImportError, match=r"this is cpython 3\.14\."):
        check_supported((3, 14), free_threaded=True)


def test_frame_compat_refuses_a_free_threaded_build(tmp_path):
    """frame_compat.h stops a free-threaded build (pyconfig.h defines Py_GIL_DISABLED there;
    defined on the command line here) with an #error naming the supported builds, for a
    build that does not go through CMakeLists.txt's own check."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler on PATH")
    header = Path(__file__).resolve().parents[3] / "csrc" / "capture" / "frame_compat.h"
    if not header.is_file():
        pytest.skip("frame_compat.h is not in this checkout (an installed package's tests)")
    source = tmp_path / "tu.cpp"
    source.write_text(f'#include "{header}"\n')
    include = sysconfig.get_paths()["include"]
    command = [cxx, "-std=c++17", "-fsyntax-only", f"-I{include}", str(source)]
    plain = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert plain.returncode == 0, plain.stderr
    freethreaded = subprocess.run(
        [*command, "-DPy_GIL_DISABLED=1"], capture_output=True, text=True, timeout=120, check=False
    )
    assert freethreaded.returncode != 0
    assert "does not support free-threaded CPython" in freethreaded.stderr, freethreaded.stderr
