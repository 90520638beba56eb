"""``torch_plugin.decompile(fn)``: the code that replaced a captured function, and every
resume function it reaches, as readable Python source written to files.

After an optimized function has run, each of its cache entries holds a *transformed code*
(it loads the graph inputs, calls the compiled graph, replays side effects and, at a graph
break, runs the unsupported instruction and calls a *resume function* with the rest of the
function). Resume functions are frames too: once called they hold transformed codes of their
own. :func:`decompile` walks this tree from ``fn``'s code and decompiles every code object
with the optional ``depyf`` package (:mod:`torch_plugin.decompiler`; without depyf, or where
it fails, the ``dis`` listing is kept, with the reason), writes each to a file, and returns a
:class:`DecompileOutput`. :meth:`DecompileOutput.load` compiles a file back into a function
whose code comes from that file, so a debugger (pdb, an IDE) steps through the transformed
code and into the decompiled resume functions line by line.

Layer: above capture (reads ``torch_plugin._C.cache_entries`` and the globals capture
installed); nothing in capture imports it. Key names: :func:`decompile`,
:class:`DecompileOutput`, :class:`DecompiledCode`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tempfile
import types
from collections.abc import Callable
from typing import Any

import torch

from . import _C
from .capture.eval_frame import OptimizedModule
from .decompiler import CLOSURE_MAKER, module_text, resume_codes, source_of

__all__ = ["DecompileOutput", "DecompiledCode", "decompile"]


@dataclasses.dataclass
class DecompiledCode:
    """One code object of the tree :func:`decompile` walked.

    Attributes:
        kind: ``"transformed"`` (the code of a cache entry, run instead of a frame) or
            ``"resume"`` (a resume function as capture generated it: the rest of a function
            after a graph break, run as plain Python until it is captured in turn).
        name: the code's qualified name (``f``, ``torch_plugin_resume_in_f``).
        code: the code object.
        text: Python source (``tool == "depyf"``) or the ``dis`` listing (``"dis"``).
        tool: ``"depyf"`` or ``"dis"``; ``note``: why not depyf, else None.
        path: the file it was written to.
        parent: index in :attr:`DecompileOutput.codes` of the code that calls it (None for
            the transformed codes of ``fn`` itself); ``entry``: for a transformed code, its
            position among its frame's cache entries (0: most recently used).
        global_name: for a resume function installed as a global, the name the transformed
            code loads it by (``__torch_plugin_resume_2``); None for one made from a constant.
    """

    kind: str
    name: str
    code: types.CodeType
    text: str
    tool: str
    note: str | None
    path: str | None = None
    parent: int | None = None
    entry: int | None = None
    global_name: str | None = None

    @property
    def is_source(self) -> bool:
        return self.tool == "depyf"


class DecompileOutput:
    """What :func:`decompile` found: :attr:`codes` (:class:`DecompiledCode`, parents before
    children) and :attr:`dump_dir`, the folder of the files. ``str()`` of it is every code's
    text with a header line each."""

    def __init__(self, fn: Callable, codes: list[DecompiledCode], dump_dir: str, f_globals: dict):
        self.fn = fn
        self.codes = codes
        self.dump_dir = dump_dir
        self._globals = f_globals
        self._closure = _closure_values(fn)

    def __str__(self) -> str:
        parts = []
        for c in self.codes:
            how = "decompiled by depyf" if c.is_source else f"dis listing ({c.note})"
            parts.append(f"# {c.kind} {c.name} ({how}) -> {c.path}\n{c.text.rstrip()}\n")
        return "\n".join(parts)

    def transformed(self) -> list[DecompiledCode]:
        """The transformed codes of ``fn``'s own cache entries (most recently used first)."""
        return [c for c in self.codes if c.kind == "transformed" and c.parent is None]

    def resume_functions(self) -> list[DecompiledCode]:
        """Every resume function reached (as generated; their transformed codes are in
        :attr:`codes` with them as parent)."""
        return [c for c in self.codes if c.kind == "resume"]

    def load(self, which: DecompiledCode | None = None) -> Callable:
        """A function compiled from ``which``'s file (default: the transformed code of
        ``fn``'s most recently used entry), in a copy of ``fn``'s globals in which each
        resume function it calls is its decompiled source loaded the same way (so a
        debugger steps from one file into the next). The compiled graphs it calls are the
        real ones; free variables get the values of ``fn``'s closure (copies: assigning them
        does not reach ``fn``'s cells).

        A transformed code takes the frame's arguments as plain positional parameters (a
        ``*args`` parameter as one tuple, ``**kwargs`` as one dict) and does not check its
        entry's guards: call it with arguments like those it was compiled for.

        Raises:
            ValueError: ``which`` (or a resume function it calls) has no Python source
                (depyf is not installed or could not decompile it: the message says why).
        """
        if which is None:
            own = self.transformed()
            if not own:
                raise ValueError(f"no transformed code of {_name(self.fn)}")
            which = own[0]
        return self._load(which)

    def _load(self, which: DecompiledCode) -> Callable:
        if not which.is_source:
            raise ValueError(f"no Python source for {which.name}: {which.note}")
        namespace = dict(self._globals)
        index = self.codes.index(which)
        for child in self.codes:
            if child.parent == index and child.kind == "resume" and child.global_name:
                namespace[child.global_name] = self._load(child)
        if which.path is not None:
            with open(which.path, encoding="utf-8") as f:
                text = f.read()  # the file as written (header comments included): its lines
        else:
            text = module_text(which.code, which.text)
        module = compile(text, which.path or f"<decompiled {which.name}>", "exec")
        exec(module, namespace)  # noqa: S102 - the decompiled file, loaded on request
        if which.code.co_freevars:
            cells = [self._closure.get(n) for n in which.code.co_freevars]
            return namespace[CLOSURE_MAKER](*cells)
        return namespace[which.code.co_name]


def decompile(fn: Callable | torch.nn.Module, dump_dir: str | None = None) -> DecompileOutput:
    """The transformed code of every cache entry of ``fn``, and every resume function it
    reaches (with their own entries' transformed codes), as Python source, each written to a
    file in ``dump_dir``.

    Call it after the optimized function has run (its entries exist from the first call).
    Sources come from the optional ``depyf`` package (``pip install depyf``); a code it
    cannot decompile (or every code, without depyf) is given as its ``dis`` listing, with
    the reason in :attr:`DecompiledCode.note`.

    Args:
        fn: the optimized function or module (``torch_plugin.optimize(...)``'s result) or
            the original one; for a module, its ``forward``.
        dump_dir: the folder for the files (created); None: a new temporary folder.

    Returns:
        A :class:`DecompileOutput`; ``.load()`` gives a function compiled from the files.

    Raises:
        TypeError: ``fn`` has no Python code.
        ValueError: ``fn``'s code has no compiled entry (not called yet, or it ran
            uncaptured).
    """
    target = _unwrap(fn)
    code = getattr(target, "__code__", None)
    if not isinstance(code, types.CodeType):
        raise TypeError(f"decompile() expects a Python function or nn.Module, got {target!r}")
    entries = _C.cache_entries(code)
    if not entries:
        raise ValueError(
            f"decompile(): {code.co_qualname} ({code.co_filename}:{code.co_firstlineno}) "
            "has no compiled entry; call the optimized function first"
        )
    dump_dir = dump_dir or tempfile.mkdtemp(prefix="torch_plugin_decompiled_")
    os.makedirs(dump_dir, exist_ok=True)
    f_globals = target.__globals__
    codes: list[DecompiledCode] = []
    seen: set[int] = set()

    def add(kind, c, parent, entry=None, global_name=None) -> int:
        r = source_of(c)
        codes.append(DecompiledCode(kind, c.co_qualname, c, r.text, r.tool, r.note, None,
                                    parent, entry, global_name))  # fmt: skip
        return len(codes) - 1

    def walk_entries(frame_code: types.CodeType, parent: int | None) -> None:
        if id(frame_code) in seen:
            return
        seen.add(id(frame_code))
        for i, (transformed, _guard) in enumerate(_C.cache_entries(frame_code)):
            t = add("transformed", transformed, parent, entry=i)
            for global_name, rcode in resume_codes(transformed, f_globals):
                r = add("resume", rcode, t, global_name=global_name)
                walk_entries(rcode, r)

    walk_entries(code, None)
    for i, c in enumerate(codes):
        c.path = _write(dump_dir, i, c, codes)
    return DecompileOutput(target, codes, dump_dir, f_globals)


def _write(dump_dir: str, index: int, c: DecompiledCode, codes: list[DecompiledCode]) -> str:
    stem = re.sub(r"[^A-Za-z0-9_]+", "_", c.name)
    path = os.path.join(dump_dir, f"{index:02d}_{c.kind}_{stem}.{'py' if c.is_source else 'txt'}")
    what = {
        "transformed": f"the transformed code of cache entry {c.entry} of {c.name}",
        "resume": "a resume function: the rest of a function after a graph break",
    }[c.kind]
    header = [
        f"# torch_plugin.decompile: {what}",
        f"# {c.code.co_filename}:{c.code.co_firstlineno}",
    ]
    if c.parent is not None:
        header.append(f"# called from {os.path.basename(codes[c.parent].path or '')}")
    if not c.is_source:
        header.append(f"# dis listing: {c.note}")
    text = module_text(c.code, c.text) if c.is_source else c.text
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(header) + "\n" + text)  # load() compiles this file as it is
    return path


def _unwrap(fn: Any) -> Any:
    if isinstance(fn, OptimizedModule):
        fn = fn._orig_mod
    if isinstance(fn, torch.nn.Module):
        return type(fn).forward.__get__(fn)
    fn = getattr(fn, "_torchplugin_original", fn)
    return getattr(fn, "__func__", fn)


def _closure_values(fn: Any) -> dict[str, Any]:
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    closure = getattr(fn, "__closure__", None) or ()
    if code is None:
        return {}
    return {name: cell.cell_contents for name, cell in zip(code.co_freevars, closure)}


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or repr(fn)
