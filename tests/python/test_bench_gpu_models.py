"""benchmarks/gpu_models.py without a GPU: the row plan, the derived ratios, table, summary
against issue #29's targets, merging results files, resuming, sharding, the scheduler and its
deadlines (a fake child launcher and clock), and one end-to-end run on the CPU (slow).

The records are built here with random figures; every expected value is recomputed from them
(no fixed results)."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def gm():
    """The benchmark's modules (imported from benchmarks/, which is not a package)."""
    sys.path.insert(0, str(BENCH))
    try:
        import gpu_rows
        import gpu_runner
        import gpu_table

        yield SimpleNamespace(rows=gpu_rows, table=gpu_table, runner=gpu_runner)
    finally:
        sys.path.remove(str(BENCH))


def rec(row, batch, dtype, backend, job="main", **kw):
    return dict(row=row, batch=batch, dtype=dtype, backend=backend, job=job, **kw)


def measured_row(rng, row, batch, dtype, backends=("eager", "plugin", "compile", "compile_ro")):
    return [
        rec(
            row,
            batch,
            dtype,
            b,
            ms=rng.uniform(0.5, 20.0),
            compile_s=0.0 if b == "eager" else rng.uniform(0.5, 20.0),
            peak_mb=rng.uniform(100.0, 900.0),
            err=rng.uniform(0.0, 1e-3),
        )
        for b in backends
    ]


def by_backend(recs):
    return {r["backend"]: r for r in recs}


# --- rows --------------------------------------------------------------------------------------
def test_plan_follows_issue_table(gm):
    p = gm.rows.plan(",".join(gm.rows.ISSUE_PLAN), None, None)
    assert len(p) == len(set(p))
    for name, dtypes in gm.rows.ISSUE_PLAN.items():
        got = {(b, d) for r, b, d in p if r == name}
        assert got == {(b, d) for b in (1, 32) for d in dtypes}
    assert gm.rows.ISSUE_PLAN["resnet18"] == ("fp32",)
    assert set(gm.rows.ISSUE_PLAN["gpt2"]) == {"fp32", "bf16"}
    # explicit triples, explicit dtypes/batches, micro rows
    assert gm.rows.plan("vit:8:bf16,tiny", None, None) == [("vit", 8, "bf16"), ("tiny", 1, "fp32")]
    assert gm.rows.plan("resnet18", "4", "bf16") == [("resnet18", 4, "bf16")]
    with pytest.raises(SystemExit):
        gm.rows.plan("nosuchrow", None, None)
    with pytest.raises(SystemExit):
        gm.rows.plan("bert:1:fp8", None, None)


def test_build_tiny_rows_on_cpu(gm):
    import torch

    fn, (x,) = gm.rows.build("tiny", 1, "cpu")
    assert torch.equal(fn(x), x + 1)
    fn, (x, r) = gm.rows.build("ln_gelu_res", 1, "cpu")
    assert fn(x, r).shape == (8192, 4096)


def test_estimates_order_and_cap(gm):
    est = gm.rows.estimate_s
    bs = ["eager", "plugin", "compile", "compile_ro"]
    assert est("resnet50", 32, "bf16", bs, 30) > est("resnet50", 32, "fp32", bs, 30)
    assert est("bert", 32, "fp32", bs, 30) > est("bert", 1, "fp32", bs, 30)
    assert est("bert", 1, "fp32", bs, 100) > est("bert", 1, "fp32", bs, 30)
    ma = ["eager", "compile_ma"]
    assert est("bert", 1, "fp32", ma, 30, ma_cap_s=5.0) < est("bert", 1, "fp32", ma, 30)


# --- derived figures, table, summary -------------------------------------------------------------
def test_metrics_recomputed(gm):
    rng = random.Random(1)
    for _ in range(20):
        cells = by_backend(measured_row(rng, "bert", 1, "fp32"))
        m = gm.table.metrics(cells)
        best = min(cells["compile"]["ms"], cells["compile_ro"]["ms"])
        assert m["ratio"] == pytest.approx(best / cells["plugin"]["ms"])
        assert m["best"] == min(("compile", "compile_ro"), key=lambda b: cells[b]["ms"])
        assert m["x_eager"] == pytest.approx(cells["eager"]["ms"] / cells["plugin"]["ms"])
        assert m["peak_ratio"] == pytest.approx(
            cells["plugin"]["peak_mb"] / cells["eager"]["peak_mb"]
        )
        assert m["cold_ratio"] == pytest.approx(
            cells["plugin"]["compile_s"] / cells["compile"]["compile_s"]
        )
    # a failed or unmeasured mode is left out of the best; no plugin: no ratio
    cells = by_backend(measured_row(rng, "bert", 1, "fp32"))
    cells["compile_ro"] = rec("bert", 1, "fp32", "compile_ro", error="RuntimeError: x")
    assert gm.table.metrics(cells)["ratio"] == pytest.approx(
        cells["compile"]["ms"] / cells["plugin"]["ms"]
    )
    cells["plugin"] = rec("bert", 1, "fp32", "plugin", not_run="deadline")
    assert gm.table.metrics(cells)["ratio"] is None
    assert gm.table.metrics(cells)["cold_ratio"] is None


def test_table_cells(gm):
    rng = random.Random(2)
    recs = measured_row(rng, "vit", 32, "bf16")
    recs += measured_row(rng, "bert", 1, "fp32", ("eager", "plugin", "compile"))
    recs.append(rec("bert", 1, "fp32", "compile_ro", error="RuntimeError: boom"))
    recs.append(rec("bert", 1, "fp32", "compile_ma", job="ma", error="over cap: compile_ma ..."))
    recs += [rec("gpt2", 32, "bf16", b, not_run="deadline") for b in ("eager", "plugin")]
    text = gm.table.table(recs)
    lines = text.splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    assert head[:3] == ["row", "batch", "dtype"]
    assert "compile_ma ms" in head and "inductor ms" not in head
    assert len(lines) == 2 + 3
    rows = {
        ln.split("|")[1].strip(): [c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]
    }
    vit = rows["vit"]
    cells = by_backend(recs[:4])
    ratio = min(cells["compile"]["ms"], cells["compile_ro"]["ms"]) / cells["plugin"]["ms"]
    assert vit[head.index("plugin vs best compile")].startswith(f"{ratio:.2f} (")
    assert vit[head.index("plugin ms")] == f"{cells['plugin']['ms']:.3f}"
    bert = rows["bert"]
    assert bert[head.index("compile_ro ms")] == "ERR"
    assert bert[head.index("compile_ma ms")] == "cap"
    assert rows["gpt2"][head.index("plugin ms")] == "not run"
    for line in lines:
        assert line.count("|") == lines[0].count("|")


def test_pivot_and_row_order(gm):
    rng = random.Random(10)
    keys = [("gpt2", 32, "bf16"), ("resnet18", 1, "fp32"), ("gpt2", 1, "fp32")]
    g32, r18, g1 = (measured_row(rng, *k) for k in keys)
    recs = g32 + r18 + g1 + [rec("gpt2", 1, "bf16", b, not_run="d") for b in ("eager", "plugin")]
    assert list(gm.table.index(recs)) == [
        ("resnet18", 1, "fp32"), ("gpt2", 1, "fp32"), ("gpt2", 1, "bf16"), ("gpt2", 32, "bf16")
    ]  # fmt: skip
    lines = gm.table.pivot(recs).splitlines()
    assert lines[0] == "| row | fp32 b1 | bf16 b1 | bf16 b32 |"

    def ratio(r):
        c = by_backend(r)
        return f"{min(c['compile']['ms'], c['compile_ro']['ms']) / c['plugin']['ms']:.2f}"

    assert lines[2] == f"| {gm.rows.TITLES['resnet18']} | {ratio(r18)} |  |  |"
    assert lines[3] == f"| {gm.rows.TITLES['gpt2']} | {ratio(g1)} | not run | {ratio(g32)} |"
    report = gm.table.report({"gpus": ["H100"]}, recs)
    assert lines[3] in report and "## Against issue #29's targets" in report


def _summary_table(text):
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 3 and cells[0] != "target":
            out[cells[0].split()[0]] = cells
    return out


def test_summary_targets_recomputed(gm):
    rng = random.Random(3)
    recs, ratios, peaks, colds = [], {}, {}, {}
    rows = [("resnet50", 1, "fp32"), ("resnet50", 32, "bf16"), ("bert", 1, "fp32"),
            ("gpt2", 32, "bf16"), ("vit", 1, "bf16")]  # fmt: skip
    for key in rows:
        r = measured_row(rng, *key)
        recs += r
        c = by_backend(r)
        label = gm.table.row_label(*key)
        ratios[label] = min(c["compile"]["ms"], c["compile_ro"]["ms"]) / c["plugin"]["ms"]
        peaks[label] = c["plugin"]["peak_mb"] - c["eager"]["peak_mb"]
        colds[label] = c["plugin"]["compile_s"] / c["compile"]["compile_s"]
    # a micro row far below target is not one of the issue's rows
    recs += [rec("tiny", 1, "fp32", "plugin", ms=100.0), rec("tiny", 1, "fp32", "compile", ms=1.0)]
    s = _summary_table(gm.table.summary(recs))
    slow = [k for k, v in ratios.items() if v < 1.0]
    for k in ratios:
        assert (k in s["every"][2]) == (k in slow)
    assert s["every"][1].startswith(f"lowest {min(ratios.values()):.2f}x")
    assert "tiny" not in s["every"][2]
    geo = math.exp(sum(math.log(v) for v in ratios.values()) / len(ratios))
    assert s["geomean"][1] == f"{geo:.2f}x over {len(ratios)} rows"
    for k, over in peaks.items():
        assert (k in s["peak"][2]) == (over > gm.table.PEAK_TOL_MB)
    for k, v in colds.items():
        assert (k in s["cold"][2]) == (v > 0.2)


def test_summary_peak_tolerance_and_not_measured(gm):
    base = [rec("gpt2", 32, "fp32", "eager", ms=2.0, peak_mb=1306.49)]
    same = base + [rec("gpt2", 32, "fp32", "plugin", ms=1.0, peak_mb=1306.51)]
    assert _summary_table(gm.table.summary(same))["peak"][2] == "none"
    more = base + [rec("gpt2", 32, "fp32", "plugin", ms=1.0, peak_mb=1310.0)]
    assert "gpt2 b32 fp32" in _summary_table(gm.table.summary(more))["peak"][2]
    s = _summary_table(gm.table.summary(base))
    assert s["every"][1] == "lowest not measured" and s["every"][2] == "-"


def test_notes_list_not_run_errors_and_eager_graphs(gm):
    recs = [
        rec("vit", 32, "bf16", "plugin", ms=1.0, eager_graphs=1, notes=["compiled graph slower"]),
        rec("bert", 1, "bf16", "compile", error="RuntimeError: boom"),
        rec("gpt2", 1, "fp32", "eager", not_run="deadline"),
        rec("gpt2", 1, "fp32", "plugin", not_run="deadline"),
    ]
    text = "\n".join(gm.table.notes(recs))
    assert "not run (deadline): gpt2 b1 fp32" in text and text.count("gpt2 b1 fp32") == 1
    assert "bert b1 bf16 compile: RuntimeError: boom" in text
    assert "vit b32 bf16 plugin: 1 graph(s) ran as the eager graph" in text
    assert "compiled graph slower" in text


# --- merge, resume, shard ------------------------------------------------------------------------
def test_merge_takes_whole_jobs(gm, tmp_path):
    rng = random.Random(4)
    a_bert = measured_row(rng, "bert", 1, "fp32")
    a_vit = [rec("vit", 1, "fp32", b, not_run="deadline") for b in ("eager", "plugin")]
    b_bert = measured_row(rng, "bert", 1, "fp32")
    b_bert[1] = dict(b_bert[1], error="RuntimeError")  # fewer measured: A's job stays
    b_bert[1].pop("ms")
    b_vit = measured_row(rng, "vit", 1, "fp32", ("eager", "plugin"))
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps({"meta": {"gpus": ["H100"], "runs": [30]}, "records": a_bert + a_vit}))
    pb.write_text(json.dumps(b_bert + b_vit))  # the old format: a bare list
    meta, recs = gm.table.merge([gm.table.load(str(pa)), gm.table.load(str(pb))])
    assert gm.table.load(str(pb))[1][0]["job"] == "main"
    bert = [r for r in recs if r["row"] == "bert"]
    vit = [r for r in recs if r["row"] == "vit"]
    assert bert == a_bert
    assert [r["ms"] for r in vit] == [r["ms"] for r in b_vit]
    assert meta["gpus"] == ["H100"]
    # an old file's gpt2 (GPT2Model) is the gpt2_body row now
    po = tmp_path / "old.json"
    po.write_text(json.dumps(measured_row(rng, "gpt2", 1, "fp32", ("eager", "plugin"))))
    assert {r["row"] for r in gm.table.load(str(po))[1]} == {"gpt2_body"}
    # a later complete job replaces an earlier complete one
    c_bert = measured_row(rng, "bert", 1, "fp32")
    _, recs2 = gm.table.merge([(meta, recs), ({}, c_bert)])
    assert [r for r in recs2 if r["row"] == "bert"] == c_bert


def _args(**kw):
    d = {"runs": 30, "ma_cap_s": 240.0, "gpus": 1, "pin_cpus": None, "device": "cuda"}
    d.update(deadline_s=0.0, hard_deadline_s=0.0, timeout=420.0, out="", warm=False)
    d.update(kw)
    return SimpleNamespace(**d)


def test_jobs_pending_and_shards(gm):
    plan = gm.rows.plan(",".join(gm.rows.ISSUE_PLAN), None, None) + [("tiny", 1, "fp32")]
    backends = ["eager", "plugin", "compile", "compile_ro", "compile_ma"]
    only_ma = gm.runner.make_jobs(plan[:3], ["compile_ma"], _args())
    assert [j.kind for j in only_ma] == ["ma"] * 3
    jobs = gm.runner.make_jobs(plan, backends, _args())
    assert [j.est_s for j in jobs] == sorted((j.est_s for j in jobs), reverse=True)
    assert sum(j.kind == "main" for j in jobs) == len(plan)
    assert sum(j.kind == "ma" for j in jobs) == len(plan) - 1  # no ma job for tiny
    tiny = next(j for j in jobs if j.row == "tiny")
    assert not any(b.endswith("_ro") for b in tiny.backends)
    for n in (1, 2, 3, 5):
        parts = [gm.runner.shard(jobs, f"{k}/{n}") for k in range(1, n + 1)]
        keys = [j.key for p in parts for j in p]
        assert sorted(keys) == sorted(j.key for j in jobs)
        loads = [sum(j.est_s for j in p) for p in parts]
        assert max(loads) - min(loads) <= max(j.est_s for j in jobs) + 1e-9
    with pytest.raises(SystemExit):
        gm.runner.shard(jobs, "4/3")
    # resume: complete jobs are skipped; not run and (with retry_errors) failed ones are not
    done, failed, skipped = jobs[0], jobs[1], jobs[2]
    prior = [rec(*done.key[:3], b, job=done.kind, ms=1.0) for b in done.reported()]
    prior += [rec(*failed.key[:3], b, job=failed.kind, error="x") for b in failed.reported()]
    prior += [rec(*skipped.key[:3], b, job=skipped.kind, not_run="d") for b in skipped.reported()]
    left = {j.key for j in gm.runner.pending(jobs, prior)}
    assert done.key not in left and failed.key not in left and skipped.key in left
    assert failed.key in {j.key for j in gm.runner.pending(jobs, prior, retry_errors=True)}
    assert len(left) == len(jobs) - 2


def test_pick_and_simulate(gm):
    J = gm.runner.Job
    q = [J("a", 1, "fp32", "main", [], 60.0), J("b", 1, "fp32", "main", [], 20.0)]
    assert gm.runner.pick(q, 0.0, 100.0, 0.0) == 0
    assert gm.runner.pick(q, 100.0, 100.0, 0.0) is None  # at the deadline nothing starts
    assert gm.runner.pick(q, 50.0, 100.0, 80.0) == 1  # only the short one ends in time
    assert gm.runner.pick(q, 70.0, 100.0, 80.0) is None
    assert gm.runner.pick(q, 50.0, 100.0, 80.0, scale=2.0) is None  # 2 x 20 s passes 80
    assert gm.runner.pick(q, 50.0, 100.0, 80.0, scale=0.5) == 0
    # the scale: measured over estimated seconds, per job, clamped
    recs = [rec("a", 1, "fp32", b, job_s=30.0, est_s=20.0) for b in ("eager", "plugin")]
    recs += [rec("b", 1, "fp32", "eager", job_s=50.0, est_s=40.0)]
    assert gm.runner.calibrate(recs) == pytest.approx(80.0 / 60.0)
    assert gm.runner.calibrate([rec("a", 1, "fp32", "eager", job_s=500.0, est_s=1.0)]) == 3.0
    assert gm.runner.calibrate([rec("a", 1, "fp32", "eager", not_run="x")]) is None
    rng = random.Random(5)
    jobs = sorted(
        (J(f"r{i}", 1, "fp32", "main", [], rng.uniform(10, 70)) for i in range(25)),
        key=lambda j: -j.est_s,
    )
    for n in (1, 2, 3):
        starts, left, span = gm.runner.simulate(jobs, n)
        assert not left and len(starts) == len(jobs)
        assert span >= sum(j.est_s for j in jobs) / n - 1e-9
        starts, left, span = gm.runner.simulate(jobs, n, deadline_s=200.0, hard_s=260.0)
        assert all(s < 200.0 and s + j.est_s <= 260.0 for _, s, j in starts)
        assert len(starts) + len(left) == len(jobs) and span <= 260.0


def test_workers_split_gpus_and_cpus(gm, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)))
    ws = gm.runner.workers(2, None, "cuda")
    assert [w.gpu for w in ws] == ["0", "1"]
    cpus = [gm.runner.parse_cpus(w.cpus) for w in ws]
    assert cpus[0] == set(range(16)) and cpus[1] == set(range(16, 32))
    one = gm.runner.workers(1, None, "cuda")
    assert one[0].gpu is None and one[0].cpus == ""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert [w.gpu for w in gm.runner.workers(2, False, "cuda")] == ["3", "5"]
    with pytest.raises(SystemExit):
        gm.runner.workers(3, False, "cuda")
    assert gm.runner.parse_cpus("0-2,7") == {0, 1, 2, 7}


# --- the runner with a fake child and clock ---------------------------------------------------
class FakeChild:
    """Launches nothing: advances a shared fake clock by each job's estimate (or ``took``),
    then returns measured records, or times out / crashes as told."""

    def __init__(self, rng, took=None, crash=(), hang=(), crash_in=None):
        self.now, self.lock = 0.0, threading.Lock()
        self.rng, self.took, self.crash, self.hang = rng, took or {}, set(crash), set(hang)
        self.crash_in = crash_in or {}  # row -> the backend whose measurement kills the child
        self.calls, self.backends = [], []

    def clock(self):
        return self.now

    def __call__(self, job, worker, timeout, args):
        with self.lock:
            self.calls.append((job.key, worker.gpu, timeout))
            self.backends.append(list(job.backends))
            took = self.took.get(job.row, job.est_s)
            if job.row in self.hang or took > timeout:
                self.now += timeout
                return [], None, True
            self.now += took
        if job.row in self.crash:
            return [{"crash": "Segmentation fault"}], None, False
        bs = job.reported()
        dies = self.crash_in.get(job.row)
        if dies in bs:
            bs = bs[: bs.index(dies)]
        recs = measured_row(self.rng, job.row, job.batch, job.dtype, bs)
        for r in recs:
            r["job"] = job.kind
        if dies in job.reported():
            recs.append({"crash": "CUDA error: an illegal memory access"})
        return recs, {"gpu": "FakeGPU", "versions": "v", "matmul_precision": "high"}, False


def _jobs(gm, n, rng):
    J = gm.runner.Job
    bs = ["eager", "plugin", "compile", "compile_ro"]
    jobs = [J(f"r{i}", 1, "fp32", "main", bs, rng.uniform(20, 60)) for i in range(n)]
    return sorted(jobs, key=lambda j: -j.est_s)


def test_runner_deadlines_timeouts_and_crashes(gm, tmp_path, capsys):
    rng = random.Random(6)
    jobs = _jobs(gm, 12, rng)
    fake = FakeChild(rng, crash=[jobs[1].row], hang=[jobs[2].row])
    out = tmp_path / "r.md"
    args = _args(deadline_s=200.0, hard_deadline_s=0.0, timeout=100.0, out=str(out))
    _, recs = gm.runner.Runner(jobs, args, "cmd", ({}, []), fake, fake.clock).run()
    started = [k for k, _, _ in fake.calls]
    assert len(started) == len(set(started))
    rows = {r["row"] for r in recs}
    assert rows == {j.row for j in jobs}  # every job is in the results, run or not
    by = gm.table.index(recs)
    for j in jobs:
        cells = by[(j.row, 1, "fp32")]
        assert set(cells) == set(j.reported())
        if j.key not in started:
            assert all("not_run" in c for c in cells.values())
        elif j.row == jobs[1].row:
            assert all("Segmentation fault" in c["error"] for c in cells.values())
        elif j.row == jobs[2].row:
            assert all(c["error"].startswith("timeout") for c in cells.values())
        else:
            assert all("ms" in c for c in cells.values())
    # no job started at or after the deadline: the sum of the durations before each start
    assert len(started) < len(jobs)
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["records"] == recs and data["meta"]["gpus"] == ["FakeGPU"]
    assert "not run (" in out.read_text()
    assert capsys.readouterr().out.count("[gpu0") == len(started)


def test_runner_hard_deadline_kill_is_not_run_and_resumes(gm, tmp_path):
    rng = random.Random(7)
    jobs = _jobs(gm, 6, rng)
    slow = jobs[0].row
    fake = FakeChild(rng, took={slow: 1000.0})
    args = _args(hard_deadline_s=300.0, timeout=400.0, out=str(tmp_path / "a.md"))
    _, recs = gm.runner.Runner(jobs, args, "cmd", ({}, []), fake, fake.clock).run()
    assert fake.calls[0][2] == pytest.approx(300.0)  # its timeout is the hard deadline
    killed = [r for r in recs if r["row"] == slow]
    assert killed and all(r["not_run"].startswith("killed") for r in killed)
    # a second call resumes: only the killed job and those not started run again
    todo = gm.runner.pending(jobs, recs)
    assert slow in {j.row for j in todo}
    assert all(j.row != slow for j in jobs if j not in todo)
    fake2 = FakeChild(rng)
    prior = gm.table.load(str(tmp_path / "a.json"))
    args2 = _args(out=str(tmp_path / "b.md"))
    _, recs2 = gm.runner.Runner(todo, args2, "cmd2", prior, fake2, fake2.clock).run()
    assert {k for k, _, _ in fake2.calls} == {j.key for j in todo}
    assert not any("not_run" in r for r in recs2)
    assert {r["row"] for r in recs2} == {j.row for j in jobs}
    meta = json.loads((tmp_path / "b.json").read_text())["meta"]
    assert meta["commands"] == ["cmd", "cmd2"]


def test_runner_follows_up_a_backend_crash(gm):
    rng = random.Random(9)
    jobs = _jobs(gm, 3, rng)
    fake = FakeChild(rng, crash_in={jobs[0].row: "plugin", jobs[1].row: "eager"})
    _, recs = gm.runner.Runner(jobs, _args(), "cmd", ({}, []), fake, fake.clock).run()
    by = gm.table.index(recs)
    order = jobs[0].backends  # eager, plugin, compile, compile_ro
    cells = by[(jobs[0].row, 1, "fp32")]
    assert set(cells) == set(order)
    assert "illegal memory access" in cells["plugin"]["error"]
    assert all("ms" in cells[b] for b in order if b != "plugin")
    follow = [b for (k, _, _), b in zip(fake.calls, fake.backends) if k == jobs[0].key]
    assert follow == [order, order[order.index("plugin") + 1 :]]
    # a child that dies before any record is not followed up: every backend failed
    cells = by[(jobs[1].row, 1, "fp32")]
    assert all("illegal memory access" in c["error"] for c in cells.values())
    assert sum(k == jobs[1].key for k, _, _ in fake.calls) == 1
    assert all("ms" in c for c in by[(jobs[2].row, 1, "fp32")].values())


def test_runner_two_gpus_each_job_once(gm, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    rng = random.Random(8)
    jobs = _jobs(gm, 15, rng)
    fake = FakeChild(rng)
    args = _args(gpus=2, pin_cpus=False)
    _, recs = gm.runner.Runner(jobs, args, "cmd", ({}, []), fake, fake.clock).run()
    keys = [k for k, _, _ in fake.calls]
    assert sorted(keys) == sorted(j.key for j in jobs)
    assert {g for _, g, _ in fake.calls} <= {"0", "1"}
    assert len(recs) == sum(len(j.reported()) for j in jobs)


# --- end to end on the CPU ----------------------------------------------------------------------
@pytest.mark.slow
def test_cpu_smoke_run_then_resume_then_merge(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    script = str(BENCH / "gpu_models.py")
    out = tmp_path / "cpu.md"
    cmd = [sys.executable, script, "--device", "cpu", "--rows", "tiny", "--backends",
           "eager,plugin", "--runs", "3", "--out", str(out)]  # fmt: skip
    p = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    data = json.loads(out.with_suffix(".json").read_text())
    recs = {r["backend"]: r for r in data["records"]}
    assert set(recs) == {"eager", "plugin"}
    for r in recs.values():
        assert "error" not in r and r["ms"] > 0
    assert recs["plugin"]["err"] == 0.0  # x + 1 in fp32 is exact
    assert data["meta"]["matmul_precision"][0].startswith("high")
    assert "| tiny | 1 | fp32 |" in out.read_text()
    # --append: the row is complete, no child runs, the table is kept
    p2 = subprocess.run(
        cmd + ["--append"], check=False, capture_output=True, text=True, env=env, timeout=300
    )
    assert p2.returncode == 0, p2.stderr
    assert "[gpu0" not in p2.stdout
    assert json.loads(out.with_suffix(".json").read_text())["records"] == data["records"]
    merged = tmp_path / "m.md"
    p3 = subprocess.run(
        [sys.executable, script, "--merge", str(out.with_suffix(".json")), "--out", str(merged)],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p3.returncode == 0, p3.stderr
    assert "| tiny | 1 | fp32 |" in merged.read_text()
