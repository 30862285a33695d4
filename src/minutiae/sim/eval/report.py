"""The demo's self-contained HTML report: inline SVG plots generated here, no external assets.

Plots (each an ``<svg>`` with a stable id): ``heatmap`` (node health over time: the worst
injected fault active on each node per hour, with minutiae's alarms and drains marked),
``timeline`` (every fault as a bar, its first detection and drain as marks), ``stragglers``
(step-time traces of the slowest ranks minutiae flagged against their peers' median); tables
``scorecard``, ``drains`` (what would have been drained and why) and ``detectors``. The full
``minutiae eval --json`` object is embedded as ``<script type="application/json" id="eval-json">``.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from minutiae.scoring.truth import TruthEvent
from minutiae.sim.eval.evaluate import Evaluation

SEV_COLOR = {0: "#e8f5e9", 1: "#ffcc80", 2: "#e53935", 3: "#b0bec5"}
CLASS_COLORS = ("#1e88e5", "#d81b60", "#43a047", "#fb8c00", "#8e24aa", "#00897b", "#f4511e",
                "#3949ab", "#6d4c41", "#c0ca33", "#00acc1", "#5e35b1")


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _ts(t: float) -> str:
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%d %H:%M")


def heatmap(ev: Evaluation, bucket_s: float = 3600.0) -> str:
    ds = ev.dataset
    nodes = ds.nodes
    nb = max(1, int(np.ceil((ds.end - ds.start) / bucket_s)))
    grid = np.zeros((len(nodes), nb), dtype=np.int8)
    row = {n: i for i, n in enumerate(nodes)}
    for t in ds.truth:
        if not t.harmful or t.node is None or t.node not in row or t.cls == "lemon_node":
            continue
        lvl = 2 if t.severity in ("critical", "error") else 1
        a = int((t.start - ds.start) // bucket_s)
        b = int(np.ceil((t.end - ds.start) / bucket_s))
        r = grid[row[t.node], max(0, a):max(a + 1, min(nb, b))]
        np.maximum(r, lvl, out=r)
    for _t, node, _w in ds.maintenance:
        if node in row:
            a = int((_t - ds.start) // bucket_s)
            if 0 <= a < nb and grid[row[node], a] == 0:
                grid[row[node], a] = 3
    cw, rh, left, top = 10, max(2, min(8, 900 // max(1, len(nodes)))), 60, 20
    w, h = left + nb * cw + 10, top + len(nodes) * rh + 30
    out = [f'<svg id="heatmap" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'viewBox="0 0 {w} {h}" role="img"><title>node health over time</title>']
    for i, node in enumerate(nodes):
        j = 0
        while j < nb:
            k = j
            while k < nb and grid[i, k] == grid[i, j]:
                k += 1
            out.append(f'<rect x="{left + j * cw}" y="{top + i * rh}" width="{(k - j) * cw}" '
                       f'height="{rh}" fill="{SEV_COLOR[int(grid[i, j])]}"><title>{_e(node)}</title></rect>')
            j = k
        if len(nodes) <= 64 or i % max(1, len(nodes) // 32) == 0:
            out.append(f'<text x="{left - 4}" y="{top + i * rh + rh}" font-size="{min(8, rh + 2)}" '
                       f'text-anchor="end">{_e(node)}</text>')
    from minutiae.scoring.score import merge_alarms

    alarms = [d for d in merge_alarms([d for r in ev.detectors for d in r.detections], ev.params)
              if d.node in row]
    for d in alarms:
        x = left + (d.time - ds.start) / bucket_s * cw
        y = top + row[str(d.node)] * rh
        color = "#000" if d.drain else "#1565c0"
        out.append(f'<rect class="{"drain" if d.drain else "alarm"}" x="{x:.1f}" y="{y}" width="1.5" '
                   f'height="{rh}" fill="{color}"/>')
    for day in range(int((ds.end - ds.start) // 86400) + 1):
        x = left + day * 86400 / bucket_s * cw
        out.append(f'<text x="{x:.0f}" y="{h - 8}" font-size="10">day {day}</text>')
    out.append("</svg>")
    return "".join(out)


def timeline(ev: Evaluation) -> str:
    ds = ev.dataset
    faults = sorted((t for t in ds.truth if t.harmful and t.node is not None and t.cls != "lemon_node"),
                    key=lambda t: t.start)
    classes = sorted({t.cls for t in faults})
    color = {c: CLASS_COLORS[i % len(CLASS_COLORS)] for i, c in enumerate(classes)}
    span = max(1.0, ds.end - ds.start)
    left, width, rh, top = 180, 900, 9, 20
    h = top + len(faults) * rh + 40 + 14 * ((len(classes) + 3) // 4)
    first = _first_detections(ev)
    out = [f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{left + width + 20}" height="{h}" '
           f'role="img"><title>faults vs detections</title>']
    for i, t in enumerate(faults):
        y = top + i * rh
        x0 = left + (t.start - ds.start) / span * width
        x1 = left + (min(t.end, ds.end) - ds.start) / span * width
        out.append(f'<rect class="fault" x="{x0:.1f}" y="{y}" width="{max(1.5, x1 - x0):.1f}" height="{rh - 2}" '
                   f'fill="{color[t.cls]}" opacity="0.75"><title>{_e(t.id)} {_e(t.cls)} on {_e(t.node)} '
                   f'from {_ts(t.start)}</title></rect>')
        out.append(f'<text x="{left - 4}" y="{y + rh - 2}" font-size="8" text-anchor="end">'
                   f'{_e(t.node)} {_e(t.cls)}</text>')
        det = first.get(t.id)
        if det is not None:
            xd = left + (det[0] - ds.start) / span * width
            shape = "drain" if det[1] else "detect"
            out.append(f'<path class="{shape}" d="M{xd:.1f},{y - 1} l3,{rh / 2:.1f} l-3,{rh / 2:.1f} l-3,-{rh / 2:.1f} z" '
                       f'fill="{"#000" if det[1] else "#fff"}" stroke="#000" stroke-width="0.8">'
                       f'<title>first detection {_ts(det[0])}{" (drain)" if det[1] else ""}</title></path>')
    y = top + len(faults) * rh + 20
    for i, c in enumerate(classes):
        x = left + (i % 4) * 220
        yy = y + (i // 4) * 14
        out.append(f'<rect x="{x}" y="{yy - 8}" width="10" height="8" fill="{color[c]}"/>'
                   f'<text x="{x + 14}" y="{yy}" font-size="10">{_e(c)}</text>')
    out.append("</svg>")
    return "".join(out)


def _first_detections(ev: Evaluation) -> dict[str, tuple[float, bool]]:
    from minutiae.scoring.score import _Index, merge_alarms

    idx = _Index(ev.dataset.truth)
    out: dict[str, tuple[float, bool]] = {}
    for a in merge_alarms([d for r in ev.detectors for d in r.detections], ev.params):
        t = idx.match(a, ev.params)
        if t is None or not t.harmful:
            continue
        prev = out.get(t.id)
        if prev is None or a.time < prev[0]:
            out[t.id] = (a.time, a.drain or (prev[1] if prev else False))
        elif a.drain and not prev[1]:
            out[t.id] = (prev[0], True)
    return out


def straggler_traces(ev: Evaluation, max_jobs: int = 3) -> str:
    """Per-step seconds of the flagged rank vs the median of its job, for up to ``max_jobs``."""
    from minutiae.sim.dataset import read_timings

    ds = ev.dataset
    flagged: dict[str, float] = {}
    for r in ev.detectors:
        if r.name in ("stragglers", "slownodes"):
            for d in r.detections:
                if d.node is not None:
                    flagged.setdefault(d.node, d.time)
    slow_truth = {t.node for t in ds.truth if t.cls == "persistent_straggler" and t.node}
    picks = []
    for j in sorted(ds.jobs, key=lambda j: -(j.end - j.start)):
        hit = [n for n in j.nodes if n in flagged or n in slow_truth]
        if hit and ds.timings_path(j.job_id).is_file():
            picks.append((j, hit[0]))
        if len(picks) >= max_jobs:
            break
    pw, ph, pad = 420, 180, 36
    out = [f'<svg id="stragglers" xmlns="http://www.w3.org/2000/svg" width="{max(1, len(picks)) * (pw + 20)}" '
           f'height="{ph + 50}" role="img"><title>straggler step-time traces</title>']
    if not picks:
        out.append('<text x="10" y="20" font-size="12">no straggler found in this fleet</text>')
    for k, (job, node) in enumerate(picks):
        df = read_timings(ds.timings_path(job.job_id))
        if "section" in df.columns:  # step totals only (section rows split the same steps)
            df = df.filter(__import__("polars").col("section").is_null())
        steps = np.unique(df["step"].to_numpy())
        med = df.group_by("step").agg(__import__("polars").col("seconds").median()).sort("step")
        sl = df.filter(__import__("polars").col("node") == node).group_by("step").agg(
            __import__("polars").col("seconds").max()).sort("step")
        ys = np.concatenate([med["seconds"].to_numpy(), sl["seconds"].to_numpy()])
        lo, hi = float(np.min(ys)) * 0.98, float(np.max(ys)) * 1.02
        x0 = k * (pw + 20)
        s_lo, s_hi = float(steps[0]), float(max(steps[-1], steps[0] + 1))

        def pts(st: Sequence[float], v: Sequence[float], x0: float = x0, s_lo: float = s_lo,
                s_hi: float = s_hi, lo: float = lo, hi: float = hi) -> str:
            return " ".join(f"{x0 + pad + (a - s_lo) / (s_hi - s_lo) * (pw - pad - 8):.1f},"
                            f"{20 + (1 - (b - lo) / max(1e-9, hi - lo)) * (ph - 20):.1f}"
                            for a, b in zip(st, v, strict=True))

        out.append(f'<text x="{x0 + pad}" y="12" font-size="11">job {_e(job.job_id)} ({_e(job.signature)}, '
                   f'{len(job.nodes)} nodes): {_e(node)} vs job median</text>')
        out.append(f'<polyline class="median" fill="none" stroke="#757575" stroke-width="1.2" '
                   f'points="{pts(med["step"].to_list(), med["seconds"].to_list())}"/>')
        out.append(f'<polyline class="slow" fill="none" stroke="#e53935" stroke-width="1.2" '
                   f'points="{pts(sl["step"].to_list(), sl["seconds"].to_list())}"/>')
        out.append(f'<text x="{x0 + 2}" y="{ph}" font-size="9">{lo:.2f}s</text>'
                   f'<text x="{x0 + 2}" y="24" font-size="9">{hi:.2f}s</text>'
                   f'<text x="{x0 + pad}" y="{ph + 16}" font-size="9">step {int(s_lo)}</text>'
                   f'<text x="{x0 + pw - 60}" y="{ph + 16}" font-size="9">step {int(s_hi)}</text>')
        if node in flagged:
            t = flagged[node]
            st = df.filter(__import__("polars").col("time") <= t)["step"]
            if len(st):
                xs = x0 + pad + (float(st.max()) - s_lo) / (s_hi - s_lo) * (pw - pad - 8)
                out.append(f'<line class="detected" x1="{xs:.1f}" x2="{xs:.1f}" y1="20" y2="{ph}" '
                           f'stroke="#000" stroke-dasharray="3,2"><title>flagged</title></line>')
    out.append("</svg>")
    return "".join(out)


def _table(tid: str, head: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    h = "".join(f"<th>{_e(c)}</th>" for c in head)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table id="{tid}"><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>'


def _num(v: float | None, nd: int = 2) -> str:
    return "–" if v is None else f"{v:.{nd}f}"


def render_html(ev: Evaluation, title: str = "minutiae demo report") -> str:
    ds = ev.dataset
    o = ev.overall
    data = ev.to_json()
    score_rows = [(c.cls, c.faults, c.detected, _num(c.recall), _num(c.precision), _num(c.latency_median_s, 0),
                   _num(c.latency_p95_s, 0), _num(c.latency_median_steps, 0), c.alarms_false)
                  for c in o.classes]
    drains = [(d["node"], _ts(d["time"]), d["detector"], d["kind"], d["reason"], d["truth"] or "–", d["verdict"])
              for d in data["drains"]]
    dets = [(r.name, r.reason if r.available else f"not available: {r.reason}", r.inputs, len(r.detections),
             f"{r.seconds:.1f}") for r in ev.detectors]
    summary = [
        ("fleet", f"{len(ds.fleet)} nodes x {ds.gpus} GPUs, {(ds.end - ds.start) / 86400:g} days, seed {ds.meta.get('seed')}"),
        ("faults injected", str(data["dataset"]["faults"])),
        ("alarms", str(o.alarms)),
        ("false alarms per 1,000 node-days", f"{o.false_alarms_per_1000_node_days:.1f}"),
        ("drains right / wrong / missed / repeat", f"{o.drains.right} / {o.drains.wrong} / {o.drains.missed} / {o.drains.repeat}"),
        ("GPU-hours lost without / with minutiae", f"{o.gpu_hours.without:.1f} / {o.gpu_hours.with_minutiae:.1f}"),
    ]
    summ = "".join(f'<tr><th>{_e(k)}</th><td id="summary-{i}">{_e(v)}</td></tr>' for i, (k, v) in enumerate(summary))
    blob = json.dumps(data, sort_keys=True).replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>
<style>
body{{font-family:system-ui,sans-serif;margin:24px;color:#222}} h2{{margin-top:32px}}
table{{border-collapse:collapse;font-size:13px}} td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left}}
th{{background:#f5f5f5}} svg{{display:block;margin:8px 0;background:#fff}} .legend span{{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:middle}}
</style></head><body>
<h1>{_e(title)}</h1>
<table id="summary">{summ}</table>
<h2>Fleet health over time</h2>
<p class="legend">one row per node, one column per hour:<span style="background:{SEV_COLOR[0]}"></span>healthy
<span style="background:{SEV_COLOR[1]}"></span>degrading fault active<span style="background:{SEV_COLOR[2]}"></span>hard fault active
<span style="background:{SEV_COLOR[3]}"></span>planned maintenance; blue ticks: minutiae alarms, black ticks: drains</p>
{heatmap(ev)}
<h2>Faults vs detections</h2>
<p>each bar is one injected fault (truth.jsonl); the diamond marks minutiae's first detection (filled: drained)</p>
{timeline(ev)}
<h2>Straggler step-time traces</h2>
<p>red: the flagged node's slowest rank per logged step; grey: the job's median rank; dashed: when minutiae flagged it</p>
{straggler_traces(ev)}
<h2>Scorecard</h2>
{_table("scorecard", ("fault class", "faults", "found", "recall", "precision", "latency p50 s", "p95 s", "p50 steps", "false alarms"), score_rows)}
<h2>What would have been drained, and why</h2>
{_table("drains", ("node", "time (UTC)", "detector", "kind", "reason", "truth", "verdict"), drains)}
<h2>Detectors</h2>
{_table("detectors", ("detector", "status", "inputs", "detections", "seconds"), dets)}
<script type="application/json" id="eval-json">{blob}</script>
</body></html>
"""


def lemon_nodes(truth: Sequence[TruthEvent]) -> list[str]:
    return sorted(t.node for t in truth if t.cls == "lemon_node" and t.node)
