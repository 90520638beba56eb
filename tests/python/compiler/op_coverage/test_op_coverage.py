"""The op-coverage test (issue #27): every case of every case list (cases.py, and
typed_cases.py / reduction_cases.py when they exist) through the "plugin" compiler against
eager, on the CPU (and CUDA when available), in each case dtype.

Each case runs alone (between identity neighbours, double negations or double logical
nots, which keep nan, inf and -0.0, so that the op sits inside a fusion group: a lone
pointwise op stays an ATen call by design) and inside a chain (scaled inputs, a scaled
result). Several calls with fresh inputs (the first compiles, the later ones run the
cached graph). Checks: values (dtype, nan and inf positions, the sign of zeros, values
within the case's tolerance) and, where fused, that the case's ATen op ran inside a
generated kernel (the fusion groups' bodies in the compiled IR) and not as an ATen fallback
step (``Executor.steps()``); a tuple of ops means all of them. A dtype the device's kernels
cannot load must not claim fusion; a module's ``DEVICE_FALLBACKS`` names ops a device leaves
to ATen. In bf16/fp16 kernels round every op's result to its dtype as eager does; a fused
case matches eager or, with ``reference_in_float``, its op computed in float32 and rounded
once (Inductor's ``reference_in_float``: eager's narrow kernel of one op may round inside it).

A batch's graph holds many cases, so there the fusion check sees the union of their kernels:
``test_case_names_its_graph_ops`` checks (by tracing, no compile) that each name is in the
case's own decomposed graph, and the slow per-case run checks each case's kernels alone.

Default run: the cases of one list, device and dtype compiled as ONE graph (a few kernels,
each compiled once by the system compiler and cached), alone and chained; a failing batch
is re-run case by case so that the failure names the case. ``-m slow``: every case in its
own graph.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch

import torch_plugin

from . import cases as _float_cases

OpCase = _float_cases.OpCase

_LISTS = (
    ("cases", "FLOAT_CASES"),
    ("typed_cases", "TYPED_CASES"),
    ("reduction_cases", "REDUCTION_CASES"),
)


KNOWN_DIFFERENCES: dict[str, tuple[str, str]] = {}
DEVICE_FALLBACKS: dict[str, dict[str, str]] = {}


def _load() -> tuple[dict[str, list[OpCase]], dict[str, Callable]]:
    """The case lists that exist (module name -> cases) and all input domains."""
    lists: dict[str, list[OpCase]] = {}
    domains: dict[str, Callable] = dict(_float_cases.DOMAINS)
    for module, attr in _LISTS:
        try:
            mod = importlib.import_module(f"{__package__}.{module}")
        except ModuleNotFoundError as e:
            if e.name and e.name.endswith(module):
                continue
            raise
        lists[module] = list(getattr(mod, attr))
        domains.update(getattr(mod, "EXTRA_DOMAINS", {}))
        KNOWN_DIFFERENCES.update(getattr(mod, "KNOWN_DIFFERENCES", {}))
        for device, ops in getattr(mod, "DEVICE_FALLBACKS", {}).items():
            DEVICE_FALLBACKS.setdefault(device, {}).update(ops)
    return lists, domains


CASE_LISTS, DOMAINS = _load()
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
SHAPE_ALONE = (3, 37)
SHAPE_CHAIN = (2, 5, 129)
CALLS = 3

# torch.testing.assert_close's defaults (fp32, fp16), bf16's atol wider (values near zero
# after cancellation in a chain). fp64 exact: kernels round each op as eager does (no FMA
# contraction: -ffp-contract=off for the C++ kernels, __dadd_rn/__dmul_rn on CUDA; add/sub with
# alpha as one fma, as ATen's kernels).
_DEFAULT_TOL = {
    torch.float32: (1.3e-6, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16: (1e-3, 1e-5),
    torch.float64: (0.0, 0.0),
}


def _atens(case: OpCase) -> tuple[str, ...]:
    return (case.aten,) if isinstance(case.aten, str) else tuple(case.aten)


def _matches(expected: str, op: str) -> bool:
    """Whether the IR op name `op` ("aten::add.Tensor") is `expected` ("aten::add" matches
    every overload)."""
    return op == expected or ("." not in expected.split("::")[-1] and op.startswith(expected + "."))


def _identity(t: torch.Tensor) -> torch.Tensor:
    if t.dtype == torch.bool:
        return torch.logical_not(torch.logical_not(t))
    return torch.neg(torch.neg(t))


def _scale(t: torch.Tensor) -> torch.Tensor:
    """x * 0.5 (exact but for subnormals) for floats; x itself otherwise."""
    return t * 0.5 if t.dtype.is_floating_point else _identity(t)


def _outputs(r: Any) -> list[torch.Tensor]:
    return list(r) if isinstance(r, (tuple, list)) else [r]


def _alone(case: OpCase) -> Callable:
    def f(*xs):
        return [
            _identity(o) if o.dtype != torch.bool else o
            for o in _outputs(case.fn(*(_identity(x) for x in xs)))
        ]

    return f


def _post(o: torch.Tensor) -> torch.Tensor:
    """A chain's result scaled: x * 3 - 1 for floats (each op rounded to the dtype, as eager
    and the kernels round every op's result)."""
    return o * 3.0 - 1.0 if o.dtype.is_floating_point else o


def _chained(case: OpCase) -> Callable:
    """The case between scaled inputs and a scaled result."""

    def f(*xs):
        return [_post(o) for o in _outputs(case.fn(*(_scale(x) for x in xs)))]

    return f


def _batch(fns: Sequence[Callable], arities: Sequence[int]) -> Callable:
    def run(*xs):
        out, k = [], 0
        for f, n in zip(fns, arities):
            out.extend(f(*xs[k : k + n]))
            k += n
        return tuple(out)

    return run


def _inputs(case: OpCase, dtype: torch.dtype, device: str, shape, seed: int) -> list:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i, dom in enumerate(case.inputs):
        # The second tensor of a binary op broadcasts (its last dim only).
        s = shape[-1:] if i == 1 and len(case.inputs) == 2 and seed % 2 else shape
        out.append(DOMAINS[dom](tuple(s), dtype, gen).to(device))
    return out


_LOADABLE: dict[tuple[str, torch.dtype], bool] = {}
_IR_DTYPE = {torch.float32: "Float", torch.bfloat16: "BFloat16", torch.float16: "Half"}


class _Recorder:
    """Records every CompiledGraph built while active."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from torch_plugin.compiler import stages

        self.graphs: list = []
        init = stages.CompiledGraph.__init__
        graphs = self.graphs

        def record(self, *args, **kwargs):
            init(self, *args, **kwargs)
            graphs.append(self)

        monkeypatch.setattr(stages.CompiledGraph, "__init__", record)

    def fused_and_fallback(self) -> tuple[set[str], set[str], set[str]]:
        """The ATen ops inside generated kernels, those run as fallback steps, and the
        dtypes of the values the kernels' ops make ("Float", "BFloat16", "Half")."""
        fused, fallback, dtypes = set(), set(), set()
        for g in self.graphs:
            for line in str(g.ir_graph).splitlines():
                if line.startswith("    |   %") and " = " in line:
                    lhs, rhs = line.split(" = ", 1)
                    fused.add(rhs.split("(", 1)[0])
                    dtypes.add(lhs.split(": ", 1)[-1].split("[", 1)[0])
            for kind, op, _device in g.executor.steps():
                if kind == "fallback":
                    fallback.add(op)
        return fused, fallback, dtypes


def _compile(fn: Callable) -> Callable:
    import torch_plugin

    torch_plugin.reset()
    return torch_plugin.optimize("plugin")(fn)


def _loadable(device: str, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether the device's generated kernels take `dtype` (a probe graph fuses)."""
    key = (device, dtype)
    if key not in _LOADABLE:
        rec = _Recorder(monkeypatch)
        x = _float_cases.DOMAINS["case"]((4, 3), dtype, torch.Generator().manual_seed(0))
        _compile(lambda t: _identity(t) * 2)(x.to(device))
        fused, _, _ = rec.fused_and_fallback()
        # bool's identity is a double logical_not
        _LOADABLE[key] = bool({"aten::neg", "aten::logical_not"} & fused)
    return _LOADABLE[key]


def _tol(
    case: OpCase, dtype: torch.dtype, out_dtype: torch.dtype, chained: bool = False
) -> tuple[float, float]:
    """The case's override for its case dtype, else the default of the output's dtype
    (an integer case may return floats: int / int). In a float16 chain rtol is 2e-3: the
    chain rounds the op's result before scaling it (as eager), so an op whose float32 value
    differs from ATen's in its last bits (mish's exp/log1p/tanh) lands one float16 ulp
    away where that value sits at a rounding tie, and x * 3 - 1 keeps that ulp (1.2e-3
    relative at the top of a binade, above the default 1e-3)."""
    if case.tol and dtype in case.tol:
        return case.tol[dtype]
    rtol, atol = _DEFAULT_TOL.get(out_dtype, (0.0, 0.0))
    if chained and out_dtype == torch.float16:
        rtol = max(rtol, 2e-3)
    return rtol, atol


def _check_values(
    name: str, got: torch.Tensor, want: torch.Tensor, rtol, atol, relaxed: str = ""
) -> None:
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype}, eager {want.dtype}"
    assert got.shape == want.shape, f"{name}: shape {tuple(got.shape)}, eager {tuple(want.shape)}"
    got, want = got.cpu(), want.cpu()
    if not want.dtype.is_floating_point:
        assert torch.equal(got, want), f"{name}: values differ from eager"
        return
    g, w = got.double(), want.double()
    if relaxed == "nan_vs_inf":
        keep = ~(w.isnan() & g.isinf())
        g, w = g[keep], w[keep]
    bad = g.isnan() != w.isnan()
    assert not bad.any(), (
        f"{name}: nan at {bad.nonzero()[:4].tolist()} (got {g[bad][:4]}, eager {w[bad][:4]})"
    )
    inf = w.isinf() | g.isinf()
    bad = inf & (g != w)
    assert not bad.any(), (
        f"{name}: inf differs at {bad.nonzero()[:4].tolist()} (got {g[bad][:4]}, eager {w[bad][:4]})"
    )
    zero = (w == 0) & (g == 0)
    bad = zero & (torch.signbit(g) != torch.signbit(w)) & (relaxed != "signed_zero")
    assert not bad.any(), f"{name}: sign of zero differs at {bad.nonzero()[:4].tolist()}"
    fin = ~(w.isnan() | inf)
    torch.testing.assert_close(g[fin], w[fin], rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")


def _references(
    case: OpCase, fn: Callable, xs: list, dtype: torch.dtype, fused: bool, chained: bool
) -> list[list]:
    """The references a case's outputs may match: eager (kernels round every op's result
    to its dtype, as eager does); and for a fused case of a narrow float dtype (bf16/fp16)
    with ``reference_in_float``, also the case's op computed in float32 from the same
    inputs and rounded once to eager's output dtypes (Inductor's ``reference_in_float``):
    eager's narrow kernel of ONE op may round its own intermediates (logit, addcmul's
    product), where a generated kernel computes the op in float32 and rounds its result.
    A chain's input scaling and result scaling are ops of their own, rounded either way."""
    eager = _outputs(fn(*xs))
    if not (fused and case.reference_in_float and dtype in (torch.bfloat16, torch.float16)):
        return [eager]
    pre = [_scale(x) for x in xs] if chained else xs
    narrow = _outputs(case.fn(*pre))
    wide = _outputs(case.fn(*[x.float() if x.dtype == dtype else x for x in pre]))
    # Outputs that are not floats (comparisons, indices) are exact: eager's, whose scalars
    # are rounded to the narrow dtype first (x <= 0.1 in bf16 compares with bf16(0.1)).
    outs = [w.to(e.dtype) if e.dtype.is_floating_point else e for w, e in zip(wide, narrow)]
    return [eager, [_post(o) for o in outs] if chained else outs]


def _fused_on(case: OpCase, device: str) -> bool:
    """Whether the case claims fusion on `device` (DEVICE_FALLBACKS: ops a device's
    renderer leaves to ATen, e.g. scans on CUDA)."""
    ours = DEVICE_FALLBACKS.get(device, {})
    return case.fused and not any(a in ours for a in _atens(case))


def _run(
    cases: Sequence[OpCase],
    device: str,
    dtype: torch.dtype,
    chained: bool,
    monkeypatch: pytest.MonkeyPatch,
    first: int = 0,
) -> None:
    """Compiles the cases as one graph, runs it CALLS times with fresh inputs, checks.
    ``first``: the position of ``cases[0]`` in its batch, which seeds its inputs (a case
    run alone after its batch failed draws the inputs it drew in the batch)."""
    # The kernels' numbers are under test: on CUDA the driver may run a graph as its eager
    # graph when that timed faster, which on a loaded GPU (tests in parallel) varies from run
    # to run and gave eager's rounding against the fused reference.
    monkeypatch.setattr(torch_plugin.config, "always_run_compiled", True)
    wrap = _chained if chained else _alone
    fns = [wrap(c) for c in cases]
    counts = [len(c.inputs) for c in cases]
    loadable = _loadable(device, dtype, monkeypatch)
    rec = _Recorder(monkeypatch)
    compiled = _compile(_batch(fns, counts))
    shape = SHAPE_CHAIN if chained else SHAPE_ALONE
    for call in range(CALLS):
        xs, per_case = [], []
        for i, c in enumerate(cases):
            ins = _inputs(c, dtype, device, shape, seed=1000 * call + first + i)
            per_case.append(ins)
            xs.extend(ins)
        got = compiled(*xs)
        k = 0
        for c, f, ins in zip(cases, fns, per_case):
            fused = _fused_on(c, device) and loadable
            refs = _references(c, f, ins, dtype, fused, chained)
            n_out = len(refs[0])
            errors = []
            for want in refs:  # passes when all outputs match one of the references
                try:
                    for j, w in enumerate(want):
                        rtol, atol = _tol(c, dtype, w.dtype, chained)
                        relaxed = KNOWN_DIFFERENCES.get(c.name, ("", ""))[0]
                        where = f"{c.name}[{dtype}, {device}, call {call}, out {j}]"
                        _check_values(where, got[k + j], w, rtol, atol, relaxed)
                    break
                except AssertionError as e:
                    errors.append(str(e))
            else:
                raise AssertionError(" / against float32 rounded once: ".join(errors))
            k += n_out
    assert rec.graphs, "no graph was compiled"
    fused_ops, fallback_ops, kernel_dtypes = rec.fused_and_fallback()
    if not loadable:  # decompositions may still compute in float32 inside kernels
        name = _IR_DTYPE.get(dtype, "")
        assert name not in kernel_dtypes, f"[{dtype}, {device}]: a kernel claims {dtype} values"
    for c in cases:
        for a in _atens(c):
            in_kernel = any(_matches(a, op) for op in fused_ops)
            # In a batch another case's op may fall back with the same name (a documented
            # fallback, or a lone op where the batch's groups split: ATen by design).
            as_fallback = len(cases) == 1 and any(_matches(a, op) for op in fallback_ops)
            if _fused_on(c, device) and loadable:
                assert in_kernel and not as_fallback, (
                    f"{c.name} [{dtype}, {device}]: {a} not inside a generated kernel "
                    f"(fallback steps: {sorted(fallback_ops)})"
                )
            elif not _fused_on(c, device) and len(cases) == 1:
                assert not in_kernel, f"{c.name} [{dtype}, {device}]: {a} claims fusion"


def _batches() -> list:
    params = []
    for module, cases in CASE_LISTS.items():
        dtypes = sorted({d for c in cases for d in c.dtypes}, key=str)
        for device in DEVICES:
            for dtype in dtypes:
                params.append(pytest.param(module, device, dtype, id=f"{module}-{device}-{dtype}"))
    return params


@pytest.mark.parametrize(("module", "device", "dtype"), _batches())
@pytest.mark.parametrize("chained", [False, True], ids=["alone", "chain"])
def test_op_coverage_batch(module, device, dtype, chained, monkeypatch):
    """All cases of one list in one graph per device, dtype and mode."""
    cases = [c for c in CASE_LISTS[module] if dtype in c.dtypes and (c.chain or not chained)]
    if not cases:
        pytest.skip(f"no {module} case in {dtype}")
    try:
        _run(cases, device, dtype, chained, monkeypatch)
    except AssertionError:
        # Name the failing case(s): each on its own, on the inputs it had in the batch.
        failures = []
        for i, c in enumerate(cases):
            try:
                _run([c], device, dtype, chained, monkeypatch, first=i)
            except AssertionError as e:
                failures.append(str(e).splitlines()[0])
        if not failures:
            raise
        pytest.fail("\n".join(failures))


def _single() -> list:
    params = []
    for cases in CASE_LISTS.values():
        for c in cases:
            for device in DEVICES:
                for dtype in c.dtypes:
                    params.append(pytest.param(c, device, dtype, id=f"{c.name}-{device}-{dtype}"))
    return params


@pytest.mark.slow
@pytest.mark.parametrize(("case", "device", "dtype"), _single())
@pytest.mark.parametrize("chained", [False, True], ids=["alone", "chain"])
def test_op_coverage_case(case, device, dtype, chained, monkeypatch):
    """Each case in its own graph (slow: one kernel compile each)."""
    if chained and not case.chain:
        pytest.skip("no chain for this case")
    _run([case], device, dtype, chained, monkeypatch)


def test_harness_sees_fallbacks(monkeypatch):
    """The fusion check can fail: an op without a row (i0) is seen as a fallback step."""
    case = OpCase("i0", torch.i0, ("any",), (torch.float32,), "aten::i0")
    with pytest.raises(AssertionError, match="not inside a generated kernel"):
        _run([case], "cpu", torch.float32, False, monkeypatch)


def _graph_ops(case: OpCase, dtype: torch.dtype) -> set[str]:
    """The ATen ops of the case's graph after the plugin's decompositions (make_fx with
    :func:`~torch_plugin.compiler.decompositions.decomposition_table`; no kernel compiled)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from torch_plugin.compiler.decompositions import decomposition_table

    xs = _inputs(case, dtype, "cpu", SHAPE_ALONE, seed=0)
    with torch.no_grad():
        gm = make_fx(lambda *a: case.fn(*a), decomposition_table=decomposition_table())(*xs)
    return {
        n.target.name()
        for n in gm.graph.nodes
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
    }


@pytest.mark.parametrize("module", list(CASE_LISTS))
def test_case_names_its_graph_ops(module):
    """Each case's ATen names are in its own decomposed graph in every dtype it runs in (a
    batch checks only that the name is inside one of the batch's kernels)."""
    wrong = []
    for c in CASE_LISTS[module]:
        for dtype in c.dtypes:
            ops = _graph_ops(c, dtype)
            missing = [a for a in _atens(c) if not any(_matches(a, op) for op in ops)]
            if missing:
                wrong.append(f"{c.name} [{dtype}]: {missing} not in {sorted(ops)}")
    assert not wrong, "\n".join(wrong)
