"""``minutiae regress``: change points per signature and rollouts tested as causes. No logic here."""

from __future__ import annotations

from pathlib import Path

import click
from rich.table import Table

from minutiae.cli.regress_common import emit_json, history_options, load, make_console, pct, when


def _record(paths: list[Path], db: Path | None, run_id: str | None, signature: str | None,
            as_json: bool) -> None:
    """A run's training log into the run history (the analysis is ``joblevel``'s)."""
    from minutiae.analyses.stragglers.joblevel import analyse_job, log_record, recorded_text
    from minutiae.analyses.stragglers.read import read_trainlog
    from minutiae.errors import ConfigError, InputError
    from minutiae.history.store import RunStore, record_run

    if db is None or not run_id or not signature:
        raise ConfigError("--record-log needs --db, --run-id and --signature")
    log = read_trainlog(paths)
    report = analyse_job(log)
    try:
        start = min(p.stat().st_mtime for p in paths)
    except OSError as exc:
        raise InputError(f"cannot read ({exc.strerror or exc})", str(paths[0])) from None
    if not as_json:  # the report first: a log of slowest-rank reports only has nothing to record
        for line in report.lines():
            click.echo(line, err=True)
    rec = log_record(log, report, run_id, signature, start)
    record_run(RunStore(db), rec)
    if not as_json:
        held = recorded_text(rec)
        click.echo(f"recorded {run_id} ({signature}) into {db}" + (f": {held}" if held else ""),
                   err=True)


@click.command("regress")
@history_options
@click.option("--job", default=None, help="only this signature")
@click.option("--rollouts", "rollouts_path", type=click.Path(path_type=Path), default=None,
              help="rollouts.csv (time,node,attr,old,new); default: rollouts.csv beside --runs if "
                   "present, else rollouts inferred from the runs' version columns")
@click.option("--top", default=40, show_default=True, help="change points shown in the table (JSON: all)")
@click.option("--record-log", "record_logs", multiple=True, type=click.Path(path_type=Path),
              help="a training log of one run (repeat for its per-rank/rotated files): its "
                   "job-level report is printed and the run recorded into --db before the search")
@click.option("--run-id", default=None, help="with --record-log: the run's id")
@click.option("--signature", default=None, help="with --record-log: the run's signature")
@click.option("--no-node-adjust", "no_node_adjust", is_flag=True,
              help="search the measured step times as they are (default: first take out of each run "
                   "the slowdown its slowest node explains, fitted across the fleet)")
def command(runs: Path | None, db: Path | None, since: str | None, as_json: bool, job: str | None,
            rollouts_path: Path | None, prom: str | None, top: int, no_node_adjust: bool,
            record_logs: tuple[Path, ...] = (), run_id: str | None = None,
            signature: str | None = None) -> None:
    """Find lasting changes in each signature's step time, and which rollout caused fleet changes."""
    if record_logs:
        _record(list(record_logs), db, run_id, signature, as_json)
    from minutiae.analyses.regress.detect import Stage, find_change_points, series_noise
    from minutiae.analyses.regress.nodes import NodeAdjustment, node_penalties
    from minutiae.analyses.whatchanged.rollouts import attribute_rollouts
    from minutiae.history.read import read_rollouts
    from minutiae.history.rollouts import group_rollouts

    history = load(runs, db, since, job, prom)
    if rollouts_path is None and runs is not None and (runs.parent / "rollouts.csv").is_file():
        rollouts_path = runs.parent / "rollouts.csv"
    issues = list(history.issues)
    rollouts = None
    if rollouts_path is not None:
        changes, more = read_rollouts(rollouts_path)
        issues += more
        rollouts = group_rollouts(changes)
    adj = NodeAdjustment({}, {}, float("nan"), float("nan")) if no_node_adjust else node_penalties(history.runs)
    cps = find_change_points(history.runs, offsets=adj.penalty)
    verdicts = attribute_rollouts(history.runs, rollouts)
    noise = series_noise(history.runs)
    if as_json:
        emit_json({
            "source": history.origin, "runs": len(history.runs),
            "rollouts_from": str(rollouts_path) if rollouts_path else "runs attributes",
            "change_points": [c.to_json() for c in cps],
            "series": [{"signature": s, "runs": n, "noise": None if v != v else round(v, 6)}
                       for s, (n, v) in sorted(noise.items())],
            "rollouts": [v.to_json() for v in verdicts],
            "node_adjustment": None if no_node_adjust else adj.to_json(),
            "issues": [i.to_json() for i in issues],
        })
        return
    console = make_console()
    t = Table(title=f"Change points ({len(history.runs)} runs, {len(noise)} signatures, {history.origin})")
    for col in ("signature", "first run after", "when (UTC)", "change", "confidence", "runs before/after",
                "step time before → after", "noise"):
        t.add_column(col)
    for c in cps[:top]:
        style = "red" if c.change > 0 else "green"
        young = " (young)" if c.stage is Stage.YOUNG else ""
        t.add_row(c.signature, c.run_id, when(c.time), f"[{style}]{pct(c.change)}[/]",
                  f"{c.confidence:.4f}{young}", f"{c.n_before}/{c.n_after}",
                  f"{c.before_s:.4g} → {c.after_s:.4g}", pct(c.sigma, signed=False))
    console.print(t if cps else "No lasting change in any signature's step time.")
    if adj.slow_nodes:
        console.print(f"Slow nodes taken out of {len(adj.penalty)} runs before the search: " + ", ".join(
            f"{n} {pct(e)} ({k} runs)" for n, (k, e) in sorted(adj.slow_nodes.items(), key=lambda kv: -kv[1][1])[:8]),
            highlight=False)
    if len(cps) > top:
        console.print(f"… {len(cps) - top} older change points (--top, --json)")
    rt = Table(title=f"Rollouts tested as causes (from {rollouts_path or 'the runs version columns'})")
    for col in ("rollout", "started", "exposed runs", "overlap", "effect", "p", "cause?", "GPU-hours/week",
                "hint: signatures that changed with it"):
        rt.add_column(col)
    for v in verdicts:
        e = v.effect
        rt.add_row(v.name, when(v.start), str(v.runs_exposed), str(v.overlap), pct(e.change) if e else "untestable",
                   f"{e.p_value:.2g}" if e else "–", "[bold red]yes[/]" if v.cause else "no",
                   "–" if v.gpu_hours_per_week is None else f"{v.gpu_hours_per_week:+,.0f}",
                   ", ".join(f"{sg} {pct(se.change)}" for sg, se in v.by_signature[:3])
                   + (f" (+{len(v.by_signature) - 3})" if len(v.by_signature) > 3 else ""))
    if verdicts:
        console.print(rt)
    for v in verdicts:
        if v.groups is not None:
            console.print(f"{'cause' if v.cause else 'hint'}: {v.summary()}", highlight=False)
    for issue in issues:
        console.print(f"[yellow]note[/]: {issue.message}", highlight=False)
