"""The original statement families (setitem, view-mutation, containers, globals, closure,
branch, loop, generator, context, graph-break, helper; plus assignments and in-place ops) and
the table :meth:`Statements.stmt` picks one from."""

from __future__ import annotations

import typing

from .program import Block


class Statements:
    """Mixin of the program generator (generator._Gen): one statement at a time, as a list of
    nodes (source lines and :class:`Block`)."""

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
