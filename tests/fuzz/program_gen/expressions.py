"""Random expressions: a string that computes a float tensor of a shape kind (RC, C, R, S, CC;
see the package docstring), built from locals, arguments, globals and Python values."""

from __future__ import annotations


class Expressions:
    """Mixin of the program generator (generator._Gen): expressions and the helpers every
    family uses. Reads the generator's ``rng``, ``vars`` (tensor locals: name -> kind),
    ``counter``, ``features``, ``grad`` and ``C``."""

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
