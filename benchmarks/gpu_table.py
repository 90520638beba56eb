"""The report of ``benchmarks/gpu_models.py``: its JSON files, their merge, the markdown table
and the summary against issue #29's targets. Pure Python (no torch): ``--merge`` and the
tests run it on any machine.

A *record* is one (row, batch, dtype, backend) measurement, a dict with ``row``, ``batch``,
``dtype``, ``backend``, ``job`` (``"main"``: the child process that measured eager and the
other backends of the row; ``"ma"``: the child that measured eager and ``compile_ma`` alone)
and either the measurement (``ms``: median milliseconds per call; ``compile_s``: cold
compile seconds, the first call minus one steady call; ``peak_mb``: peak
``torch.cuda.max_memory_allocated`` in MiB, weights and inputs included, compile included;
``err``: max |out - eager| / max |eager|; optional ``gpu``, ``notes``, ``eager_graphs``,
``eager_ms`` (the ``ma`` job's own eager), ``warm_compile_s``, ``gbps``/``copy_gbps``), or
``error`` (a failure: the message), or ``not_run`` (why the runner did not measure it: the
deadline, a shard; a resumed run measures it). A results file is ``{"meta": {...},
"records": [...]}``; a bare list of records (the files before issue #29) also loads, its
``gpt2`` rows (GPT2Model then) renamed ``gpt2_body``.
"""

from __future__ import annotations

import json
import math

from gpu_rows import MICRO_ROWS, MODEL_ROWS, TITLES

BACKENDS = ["eager", "compile", "compile_ro", "compile_ma", "inductor", "plugin", "plugin_ro"]
# The ratio: the plugin against the best of these (lower milliseconds).
COMPILE_MODES = ("compile", "compile_ro")
TARGET_RATIO = 1.0
TARGET_GEOMEAN = 1.2
TARGET_COLD = 0.2
# Peak memory "at most eager's": a plugin peak within this many MiB of eager's meets it (the
# caching allocator's rounding of a few small blocks; issue #27 read 1306.51 vs 1306.49 MB as
# equal).
PEAK_TOL_MB = 1.0


def load(path: str) -> tuple[dict, list[dict]]:
    """``(meta, records)`` of a results JSON file (either format)."""
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, list):  # before issue #29, "gpt2" was GPT2Model (now "gpt2_body")
        old = [dict(r, job=r.get("job", "main")) for r in data]
        for r in old:
            r["row"] = "gpt2_body" if r["row"] == "gpt2" else r["row"]
        return {"sources": [path]}, old
    return data.get("meta", {}), list(data.get("records", []))


def _job_score(recs: list[dict]) -> tuple[int, int]:
    ok = sum(1 for r in recs if "ms" in r and "error" not in r)
    ran = sum(1 for r in recs if "not_run" not in r)
    return ok, ran


def merge(runs: list[tuple[dict, list[dict]]]) -> tuple[dict, list[dict]]:
    """One ``(meta, records)`` from several runs' files. Records are chosen per job (all the
    records of one child process together, so that a row's ratios never mix processes): the
    job with the most measured backends, then the one that ran (errors over not run), then
    the later file."""
    best: dict[tuple, tuple[tuple[int, int], int, list[dict]]] = {}
    order: list[tuple] = []
    for i, (_, recs) in enumerate(runs):
        jobs: dict[tuple, list[dict]] = {}
        for r in recs:
            k = (r["row"], r["batch"], r["dtype"], r.get("job", "main"))
            jobs.setdefault(k, []).append(r)
        for k, js in jobs.items():
            score = _job_score(js)
            if k not in best:
                order.append(k)
            if k not in best or score >= best[k][0]:
                best[k] = (score, i, js)
    records = [r for k in order for r in best[k][2]]
    metas = [m for m, _ in runs]

    def union(key: str) -> list:
        vals = []
        for m in metas:
            v = m.get(key, [])
            for x in v if isinstance(v, list) else [v]:
                if x not in vals:
                    vals.append(x)
        return vals

    meta = {k: union(k) for k in ("gpus", "versions", "matmul_precision", "runs")}
    meta["commands"] = [c for m in metas for c in m.get("commands", [])]
    return meta, records


ROW_ORDER = MODEL_ROWS + MICRO_ROWS
DTYPE_ORDER = ("fp32", "bf16")


def _row_key(k: tuple) -> tuple:
    row, batch, dtype = k
    ri = ROW_ORDER.index(row) if row in ROW_ORDER else len(ROW_ORDER)
    di = DTYPE_ORDER.index(dtype) if dtype in DTYPE_ORDER else len(DTYPE_ORDER)
    return (ri, row, di, batch)


def index(records: list[dict]) -> dict[tuple, dict[str, dict]]:
    """{(row, batch, dtype): {backend: record}}, rows in the issue's order (the rows of
    gpu_rows, then fp32 before bf16, then batch)."""
    rows: dict[tuple, dict[str, dict]] = {}
    for r in records:
        rows.setdefault((r["row"], r["batch"], r["dtype"]), {})[r["backend"]] = r
    return {k: rows[k] for k in sorted(rows, key=_row_key)}


def pivot(records: list[dict]) -> str:
    """Issue #29's layout: one line per model, a column per (dtype, batch), each cell the
    plugin over the best of compile and compile_ro (``not run``, ``ERR`` where it has none)."""
    rows = {k: v for k, v in index(records).items() if k[0] not in MICRO_ROWS}
    cols = sorted({(d, b) for _, b, d in rows}, key=lambda c: _row_key(("", c[1], c[0])))
    models = list(dict.fromkeys(k[0] for k in rows))
    lines = ["| row | " + " | ".join(f"{d} b{b}" for d, b in cols) + " |"]
    lines.append("|---|" + "---|" * len(cols))
    for m in models:
        cells = []
        for d, b in cols:
            c = rows.get((m, b, d))
            ratio = metrics(c)["ratio"] if c else None
            if ratio is not None:
                cells.append(f"{ratio:.2f}")
            elif c and any("not_run" in r for r in c.values()):
                cells.append("not run")
            elif c:
                cells.append("ERR")
            else:
                cells.append("")
        lines.append(f"| {TITLES.get(m, m)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _ok(c: dict | None, key: str = "ms"):
    if not c or "error" in c or "not_run" in c or c.get(key) is None:
        return None
    return c[key]


def metrics(cells: dict[str, dict]) -> dict[str, float | None]:
    """A row's derived figures: ``ratio`` (the best of compile and compile_ro ms over plugin
    ms: above 1.0 = the plugin is faster than torch.compile), ``best`` (which mode was
    best), ``x_eager`` (eager ms over plugin ms), ``peak_ratio`` (plugin peak over eager
    peak), ``peak_over_mb`` (plugin peak minus eager peak), ``cold_ratio`` (plugin cold
    compile over torch.compile's default-mode cold compile). None where a side is missing."""
    plugin = _ok(cells.get("plugin"))
    modes = [(m, _ok(cells.get(m))) for m in COMPILE_MODES]
    modes = [(m, v) for m, v in modes if v is not None]
    best = min(modes, key=lambda mv: mv[1]) if modes else None
    eager = _ok(cells.get("eager"))
    pp, ep = _ok(cells.get("plugin"), "peak_mb"), _ok(cells.get("eager"), "peak_mb")
    pc, cc = _ok(cells.get("plugin"), "compile_s"), _ok(cells.get("compile"), "compile_s")
    return {
        "ratio": best[1] / plugin if best and plugin else None,
        "best": best[0] if best else None,
        "x_eager": eager / plugin if eager and plugin else None,
        "peak_ratio": pp / ep if pp is not None and ep else None,
        "peak_over_mb": pp - ep if pp is not None and ep is not None else None,
        "cold_ratio": pc / cc if pc is not None and cc else None,
    }


def _f(v, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def _ms(v: float) -> str:
    return f"{v:.4f}" if v < 0.1 else f"{v:.3f}"


def _cell(c: dict | None, key: str, fmt) -> str:
    if c is None:
        return "-"
    if "not_run" in c:
        return "not run"
    if "error" in c:
        return "cap" if c["error"].startswith("over cap") else "ERR"
    v = c.get(key)
    return "-" if v is None else fmt(v)


def row_label(row: str, batch: int, dtype: str) -> str:
    return f"{row} b{batch} {dtype}"


def table(records: list[dict], backends: list[str] | None = None) -> str:
    """The markdown table: per row, each backend's ms, the derived ratios, cold compile s,
    peak MiB and the largest relative error against eager."""
    rows = index(records)
    present = {b for cells in rows.values() for b in cells}
    bs = [b for b in BACKENDS if b in present or (backends and b in backends)]
    bs += [b for b in (backends or []) if b not in bs and b in present]
    nb = [b for b in bs if b != "eager"]
    head = ["row", "batch", "dtype"] + [f"{b} ms" for b in bs]
    head += ["plugin vs best compile", "plugin x eager"]
    head += [f"{b} cold s" for b in nb] + ["plugin/compile cold"]
    head += [f"{b} peak MB" for b in bs] + ["plugin/eager peak", "max rel err"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (row, batch, dtype), cells in rows.items():
        m = metrics(cells)
        line = [row, str(batch), dtype]
        line += [_cell(cells.get(b), "ms", _ms) for b in bs]
        ratio = _f(m["ratio"])
        if m["ratio"] is not None and m["best"]:
            ratio += f" ({m['best']})"
        line += [ratio, _f(m["x_eager"])]
        line += [_cell(cells.get(b), "compile_s", "{:.1f}".format) for b in nb]
        line += [_f(m["cold_ratio"])]
        line += [_cell(cells.get(b), "peak_mb", "{:.0f}".format) for b in bs]
        line += [_f(m["peak_ratio"])]
        errs = [f"{b}:{c['err']:.1e}" for b, c in cells.items() if _ok(c, "err") is not None]
        line += [" ".join(e for e in errs if not e.startswith("eager:")) or "-"]
        lines.append("| " + " | ".join(line) + " |")
    return "\n".join(lines)


def _miss_list(items: list[str], measured: bool = True) -> str:
    if not measured:
        return "-"
    return ", ".join(items) if items else "none"


def summary(records: list[dict]) -> str:
    """Issue #29's targets over the model rows (micro rows excluded), each with its measured
    value and the rows that miss; then the rows not run, the failures and the plugin's
    notes (graphs it ran as their eager graph)."""
    rows = {k: v for k, v in index(records).items() if k[0] not in MICRO_ROWS}
    ms = {k: metrics(c) for k, c in rows.items()}
    ratios = {k: m["ratio"] for k, m in ms.items() if m["ratio"] is not None}
    slow = [f"{row_label(*k)} {v:.2f}" for k, v in ratios.items() if v < TARGET_RATIO]
    geo = math.exp(sum(math.log(v) for v in ratios.values()) / len(ratios)) if ratios else None
    peaks = {k: m for k, m in ms.items() if m["peak_ratio"] is not None}
    fat = [
        f"{row_label(*k)} {m['peak_ratio']:.2f} (+{m['peak_over_mb']:.0f} MB)"
        for k, m in peaks.items()
        if m["peak_over_mb"] > PEAK_TOL_MB
    ]
    colds = {k: m["cold_ratio"] for k, m in ms.items() if m["cold_ratio"] is not None}
    late = [f"{row_label(*k)} {v:.2f}" for k, v in colds.items() if v > TARGET_COLD]
    n = len(rows)

    def measured(vals: dict, fmt: str, worst) -> str:
        if not vals:
            return "not measured"
        return f"{fmt.format(worst(vals.values()))} ({len(vals)} of {n} rows measured)"

    below = [f"{row_label(*k)} {v:.2f}" for k, v in ratios.items() if v < TARGET_GEOMEAN]
    geo_text = f"{geo:.2f}x over {len(ratios)} rows" if geo else "not measured"
    geo_miss = "-" if geo is None else "none"
    if geo is not None and geo < TARGET_GEOMEAN:
        geo_miss = "rows below it: " + _miss_list(below)
    peak_ratios = {k: m["peak_ratio"] for k, m in peaks.items()}
    targets = [
        (
            f"every row >= {TARGET_RATIO:.1f}x the best of compile and compile_ro",
            "lowest " + measured(ratios, "{:.2f}x", min),
            _miss_list(slow, bool(ratios)),
        ),
        (f"geomean >= {TARGET_GEOMEAN:.1f}x", geo_text, geo_miss),
        (
            f"peak memory <= eager's (within {PEAK_TOL_MB:.0f} MB)",
            "highest plugin/eager " + measured(peak_ratios, "{:.2f}", max),
            _miss_list(fat, bool(peaks)),
        ),
        (
            f"cold compile <= {TARGET_COLD:.1f} of Inductor's (compile)",
            "highest " + measured(colds, "{:.2f}", max),
            _miss_list(late, bool(colds)),
        ),
    ]
    out = [f"## Against issue #29's targets ({n} model rows)", ""]
    out += ["| target | measured | rows that miss |", "|---|---|---|"]
    out += [f"| {t} | {m} | {r} |" for t, m, r in targets]
    extra = notes(records)
    return "\n".join(out + ([""] + extra if extra else []))


def notes(records: list[dict]) -> list[str]:
    """Bullet lines: rows not run, failures, the plugin's eager-graph decisions, GB/s of the
    pointwise row."""
    lines = []
    missing = sorted(
        {(r["row"], r["batch"], r["dtype"], r["not_run"]) for r in records if "not_run" in r}
    )
    by_reason: dict[str, list[str]] = {}
    for row, batch, dtype, why in missing:
        by_reason.setdefault(why, [])
        label = row_label(row, batch, dtype)
        if label not in by_reason[why]:
            by_reason[why].append(label)
    for why, labels in by_reason.items():
        lines.append(f"- not run ({why}): {', '.join(labels)}")
    for r in records:
        label = f"{row_label(r['row'], r['batch'], r['dtype'])} {r['backend']}"
        if "error" in r:
            lines.append(f"- {label}: {r['error']}")
        if r.get("eager_graphs"):
            lines.append(f"- {label}: {r['eager_graphs']} graph(s) ran as the eager graph")
        for n in r.get("notes", []):
            if "running the compiled graph" not in n:  # the graphs the plugin gave up on
                lines.append(f"- {label}: {n}")
        if r.get("gbps") and r.get("copy_gbps"):
            lines.append(
                f"- {label}: {r['gbps']:.0f} GB/s ({100 * r['gbps'] / r['copy_gbps']:.0f}% of "
                f"the {r['copy_gbps']:.0f} GB/s device copy)"
            )
    return lines


def header(meta: dict) -> str:
    """The report's first lines: GPU(s), versions, matmul precision, commands, method."""
    gpus = meta.get("gpus") or ["unknown"]
    prec = meta.get("matmul_precision") or ["?"]
    lines = [
        "# gpu_models: eager vs torch.compile vs torch_plugin (issue #29's rows)",
        "",
        f"- GPU: {', '.join(gpus)}"
        + (" (MIXED: rows from different cards)" if len(gpus) > 1 else ""),
        f"- versions: {'; '.join(meta.get('versions') or ['?'])}",
        f"- torch.set_float32_matmul_precision: {', '.join(prec)} (every implementation)",
        "- latency: median of "
        + "/".join(str(r) for r in meta.get("runs") or ["?"])
        + (" calls, perf_counter" if gpus == ["cpu"] else " calls, CUDA events")
        + " around each, after warm-up; eager measured in the same process;"
        " cold s: first call minus one steady call, empty Inductor/Triton/plugin caches;"
        " peak MB: max_memory_allocated from before the first call, weights and inputs"
        " included, less what earlier backends of the process still hold",
    ]
    for c in meta.get("commands", []):
        lines.append(f"- command: `{c}`")
    return "\n".join(lines)


def report(meta: dict, records: list[dict], backends: list[str] | None = None) -> str:
    """Header, table and summary: the whole markdown file."""
    titles = sorted({r["row"] for r in records if r["row"] in TITLES})
    legend = "Rows: " + "; ".join(f"`{t}` = {TITLES[t]}" for t in titles) if titles else ""
    parts = [header(meta), ""]
    if any(r["row"] not in MICRO_ROWS for r in records):
        parts += ["Plugin over the best of compile and compile_ro (above 1.0: faster):", ""]
        parts += [pivot(records), ""]
    parts += [table(records, backends), ""]
    if legend:
        parts += [legend, ""]
    parts.append(summary(records))
    return "\n".join(parts) + "\n"
