"""Random small Python programs for differential testing of capture (see differential.py).

:func:`generate` makes a :class:`Program` from a seed, deterministically (``random.Random``,
no global state). A program is Python source: a module with globals (a tensor, a list, a
dict, a user object, an int, a StringIO), helper classes (a ``Box``, a context manager
``Rec`` that appends to a list, a generator function with side effects, an inlined helper),
and ``make()``, which returns the function under test: a closure ``f`` over a few cells. The
body mixes tensor ops (pointwise, reductions, matmul, views, cat/stack), indexing and
setitem (also through views), in-place ops on locals, arguments and globals, int / float /
bool arguments (0 and 1 included), list/dict/object mutation through two paths (global and a
local alias, an object's attribute aliasing a global list, an argument that *is* a global),
``nonlocal`` and ``global`` writes, branches on shapes and Python values, for/while loops,
partially consumed generators, context managers (no_grad, enable_grad, a user one, autocast)
and graph breaks (print to a StringIO, ``.item()``, ``.tolist()``, data-dependent ``if``).

Newer families (NEW_FAMILIES, each excludable by name): the identity of in-place results
(``r = t.add_(1)``; ``r is t`` returned, branched on, stored), descriptors (set-only, get+set,
non-data, property with setter) on a global, an argument or a local object, attributes on
tensors (``x.tag`` set by the caller on some calls; ``hasattr`` / ``getattr`` with a default
inside, also of FakeTensor-only names), attributes on objects built inside (``o.extra`` on a
user class, namedtuple and typing.NamedTuple subclasses), and NumPy scalars (argument,
global, constants) with tensors of several dtypes. Their module code (PRELUDE_EXTRA), globals
and arguments appear only in programs that use them.

``inputs(call)`` in the same source builds each call's arguments: calls 0 and 1 have the
same shapes and Python values (1 must hit the cache), call 2 changes one thing (a size, an
int, a bool, a float, a list length) so it recompiles, and call 3 changes it once more
(automatic dynamic makes the second recompile symbolic: its own code path).

Shapes: 2-D tensors are (R, C), with R = 3..6 changing between calls and C = 2..4 fixed per
program; variables are tracked by "kind": RC (R, C), R (R,), C (C,), S (scalar), CC (C, C).
Index constants stay below 3 so they are valid for every R.

:func:`minimize` drops statements (and returned values) while a predicate still holds.
"""

from __future__ import annotations

import dataclasses
import random
import typing
from collections.abc import Callable

PRELUDE = """\
import io
import torch


class Box:
    def __init__(self, t, n):
        self.t = t
        self.n = n
        self.items = [t]


class Rec:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, *exc):
        self.log.append("exit")
        return False


def gen(t, log):
    log.append("g0")
    yield t * 2
    log.append("g1")
    yield t + 1
    log.append("g2")


def helper(t, lst):
    lst.append(t.sum())
    return t * 2


def helper_obj(o, t):
    o.n = o.n + 1
    o.t = o.t + t
    return o.t
"""


# Extra module-level code, emitted only when a program uses the family (so a program without
# the new families is the same text as before they existed).
PRELUDE_EXTRA = {
    "numpy-scalars": """\
import numpy as np
""",
    "descriptors": """\
class SetOnly:
    # only __set__ (a data descriptor without __get__): reads find the instance __dict__
    def __set_name__(self, owner, name):
        self.name = name

    def __set__(self, obj, value):
        obj.__dict__[self.name] = value * 2


class GetSet:
    def __set_name__(self, owner, name):
        self.name = "_" + name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return obj.__dict__[self.name] + 1

    def __set__(self, obj, value):
        obj.__dict__["sets"] = obj.__dict__.get("sets", 0) + 1
        obj.__dict__[self.name] = value * 0.5


class NonData:
    # __get__ only: an instance attribute of the same name shadows it
    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return obj.base * 3


class DObj:
    sa = SetOnly()
    gs = GetSet()
    nd = NonData()

    def __init__(self, t, n):
        self.base = t
        self.sa = t
        self.gs = t
        self._p = t
        self.n = n

    @property
    def p(self):
        return self._p - 1

    @p.setter
    def p(self, v):
        self._p = v * 3
""",
    "object-attrs": """\
import collections
import typing

Pair = collections.namedtuple("Pair", ["a", "b"])


class PairX(Pair):
    pass


class NT(typing.NamedTuple):
    a: torch.Tensor
    b: int


class NTX(NT):
    pass


class Plain:
    pass
""",
}


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


# --------------------------------------------------------------------------- generator


class _Gen:
    def __init__(self, seed: int, exclude: frozenset = frozenset()) -> None:
        self.exclude = exclude
        self.rng = random.Random(seed)
        self.seed = seed
        self.C = self.rng.choice([2, 3, 4])
        self.vars: dict[str, str] = {}  # tensor locals: name -> kind
        self.counter = 0
        self.features: set = set()
        self.grad = self.rng.random() < 0.15
        self.in_loop = False
        # the newer families (NEW_FAMILIES) draw from the RNG only when enabled, so excluding
        # them all gives exactly the programs of before they were added
        self.new_families = [f for f in NEW_FAMILIES if f not in exclude]
        focus = all(name in exclude for name in self._EXCLUDE_NAME.values())
        self.p_new = 0.8 if focus else 0.25
        self.extra_rets: list = []  # expressions the program may return (top-level only)
        self.dobjs: list = []  # DObj locals (descriptors)
        self.aobjs: list = []  # locals of objects with an .extra attribute (object-attrs)
        self.uses: set = set()  # extra params/globals: "dob", "npv", "tag"

    # ----- helpers
    def r(self) -> float:
        return self.rng.random()

    def pick(self, seq):
        return self.rng.choice(seq)

    def new(self, prefix: str = "t") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def vars_of(self, kind: str) -> list:
        return [v for v, k in self.vars.items() if k == kind]

    # ----- expressions: a string producing a float tensor of `kind`
    def expr(self, kind: str, depth: int = 0) -> str:
        if depth >= 2 or self.r() < 0.3:
            return self.leaf(kind)
        choice = self.r()
        if choice < 0.35:
            return self.unary(self.expr(kind, depth + 1))
        if choice < 0.7:
            return self.binary(kind, depth)
        return self.convert(kind, depth)

    def leaf(self, kind: str) -> str:
        names = self.vars_of(kind)
        extra = {
            "RC": ["x"],
            "C": ["y", "G_T", "cell", "obj.t", "G_OBJ.t", 'G_DICT["a"]', 'd["a"]'],
            "R": ["x[:, 0]", "x.sum(1)"],
            "S": ["x.sum()", "y[0]", "G_T.sum()"],
            "CC": ["M"],
        }[kind]
        if self.r() < 0.6 and names:
            return self.pick(names)
        return self.pick(extra + names)

    def unary(self, e: str) -> str:
        ops = [
            "torch.sin({})",
            "{}.cos()",
            "torch.relu({})",
            "{}.tanh()",
            "{}.abs()",
            "(-{})",
            "({} * 2)",
            "({} + 1.5)",
            "torch.sigmoid({})",
            "{}.clamp(-1.0, 1.0)",
            "({} * n)",
            "({} + s)",
            "({} * flag)",
            "torch.where({0} > 0, {0}, 0.5)",
            "({} / ({}.abs() + 1))",
            "{}.clone()",
        ]
        op = self.pick(ops)
        if op.count("{}") == 2:
            return op.format(e, e)
        return op.format(e)

    def py_value(self) -> str:
        self.features.add("python-values")
        return self.pick(
            [
                "n",
                "s",
                "len(lst)",
                "obj.n",
                "G_N",
                'd["n"]',
                "count",
                "G_OBJ.n",
                "len(G_LIST)",
                'G_DICT["n"]',
                "x.shape[0]",
            ]
        )

    def binary(self, kind: str, depth: int) -> str:
        a = self.expr(kind, depth + 1)
        op = self.pick([" + ", " * ", " - ", "max"])
        # second operand: same kind, a broadcastable one, or a Python value
        c = self.r()
        if c < 0.45:
            b = self.expr(kind, depth + 1)
        elif c < 0.6 and kind in ("RC", "C"):
            b = self.expr("C", depth + 1)
        elif c < 0.7 and kind == "RC":
            b = f"{self.expr('R', depth + 1)}.unsqueeze(1)"
        elif c < 0.78:
            b = self.expr("S", depth + 1)
        elif c < 0.85 and kind in ("RC", "C"):
            self.features.add("list-read")
            b = self.pick(["lst[-1]", "G_LIST[-1]", "obj.items[-1]", "lst[0]", "G_LIST[0]"])
        elif c < 0.9 and self.grad and kind in ("RC", "C"):
            b = "w"
        else:
            b = self.py_value()
        if op == "max":
            if b.startswith(("n", "s", "len", "obj.n", "G_N", "d[", "count", "G_OBJ.n", "G_D")):
                return f"({a} + {b})"
            return f"torch.maximum({a}, torch.as_tensor({b}))"
        return f"({a}{op}{b})"

    def convert(self, kind: str, depth: int) -> str:
        d = depth + 1
        C = self.C
        i = self.pick([0, 1, 2, -1])
        j = self.pick(range(C))
        if kind == "RC":
            return self.pick(
                [
                    lambda: f"({self.expr('RC', d)} @ {self.expr('CC', d)})",
                    lambda: f"torch.softmax({self.expr('RC', d)}, dim=-1)",
                    lambda: (
                        f"torch.cat([{self.expr('RC', d)}, {self.expr('RC', d)}], dim=0)"
                        f".reshape(2, -1, {C}).sum(0)"
                    ),
                    lambda: f"torch.stack([{self.expr('RC', d)}, {self.expr('RC', d)}]).amax(0)",
                    lambda: (
                        f"torch.cat([{self.expr('RC', d)}, {self.expr('RC', d)}], dim=1)[:, :{C}]"
                    ),
                    lambda: f"{self.expr('RC', d)}.t().contiguous().t()",
                    lambda: f"{self.expr('RC', d)}.reshape(-1, {C})",
                    lambda: f"torch.outer({self.expr('R', d)}, {self.expr('C', d)})",
                    lambda: f"{self.expr('RC', d)}.cumsum(0)",
                ]
            )()
        if kind == "C":
            return self.pick(
                [
                    lambda: f"{self.expr('RC', d)}.sum(0)",
                    lambda: f"{self.expr('RC', d)}.amax(0)",
                    lambda: f"{self.expr('RC', d)}.mean(dim=0)",
                    lambda: f"{self.expr('RC', d)}[{i}]",
                    lambda: f"{self.expr('RC', d)}.reshape(-1)[:{C}]",
                    lambda: f"({self.expr('C', d)} @ {self.expr('CC', d)})",
                    lambda: f"torch.cat([{self.expr('C', d)}, {self.expr('C', d)}])[{C}:]",
                    lambda: f"(({self.expr('RC', d)} > 0).sum(0) * 1.0)",
                    lambda: f"{self.expr('RC', d)}.t()[:, {i}]",
                ]
            )()
        if kind == "R":
            return self.pick(
                [
                    lambda: f"{self.expr('RC', d)}.sum(1)",
                    lambda: f"{self.expr('RC', d)}.mean(-1)",
                    lambda: f"{self.expr('RC', d)}[:, {j}]",
                    lambda: f"({self.expr('RC', d)} @ {self.expr('C', d)})",
                    lambda: f"{self.expr('RC', d)}.t()[{j}]",
                ]
            )()
        if kind == "S":
            return self.pick(
                [
                    lambda: f"{self.expr('RC', d)}.sum()",
                    lambda: f"{self.expr('C', d)}.max()",
                    lambda: f"{self.expr('RC', d)}[{i}, {j}]",
                    lambda: f"({self.expr('C', d)} @ {self.expr('C', d)})",
                    lambda: f"{self.expr('R', d)}.mean()",
                ]
            )()
        if kind == "CC":
            return self.pick(
                [
                    lambda: f"({self.expr('RC', d)}.t() @ {self.expr('RC', d)})",
                    lambda: f"torch.outer({self.expr('C', d)}, {self.expr('C', d)})",
                ]
            )()
        raise AssertionError(kind)

    # ----- statements
    def mutable_target(self, kind: str) -> str | None:
        """A tensor of `kind` that may be mutated in place (never the requires-grad leaf)."""
        cands = self.vars_of(kind)
        glob = {
            "RC": ["x"],
            "C": ["y", "G_T", "obj.t", "G_OBJ.t", 'G_DICT["a"]', 'd["a"]', "cell", "lst[0]"],
            "R": [],
            "S": [],
            "CC": ["M"],
        }[kind]
        pool = cands + glob if self.r() < 0.5 else glob + cands * 2
        return self.pick(pool) if pool else None

    def stmt(self, top: bool, depth: int = 0) -> list:
        """One statement (a list of nodes; a new local only when ``top``)."""
        if self.new_families and self.r() < self.p_new:
            fam = self.pick(self.new_families)
            return getattr(self, "s_" + fam.replace("-", "_"))(top, depth)
        r = self.r()
        table = [
            (0.20, self.s_assign),
            (0.10, self.s_inplace),
            (0.10, self.s_setitem),
            (0.05, self.s_view_mutation),
            (0.12, self.s_container),
            (0.06, self.s_global),
            (0.05, self.s_closure),
            (0.07, self.s_branch),
            (0.05, self.s_loop),
            (0.04, self.s_generator),
            (0.05, self.s_context),
            (0.07, self.s_graph_break),
            (0.04, self.s_helper),
        ]
        acc = 0.0
        for p, fn in table:
            acc += p
            if r < acc:
                if depth >= 2 and fn in (self.s_branch, self.s_loop, self.s_context):
                    continue
                if self._EXCLUDE_NAME.get(fn.__name__) in self.exclude:
                    continue
                return fn(top, depth)
        return self.s_assign(top, depth)

    _EXCLUDE_NAME: typing.ClassVar[dict] = {
        "s_setitem": "setitem",
        "s_view_mutation": "view-mutation",
        "s_generator": "generator",
        "s_context": "context",
        "s_graph_break": "graph-break",
        "s_container": "containers",
        "s_global": "globals",
        "s_closure": "closure",
        "s_helper": "helper",
        "s_loop": "loop",
        "s_branch": "branch",
    }

    def assign_target(self, top: bool, kind: str) -> str:
        existing = self.vars_of(kind)
        if top or not existing:
            if not top:
                return ""
            name = self.new()
            return name
        return self.pick(existing)

    def s_assign(self, top, depth):
        kind = self.pick(["RC", "RC", "C", "C", "R", "S", "CC"])
        target = self.assign_target(top, kind)
        if not target:
            return self.s_inplace(top, depth)
        e = self.expr(kind)
        self.vars[target] = kind
        return [f"{target} = {e}"]

    def s_inplace(self, top, depth):
        self.features.add("inplace")
        kind = self.pick(["RC", "C", "C", "CC"])
        t = self.mutable_target(kind)
        if t is None:
            return []
        op = self.pick(
            [
                "{t}.add_({e})",
                "{t}.mul_({e})",
                "{t}.sub_({e})",
                "{t} += {e}",
                "{t} *= {e}",
                "{t}.copy_({e})",
                "{t}.clamp_(min=-1.0)",
                "{t}.sin_()",
                "{t}.zero_()",
                "{t}.add_(1.0)",
            ]
        )
        if op.startswith("{t} ") and ("[" in t or "." in t or t == "M"):
            op = "{t}.add_({e})"  # augmented assignment to an attribute/item: keep in place
        e = self.expr(self.pick([kind, "S"]) if kind != "CC" else "CC")
        if t == "x" and kind == "RC":
            self.features.add("mutate-input")
        return [op.format(t=t, e=e)]

    def s_setitem(self, top, depth):
        self.features.add("setitem")
        kind = self.pick(["RC", "RC", "C"])
        t = self.mutable_target(kind)
        if t is None:
            return []
        i = self.pick([0, 1, 2, -1])
        j = self.pick(range(self.C))
        if kind == "RC":
            form = self.pick(
                [
                    f"{t}[{i}] = {self.expr('C')}",
                    f"{t}[{i}] = {self.pick(['0.0', '1.0', 's', 'n'])}",
                    f"{t}[:, {j}] = {self.expr('S')}",
                    f"{t}[{i}, {j}] = {self.pick(['2.5', 'n', 's'])}",
                    f"{t}[1:3] = {self.expr('C')}",
                    f"{t}[{t} > 0] = 0.5",
                    f"{t}[{i}] += 1",
                    f"{t}[:, :1] *= 2",
                ]
            )
        else:
            form = self.pick(
                [
                    f"{t}[{j}] = {self.expr('S')}",
                    f"{t}[{j}] = {self.pick(['0.0', '3.0', 'n', 's'])}",
                    f"{t}[:1] = 7.0",
                    f"{t}[{t} < 0] = 0.0",
                ]
            )
        return [form]

    def s_view_mutation(self, top, depth):
        self.features.add("view-mutation")
        t = self.mutable_target("RC")
        if t is None:
            return []
        v = self.new("v") if top else "vw"
        i = self.pick([0, 1, -1])
        j = self.pick(range(self.C))
        view = self.pick([f"{t}[{i}]", f"{t}[:, {j}]", f"{t}.t()", f"{t}.view(-1)", f"{t}[1:]"])
        mut = self.pick(
            [
                f"{v}.mul_(2)",
                f"{v}.add_({self.expr('S')})",
                f"{v}[0] = 9.0" if "setitem" not in self.exclude else f"{v}.sub_(1.0)",
                f"{v}.zero_()",
                f"{v}.copy_({v} * 3)",
            ]
        )
        return [f"{v} = {view}", mut]

    def s_container(self, top, depth):
        self.features.add("containers")
        forms = [
            lambda: f"lst.append({self.expr('C')})",
            lambda: f"G_LIST.append({self.expr(self.pick(['C', 'S']))})",
            lambda: "al = G_LIST\nal.append(n)",
            lambda: f"al = lst\nal.append({self.expr('S')})",
            lambda: f"obj.items.append({self.expr('C')})",
            lambda: f"G_OBJ.items.append({self.pick(['n', 's', 'count'])})",
            lambda: "if len(lst) > 2:\n    lst.pop()",
            lambda: "if len(G_LIST) > 2:\n    G_LIST.pop()",
            lambda: f"lst[0] = {self.expr('C')}",
            lambda: f"G_LIST[0] = {self.expr('C')}",
            lambda: f'd["k{self.rng.randrange(3)}"] = {self.expr("C")}',
            lambda: 'd.pop("k0", None)',
            lambda: f'G_DICT["b"] = {self.expr("S")}',
            lambda: 'd["n"] = d["n"] + 1',
            lambda: 'G_DICT["n"] += n',
            lambda: "obj.n = obj.n + n",
            lambda: f"obj.t = {self.expr('C')}",
            lambda: "G_OBJ.n += 1",
            lambda: f"helper_obj(obj, {self.expr('C')})",
            lambda: f"lst.extend([{self.expr('C')}, n])",
            lambda: f"obj.items = [{self.expr('C')}]",
            lambda: f"lst[-1] = lst[-1] * {self.pick(['2', 'n', 's'])}",
            lambda: f"d2 = G_DICT\nd2['a'] = d2['a'] + {self.expr('C')}",
            lambda: "o2 = G_OBJ\no2.t = o2.t * 2\nG_N = G_N + int(G_OBJ.t.shape[0])",
        ]
        return [self.pick(forms)()]

    def s_global(self, top, depth):
        self.features.add("globals")
        return [
            self.pick(
                [
                    "G_N = G_N + 1",
                    "G_N += n",
                    f"G_T = G_T + {self.expr('C')}",
                    "G_T = G_T * 2",
                    f"G_T.add_({self.expr('S')})",
                    "G_N = len(G_LIST)",
                ]
            )
        ]

    def s_closure(self, top, depth):
        self.features.add("closure")
        return [
            self.pick(
                [
                    f"cell = cell + {self.expr('C')}",
                    "count += 1",
                    "count = count + n",
                    f"cl.append({self.expr('S')})",
                    f"cell.mul_({self.expr('S')})",
                ]
            )
        ]

    def body(self, depth: int, k: int | None = None) -> list:
        out = []
        for _ in range(k or self.rng.randint(1, 3)):
            out += self.stmt(False, depth + 1)
        return out

    def s_branch(self, top, depth):
        self.features.add("branch")
        cond = self.pick(
            [
                "n > 1",
                "n == 0",
                "flag",
                "not flag",
                "s > 0.5",
                "x.shape[0] > 4",
                "x.size(0) == 3",
                "len(lst) > 3",
                "obj.n > 2",
                "G_N % 2 == 0",
                'd["n"] > 1',
                "count > 1",
                "x.sum() > 0",  # data-dependent: graph break
                "y.max() < 0.5",
                "x.dim() == 2",
            ]
        )
        if cond.startswith(("x.sum", "y.max")):
            self.features.add("graph-break")
        orelse = self.body(depth) if self.r() < 0.5 else None
        return [Block(f"if {cond}:", self.body(depth), orelse)]

    def s_loop(self, top, depth):
        self.features.add("loop")
        t = self.pick(self.vars_of("RC") or ["x"])
        acc = self.pick(self.vars_of("C")) if self.vars_of("C") else None
        c = self.r()
        if c < 0.35:
            body = [f"{t} = {t} + i"] if t != "x" else [f"acc_{depth} = x * i"]
            body = body + self.body(depth, 1)
            return [
                Block(f"for i in range({self.pick(['n', '2', 'len(lst)', 'obj.n % 3'])}):", body)
            ]
        if c < 0.55 and acc is not None:
            return [Block(f"for row in {t}:", [f"{acc} = {acc} + row"])]
        if c < 0.75 and acc is not None:
            return [
                Block(
                    "for item in lst:",
                    [f"{acc} = {acc} * 0.5 + item"],
                )
            ]
        return [
            "k = 0",
            Block("while k < n:", ["k += 1"] + self.body(depth, 1)),
        ]

    def s_generator(self, top, depth):
        self.features.add("generator")
        kind = self.pick(["RC", "C"])
        src = self.expr(kind)
        log = self.pick(["LOG", "cl"])
        if top:
            name = self.new()
            self.vars[name] = kind
            if self.r() < 0.6:
                return [f"g = gen({src}, {log})", f"{name} = next(g)"]
            return [f"{name} = sum(gen({src}, {log}))"]
        target = self.assign_target(False, kind)
        if not target:
            return []
        return [f"{target} = next(gen({src}, {log}))"]

    def s_context(self, top, depth):
        self.features.add("context")
        headers = [
            "with torch.no_grad():",
            "with torch.enable_grad():",
            "with Rec(LOG):",
            "with Rec(cl):",
        ]
        if "autocast" not in self.exclude:
            headers.append('with torch.autocast("cpu", dtype=torch.bfloat16):')
        header = self.pick(headers)
        if "autocast" in header:
            self.features.add("autocast")
            kind = self.pick(["RC", "C"])
            target = self.assign_target(False, kind)
            if not target:
                return []
            body = [f"{target} = ({self.expr(kind)} @ M).float()"]
        else:
            body = self.body(depth)
        return [Block(header, body)]

    def s_graph_break(self, top, depth):
        self.features.add("graph-break")
        C = self.C
        c = self.r()
        if c < 0.3:
            return [f'print("p", {self.py_value()}, {self.expr("RC")}.shape, file=BUF)']
        if c < 0.55:
            name = self.new("f") if top else "fv"
            src = self.expr("S")
            use = self.assign_target(False, "RC")
            lines = [f"{name} = {src}.item()"]
            if use:
                lines.append(f"{use} = {use} * ({name} > 0) + {name}")
            else:
                lines.append(f"G_DICT['item'] = {name} > 0")
            return lines
        if c < 0.75:
            name = self.new("l") if top else "lv"
            target = self.assign_target(False, "C")
            lines = [f"{name} = {self.expr('C')}.tolist()"]
            if target:
                lines.append(f"{target} = {target} + {name}[{self.rng.randrange(C)}]")
            else:
                lines.append(f"G_N = G_N + len({name})")
            return lines
        return [Block(f"if {self.expr('S')} > 0:", self.body(depth), self.body(depth))]

    def s_helper(self, top, depth):
        self.features.add("helper")
        kind = self.pick(["RC", "C"])
        target = self.assign_target(top, kind)
        lst = self.pick(["lst", "G_LIST", "obj.items"])
        e = self.expr(kind)
        if not target:
            return [f"helper({e}, {lst})"]
        self.vars[target] = kind
        return [f"{target} = helper({e}, {lst})"]

    # ----- newer families (NEW_FAMILIES)
    def _local(self, top: bool, prefix: str, fallback: str) -> str:
        return self.new(prefix) if top else fallback

    def _graph_break_line(self) -> str:
        return self.pick(
            [
                'print("gb", n, file=BUF)',
                'BUF.write("gb\\n")',
                'print("gb", x.shape, file=BUF)',
            ]
        )

    def s_inplace_identity(self, top, depth):
        """In-place results are their receiver: ``r = t.add_(1)`` makes ``r is t``; the
        comparisons, the aliases and containers holding them are all observable."""
        self.features.add("inplace-identity")
        kind = self.pick(["RC", "C", "C"])
        out = []
        c = self.r()
        if c < 0.35:
            # a fresh tensor mutated in place: w = z.add_(1), compare w with z
            z = self._local(top, "z", "zi")
            src = self.pick(
                [f"{self.expr(kind)}.clone()", "x.clone()" if kind == "RC" else "y.clone()"]
            )
            out.append(f"{z} = {src}")
            t = z
            if top:
                self.vars[z] = kind
        else:
            t = self.mutable_target(kind)
            if t is None:
                return []
            if t == "x":
                self.features.add("mutate-input")
        r = self._local(top, "r", "ri")
        op = self.pick(
            [
                "{t}.add_({e})",
                "{t}.add_(1)",
                "torch.Tensor.mul_({t}, 2)",
                "torch.Tensor.add_({t}, {e})",
                "{t}.mul_({s})",
                "{t}.clamp_(min=-1.0)",
                "{t}.sin_()",
                "{t}.zero_()",
                "{t}.copy_({e})",
                "torch.relu_({t})",
                "{t}.fill_({s})",
            ]
        )
        e = self.expr(self.pick([kind, "S"]))
        out.append(f"{r} = " + op.format(t=t, e=e, s=self.pick(["2", "n", "s", "0.5"])))
        if top:
            self.vars[r] = kind
        if self.r() < 0.4 and "graph-break" not in self.exclude:
            self.features.add("graph-break")
            out.append(self._graph_break_line())
        other = self.pick([t, t, t, "x", "y"] + self.vars_of(kind)[:2])
        cmp_ = self.pick([f"{r} is {other}", f"{r} is not {other}", f"{other} is {r}"])
        use = self.r()
        if use < 0.3:
            v = self.assign_target(False, self.pick(["RC", "C"]))
            body = [f"{v} = {v} + 1"] if v else ["G_N = G_N + 1"]
            orelse = [f"{v} = {v} * 2"] if v and self.r() < 0.5 else None
            out.append(Block(f"if {cmp_}:", body, orelse))
        elif use < 0.5:
            out.append(self.pick(['G_DICT["same"] = ', 'd["same"] = ', "obj.same = "]) + cmp_)
        elif use < 0.7:
            out.append(
                self.pick(
                    [
                        f"lst.append({r})",
                        f'd["ip"] = {r}',
                        f"obj.items.append({r})",
                        f'G_DICT["ip"] = {r}',
                        f"obj.t = {r}" if kind == "C" else f"lst.append({r})",
                    ]
                )
            )
        elif use < 0.85:
            out.append(f"count = count + ({cmp_})")
        if top:
            self.extra_rets += [r, f"({cmp_})"]
            if "." not in t and "[" not in t:
                self.extra_rets.append(t)
        return out

    def _dobj(self) -> str:
        self.uses.add("descriptors")
        pool = ["G_DOBJ", "dob"] + self.dobjs * 2
        o = self.pick(pool)
        if o == "dob":
            self.uses.add("dob")
        return o

    def s_descriptors(self, top, depth):
        """Attributes that are descriptors: set-only, get+set, non-data (shadowable by the
        instance), a property with a setter; on a global, an argument or a local object."""
        self.features.add("descriptors")
        self.uses.add("descriptors")
        c = self.r()
        if top and (c < 0.2 or not self.dobjs and c < 0.35):
            o = self.new("do")
            self.dobjs.append(o)
            self.extra_rets.append(o)
            return [f"{o} = DObj({self.expr('C')}, n)"]
        o = self._dobj()
        attr = self.pick(["sa", "gs", "nd", "p", "base"])
        c = self.r()
        if c < 0.4:
            val = self.pick([self.expr("C"), f"{o}.{self.pick(['sa', 'gs', 'p', 'nd'])} * 2"])
            if attr == "base" and self.r() < 0.5:
                return [f"{o}.base.add_({self.expr('S')})"]
            return [f"{o}.{attr} = {val}"]
        if c < 0.85:
            reads = " + ".join(
                f"{o}.{a}" for a in self.rng.sample(["sa", "gs", "nd", "p", "base"], 2)
            )
            e = f"({reads}) * {self.pick(['n', 's', '0.5', self.expr('S')])}"
            if top:
                v = self.new()
                self.vars[v] = "C"
                self.extra_rets.append(f"{o}.{attr}")
                return [f"{v} = {e}"]
            v = self.assign_target(False, "C")
            return [f"{v} = {v} + {e}"] if v else [f"G_N = G_N + int({o}.{attr}.shape[0])"]
        # a branch on a descriptor read
        return [
            Block(
                f"if {o}.{attr}.sum() > 0:",
                [f"{o}.{self.pick(['sa', 'gs', 'p', 'nd'])} = {self.expr('C')}"],
                [f"{o}.n = {o}.n + 1"],
            )
        ]

    def s_tensor_attrs(self, top, depth):
        """Attributes on tensors: x.tag set by the caller (on some calls only), hasattr and
        getattr with a default inside; hasattr of FakeTensor-only attributes."""
        self.features.add("tensor-attrs")
        self.uses.add("tag")
        c = self.r()
        if c < 0.3:
            v = self.assign_target(False, self.pick(["RC", "C"]))
            default = self.pick(["0", "1", "0.5"])
            if not v:
                return [f'G_N = G_N + int(getattr(x, "tag", {default}) is not None)']
            return [f'{v} = {v} * getattr(x, "tag", {default})']
        if c < 0.5:
            v = self.assign_target(False, self.pick(["RC", "C"]))
            body = [f"{v} = {v} + x.tag"] if v else ["G_N = G_N + 1"]
            orelse = [f"{v} = {v} - 1"] if v and self.r() < 0.5 else None
            return [Block(f'if hasattr(x, "{self.pick(["tag", "tag", "tag2"])}"):', body, orelse)]
        attr = self.pick(
            [
                "fake_mode",
                "fake_device",
                "constant",
                "nonzero_memo",
                "tag",
                "tag2",
                "grad_fn",
                "_base",
                "__cuda_array_interface__",
                "note",
            ]
        )
        who = self.pick(["x", "y"] + self.vars_of("C")[:2] + self.vars_of("RC")[:2])
        if c < 0.65:
            if top:
                h = self.new("h")
                self.extra_rets.append(h)
                return [f'{h} = hasattr({who}, "{attr}")']
            return [f'G_DICT["has"] = hasattr({who}, "{attr}")']
        if c < 0.8:
            return [Block(f'if hasattr({who}, "{attr}"):', ["G_N = G_N + 1"], ["count += 1"])]
        # an attribute set inside the frame, on an argument or a local, read back
        tgt = self.pick(["y", "x"] + self.vars_of("C")[:2])
        out = [f"{tgt}.note = {self.pick(['n', 's', 'count', self.expr('C')])}"]
        if self.r() < 0.3 and "graph-break" not in self.exclude:
            out.append(self._graph_break_line())
        if top:
            self.extra_rets.append(f'getattr({tgt}, "note", None)')
            if tgt not in ("x", "y"):
                self.extra_rets.append(tgt)
        return out

    def s_object_attrs(self, top, depth):
        """Attributes on objects built in the frame: a user class, namedtuple and
        typing.NamedTuple subclasses (which have a __dict__) with ``o.extra = tensor``."""
        self.features.add("object-attrs")
        self.uses.add("object-attrs")
        if top and (not self.aobjs or self.r() < 0.5):
            o = self.new("o")
            cls = self.pick(["Box", "PairX", "NTX", "Plain", "PairX", "NTX"])
            ctor = "Plain()" if cls == "Plain" else f"{cls}({self.expr('C')}, n)"
            self.aobjs.append(o)
            out = [f"{o} = {ctor}", f"{o}.extra = {self.expr('C')}"]
            if self.r() < 0.5:
                out.append(f"{o}.k = {self.pick(['n', 's', 'count', 'x.shape[0]'])}")
            self.extra_rets.append(self.pick([o, f"{o}.extra", o]))
            return out
        if not self.aobjs:
            return []
        o = self.pick(self.aobjs)
        c = self.r()
        if c < 0.3:
            return [f"{o}.extra = {o}.extra * {self.pick(['2', 'n', 's'])} + {self.expr('S')}"]
        if c < 0.45:
            return [f"{o}.extra.add_({self.expr('S')})"]
        if c < 0.6:
            return [
                self.pick(
                    [f'd["o"] = {o}', f'G_DICT["o"] = {o}', f"obj.other = {o}", f"cl.append({o})"]
                )
            ]
        if c < 0.7 and "graph-break" not in self.exclude:
            self.features.add("graph-break")
            return [self._graph_break_line(), f"{o}.extra = {o}.extra + 1"]
        v = self.assign_target(False, "C")
        rd = f'{o}.extra + getattr({o}, "k", 0)'
        if top:
            v = self.new()
            self.vars[v] = "C"
            return [f"{v} = {rd}"]
        return [f"{v} = {v} + {rd}"] if v else [f"G_N = G_N + int({o}.extra.shape[0])"]

    def s_numpy_scalars(self, top, depth):
        """NumPy scalars (np.float64, np.float32, np.int64) as an argument, a global and
        constants, combined with tensors of several dtypes (result dtypes must match)."""
        self.features.add("numpy-scalars")
        self.uses.add("numpy-scalars")
        npc = self.pick(
            [
                "npv",
                "npv",
                "G_NP",
                "np.float64(1.5)",
                "np.float32(0.25)",
                "np.int64(2)",
                "np.int32(3)",
            ]
        )
        if npc == "npv":
            self.uses.add("npv")
        c = self.r()
        if c < 0.4:
            kind = self.pick(["RC", "C", "C", "S"])
            v = self.assign_target(top, kind)
            if not v:
                return []
            e = self.expr(kind)
            self.vars[v] = kind
            op = self.pick([" + ", " * ", " - "])
            return [f"{v} = {e}{op}{npc}"]
        if c < 0.75 and top:
            dt = self.pick(["float16", "bfloat16", "float64", "int32", "int64", "float32"])
            e = self.expr(self.pick(["C", "RC"]))
            if dt.startswith("int"):
                e = f"({e} * 4)"
            v = self.new("nd")
            self.extra_rets.append(v)
            op = self.pick([" + ", " * "])
            lines = [f"{v} = {e}.to(torch.{dt}){op}{npc}"]
            if self.r() < 0.5:
                w = self.new()
                self.vars[w] = "S"
                lines.append(f"{w} = {v}.float().sum()")
            return lines
        if c < 0.85:
            v = self.assign_target(False, "C")
            if not v:
                return [f"G_N = G_N + int({npc} > 1)"]
            return [Block(f"if {npc} > 1:", [f"{v} = {v} + {npc}"], [f"{v} = {v} * {npc}"])]
        if top:
            v = self.new("np")
            self.extra_rets.append(v)
            return [
                self.pick(
                    [
                        f"{v} = torch.tensor({npc})",
                        f"{v} = torch.full(({self.C},), {npc})",
                        f"{v} = {npc} * 2 + n",
                        f"{v} = torch.as_tensor({npc}) + x.sum()",
                    ]
                )
            ]
        return [f'G_DICT["np"] = {npc} * 2']

    # ----- the whole program
    def program(self) -> Program:
        rng = self.rng
        C = self.C
        R0 = rng.choice([3, 4, 5])
        variant = rng.choice(["shape", "int", "int", "flag", "float", "list", "global"])
        n0 = rng.choice([0, 1, 1, 2, 3])
        n2 = {0: 1, 1: 2, 2: 1, 3: 0}[n0] if variant == "int" else n0
        n3 = {0: 2, 1: 0, 2: 3, 3: 1}[n0] if variant == "int" else n0
        R2 = rng.choice([r for r in (3, 4, 5, 6) if r != R0]) if variant == "shape" else R0
        R3 = (
            rng.choice([r for r in (3, 4, 5, 6) if r not in (R0, R2)]) if variant == "shape" else R0
        )
        flag0 = rng.random() < 0.5
        flag2 = (not flag0) if variant == "flag" else flag0
        s0 = rng.choice([0.0, 1.0, 0.5, 2.0])
        s2 = {0.0: 1.0, 1.0: 0.0, 0.5: 2.0, 2.0: 0.5}[s0] if variant == "float" else s0
        s3 = {0.0: 0.5, 1.0: 2.0, 0.5: 0.0, 2.0: 1.0}[s0] if variant == "float" else s0
        extra = 2 if variant == "list" else 0
        lst_src = rng.choice(["fresh", "fresh", "G_LIST", "G_OBJ.items"])
        obj_src = rng.choice(["fresh", "fresh", "G_OBJ"])
        d_src = rng.choice(["fresh", "fresh", "G_DICT"])
        self.features.add(f"variant-{variant}")
        if lst_src != "fresh" or obj_src != "fresh" or d_src != "fresh":
            self.features.add("arg-aliases-global")
        alias_items = rng.random() < 0.4
        globals_src = [
            "BUF = io.StringIO()",
            "LOG = []",
            f"G_T = torch.randn({C})",
            f"G_LIST = [torch.randn({C}), 1]",
            f'G_DICT = {{"a": torch.randn({C}), "n": 2}}',
            f"G_OBJ = Box(torch.randn({C}), 1)",
            "G_OBJ.items = G_LIST" if alias_items else f"G_OBJ.items = [torch.randn({C})]",
            "G_N = 0",
            f"M = torch.randn({C}, {C})",
        ]
        cells_src = [f"cell = torch.zeros({C})", "count = 0", "cl = []"]
        params = ["x", "y", "n", "s", "flag", "lst", "d", "obj"]
        if self.grad:
            params.append("w")
            self.features.add("requires-grad")
        inputs_src = [
            f"R = ({R0}, {R0}, {R2}, {R3})[call]",
            f"n = ({n0}, {n0}, {n2}, {n3})[call]",
            f"flag = ({flag0}, {flag0}, {flag2}, {flag0})[call]",
            f"s = ({s0}, {s0}, {s2}, {s3})[call]",
            "x = torch.randn(R, " + str(C) + ")",
            f"y = torch.randn({C})",
        ]
        if lst_src == "fresh":
            inputs_src.append(
                f"lst = [torch.randn({C}), 1] + [torch.randn({C})] * ({extra} * (call >= 2))"
            )
        else:
            inputs_src.append(f"lst = {lst_src}")
            if extra:
                inputs_src.append(f"if call >= 2:\n        lst += [0] * {extra}")
        if d_src == "fresh":
            inputs_src.append(f'd = {{"a": torch.randn({C}), "n": n}}')
        else:
            inputs_src.append(f"d = {d_src}")
        if obj_src == "fresh":
            inputs_src.append(f"obj = Box(torch.randn({C}), n)")
            if rng.random() < 0.3:
                inputs_src.append("obj.items = lst")
                self.features.add("attr-aliases-arg")
        else:
            inputs_src.append(f"obj = {obj_src}")
        args = "x, y, n, s, flag, lst, d, obj"
        if self.grad:
            inputs_src.append(f"w = torch.randn({C}, requires_grad=True)")
            args += ", w"

        body = []
        for _ in range(rng.randint(2, 7)):
            body += self.stmt(True)
        # return a few values: tensors, Python values, containers
        rets = []
        names = list(self.vars)
        rng.shuffle(names)
        rets += names[:3]
        if rng.random() < 0.3:
            rets.append(rng.choice(["n", "count", "G_N", "len(lst)", "lst", "obj.n", "cell"]))
        preludes = []
        if self.uses:  # the newer families' globals, arguments and returns
            preludes, args = self._extras(globals_src, params, inputs_src, rets, args, R0)
        inputs_src.append(f"return ({args})")
        if not rets:
            rets = ["x"]
        return Program(
            self.seed,
            globals_src,
            cells_src,
            params,
            body,
            rets,
            inputs_src,
            self.features,
            preludes,
        )

    def _extras(self, globals_src, params, inputs_src, rets, args, R0):
        """Globals, parameters and argument values that the newer families used; some of
        their values returned. Draws from the RNG only when one of them was used."""
        rng, C = self.rng, self.C
        uses = self.uses
        if "dob" in uses:
            uses.add("descriptors")
        if "npv" in uses:
            uses.add("numpy-scalars")
        preludes = [k for k in PRELUDE_EXTRA if k in uses]
        if "descriptors" in uses:
            globals_src.append(f"G_DOBJ = DObj(torch.randn({C}), 1)")
        if "dob" in uses:
            params.append("dob")
            args += ", dob"
            inputs_src.append(
                rng.choice([f"dob = DObj(torch.randn({C}), n)", "dob = G_DOBJ"]),
            )
        if "numpy-scalars" in uses:
            globals_src.append(f"G_NP = np.{rng.choice(['float32', 'float64', 'int64'])}(2)")
        if "npv" in uses:
            params.append("npv")
            args += ", npv"
            inputs_src.append(
                rng.choice(
                    [
                        "npv = np.float64(s)",
                        "npv = np.float32(s + 0.5)",
                        "npv = np.int64(n)",
                        # the type changes between calls: must recompile, not reuse
                        "npv = (np.float64(0.5), np.float64(1.5), np.float32(1.5), np.int64(2))[call]",
                    ]
                )
            )
        if "tag" in uses:
            inputs_src.append(
                rng.choice(
                    [
                        "x.tag = n + 1",
                        "if call < 2:\n        x.tag = n + 1",  # gone from call 2 on
                        "if call != 1:\n        x.tag = float(call)",  # absent on the cached call
                        f"x.tag = torch.full(({C},), call + 1.0)",
                        "x.tag = (1, 1, 2, 2)[call]\n    y.tag2 = call",
                    ]
                )
            )
        extra = list(dict.fromkeys(self.extra_rets))
        rng.shuffle(extra)
        rets += extra[: rng.randint(1, 3)]
        return preludes, args


# Families added later; each is picked (uniformly) instead of the table above with
# probability _Gen.p_new, and draws from the RNG only while enabled.
NEW_FAMILIES = (
    "inplace-identity",  # r = t.add_(1); r is t; r returned / stored / compared across breaks
    "descriptors",  # set-only, get+set, non-data descriptors and a property with a setter
    "tensor-attrs",  # x.tag set by the caller; hasattr / getattr(x, "tag", default) inside
    "object-attrs",  # o.extra = tensor on Box / namedtuple / NamedTuple subclasses built inside
    "numpy-scalars",  # np.float64 / np.float32 / np.int64 args and constants with tensors
)

FEATURES = (
    "setitem",
    "view-mutation",
    "generator",
    "context",
    "autocast",
    "graph-break",
    "containers",
    "globals",
    "closure",
    "helper",
    "loop",
    "branch",
    *NEW_FAMILIES,
)


# Calls per program: 0 compiles, 1 hits the cache (fresh values, same shapes and Python
# values), 2 changes one thing (a size, an int, a bool, a float, a list length) and
# recompiles, 3 changes it again: the second recompile of a frame is the first with
# automatic dynamic sizes and ints, a path of its own.
N_CALLS = 4


def generate(seed: int, exclude=()) -> Program:
    """The program for ``seed``; ``exclude`` names statement families (FEATURES) to leave
    out, e.g. to look past a known bug (the same seed then gives another program)."""
    return _Gen(seed, frozenset(exclude)).program()


# --------------------------------------------------------------------------- running


def build_world(source: str, name: str = "fuzz_program"):
    """A factory for differential.run_case: exec ``source`` into a fresh module (so its
    globals are real module globals) and return f, the three calls and the observables."""
    import linecache
    import types

    import differential

    filename = f"<{name}>"
    # linecache lets tracebacks and capture's source locations show the program's lines
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    code = compile(source, filename, "exec")

    def build():
        mod = types.ModuleType(name)
        exec(code, mod.__dict__)  # noqa: S102 - the generated program
        ns = mod.__dict__
        fn = ns["make"]()
        calls = [lambda i=i: ns["inputs"](i) for i in range(N_CALLS)]
        return differential.World(fn, calls, {"globals": ns})

    return build


def check_program(source: str, backends, seed: int = 0, name: str = "fuzz_program"):
    """Run one program's source through the harness; the mismatches (empty if none)."""
    import differential

    return differential.run_case(build_world(source, name), backends, seed=seed)


# --------------------------------------------------------------------------- minimizer


def _paths(nodes, prefix=()):
    """Every removable node, as an index path (deepest last so blocks go after children)."""
    for i, node in enumerate(nodes):
        yield prefix + (("body", i),)
        if isinstance(node, Block):
            yield from _paths(node.body, prefix + (("body", i), ("in", "body")))
            if node.orelse is not None:
                yield from _paths(node.orelse, prefix + (("body", i), ("in", "orelse")))


def _remove(nodes, path):
    nodes = list(nodes)
    (_, i), rest = path[0], path[1:]
    if not rest:
        del nodes[i]
        return nodes
    node = nodes[i]
    field = rest[0][1]
    new = dataclasses.replace(node)
    setattr(new, field, _remove(getattr(node, field), rest[1:]))
    nodes[i] = new
    return nodes


def _unwrap(nodes, path):
    """Replace the block at path by its body (drop the condition/loop/with)."""
    nodes = list(nodes)
    (_, i), rest = path[0], path[1:]
    if not rest:
        node = nodes[i]
        if isinstance(node, Block):
            nodes[i : i + 1] = list(node.body)
        return nodes
    node = nodes[i]
    field = rest[0][1]
    new = dataclasses.replace(node)
    setattr(new, field, _unwrap(getattr(node, field), rest[1:]))
    nodes[i] = new
    return nodes


def minimize(prog: Program, still_fails: Callable[[Program], bool], budget: int = 200) -> Program:
    """Greedy: drop statements, unwrap blocks and drop returned values while ``still_fails``
    holds (at most ``budget`` tries)."""
    tries = 0
    changed = True
    while changed and tries < budget:
        changed = False
        # statements, last first (later ones depend on earlier ones)
        for path in reversed(list(_paths(prog.body))):
            if tries >= budget:
                break
            for op in (_remove, _unwrap):
                try:
                    body = op(prog.body, path)
                except (IndexError, AttributeError):
                    continue
                if body == prog.body:
                    continue
                cand = dataclasses.replace(prog, body=body)
                tries += 1
                if still_fails(cand):
                    prog = cand
                    changed = True
                    break
        for k in range(len(prog.ret) - 1, -1, -1):
            if len(prog.ret) <= 1 or tries >= budget:
                break
            cand = dataclasses.replace(prog, ret=prog.ret[:k] + prog.ret[k + 1 :])
            tries += 1
            if still_fails(cand):
                prog = cand
                changed = True
    return prog
