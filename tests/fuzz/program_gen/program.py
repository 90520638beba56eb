"""A generated program as data: the statement tree (strings and :class:`Block` nodes) inside
``f``, its globals, cells, parameters (or, for a frame without parameters, where ``f`` reads
them: FRAMES), returned values and ``inputs(call)``; and its source text
(:meth:`Program.source`)."""

from __future__ import annotations

import dataclasses

from .preludes import PRELUDE, PRELUDE_EXTRA

# How the function under test gets its inputs: its parameters, or none (zero-argument frames,
# whose resume functions start with a stack value instead of an argument) and it reads
# them from a global or from a closure cell.
FRAMES = ("args", "global", "closure")


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
    # How f gets its inputs (FRAMES): "args" its parameters; "global" none, it unpacks the
    # global ARGS that inputs(call) set; "closure" none, it unpacks holder[0], a cell of
    # make() holding the global list ARGS_BOX that inputs(call) fills.
    frame: str = "args"

    def source(self) -> str:
        out = [PRELUDE, ""]
        for key in self.preludes:
            out += ["", PRELUDE_EXTRA[key]]
        out += self.globals_src
        if self.frame == "global":
            out.append("ARGS = ()")
        elif self.frame == "closure":
            out.append("ARGS_BOX = []")
        out += ["", "", "def make():"]
        out += ["    " + line for line in self.cells_src]
        if self.frame == "closure":
            out.append("    holder = ARGS_BOX")
        params = ", ".join(self.params)
        out.append(f"    def f({params if self.frame == 'args' else ''}):")
        out.append("        nonlocal cell, count")
        out.append("        global G_N, G_T")
        if self.frame != "args":
            out.append(f"        {params} = {'ARGS' if self.frame == 'global' else 'holder[0]'}")
        for node in self.body:
            _emit(node, 2, out)
        ret = ", ".join(self.ret)
        out.append(f"        return ({ret}{',' if len(self.ret) == 1 else ''})")
        out.append("    return f")
        out += ["", "", "def inputs(call):"]
        inputs = list(self.inputs_src)
        if self.frame != "args":  # the arguments go where f reads them; the call has none
            packed = inputs.pop().removeprefix("return ")
            if self.frame == "global":
                inputs = ["global ARGS", *inputs, f"ARGS = {packed}"]
            else:
                inputs.append(f"ARGS_BOX[:] = [{packed}]")
            inputs.append("return ()")
        out += ["    " + line for line in inputs]
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
