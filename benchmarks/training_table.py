"""The report of ``benchmarks/training_step.py``: the markdown tables and the summary against
issue #30's training targets. Pure Python (no torch): ``--merge`` and the tests run it on any
machine.

A record is gpu_table's (``row``, ``batch``, ``dtype``, ``backend``: here the variant,
``job``; ``error`` or ``not_run`` where there is no measurement) with training_step's
figures: ``ms`` (median step), ``first_s`` (the first step's wall seconds), ``compile_s``
(cold compile: first step minus one steady step), ``compile3_s`` (the 3 checked steps minus
3 steady steps), ``peak_mb``, ``check`` (``loss_err``, ``moment_err``, ``loss3_err``,
``update_err``, ``buffer_err`` against eager), ``check_precise`` (the same against the precise reference),
``floor`` (eager's against it), ``tol`` and ``tol_mult`` (the rule), ``check_ok`` (True,
False, or None when not judged: with dropout), and for the plugin ``plugin`` (its counters
over the variant: optimizer steps compiled / run as eager, capture's frames, failures, graph
breaks, graphs, recompiles, graphs run as eager graphs), ``notes``.
"""

from __future__ import annotations

import math

import gpu_table
from gpu_rows import TITLES

VARIANTS = ["eager", "eager_fused", "plugin", "compile", "compile_opt"]
COMPILE_VARIANTS = ("compile", "compile_opt")
# Issue #30's targets: the plugin at least TARGET_X_COMPILE times the best torch.compile
# variant and never below eager; peak memory at most eager's (gpu_table's tolerance); cold
# compile at most TARGET_COLD of torch.compile's (compile_opt's: the same work, the module and
# the optimizer step; compile's where compile_opt was not measured).
TARGET_X_COMPILE = 1.1
TARGET_X_EAGER = 1.0
TARGET_COLD = 0.2
PEAK_TOL_MB = gpu_table.PEAK_TOL_MB
TINY_TITLES = {"mlp": "tiny MLP (CPU smoke)", "cnn": "tiny CNN (CPU smoke)"}


def usable(c: dict | None, key: str = "ms"):
    """``c[key]`` of a measured record that did not fail its check, else None."""
    if not c or c.get("check_ok") is False:
        return None
    return gpu_table._ok(c, key)


def metrics(cells: dict[str, dict]) -> dict:
    """A row's derived figures (None where a side is missing or failed its check):
    ``x_compile`` (best torch.compile variant's ms over the plugin's) and ``best`` (which),
    ``x_eager`` (eager over plugin), ``peak_ratio`` / ``peak_over_mb`` (plugin against eager),
    ``cold_ratio`` (plugin's cold compile over torch.compile's: compile_opt's, else compile's)
    and ``cold_ref`` (which)."""
    plugin = usable(cells.get("plugin"))
    modes = [(m, usable(cells.get(m))) for m in COMPILE_VARIANTS]
    modes = [(m, v) for m, v in modes if v is not None]
    best = min(modes, key=lambda mv: mv[1]) if modes else None
    eager = usable(cells.get("eager"))
    pp, ep = usable(cells.get("plugin"), "peak_mb"), usable(cells.get("eager"), "peak_mb")
    pc = usable(cells.get("plugin"), "compile_s")
    ref = next((m for m in ("compile_opt", "compile") if usable(cells.get(m), "compile_s")), None)
    cc = usable(cells.get(ref), "compile_s") if ref else None
    return {
        "x_compile": best[1] / plugin if best and plugin else None,
        "best": best[0] if best else None,
        "x_eager": eager / plugin if eager and plugin else None,
        "peak_ratio": pp / ep if pp is not None and ep else None,
        "peak_over_mb": pp - ep if pp is not None and ep is not None else None,
        "cold_ratio": pc / cc if pc is not None and cc else None,
        "cold_ref": ref if cc else None,
    }


CHECK_KEYS = ("loss_err", "moment_err", "loss3_err", "update_err", "buffer_err")


def _figs(ch: dict | None) -> str:
    return " / ".join(f"{ch[k]:.1e}" if k in ch else "-" for k in CHECK_KEYS) if ch else "-"


def _check(c: dict) -> str:
    if not c.get("check"):
        return "-"
    verdict = {True: "ok", False: "**FAIL**", None: "not judged"}[c.get("check_ok")]
    return f"{verdict} ({_figs(c['check'])})"


def variants_table(records: list[dict], variants: list[str] | None = None) -> str:
    """One line per (row, variant): ms, x eager, cold s, peak MB, the check."""
    head = ["row", "batch", "dtype", "variant", "ms", "x eager", "cold s", "cold 3 s", "peak MB",
            "check: err vs eager (loss / moment / loss3 / update / buffer)"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (row, batch, dtype), cells in gpu_table.index(records).items():
        order = [v for v in (variants or VARIANTS) if v in cells]
        order += [v for v in cells if v not in order]
        eager = usable(cells.get("eager"))
        for v in order:
            c = cells[v]
            ms = gpu_table._cell(c, "ms", gpu_table._ms)
            if c.get("check_ok") is False and "ms" in c:
                ms = f"({ms}: check failed)"
            mine = usable(c)
            x = f"{eager / mine:.2f}" if eager and mine else "-"
            cold = cold3 = "-"
            if not v.startswith("eager"):
                cold = gpu_table._cell(c, "compile_s", "{:.1f}".format)
                cold3 = gpu_table._cell(c, "compile3_s", "{:.1f}".format)
            peak = gpu_table._cell(c, "peak_mb", "{:.0f}".format)
            line = [row, str(batch), dtype, v, ms, x, cold, cold3, peak, _check(c)]
            lines.append("| " + " | ".join(line) + " |")
    return "\n".join(lines)


def rows_table(records: list[dict]) -> str:
    """One line per row: the plugin against eager and the best torch.compile variant."""
    head = ["row", "batch", "dtype", "eager ms", "best compile ms", "plugin ms",
            "plugin x best compile", "plugin x eager", "plugin/eager peak",
            "plugin/compile cold"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (row, batch, dtype), cells in gpu_table.index(records).items():
        m = metrics(cells)
        best = usable(cells.get(m["best"])) if m["best"] else None
        best_s = f"{gpu_table._ms(best)} ({m['best']})" if best else "-"
        eager, plugin = usable(cells.get("eager")), usable(cells.get("plugin"))
        cold = gpu_table._f(m["cold_ratio"])
        if m["cold_ref"]:
            cold += f" ({m['cold_ref']})"
        line = [row, str(batch), dtype, gpu_table._f(eager, "{:.3f}"), best_s,
                gpu_table._f(plugin, "{:.3f}"), gpu_table._f(m["x_compile"]),
                gpu_table._f(m["x_eager"]), gpu_table._f(m["peak_ratio"]), cold]  # fmt: skip
        lines.append("| " + " | ".join(line) + " |")
    return "\n".join(lines)


def summary(records: list[dict]) -> str:
    """Issue #30's training targets, each with its measured value and the rows that miss; then
    the failed checks, rows not run, failures and the plugin's notes."""
    rows = gpu_table.index(records)
    ms = {k: metrics(c) for k, c in rows.items()}
    n = len(rows)
    label = gpu_table.row_label

    def figure(key: str, worst, fmt: str) -> str:
        vals = [m[key] for m in ms.values() if m[key] is not None]
        if not vals:
            return "not measured"
        return f"{fmt.format(worst(vals))} ({len(vals)} of {n} rows measured)"

    def misses(key: str, bad) -> str:
        vals = {k: m[key] for k, m in ms.items() if m[key] is not None}
        if not vals:
            return "-"
        items = [f"{label(*k)} {v:.2f}" for k, v in vals.items() if bad(k, v)]
        return ", ".join(items) or "none"

    plugin_failed = [
        label(*k) for k, c in rows.items() if c.get("plugin", {}).get("check_ok") is False
    ]
    targets = [
        (f"plugin >= {TARGET_X_COMPILE:.1f}x the best torch.compile variant",
         "lowest " + figure("x_compile", min, "{:.2f}x"),
         misses("x_compile", lambda k, v: v < TARGET_X_COMPILE)),
        (f"plugin >= {TARGET_X_EAGER:.1f}x eager", "lowest " + figure("x_eager", min, "{:.2f}x"),
         misses("x_eager", lambda k, v: v < TARGET_X_EAGER)),
        (f"peak memory <= eager's (within {PEAK_TOL_MB:.0f} MB)",
         "highest plugin/eager " + figure("peak_ratio", max, "{:.2f}"),
         misses("peak_ratio", lambda k, v: ms[k]["peak_over_mb"] > PEAK_TOL_MB)),
        (f"cold compile <= {TARGET_COLD:.1f} of torch.compile's",
         "highest " + figure("cold_ratio", max, "{:.2f}"),
         misses("cold_ratio", lambda k, v: v > TARGET_COLD)),
        ("plugin passes the check against eager", f"{len(plugin_failed)} rows fail",
         ", ".join(plugin_failed) or "none"),
    ]  # fmt: skip
    xs = [m["x_compile"] for m in ms.values() if m["x_compile"]]
    out = [f"## Against issue #30's training targets ({n} rows)", ""]
    out += ["| target | measured | rows that miss |", "|---|---|---|"]
    out += [f"| {t} | {m} | {r} |" for t, m, r in targets]
    if xs:
        geo = math.exp(sum(math.log(x) for x in xs) / len(xs))
        out += ["", f"Geomean plugin x best torch.compile: {geo:.2f} over {len(xs)} rows."]
    extra = notes(records)
    return "\n".join(out + ([""] + extra if extra else []))


def notes(records: list[dict]) -> list[str]:
    """gpu_table's notes (not run, errors, eager graphs, plugin messages), the failed checks
    and the plugin's optimizer steps run as eager."""
    lines = gpu_table.notes(records)
    for r in records:
        name = f"{gpu_table.row_label(r['row'], r['batch'], r['dtype'])} {r['backend']}"
        if r.get("check_ok") is False:
            tol = r.get("tol") or {}
            lines.append(
                f"- {name}: check FAILED: against the precise reference {_figs(r.get('check_precise'))},"
                f" allowed {r.get('tol_mult', '?')} x eager's {_figs(r.get('floor'))} + {_figs(tol)}"
                " (loss / moment / loss3 / update / buffer): not counted as a speed-up"
            )
        w = r.get("compile_warmup_s")
        if w is not None and r["backend"] == "compile":
            w = f"{w} s" if isinstance(w, (int, float)) else w
            lines.append(
                f"- {name}: torch.compile's one-time process warm-up {w}"
                " (not in the torch.compile variants' cold compiles)"
            )
        p = r.get("plugin") or {}
        if p:
            lines.append(
                f"- {name}: optimizer steps {p.get('compiled_steps', 0)} compiled,"
                f" {p.get('eager_steps', 0)} eager's; capture: {p.get('frames_captured', 0)}"
                f" frames, {p.get('frames_failed', 0)} failed, {p.get('graph_breaks', 0)} graph"
                f" breaks, {p.get('graphs_compiled', 0)} graphs, {p.get('recompiles', 0)}"
                " recompiles"
            )
    return lines


def header(meta: dict) -> str:
    """The report's first lines: GPU(s), versions, matmul precision, commands, method."""
    gpus = meta.get("gpus") or ["unknown"]
    mixed = " (MIXED: rows from different cards)" if len(gpus) > 1 else ""
    lines = [
        "# training_step: one training step, eager vs torch.compile vs torch_plugin (issue #30)",
        "",
        f"- GPU: {', '.join(gpus)}{mixed}",
        f"- versions: {'; '.join(meta.get('versions') or ['?'])}",
        f"- torch.set_float32_matmul_precision: {', '.join(meta.get('matmul_precision') or ['?'])}",
        "- step: forward and loss (under bf16 autocast for bf16), backward, AdamW(lr=1e-4)"
        " step, zero_grad; ms: median of "
        + "/".join(str(r) for r in meta.get("runs") or ["?"])
        + " steps"
        + (", perf_counter" if gpus == ["cpu"] else ", CUDA events around each")
        + ", after the 3 checked steps and the warm-up; cold s: the first step minus one"
        " steady step, empty caches (torch.compile variants: each in fresh_cache(), after a"
        " small compiled layer paid the process's one-time costs, in the notes); cold 3 s:"
        " the 3 checked steps minus 3 steady steps; peak MB: max_memory_allocated over the"
        " variant, weights included; check: 3 steps from the same start against eager"
        " foreach: the first loss and AdamW's first moments (the first gradients), the later"
        " losses, the weights' change |dW - dW_eager| / |dW_eager| and the buffers after 3",
    ]
    lines += [f"- command: `{c}`" for c in meta.get("commands", [])]
    return "\n".join(lines)


def report(meta: dict, records: list[dict], variants: list[str] | None = None) -> str:
    """Header, the per-row table, the per-variant table and the summary: the markdown file."""
    titles = {**TITLES, **TINY_TITLES}
    present = sorted({r["row"] for r in records if r["row"] in titles})
    parts = [header(meta), "", rows_table(records), "", variants_table(records, variants), ""]
    if present:
        parts += ["Rows: " + "; ".join(f"`{t}` = {titles[t]}" for t in present), ""]
    parts.append(summary(records))
    return "\n".join(parts) + "\n"
