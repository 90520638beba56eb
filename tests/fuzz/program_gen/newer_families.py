"""The newer statement families (NEW_FAMILIES): the identity of in-place results,
descriptors, attributes on tensors, attributes on objects built inside, NumPy scalars; and
the globals, parameters and arguments they add to a program (:meth:`NewerFamilies._extras`)."""

from __future__ import annotations

from .preludes import PRELUDE_EXTRA
from .program import Block

# Families added later; each is picked (uniformly) instead of the table of Statements.stmt
# with probability _Gen.p_new, and draws from the RNG only while enabled.
NEW_FAMILIES = (
    "inplace-identity",  # r = t.add_(1); r is t; r returned / stored / compared across breaks
    "descriptors",  # set-only, get+set, non-data descriptors and a property with a setter
    "tensor-attrs",  # x.tag set by the caller; hasattr / getattr(x, "tag", default) inside
    "object-attrs",  # o.extra = tensor on Box / namedtuple / NamedTuple subclasses built inside
    "numpy-scalars",  # np.float64 / np.float32 / np.int64 args and constants with tensors
    "python-builtins",  # sets (of ints, of tensors), set algebra, functools.reduce,
    # dict.fromkeys, itertools.combinations/chain.from_iterable, sorted(key=), partial
    # attributes, user-class operators, containers changed while iterated (issue #31)
    "tensor-branch",  # LayerDrop's `if torch.rand([]) < p: continue`, a flag set in a
    # branch on a tensor, if/else on a reduction: conditionals in the graph (issue #31)
)


class NewerFamilies:
    """Mixin of the program generator (generator._Gen). Each family draws from the RNG only
    while enabled, so excluding them all gives the programs of before they were added."""

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

    def s_python_builtins(self, top, depth):
        """Issue #31's constructs: sets (of ints from ``n``, of tensors by identity), set
        algebra and membership, a global set mutated, functools.reduce, dict.fromkeys,
        itertools.combinations / chain.from_iterable, sorted with a key function,
        functools.partial attributes, a user class's operators and ``__iter__``, loops
        over a list or dict that they change (an append seen, a value update, a key added:
        RuntimeError, caught), builtin ``max``/``min`` of one-element tensors, writes
        through the argument's ``__dict__`` (``setdefault``, ``update``),
        ``collections.namedtuple()`` and ``Counter`` built in the frame, and tensors as dict
        keys."""
        self.features.add("python-builtins")
        self.uses.add("python-builtins")
        kind = self.pick(["C", "RC"])
        e1, e2, e3 = self.expr(kind), self.expr(kind), self.expr(kind)
        v = self.assign_target(top, kind)
        c = self.r()
        if c < 0.12:
            s = self.new("st")
            lines = [f"{s} = {{{e1}, {e2}, {e1}}}"]
            if v:
                self.vars[v] = kind
                lines.append(f"{v} = {e3} * len({s})")
            lines.append(self.pick([f"count = count + ({e1} in {s})", f"G_SET.add(len({s}))"]))
            return lines
        if c < 0.24:
            s = self.pick(["{n, n + 1, 2}", "set([n, 1, 1])", "{i % 3 for i in range(n + 2)}"])
            t = self.pick(["{1, 2}", "frozenset([2, n])", "G_SET"])
            op = self.pick(["|", "&", "-", "^"])
            w = self.new("sv")
            out = [f"{w} = {s} {op} {t}"]
            out.append(
                self.pick([f"G_SET.update({w})", "G_SET.discard(n)", f"count = count + len({w})"])
            )
            if top:
                self.extra_rets += [w, "G_SET", f"sorted({w})"]
            return out
        if not v:
            return [self.pick(["G_SET.add(n)", "G_SET.update(range(n))", "G_SET.discard(1)"])]
        self.vars[v] = kind
        body = self.pick(
            [
                f"functools.reduce(operator.add, [{e1}, {e2}, {e3}])",
                f"functools.reduce(lambda a, b: a * 0.5 + b, [{e1}, {e2}], {e3})",
                f'dict.fromkeys(["a", "b"], {e1})["b"] + {e2}',
                f"sum(a * b for a, b in itertools.combinations([{e1}, {e2}, {e3}], 2))",
                f"sum(itertools.chain.from_iterable([[{e1}], [{e2}, {e3}]]))",
                f"sorted([{e1}, {e2} * 2], key=lambda t: t.shape[0])[0]",
                f"G_PART({e1}) + G_PART.func({e2}, G_PART.keywords['k'])",
                f"functools.partial(scale, {e1})(k=len(G_PART.args) + 1)",
                f"(Vec({e1}, n) + Vec({e2}, 1)).v * (Vec({e1}, n) == Vec({e3}, n))",
                f"sum(Vec({e1}, n)) + {e2}",
                f"grow([{e1}, {e2}], {e3})",
                f'bump({{"a": {e1}, "b": {e2}}}, {e3})',
                f'add_while_iterating({{"a": {e1}}}, {e2})',
                f"sum(map(lambda t: t * 2, [{e1}, {e2}])) + {e3}",
                # builtin max/min of one-element tensors (a conditional in the graph)
                f"max({e1}.sum(), {e2}.mean()) * {e3}",
                f"min([{e1}.amax(), {e2}.sum(), {e3}.mean()], key=lambda t: -t) + {e3}",
                # writes through the argument's instance __dict__ (attribute side effects)
                f'vars(obj).setdefault("dk", {self.expr("C")}) + {e2}',
                f"(obj.__dict__.update(dk={self.expr('C')}) or obj.dk) * {e2}",
                # collections factories and tensors as dict keys (by identity)
                f"collections.namedtuple('Q', 'a b')({e1}, n)._replace(b=2).a * 2",
                f"collections.Counter('abca')['a'] * {e1} + collections.Counter(a=n)['a']",
                f"(lambda k: {{k: 2, {e2}: 3}}[k] * k)({e1})",
            ]
        )
        return [f"{v} = {body}"]

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
        if "python-builtins" in uses:
            globals_src.append(f"G_SET = {{{rng.choice([1, 2, 3])}, 5}}")
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

    def s_tensor_branch(self, top, depth):
        """Issue #31: branches on one-element tensors that capture records as conditionals
        (capture/conditionals.py): HF's LayerDrop loop (``if torch.rand([]) < p:
        continue``, the generator consumed as in eager), BART's flag (``drop = True`` on one
        way, then ``if not drop:``), and if/else on a reduction assigning on both ways."""
        kind = self.pick(["C", "RC"])
        # a tensor local of that kind, else the argument of that shape (x: RC, y: C)
        targets = self.vars_of(kind) or ["x" if kind == "RC" else "y"]
        self.features.add("tensor-branch")
        t = self.pick(targets)
        e1, e2 = self.expr(kind), self.expr(kind)
        c = self.r()
        if c < 0.4:
            body = [f"{t} = {t} * 0.5 + {e1}"]
            return [
                Block(
                    f"for i in range({self.pick(['2', 'n % 3 + 1'])}):",
                    [
                        Block(f"if torch.rand([]) < {self.pick(['0.5', '0.3'])}:", ["continue"]),
                        *body,
                    ],
                )
            ]
        if c < 0.7:
            flag = self.new("drop")
            pred = self.pick(["torch.rand([]) < 0.5", "y.max() < 0.5", "x.sum() > 0"])
            return [
                f"{flag} = False",
                Block(f"if {pred}:", [f"{flag} = True"]),
                Block(f"if not {flag}:", [f"{t} = {e1}"]),
            ]
        pred = self.pick(["x.sum() > 0", "y.mean() < 0", f"{t}.sum() > 1"])
        return [Block(f"if {pred}:", [f"{t} = {e1}"], [f"{t} = {e2} * 2"])]
