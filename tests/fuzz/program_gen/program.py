"""A generated program as data: the statement tree (strings and :class:`Block` nodes) inside
``f``, its globals, cells, parameters, returned values and ``inputs(call)``; and its source
text (:meth:`Program.source`)."""

from __future__ import annotations

import dataclasses

from .preludes import PRELUDE, PRELUDE_EXTRA


@dataclasses.dataclass
class Block:
    header: str
    body: list
    orelse: list | None = None  # for if/else


@dataclasses.dataclass
class Program:
    seed: int
    globals_src: list  # module-level lines after the prelude
    cells_src: list  # lines in make() before def f
    params: list
    body: list  # str | Block
    ret: list  # returned expressions
    inputs_src: list  # body of inputs(call)
    features: set = dataclasses.field(default_factory=set)
    preludes: list = dataclasses.field(default_factory=list)  # PRELUDE_EXTRA keys

    def source(self) -> str:
        out = [PRELUDE, ""]
        for key in self.preludes:
            out += ["", PRELUDE_EXTRA[key]]
        out += self.globals_src
        out += ["", "", "def make():"]
        out += ["    " + line for line in self.cells_src]
        out.append(f"    def f({', '.join(self.params)}):")
        out.append("        nonlocal cell, count")
        out.append("        global G_N, G_T")
        for node in self.body:
            _emit(node, 2, out)
        ret = ", ".join(self.ret)
        out.append(f"        return ({ret}{',' if len(self.ret) == 1 else ''})")
        out.append("    return f")
        out += ["", "", "def inputs(call):"]
        out += ["    " + line for line in self.inputs_src]
        return "\n".join(out) + "\n"

    def n_statements(self) -> int:
        return _count(self.body)


def _emit(node, depth: int, out: list) -> None:
    pad = "    " * depth
    if isinstance(node, str):
        for line in node.split("\n"):
            out.append(pad + line)
        return
    out.append(pad + node.header)
    for child in node.body or ["pass"]:
        _emit(child, depth + 1, out)
    if node.orelse is not None:
        out.append(pad + "else:")
        for child in node.orelse or ["pass"]:
            _emit(child, depth + 1, out)


def _count(nodes) -> int:
    n = 0
    for node in nodes:
        n += 1
        if isinstance(node, Block):
            n += _count(node.body) + _count(node.orelse or [])
    return n
