"""The program generator: :func:`generate` runs one generator object per seed, which draws
the program's shapes and call-to-call changes, its globals and ``inputs(call)``, then its
statements (statements.py, newer_families.py) and returned values."""

from __future__ import annotations

import random

from .expressions import Expressions
from .newer_families import NEW_FAMILIES, NewerFamilies
from .program import FRAMES, Program
from .statements import Statements


class _Gen(NewerFamilies, Statements, Expressions):
    """One program's generator: its RNG (seeded once; every draw in a fixed order), the
    locals made so far and what the program uses."""

    def __init__(
        self, seed: int, exclude: frozenset = frozenset(), frame: str | None = None
    ) -> None:
        self.exclude = exclude
        self.frame = frame
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
        frame = self._frame()
        if frame != "args":
            self.features.add("zero-args")
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
            frame,
        )

    def _frame(self) -> str:
        """How f gets its inputs (program.FRAMES): the one asked for, else "args" where
        "zero-args" is excluded, else drawn (one program in four without parameters) from
        an RNG of its own, so the statements stay those the seed made before."""
        if self.frame is not None:
            return self.frame
        if "zero-args" in self.exclude:
            return "args"
        rng = random.Random(f"frame-{self.seed}")
        return rng.choice(["global", "closure"]) if rng.random() < 0.25 else "args"


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
    "zero-args",  # f without parameters (program.FRAMES), not a statement family
)


def generate(seed: int, exclude=(), frame: str | None = None) -> Program:
    """The program for ``seed``; ``exclude`` names statement families (FEATURES) to leave
    out, e.g. to look past a known bug (the same seed then gives another program).
    ``frame`` (program.FRAMES) forces how f gets its inputs; by default one program in four
    has no parameters ("zero-args"; excluding it gives the programs of before: the
    statements do not depend on it)."""
    if frame is not None and frame not in FRAMES:
        raise ValueError(f"unknown frame {frame!r}; known: {FRAMES}")
    return _Gen(seed, frozenset(exclude), frame).program()
