"""The compile report: a trace folder (``TORCH_PLUGIN_TRACE=DIR``, see
:mod:`torch_plugin.trace`) turned into one self-contained HTML page (no script, no external
asset: it opens from disk in any browser).

Usage::

    python -m torch_plugin.report DIR [-o OUT.html]     # default OUT: DIR/report.html

or ``torch_plugin.report.write(DIR)``. The page has a summary on top (frames, graphs, graph
breaks, recompiles, compile time, time per stage), a bar plot of the compile time of each
frame, then each frame: its recompile (with the guard that failed), its graphs (FX code),
graph breaks with the user's source lines around them, the transformed code and its resume
functions (Python source decompiled by depyf, or ``dis``), guards, the "plugin" backend's
library-pattern rules that fired or were rejected (with the constraint that failed) and its
kernels (executor steps and the IR with each generated kernel's source).

Key names: :func:`load`, :func:`render`, :func:`write`, :func:`main`.
"""

from __future__ import annotations

import argparse
import collections
import glob
import html
import json
import linecache
import os
import sys
from typing import Any

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;border-bottom:1px solid #ccc;margin-top:2em}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;
text-align:left}pre{background:#f6f6f6;padding:.5em;overflow-x:auto;font-size:.85em}
.break{background:#fff4e5;border-left:4px solid #f0a020;padding:.3em .8em;margin:.5em 0}
.recompile{background:#fdecec;border-left:4px solid #d04040;padding:.3em .8em;margin:.5em 0}
.hl{background:#ffe08a}.muted{color:#777}
"""


def load(trace_dir: str) -> list[dict[str, Any]]:
    """The events of every ``trace-*.jsonl`` file in ``trace_dir``, by process then order;
    lines that are not JSON (a file cut by a crash) are skipped."""
    events: list[dict[str, Any]] = []
    for path in sorted(glob.glob(os.path.join(trace_dir, "trace-*.jsonl"))):
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    return events


def _e(value: Any) -> str:
    return html.escape(str(value))


def _snippet(filename: str | None, lineno: int | None, context: int = 2) -> str:
    """The user's source around ``lineno``, the line itself highlighted."""
    if not filename or not lineno:
        return ""
    rows = []
    for n in range(max(1, lineno - context), lineno + context + 1):
        text = linecache.getline(filename, n)
        if not text:
            continue
        cls = ' class="hl"' if n == lineno else ""
        rows.append(f"<span{cls}>{n:5d}  {_e(text.rstrip())}</span>")
    return "<pre>" + "\n".join(rows) + "</pre>" if rows else ""


def _frames(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per frame conversion (keyed by process and frame id), in order."""
    frames: dict[tuple, dict[str, Any]] = {}
    pending_recompile: dict[tuple, dict[str, Any]] = {}
    for ev in events:
        kind, pid = ev.get("event"), ev.get("pid")
        if kind == "recompile":
            pending_recompile[(pid, ev.get("name"), ev.get("file"), ev.get("line"))] = ev
            continue
        fid = ev.get("frame")
        if fid is None:
            continue
        key = (pid, fid)
        fr = frames.setdefault(
            key,
            {
                "stages": [],
                "graphs": [],
                "breaks": [],
                "guards": [],
                "kernels": [],
                "code": [],
                "patterns": [],
                "autotune": [],
            },
        )
        if kind == "frame":
            fr.update(name=ev["name"], file=ev["file"], line=ev["line"], pid=pid, id=fid)
            fr["recompile"] = pending_recompile.pop((pid, ev["name"], ev["file"], ev["line"]), None)
        elif kind == "frame_done":
            fr.update(seconds=ev.get("seconds", 0.0), result=ev.get("result"))
        elif kind == "stage":
            fr["stages"].append(ev)
        elif kind == "graph":
            fr["graphs"].append(ev)
        elif kind in ("graph_break", "not_captured"):
            fr["breaks"].append(ev)
        elif kind == "guards":
            fr["guards"].extend(ev.get("guards", []))
        elif kind == "kernels":
            fr["kernels"].append(ev)
        elif kind == "bytecode":
            fr["code"].append(ev)
        elif kind == "patterns":
            fr["patterns"].extend(ev.get("decisions", []))
        elif kind == "autotune":
            fr["autotune"].append(ev)
    return [f for f in frames.values() if "name" in f]


def _plot(frames: list[dict[str, Any]]) -> str:
    """An inline SVG bar plot of each frame's compile time."""
    if not frames:
        return ""
    top = max(f.get("seconds", 0.0) for f in frames) or 1.0
    bar_h, width, label_w = 18, 500, 320
    rows = []
    for i, f in enumerate(frames):
        s = f.get("seconds", 0.0)
        y = i * bar_h
        w = max(1, int(width * s / top))
        label = f"{f['id']}. {f['name']}"[:48]
        rows.append(
            f'<text x="0" y="{y + 13}" font-size="12">{_e(label)}</text>'
            f'<rect x="{label_w}" y="{y + 3}" width="{w}" height="{bar_h - 6}" fill="#4a7ebb"/>'
            f'<text x="{label_w + w + 4}" y="{y + 13}" font-size="12">{s:.3f} s</text>'
        )
    h = bar_h * len(frames)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + width + 80}" height="{h}" '
        f'role="img" aria-label="compile time per frame">{"".join(rows)}</svg>'
    )


def render(events: list[dict[str, Any]], title: str = "torch_plugin compile report") -> str:
    """The HTML page of ``events`` (as :func:`load` returns them)."""
    frames = _frames(events)
    graphs = sum(len(f["graphs"]) for f in frames)
    breaks = [b for f in frames for b in f["breaks"] if b["event"] == "graph_break"]
    not_captured = [b for f in frames for b in f["breaks"] if b["event"] == "not_captured"]
    recompiles = [e for e in events if e.get("event") == "recompile"]
    total = sum(f.get("seconds", 0.0) for f in frames)
    per_stage: collections.OrderedDict[str, list[float]] = collections.OrderedDict()
    for st in (e for e in events if e.get("event") == "stage"):
        per_stage.setdefault(st["name"], []).append(st["seconds"])
    outside = sum(
        e["seconds"]
        for e in events
        if e.get("event") == "stage" and e.get("frame") is None and e.get("depth", 0) == 0
    )
    cache = collections.Counter(e.get("hit") for e in events if e.get("event") == "graph_cache")
    outcomes = collections.Counter(d.get("outcome") for f in frames for d in f["patterns"])
    out = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_e(title)}</title>",
        f"<style>{_CSS}</style></head><body><h1>{_e(title)}</h1>",
        "<table>",
        f"<tr><th>frames converted</th><td>{len(frames)}</td></tr>",
        f"<tr><th>graphs</th><td>{graphs}</td></tr>",
        f"<tr><th>graph breaks</th><td>{len(breaks)}</td></tr>",
        f"<tr><th>frames not captured</th><td>{len(not_captured)}</td></tr>",
        f"<tr><th>recompiles</th><td>{len(recompiles)}</td></tr>",
        (
            f"<tr><th>compile time</th><td>{total:.3f} s in frames, {outside:.3f} s outside "
            "(backward graphs, new sizes)</td></tr>"
        ),
        f"<tr><th>graph cache</th><td>{cache[True]} hits, {cache[False]} misses</td></tr>",
        (
            f"<tr><th>library patterns</th><td>{outcomes['fired']} fired, "
            f"{outcomes['rejected']} rejected, {outcomes['off']} off in this build</td></tr>"
        ),
        "</table>",
        "<h2>Time per stage</h2><table><tr><th>stage</th><th>count</th><th>total (s)</th></tr>",
    ]
    for name, times in per_stage.items():
        out.append(f"<tr><td>{_e(name)}</td><td>{len(times)}</td><td>{sum(times):.3f}</td></tr>")
    out.append("</table><p class='muted'>The plugin's stages (graph_cache, aot_autograd, "
               "lower, passes, executor) run inside backend.</p>")  # fmt: skip
    out.append("<h2>Compile time per frame</h2>" + _plot(frames))
    for f in frames:
        out.append(_frame_html(f))
    out.append("</body></html>")
    return "\n".join(out)


def _frame_html(f: dict[str, Any]) -> str:
    head = (
        f"<h2 id='frame-{f['pid']}-{f['id']}'>Frame {f['id']}: {_e(f['name'])} "
        f"<span class='muted'>({_e(f['file'])}:{f['line']}) — {_e(f.get('result', '?'))}, "
        f"{f.get('seconds', 0.0):.3f} s</span></h2>"
    )
    parts = [head]
    rc = f.get("recompile")
    if rc:
        parts.append(
            f"<div class='recompile'><b>Recompile</b> ({rc.get('entries')} compiled entries "
            f"already): guard failed: <code>{_e(rc.get('failed_guard'))}</code></div>"
        )
    for b in f["breaks"]:
        what = "Graph break" if b["event"] == "graph_break" else "Not captured"
        where = (
            f'File "{_e(b.get("file"))}", line {_e(b.get("line"))}, in {_e(b.get("function"))}'
            if b.get("file")
            else ""
        )
        parts.append(
            f"<div class='break'><b>{what}</b>: {_e(b.get('reason'))} "
            f"[{_e(b.get('gb_id'))} {_e(b.get('gb_name'))}]<br>{where}"
            f"<pre>{_e(b.get('source') or '')}</pre>"
            f"{_snippet(b.get('file'), b.get('line'))}</div>"
        )
    if f["stages"]:
        cells = "".join(
            f"<tr><td>{'&nbsp;' * 4 * st.get('depth', 0)}{_e(st['name'])}</td>"
            f"<td>{st['seconds']:.4f}</td></tr>"
            for st in f["stages"]
        )
        parts.append(f"<table><tr><th>stage</th><th>seconds</th></tr>{cells}</table>")
    for i, g in enumerate(f["graphs"], 1):
        part = " (part before a graph break)" if g.get("part") else ""
        parts.append(
            f"<h3>Graph {i}{part}: {g.get('nodes')} nodes, ops: {_e(', '.join(g.get('ops', [])))}"
            f"</h3><pre>{_e(g.get('code', ''))}</pre>"
        )
    for ev in f["code"]:
        parts.append(_code_html("Transformed code", ev.get("transformed") or {}))
        for r in ev.get("resume", []):
            parts.append(_code_html("Resume function", r))
    if f["guards"]:
        parts.append(f"<h3>Guards ({len(f['guards'])})</h3><pre>")
        parts.append(_e("\n".join(f["guards"])) + "</pre>")
    if f["patterns"]:
        parts.append(_patterns_html(f["patterns"]))
    for a in f["autotune"]:
        parts.append(
            f"<p><b>max-autotune</b>: library plan {a.get('library_ms', 0.0):.3f} ms, "
            f"generated kernels {a.get('kernels_ms', 0.0):.3f} ms: running the "
            f"{_e(a.get('chosen'))}</p>"
        )
    for k in f["kernels"]:
        steps = k.get("steps", [])
        kinds = collections.Counter(s[0] for s in steps)
        summary = ", ".join(f"{n} {kind}" for kind, n in kinds.items())
        parts.append(
            f"<h3>Kernels: {len(steps)} executor steps ({_e(summary)})</h3>"
            f"<pre>{_e(k.get('describe', ''))}</pre>"
            f"<details><summary>IR after the passes</summary><pre>{_e(k.get('ir', ''))}"
            "</pre></details>"
        )
        for kernel in k.get("kernels", []):
            parts.append(
                f"<details><summary>kernel <code>{_e(kernel['name'])}</code> "
                f"({_e(kernel['target'])}): {_e(kernel['group'])}</summary>"
                f"<pre>{_e(_kernel_proper(kernel['source']))}</pre></details>"
            )
    return "\n".join(parts)


def _patterns_html(decisions: list[dict[str, Any]]) -> str:
    """The library-pattern rules' decisions of one frame: a count per outcome, then one row
    per decision (rule, its row in csrc, node, device, outcome and why)."""
    counts = collections.Counter(d.get("outcome") for d in decisions)
    summary = ", ".join(f"{n} {outcome}" for outcome, n in counts.items())
    rows = "".join(
        f"<tr class='{_e(d.get('outcome'))}'><td>{_e(d.get('rule'))}</td>"
        f"<td>{_e(d.get('outcome'))}</td><td><code>{_e(d.get('node'))}</code></td>"
        f"<td>{_e(d.get('device'))}</td><td>{_e(d.get('reason'))}</td>"
        f"<td class='muted'>{_e(d.get('source'))}</td></tr>"
        for d in decisions
    )
    return (
        f"<h3>Library patterns: {_e(summary)}</h3><table><tr><th>rule</th><th>outcome</th>"
        f"<th>node</th><th>device</th><th>why</th><th>rule row</th></tr>{rows}</table>"
    )


def _code_html(what: str, r: dict[str, Any]) -> str:
    """A transformed code or resume function of a ``bytecode`` event, folded."""
    how = (
        "Python, decompiled by depyf"
        if r.get("tool") == "depyf"
        else f"dis listing: {r.get('note') or 'no source'}"
    )
    return (
        f"<details class='code'><summary>{what} <code>{_e(r.get('name'))}</code> "
        f"<span class='muted'>({_e(how)})</span></summary><pre>{_e(r.get('text', ''))}</pre>"
        "</details>"
    )


# Where the shared helpers of a generated CPU kernel end (csrc/compiler/codegen/cpp).
_PREAMBLE_END = "// ---- end of typed helpers ----"


def _kernel_proper(source: str) -> str:
    """A generated kernel's source without the helpers every kernel shares (its first
    comment line kept); the whole source when there is no such marker."""
    head, sep, body = source.partition(_PREAMBLE_END)
    if not sep:
        return source
    first = head.split("\n", 1)[0]
    return f"{first}\n// (shared helpers left out)\n{body.lstrip()}"


def write(trace_dir: str, out: str | None = None) -> str:
    """Write the report of ``trace_dir`` to ``out`` (default ``trace_dir/report.html``);
    returns its path. Raises FileNotFoundError when ``trace_dir`` holds no trace file."""
    if not glob.glob(os.path.join(trace_dir, "trace-*.jsonl")):
        raise FileNotFoundError(f"no trace-*.jsonl file in {trace_dir!r}")
    out = out or os.path.join(trace_dir, "report.html")
    page = render(load(trace_dir), f"torch_plugin compile report: {trace_dir}")
    with open(out, "w", encoding="utf-8") as f:
        f.write(page)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m torch_plugin.report DIR [-o OUT]``."""
    parser = argparse.ArgumentParser(
        prog="python -m torch_plugin.report",
        description="Turn a TORCH_PLUGIN_TRACE folder into one self-contained HTML page.",
    )
    parser.add_argument("trace_dir")
    parser.add_argument("-o", "--output", default=None)
    args = parser.parse_args(argv)
    try:
        path = write(args.trace_dir, args.output)
    except FileNotFoundError as e:
        print(f"torch_plugin.report: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
