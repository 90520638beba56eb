"""Code objects as readable text: Python source through ``depyf`` where it can, else ``dis``.

The transformed code that replaces a captured frame and the resume functions made at a graph
break exist only as bytecode. :func:`source_of` turns one code object into Python source
with the optional ``depyf`` package (``pip install depyf``, the decompiler torch.compile's
users know; it is not a dependency of torch_plugin), and falls back to the ``dis`` listing
when depyf is missing or cannot decompile that code. depyf 0.20 decompiles the transformed
code torch_plugin generates (straight-line calls, assembled without superinstructions) on
Python 3.11, 3.12 and 3.13 (checked on 3.13 with equivalent bytecode only: no torch build for
it here); the resume functions, which hold the user's own bytecode, decompile on 3.11 but
often not on 3.12 (inlined comprehensions: ``SWAP``; ``try``: ``PUSH_EXC_INFO``) nor on 3.13
(``LOAD_FAST_LOAD_FAST``, jump targets depyf cannot parse): those come back as ``dis`` text,
with depyf's reason.

Used by the ``bytecode`` log channel (:mod:`torch_plugin.logs`), the compile trace
(:mod:`torch_plugin.trace`) and :func:`torch_plugin.decompile`. A leaf: imports nothing of
the project.

Key names: :class:`Readable`, :func:`source_of`, :func:`depyf_available`,
:func:`resume_codes`.
"""

from __future__ import annotations

import dataclasses
import dis
import inspect
import linecache
import re
import tokenize
import types
import warnings
from typing import Any

# Resume functions are code objects named torch_plugin_resume_in_<function>
# (torch_plugin.capture.resume_execution).
RESUME_PREFIX = "torch_plugin_resume_in_"

_depyf: Any = None
_depyf_error: str | None = None


def _load_depyf() -> Any:
    """depyf's ``decompile``, or None when it is not installed or fails to import (the
    reason kept for :func:`source_of`'s note)."""
    global _depyf, _depyf_error
    if _depyf is None and _depyf_error is None:
        try:
            with warnings.catch_warnings():
                # depyf's import warns about torch versions it compares as strings
                # ("2.11" < "2.2") and leaves a file open; neither concerns decompiling.
                warnings.simplefilter("ignore")
                from depyf import decompile
            _depyf = decompile
        except Exception as e:  # noqa: BLE001 - optional package: any import failure
            _depyf_error = f"depyf is not available ({type(e).__name__}: {e})"
    return _depyf


def depyf_available() -> bool:
    """Whether the ``depyf`` package can be imported."""
    return _load_depyf() is not None


@dataclasses.dataclass(frozen=True)
class Readable:
    """One code object as text.

    Attributes:
        text: Python source (``tool == "depyf"``) or the ``dis`` listing (``"dis"``; for a
            resume function, led by the user's source lines it continues, as comments).
        tool: ``"depyf"`` or ``"dis"``.
        note: why it is ``dis`` text (depyf missing, or its error for this code), else None.
    """

    text: str
    tool: str
    note: str | None = None

    @property
    def is_source(self) -> bool:
        """Whether :attr:`text` is Python source."""
        return self.tool == "depyf"


def source_of(code: types.CodeType) -> Readable:
    """``code`` as Python source through depyf, or as its ``dis`` listing when depyf is not
    installed or cannot decompile it (:attr:`Readable.note` says why). The source is
    checked to compile; it never raises."""
    decompile = _load_depyf()
    if decompile is None:
        return Readable(_fallback_text(code), "dis", _depyf_error)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            text = decompile(code)
        compile(module_text(code, text), f"<decompiled {code.co_qualname}>", "exec")
    except Exception as e:  # noqa: BLE001 - any decompiler failure falls back to dis
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        note = f"depyf cannot decompile {code.co_qualname}: {type(e).__name__}: {first}"
        return Readable(_fallback_text(code), "dis", note)
    return Readable(text, "depyf")


_RESUME_LINE = re.compile(r"<resume at line (\d+)>$")


def _fallback_text(code: types.CodeType) -> str:
    """The ``dis`` listing; for a resume function, led by the user's own source it
    continues (from its resume line to the end of the function, as comments)."""
    listing = _dis_text(code)
    m = _RESUME_LINE.search(code.co_qualname)
    if m is None:
        return listing
    lines = linecache.getlines(code.co_filename)
    start, resume = code.co_firstlineno, int(m.group(1))
    if not lines or not 1 <= start <= resume <= len(lines):
        return listing
    try:
        block = inspect.getblock(lines[start - 1 :])
    except (SyntaxError, IndentationError, tokenize.TokenError):
        return listing
    rest = block[resume - start :]
    if not rest:
        return listing
    where = f"{code.co_filename}, lines {resume}-{start + len(block) - 1}"
    shown = "".join(f"#   {line.rstrip()}\n" for line in rest)
    return f"# The rest of the function it resumes, as written ({where}):\n{shown}\n{listing}"


CLOSURE_MAKER = "__torch_plugin_closure"


def module_text(code: types.CodeType, source: str) -> str:
    """``source`` (a decompiled function of ``code``) as module text that compiles: a code
    with free variables (its source says ``nonlocal``) is wrapped in a function
    ``__torch_plugin_closure(<free variables>)`` that defines it and returns it."""
    if not code.co_freevars:
        return source
    body = "".join(f"    {line}\n" if line.strip() else "\n" for line in source.splitlines())
    return f"def {CLOSURE_MAKER}({', '.join(code.co_freevars)}):\n{body}    return {code.co_name}\n"


def _dis_text(code: types.CodeType) -> str:
    return dis.Bytecode(code).dis()


def code_globals(code: types.CodeType) -> list[str]:
    """The global names ``code`` loads (in order, once each), as ``LOAD_GLOBAL`` reads them."""
    names: dict[str, None] = {}
    for inst in dis.get_instructions(code):
        if inst.opname == "LOAD_GLOBAL":
            names[str(inst.argval)] = None
    return list(names)


def resume_codes(code: types.CodeType, f_globals: dict) -> list[tuple[str | None, Any]]:
    """The resume functions ``code`` (a transformed code) calls: ``(global name, code
    object)`` for those installed as globals of ``f_globals``, ``(None, code object)`` for
    those made in the code from a constant (a frame with free variables)."""
    found: list[tuple[str | None, Any]] = []
    for name in code_globals(code):
        fn = f_globals.get(name)
        fn_code = getattr(fn, "__code__", None)
        if isinstance(fn_code, types.CodeType) and fn_code.co_name.startswith(RESUME_PREFIX):
            found.append((name, fn_code))
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and const.co_name.startswith(RESUME_PREFIX):
            found.append((None, const))
    return found
