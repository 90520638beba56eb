"""The runner of ``benchmarks/gpu_models.py``: jobs (one child process each), their order, the
GPU workers, the deadlines, resuming and writing the results. Pure Python (no torch); the
child launcher is passed in, so tests drive the runner with a fake one.

A *job* is one child process: ``kind="main"`` measures eager and the row's backends,
``kind="ma"`` measures eager and ``compile_ma`` (max-autotune) alone under its cap.

Scheduling: jobs are sorted longest first by :func:`gpu_rows.estimate_s`; each worker (one
per GPU) takes the first job that may start (:func:`pick`): none after ``deadline_s``, and
none whose estimate would end after ``hard_deadline_s`` (a shorter one may still fit). A
child still running at the hard deadline is killed and its job recorded as not run, so that
``--resume`` runs it again; a child over its own ``--timeout`` (or an ``ma`` job over
``--ma-cap-s`` + 60 s) is recorded as failed and is not rerun.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from collections.abc import Callable

import gpu_table
from gpu_rows import MICRO_ROWS, estimate_s

MA_STARTUP_S = 60.0


@dataclasses.dataclass
class Job:
    row: str
    batch: int
    dtype: str
    kind: str  # "main" or "ma"
    backends: list[str]
    est_s: float

    @property
    def key(self) -> tuple:
        return (self.row, self.batch, self.dtype, self.kind)

    @property
    def label(self) -> str:
        return f"{self.row} b{self.batch} {self.dtype}" + (" (ma)" if self.kind == "ma" else "")

    def reported(self) -> list[str]:
        """The backends whose records the job's child prints (the ma job folds eager)."""
        return [b for b in self.backends if not (self.kind == "ma" and b == "eager")]


@dataclasses.dataclass
class Worker:
    index: int
    gpu: str | None  # CUDA_VISIBLE_DEVICES of its children, None: inherit
    cpus: str  # "0-7" for os.sched_setaffinity in the child, "": inherit


def make_jobs(rows: list[tuple[str, int, str]], backends: list[str], args) -> list[Job]:
    """The jobs of the planned rows, longest first (estimate, then row order): a ``main`` job
    per row for the backends other than ``compile_ma`` (none if there are none), an ``ma`` job
    per model row when ``compile_ma`` is asked for. ``tiny`` takes no CUDA-graph backends (it
    measures the per-call cost)."""
    jobs = []
    for row, batch, dtype in rows:
        main = [b for b in backends if b != "compile_ma"]
        if row == "tiny":
            main = [b for b in main if not b.endswith("_ro")]
        if main:
            est = estimate_s(row, batch, dtype, main, args.runs)
            jobs.append(Job(row, batch, dtype, "main", main, est))
        if "compile_ma" in backends and row not in MICRO_ROWS:
            ma = ["eager", "compile_ma"]
            est = estimate_s(row, batch, dtype, ma, args.runs, args.ma_cap_s)
            jobs.append(Job(row, batch, dtype, "ma", ma, est))
    order = {j.key: i for i, j in enumerate(jobs)}
    return sorted(jobs, key=lambda j: (-j.est_s, order[j.key]))


def shard(jobs: list[Job], spec: str) -> list[Job]:
    """The K-th of N parts (``spec`` "K/N", K from 1) of ``jobs``, balanced by estimate
    (longest job to the least loaded part); ``spec`` "" returns ``jobs``. Raises SystemExit
    for a bad spec."""
    if not spec:
        return jobs
    try:
        k, n = (int(x) for x in spec.split("/"))
    except ValueError:
        raise SystemExit(f"--shard {spec!r}: expected K/N") from None
    if not 1 <= k <= n:
        raise SystemExit(f"--shard {spec!r}: K must be 1..N")
    loads, parts = [0.0] * n, [[] for _ in range(n)]
    for j in sorted(jobs, key=lambda j: -j.est_s):
        i = min(range(n), key=lambda i: (loads[i], i))
        loads[i] += j.est_s
        parts[i].append(j)
    return parts[k - 1]


def pending(jobs: list[Job], prior: list[dict], retry_errors: bool = False) -> list[Job]:
    """The jobs that ``prior`` records (earlier calls' results) do not complete: a job is
    complete when every backend it reports has a record that is not ``not_run`` (and, with
    ``retry_errors``, has no ``error``)."""
    have: dict[tuple, dict[str, dict]] = {}
    for r in prior:
        have.setdefault((r["row"], r["batch"], r["dtype"], r.get("job", "main")), {})[
            r["backend"]
        ] = r

    def complete(j: Job) -> bool:
        got = have.get(j.key, {})
        for b in j.reported():
            r = got.get(b)
            if r is None or "not_run" in r or (retry_errors and "error" in r):
                return False
        return True

    return [j for j in jobs if not complete(j)]


def pick(
    queue: list[Job], elapsed: float, deadline_s: float, hard_s: float, scale: float = 1.0
) -> int | None:
    """Index in ``queue`` (longest first) of the job to start at ``elapsed`` seconds, or None:
    nothing starts at or after ``deadline_s``, nor a job whose estimate times ``scale`` ends
    after ``hard_s`` (0 disables either)."""
    if deadline_s and elapsed >= deadline_s:
        return None
    for i, j in enumerate(queue):
        if not hard_s or elapsed + j.est_s * scale <= hard_s:
            return i
    return None


def calibrate(records: list[dict]) -> float | None:
    """Measured over estimated seconds of the jobs in ``records`` (their ``job_s`` and
    ``est_s``, one per job), clamped to [0.5, 3]; None without any."""
    jobs = {}
    for r in records:
        if r.get("job_s") and r.get("est_s"):
            jobs[(r["row"], r["batch"], r["dtype"], r.get("job", "main"))] = (
                r["job_s"],
                r["est_s"],
            )
    if not jobs:
        return None
    took, est = (sum(v) for v in zip(*jobs.values(), strict=True))
    return min(max(took / est, 0.5), 3.0)


def simulate(jobs: list[Job], n: int, deadline_s: float = 0.0, hard_s: float = 0.0):
    """The schedule if every job took its estimate: ([(worker, start, job)], not started,
    makespan)."""
    queue = list(jobs)
    free = [0.0] * n
    starts = []
    while queue:
        w = min(range(n), key=lambda i: (free[i], i))
        i = pick(queue, free[w], deadline_s, hard_s)
        if i is None:
            free[w] = float("inf")
            if all(f == float("inf") for f in free):
                break
            continue
        j = queue.pop(i)
        starts.append((w, free[w], j))
        free[w] += j.est_s
    ends = [s + j.est_s for _, s, j in starts]
    return starts, queue, max(ends, default=0.0)


def describe_plan(jobs: list[Job], total: int, args) -> str:
    """``--plan``'s text: the jobs with estimates and the simulated schedule."""
    starts, left, span = simulate(jobs, args.gpus, args.deadline_s, args.hard_deadline_s)
    lines = [f"{len(jobs)} of {total} jobs to run on {args.gpus} GPU(s); estimates in s:"]
    for w, s, j in starts:
        lines.append(
            f"  gpu{w} start {s:6.0f}  est {j.est_s:5.0f}  {j.label}: {','.join(j.backends)}"
        )
    for j in left:
        lines.append(f"  not started (deadline)  est {j.est_s:5.0f}  {j.label}")
    lines.append(
        f"estimated end: {span:.0f} s; sum of estimates {sum(j.est_s for j in jobs):.0f} s"
    )
    return "\n".join(lines)


def parse_cpus(spec: str) -> set[int]:
    """{0, 1, 2, 5} of "0-2,5"."""
    out: set[int] = set()
    for part in spec.split(","):
        a, _, b = part.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def _cpu_spec(cpus: list[int]) -> str:
    return ",".join(str(c) for c in cpus)


def workers(n: int, pin: bool | None, device: str) -> list[Worker]:
    """``n`` workers: GPU i of ``CUDA_VISIBLE_DEVICES`` (or i) for each when n > 1; with
    ``pin`` (default: n > 1) the allowed CPUs split into n equal contiguous sets."""
    vis = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = vis.split(",") if vis else [str(i) for i in range(n)]
    if n > len(ids):
        raise SystemExit(f"--gpus {n}: only {len(ids)} visible in CUDA_VISIBLE_DEVICES")
    pin = n > 1 if pin is None else pin
    cpus = sorted(os.sched_getaffinity(0))
    per = max(len(cpus) // n, 1)
    out = []
    for i in range(n):
        gpu = ids[i] if (n > 1 and device == "cuda") else None
        mine = cpus[i * per : (i + 1) * per] if pin else []
        out.append(Worker(i, gpu, _cpu_spec(mine)))
    return out


class Runner:
    """Runs jobs on workers (threads, one child at a time each) under the deadlines; writes
    ``args.out`` after every job. ``launch(job, worker, timeout, args)`` returns (records,
    meta, timed_out) as ``gpu_models.launch_child`` does; ``writer(out, meta, records)``
    writes the results files (default :func:`write`, gpu_models' report)."""

    def __init__(
        self, jobs, args, command, prior, launch: Callable, clock=time.monotonic, writer=None
    ):
        self.queue = list(jobs)
        self.writer = writer or write
        self.args, self.launch, self.clock = args, launch, clock
        self.prior_meta, self.prior = prior
        self.meta = {"gpus": [], "versions": [], "matmul_precision": [], "commands": [command],
                     "runs": [args.runs]}  # fmt: skip
        self.records: list[dict] = []
        self.running: dict[tuple, Job] = {}
        self.lock = threading.Lock()
        # The estimates' correction: measured over estimated seconds of the jobs done (here,
        # else in the prior files), used by the deadline's fit test.
        self.scale = calibrate(self.prior) or 1.0
        self.t0 = clock()

    def elapsed(self) -> float:
        return self.clock() - self.t0

    def run(self) -> tuple[dict, list[dict]]:
        ws = workers(self.args.gpus, self.args.pin_cpus, self.args.device)
        if self.args.out:  # the plan, all not run yet: a call killed early still says what
            self.writer(self.args.out, *self.result())
        threads = [threading.Thread(target=self._work, args=(w,)) for w in ws]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return self.result()

    def _work(self, w: Worker) -> None:
        a = self.args
        while True:
            with self.lock:
                i = pick(self.queue, self.elapsed(), a.deadline_s, a.hard_deadline_s, self.scale)
                if i is None:
                    return
                job = self.queue.pop(i)
                self.running[job.key] = job
            start = self.elapsed()
            recs, meta = self.attempt(job, w)
            took = self.elapsed() - start
            for r in recs:
                if "not_run" not in r:
                    r.update(job_s=round(took, 1), est_s=round(job.est_s, 1))
            with self.lock:
                del self.running[job.key]
                self.records += recs
                self.scale = calibrate(self.records) or self.scale
                if meta:
                    for k in ("gpus", "versions", "matmul_precision"):
                        v = meta.get("gpu") if k == "gpus" else meta.get(k)
                        if v and v not in self.meta[k]:
                            self.meta[k].append(v)
                print(self.progress(w, start, job, recs), flush=True)
                if a.out:
                    self.writer(a.out, *self.result())

    def attempt(self, job: Job, w: Worker) -> tuple[list[dict], dict | None]:
        """Runs ``job``'s child; returns its records, one per reported backend, and its meta.
        A child that crashes after printing some records (a backend-specific crash: a
        segfault, an illegal address) marks the backend it was measuring as failed, and a
        follow-up child measures the backends after it (at most twice)."""
        a, out, meta, todo = self.args, [], None, job
        for _ in range(3):
            timeout = a.timeout if job.kind == "main" else a.ma_cap_s + MA_STARTUP_S
            by_hard = bool(a.hard_deadline_s) and a.hard_deadline_s - self.elapsed() < timeout
            if by_hard:
                timeout = a.hard_deadline_s - self.elapsed()
            recs, m, timed_out = self.launch(todo, w, timeout, a)
            meta = meta or m
            if timed_out and by_hard:
                why = "killed at --hard-deadline-s"
                return [_rec(job, b, not_run=why) for b in job.reported()], meta
            crash = next((r["crash"] for r in recs if "crash" in r), None)
            recs = [r for r in recs if "crash" not in r]
            got = {r["backend"] for r in recs}
            missing = [b for b in todo.reported() if b not in got]
            if crash and recs and len(missing) > 1 and job.kind == "main":
                out += recs + [_rec(job, missing[0], error=f"child crashed: {crash}")]
                todo = dataclasses.replace(job, backends=missing[1:])
                continue
            return out + self.complete(todo, recs, timed_out, crash, timeout), meta
        return out + [_rec(job, b, error="not measured: crashes") for b in todo.reported()], meta

    @staticmethod
    def complete(job: Job, recs: list[dict], timed_out: bool, crash, timeout: float):
        """``recs`` and one record for each reported backend missing from them, with why."""
        got = {r["backend"] for r in recs}
        recs = list(recs)
        for b in job.reported():
            if b in got:
                continue
            if timed_out and job.kind == "ma":
                why = f"over cap: compile_ma not done within --ma-cap-s + {MA_STARTUP_S:.0f} s"
            elif timed_out:
                why = f"timeout: the child ran past --timeout {timeout:.0f} s"
            else:
                why = f"child crashed: {crash}" if crash else "no result from the child"
            recs.append(_rec(job, b, error=why))
        return recs

    def result(self) -> tuple[dict, list[dict]]:
        """(meta, records) of the prior files and this run, queued and running jobs as not
        run."""
        waiting = [
            (j, "not started: the deadline passed, no time was left or the run stopped")
            for j in self.queue
        ]
        waiting += [(j, "still running when written") for j in self.running.values()]
        left = [_rec(j, b, not_run=why) for j, why in waiting for b in j.reported()]
        mine = (self.meta, self.records + left)
        if self.prior:
            return gpu_table.merge([(self.prior_meta, self.prior), mine])
        return gpu_table.merge([mine])

    def progress(self, w: Worker, start: float, job: Job, recs: list[dict]) -> str:
        by = {r["backend"]: r for r in recs}
        cells = " ".join(
            f"{b} {by[b]['ms']:.3f}" if "ms" in by.get(b, {}) else f"{b} --" for b in job.reported()
        )
        m = gpu_table.metrics(by) if job.kind == "main" else {"ratio": None}
        ratio = f" ratio {m['ratio']:.2f}" if m["ratio"] else ""
        took = self.elapsed() - start
        head = f"[gpu{w.index} {self.elapsed():4.0f}s +{took:3.0f}s est {job.est_s:3.0f}"
        return f"{head} x{self.scale:.2f}] {job.label}: {cells}{ratio}"


def _rec(job: Job, backend: str, **kw) -> dict:
    return dict(row=job.row, batch=job.batch, dtype=job.dtype, backend=backend, job=job.kind, **kw)


def write(
    out, meta: dict, records: list[dict], backends=None, echo: bool = False, report=None
) -> str:
    """The report (markdown; ``report(meta, records, backends)``, default gpu_models'
    :func:`gpu_table.report`) to ``out`` and ``{"meta", "records"}`` to its .json sibling
    (each written whole to a temporary name, then renamed); also to stdout with ``echo`` or
    when ``out`` is empty. Returns the report."""
    text = (report or gpu_table.report)(meta, records, backends)
    if echo or not out:
        print(text, flush=True)
    if not out:
        return text
    base = os.path.splitext(out)[0]
    for path, data in (
        (out, text),
        (base + ".json", json.dumps({"meta": meta, "records": records}, indent=1)),
    ):
        with open(path + ".tmp", "w") as f:
            f.write(data)
        os.replace(path + ".tmp", path)
    return text
