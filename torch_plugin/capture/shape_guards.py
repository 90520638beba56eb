"""Shape guards: the ShapeEnv's guards on symbolic sizes, compiled for the C++ guard tree.

A capture with dynamic dimensions (see :mod:`.dynamic_shapes`) traces with symbols for some
sizes; every decision the trace took about them (a broadcast, a ``view``, a Python ``if`` on a
size, a backend's choice) is recorded by PyTorch's ``ShapeEnv`` as a sympy relation, e.g.
``Eq(s1, s0)`` or ``2 <= s0``. :func:`add_shape_guards` turns them, together with

- the *bindings*: which input's size or stride each symbol stands for (the first binding of
  a symbol defines it; a later one, e.g. a second input of the same size under duck sizing,
  or a stride that is an expression like ``768*s1``, becomes an equality check), and
- each symbol's value range (``s0 >= 2``),

into programs for ``RootGuardManager.add_shape_check`` (csrc/capture/shape_guards.h), which
evaluates them with integer arithmetic (floats only where the expression divides with
``/`` or has a float constant, as Inductor's heuristics do) and no Python. An expression
outside the supported operators (+, *, //, %, /, **, min, max, floor, ceil, comparisons,
and/or/not) raises
:class:`ShapeGuardUnsupported`; the capture is then repeated with static shapes.

Sources: the sympy function classes of ``torch.utils._sympy.functions`` (FloorDiv,
ModularIndexing, PythonMod, Mod, CleanDiv, Max, Min, PowByNatural), and
``ShapeEnv.guards`` / ``ShapeEnv.var_to_range`` in ``torch.fx.experimental.symbolic_shapes``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import sympy


class ShapeGuardUnsupported(Exception):
    """A shape guard uses an operation the C++ evaluator does not implement."""


@dataclasses.dataclass
class Binding:
    """``source``'s size(dim) (``kind == "size"``), stride(dim) (``"stride"``) or, for an
    int input, its value (``"int"``) equals ``expr``."""

    source: Any
    kind: str
    dim: int
    expr: sympy.Expr

    def name(self) -> str:
        if self.kind == "int":
            return self.source.name()
        return f"{self.source.name()}.{self.kind}()[{self.dim}]"


def _program(expr, symbols: dict) -> list[tuple[str, int]]:
    """``expr`` in reverse Polish notation over ``symbols`` (sympy Symbol -> index)."""
    from torch.utils._sympy import functions as F

    out: list[tuple[str, int]] = []

    def fold(args, op: str) -> None:
        emit(args[0])
        for a in args[1:]:
            emit(a)
            out.append((op, 0))

    def emit(e) -> None:
        if e is sympy.true:
            out.append(("const", 1))
        elif e is sympy.false:
            out.append(("const", 0))
        elif isinstance(e, sympy.Integer):
            out.append(("const", int(e)))
        elif isinstance(e, (sympy.Float, sympy.Rational)):
            out.append(("constf", float(e)))
        elif isinstance(e, sympy.Symbol):
            if e not in symbols:
                raise ShapeGuardUnsupported(f"symbol {e} is not bound to an input size")
            out.append(("symbol", symbols[e]))
        elif isinstance(e, sympy.Add):
            fold(e.args, "add")
        elif isinstance(e, sympy.Mul):
            fold(e.args, "mul")
        elif isinstance(e, F.FloatPow):
            fold(e.args, "pow")
        elif isinstance(e, (sympy.Pow, F.PowByNatural)):
            base, exp = e.args
            if not (isinstance(exp, sympy.Integer) and exp >= 0):
                raise ShapeGuardUnsupported(f"power with exponent {exp}")
            emit(base)
            emit(exp)
            out.append(("pow", 0))
        elif isinstance(e, (F.FloorDiv, F.CleanDiv)):
            fold(e.args, "floordiv")
        elif isinstance(e, F.CeilDiv):  # ceil(a / b) == -((-a) // b)
            emit(e.args[0])
            out.append(("neg", 0))
            emit(e.args[1])
            out.append(("floordiv", 0))
            out.append(("neg", 0))
        elif isinstance(e, (F.IntTrueDiv, F.FloatTrueDiv)):
            fold(e.args, "truediv")
        elif isinstance(e, F.ToFloat):
            emit(e.args[0])
            out.append(("tofloat", 0))
        elif isinstance(e, F.FloorToInt):
            emit(e.args[0])
            out.append(("floor", 0))
        elif isinstance(e, F.CeilToInt):
            emit(e.args[0])
            out.append(("ceil", 0))
        elif isinstance(e, (F.PythonMod, F.Mod, sympy.Mod)):
            fold(e.args, "mod")
        elif isinstance(e, F.ModularIndexing):
            base, div, mod = e.args
            emit(base)
            emit(div)
            out.append(("floordiv", 0))
            emit(mod)
            out.append(("mod", 0))
        elif isinstance(e, (F.Max, sympy.Max)):
            fold(e.args, "max")
        elif isinstance(e, (F.Min, sympy.Min)):
            fold(e.args, "min")
        elif isinstance(e, sympy.Eq):
            fold(e.args, "eq")
        elif isinstance(e, sympy.Ne):
            fold(e.args, "ne")
        elif isinstance(e, sympy.StrictLessThan):
            fold(e.args, "lt")
        elif isinstance(e, sympy.LessThan):
            fold(e.args, "le")
        elif isinstance(e, sympy.StrictGreaterThan):
            fold(e.args, "gt")
        elif isinstance(e, sympy.GreaterThan):
            fold(e.args, "ge")
        elif isinstance(e, sympy.And):
            fold(e.args, "and")
        elif isinstance(e, sympy.Or):
            fold(e.args, "or")
        elif isinstance(e, sympy.Not):
            emit(e.args[0])
            out.append(("not", 0))
        else:
            raise ShapeGuardUnsupported(f"{type(e).__name__} in a shape guard ({e})")

    emit(expr)
    return out


def collect(shape_env, bindings: list[Binding]) -> list[tuple[Any, str]]:
    """The relations an entry must check: (sympy relation, description), in terms of the
    bound symbols. Called after the backend compiled (backends may add guards)."""
    names = {}
    for b in bindings:
        if isinstance(b.expr, sympy.Symbol) and b.expr not in names:
            names[b.expr] = sympy.Symbol(b.name(), integer=True)
    relations: list[tuple[Any, str]] = []

    def describe(rel) -> str:
        return str(rel.xreplace(names))

    for sym in names:
        vr = shape_env.var_to_range.get(sym)
        if vr is None:
            continue
        lower, upper = vr.lower, vr.upper
        if isinstance(lower, sympy.Integer):
            rel = sympy.Le(sympy.Integer(int(lower)), sym, evaluate=False)
            relations.append((rel, describe(rel)))
        if isinstance(upper, sympy.Integer) and int(upper) < 2**62:
            rel = sympy.Le(sym, sympy.Integer(int(upper)), evaluate=False)
            relations.append((rel, describe(rel)))
    for guard in shape_env.guards:
        relations.append((guard.expr, describe(guard.expr)))
    return relations


def add_shape_guards(root, node_for, shape_env, bindings: list[Binding]) -> list[str]:
    """Add the symbols and checks of ``bindings`` and ``shape_env``'s guards to ``root``
    (a ``torch_plugin._C.RootGuardManager``; ``node_for(source)`` gives a source's node).
    Returns the checks' descriptions, in source terms.

    Raises :class:`ShapeGuardUnsupported` for an expression the evaluator cannot run.
    """
    if not bindings:
        return []
    symbols: dict = {}
    checks: list[tuple[list, str]] = []
    # Build every program before touching the tree, so a failure leaves it unchanged.
    reads: list[tuple[Binding, int]] = []
    for b in sorted(bindings, key=lambda b: not isinstance(b.expr, sympy.Symbol)):
        index = len(reads)
        reads.append((b, index))
        if isinstance(b.expr, sympy.Symbol) and b.expr not in symbols:
            symbols[b.expr] = index
    names = {s: sympy.Symbol(reads[i][0].name(), integer=True) for s, i in symbols.items()}
    for b, index in reads:
        if symbols.get(b.expr) == index:
            continue
        read = sympy.Symbol(f"__read{index}", integer=True)
        prog = _program(sympy.Eq(read, b.expr, evaluate=False), {**symbols, read: index})
        checks.append((prog, f"{b.name()} == {b.expr.xreplace(names)}"))
    for rel, text in collect(shape_env, bindings):
        checks.append((_program(rel, symbols), text))
    for b, index in reads:
        got = root.add_shape_symbol(node_for(b.source), b.kind, b.dim, b.name())
        assert got == index, (got, index)
    for prog, text in checks:
        root.add_shape_check(prog, text)
    return [text for _, text in checks]
