"""benchmarks/training_step.py without a GPU: the check against eager (it passes the eager
variants and the plugin's whole step, and fails a step with a wrong learning rate or a wrong
BatchNorm momentum), the report's ratios and targets from random records (a variant that
fails its check is no speed-up), the jobs and their schedule, and one end-to-end CPU run
(slow) with --append and --merge.

Expected values are recomputed from the random records and tensors (no fixed results)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def ts():
    """The benchmark's modules (benchmarks/ is not a package)."""
    sys.path.insert(0, str(BENCH))
    try:
        import gpu_runner
        import training_check
        import training_step
        import training_table

        yield SimpleNamespace(
            step=training_step, check=training_check, table=training_table, runner=gpu_runner
        )
    finally:
        sys.path.remove(str(BENCH))


def _args(**kw):
    d = {"device": "cpu", "dtype": "fp32", "dropout": False, "tol_scale": 1.0, "tol_mult": 3.0}
    d.update(warmup=1, steps=2, batch=4, variants="eager,eager_fused,plugin")
    d.update(kw)
    return SimpleNamespace(**d)


# --- the check -----------------------------------------------------------------------------------
def test_compare_measures_the_differences(ts):
    g = torch.Generator().manual_seed(3)
    names = ["a", "b", "c"]

    def rnd(scale=1.0):
        return torch.randn(5, 7, generator=g, dtype=torch.float64) * scale

    init = ({n: rnd() for n in names}, {}, {})
    delta = {n: rnd(1e-3) for n in names}
    moments = {n: rnd(1e-2) for n in names}
    ref = ({n: init[0][n] + delta[n] for n in names}, {"rm": torch.rand(7, generator=g)}, moments)
    eps = random.Random(3).uniform(0.05, 0.5)
    got = (
        {n: init[0][n] + (1 + eps) * delta[n] for n in names},  # every update eps too long
        {"rm": ref[1]["rm"] * (1 + eps / 10)},
        {n: m * (1 - eps / 5) for n, m in moments.items()},
    )
    losses = [random.Random(4).uniform(1, 5) for _ in range(3)]
    bumped = [losses[0] * (1 + eps / 100)] + [x * (1 + eps / 50) for x in losses[1:]]
    c = ts.check.compare(init, ref, got, losses, bumped)
    assert c["update_err"] == pytest.approx(eps, rel=1e-6)
    assert c["moment_err"] == pytest.approx(eps / 5, rel=1e-6)
    assert c["buffer_err"] == pytest.approx(eps / 10, rel=1e-5)
    assert c["loss_err"] == pytest.approx(eps / 100, rel=1e-6)
    assert c["loss3_err"] == pytest.approx(eps / 50, rel=1e-6)
    zero = dict.fromkeys(c, 0.0)
    loose = dict.fromkeys(c, 1.0)
    assert ts.check.passes(c, zero, loose)
    assert not ts.check.passes(c, zero, dict(loose, update_err=eps / 2))
    # eager's own error against the reference widens the allowance: mult x floor + tol
    floor = dict(zero, update_err=eps / 4)
    assert ts.check.passes(c, floor, dict(loose, update_err=eps / 2), mult=3.0)
    assert not ts.check.passes(c, floor, dict(loose, update_err=eps / 2), mult=1.0)
    nan = ts.check.compare(init, ref, got, losses, [float("nan")] * 3)
    assert nan["loss_err"] == float("inf") and not ts.check.passes(nan, zero, loose)
    missing = ts.check.compare(init, ref, (got[0], got[1], {}), losses, losses)
    assert missing["moment_err"] == float("inf")  # a variant without optimizer state
    ints = ({}, {"n": torch.tensor(3)}, {})
    diff = ts.check.compare(({}, {}, {}), ints, ({}, {"n": torch.tensor(4)}, {}), [], [])
    assert diff["buffer_err"] == float("inf")


def _references(ts, name, args):
    row = ts.step.build_row(name, args.batch, "cpu", False)
    init = ts.check.snapshot(row[0])
    precise = ts.step.reference(row, args, precise=True)
    ts.check.restore(row[0], init)
    ref = ts.step.reference(row, args)
    return row, init, ref, precise


@pytest.fixture
def mlp(ts):
    args = _args()
    return (*_references(ts, "mlp", args), args)


def test_eager_variants_pass_and_a_wrong_lr_fails(ts, mlp, monkeypatch):
    row, init, ref, precise, args = mlp
    for variant in ("eager", "eager_fused"):
        rec = ts.step.measure(variant, row, init, ref, precise, args)
        assert rec["check_ok"] is True, rec
        assert rec["ms"] > 0 and rec["first_s"] > 0
    same = ts.step.measure("eager", row, init, ref, precise, args)["check"]
    assert same["update_err"] == 0.0 and same["moment_err"] == 0.0
    monkeypatch.setattr(ts.step, "LR", ts.step.LR * 1.5)  # updates 1.5x eager's
    bad = ts.step.measure("eager", row, init, ref, precise, args)
    assert bad["check_ok"] is False
    assert bad["check"]["update_err"] == pytest.approx(0.5, rel=0.05)


def test_plugin_whole_step_passes_its_check(ts, mlp):
    import torch_plugin

    row, init, ref, precise, args = mlp
    try:
        rec = ts.step.measure("plugin", row, init, ref, precise, args)
    finally:
        torch_plugin.reset()
    assert rec["check_ok"] is True, rec
    # the optimizer step inside the captured step runs compiled after eager's first
    assert rec["plugin"]["compiled_steps"] >= 1 and rec["plugin"]["frames_failed"] == 0, rec


def test_batchnorm_buffers_and_bf16(ts):
    args = _args()
    row, init, ref, precise = _references(ts, "cnn", args)
    assert ts.step.measure("eager_fused", row, init, ref, precise, args)["check_ok"] is True
    bn = next(m for m in row[0].modules() if isinstance(m, torch.nn.BatchNorm2d))
    bn.momentum = 0.3  # running statistics move faster than eager's
    bad = ts.step.measure("eager", row, init, ref, precise, args)
    assert bad["check_ok"] is False and bad["check"]["buffer_err"] > 1e-3
    # bf16 autocast: eager's distance from the fp32 reference is the floor; eager passes
    args16 = _args(dtype="bf16")
    row, init, ref, precise = _references(ts, "mlp", args16)
    rec = ts.step.measure("eager", row, init, ref, precise, args16)
    assert rec["check_ok"] is True and rec["floor"]["loss_err"] > 0, rec


# --- the report ----------------------------------------------------------------------------------
def rec(row, dtype, variant, **kw):
    return dict(row=row, batch=32, dtype=dtype, backend=variant, job="main", **kw)


def measured(rng, row, dtype, fail=()):
    out = []
    for v in ("eager", "eager_fused", "plugin", "compile", "compile_opt"):
        r = rec(row, dtype, v, ms=rng.uniform(10, 40), peak_mb=rng.uniform(1e3, 5e3))
        r.update(compile_s=0.0 if v.startswith("eager") else rng.uniform(1, 60))
        figs = dict.fromkeys(
            ("loss_err", "moment_err", "loss3_err", "update_err", "buffer_err"), 0.0
        )
        r.update(check=figs, check_precise=figs, floor=figs, tol=figs, tol_mult=3.0)
        r.update(check_ok=v not in fail)
        out.append(r)
    return out


def test_metrics_skip_failed_checks(ts):
    rng = random.Random(11)
    cells = {r["backend"]: r for r in measured(rng, "bert", "fp32")}
    m = ts.table.metrics(cells)
    best = min(("compile", "compile_opt"), key=lambda v: cells[v]["ms"])
    assert m["best"] == best
    assert m["x_compile"] == pytest.approx(cells[best]["ms"] / cells["plugin"]["ms"])
    assert m["x_eager"] == pytest.approx(cells["eager"]["ms"] / cells["plugin"]["ms"])
    assert m["peak_ratio"] == pytest.approx(cells["plugin"]["peak_mb"] / cells["eager"]["peak_mb"])
    assert m["cold_ratio"] == pytest.approx(
        cells["plugin"]["compile_s"] / cells["compile_opt"]["compile_s"]
    )
    other = "compile" if best == "compile_opt" else "compile_opt"
    cells[best]["check_ok"] = False  # the faster torch.compile failed: the other is the best
    m2 = ts.table.metrics(cells)
    assert m2["best"] == other
    assert m2["x_compile"] == pytest.approx(cells[other]["ms"] / cells["plugin"]["ms"])
    cells["plugin"]["check_ok"] = False
    assert ts.table.metrics(cells)["x_compile"] is None


def test_report_targets_and_notes(ts):
    rng = random.Random(12)
    recs = measured(rng, "resnet50", "fp32") + measured(rng, "gpt2", "bf16", fail=("plugin",))
    recs += [rec("vit", "fp32", v, not_run="deadline") for v in ("eager", "plugin")]
    recs += [rec("bert", "bf16", "compile_opt", error="RuntimeError: boom")]
    text = ts.table.report({"gpus": ["FakeGPU"], "runs": [20], "commands": ["cmd"]}, recs)
    assert "FakeGPU" in text and "`cmd`" in text
    assert "gpt2 b32 bf16 plugin: check FAILED" in text
    assert "plugin passes the check against eager | 1 rows fail | gpt2 b32 bf16 |" in text
    assert "not run (deadline): vit b32 fp32" in text
    assert "bert b32 bf16 compile_opt: RuntimeError: boom" in text
    by = {r["backend"]: r for r in recs if r["row"] == "resnet50"}
    x = min(by["compile"]["ms"], by["compile_opt"]["ms"]) / by["plugin"]["ms"]
    line = next(x for x in text.splitlines() if x.startswith("| resnet50 | 32 | fp32 | "))
    assert f"| {x:.2f} |" in line
    if x < ts.table.TARGET_X_COMPILE:
        assert f"resnet50 b32 fp32 {x:.2f}" in text
    gpt2 = next(x for x in text.splitlines() if x.startswith("| gpt2 | 32 | bf16 | plugin |"))
    assert "check failed" in gpt2 and "**FAIL**" in gpt2


# --- jobs and schedule ---------------------------------------------------------------------------
def test_jobs_fit_four_gpus_and_shard(ts):
    args = SimpleNamespace(variants=",".join(ts.step.VARIANTS), batch=32, steps=20, gpus=4)
    jobs = ts.step.make_jobs(ts.step.ROWS, ["fp32", "bf16"], args)
    assert len(jobs) == 8
    assert [j.est_s for j in jobs] == sorted((j.est_s for j in jobs), reverse=True)
    _, left, span = ts.runner.simulate(jobs, 4, 360.0, 470.0)
    assert not left and span <= 470.0
    halves = [ts.runner.shard(jobs, f"{k}/2") for k in (1, 2)]
    assert sorted(j.key for h in halves for j in h) == sorted(j.key for j in jobs)
    with pytest.raises(SystemExit):
        ts.step.make_jobs(["nope"], ["fp32"], args)
    with pytest.raises(SystemExit):
        ts.step.make_jobs(["bert"], ["fp16"], args)


# --- end to end on the CPU -----------------------------------------------------------------------
@pytest.mark.slow
def test_cpu_smoke_run_append_merge(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    script = str(BENCH / "training_step.py")
    out = tmp_path / "t.md"
    cmd = [sys.executable, script, "--device", "cpu", "--rows", "mlp", "--dtypes", "fp32",
           "--batch", "4", "--variants", "eager,eager_fused,plugin", "--warmup", "1",
           "--steps", "2", "--out", str(out)]  # fmt: skip
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    data = json.loads(out.with_suffix(".json").read_text())
    recs = {r["backend"]: r for r in data["records"]}
    assert set(recs) == {"eager", "eager_fused", "plugin"}
    for r in recs.values():
        assert "error" not in r and r["ms"] > 0 and r["check_ok"] is True, r
    assert "| mlp | 4 | fp32 | plugin |" in out.read_text()
    p2 = subprocess.run(
        cmd + ["--append"], check=False, capture_output=True, text=True, env=env, timeout=300
    )
    assert p2.returncode == 0, p2.stderr
    assert "[gpu0" not in p2.stdout  # the row is complete: no child ran
    merged = tmp_path / "m.md"
    p3 = subprocess.run(
        [sys.executable, script, "--merge", str(out.with_suffix(".json")), "--out", str(merged)],
        check=False, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert p3.returncode == 0, p3.stderr
    assert "| mlp | 4 | fp32 | plugin |" in merged.read_text()
