"""Writes a simulated fleet dataset (layout: docs/dataset.md), streaming node by node and job
by job so that memory stays flat however long the simulation runs."""

from __future__ import annotations

import csv
import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from minutiae import __version__
from minutiae.errors import InputError
from minutiae.scoring.truth import TruthEvent, write_truth
from minutiae.sim.dataset import JOB_COLUMNS, JobRow
from minutiae.sim.emit import kernlog
from minutiae.sim.emit.ib import simulate_ib, write_ib_csv, write_sysfs
from minutiae.sim.emit.telemetry import SCHEMA as TELEMETRY_SCHEMA
from minutiae.sim.emit.telemetry import node_telemetry
from minutiae.sim.emit.timings import job_timings
from minutiae.sim.world.fleet import SOFTWARE
from minutiae.sim.world.plan import Job, Plan
from minutiae.sim.world.shape import jobs_config

#: progress callback: (phase, done, total)
Progress = Callable[[str, int, int], None]
NODE_CHUNK = 32
#: dictionary-encode only the columns with few distinct values: the measured floats are nearly
#: all distinct, and trying a dictionary on them costs half the write and most of the read time
#: (zstd, a 256-node week, 4.1 M rows: write 1.4 -> 0.9 s, read 1.8 -> 0.6 s CPU)
TELEMETRY_DICT = ["node", "gpu", "clock_event_reasons", "pcie_width"]
#: from this many node-days on, the jobs' files are written by a second process (starting it
#: costs about half a second: not worth it for the tests' tiny fleets)
PARALLEL_NODE_DAYS = 100.0


def _noop(phase: str, done: int, total: int) -> None:
    return None


def _rng(seed: int, *stream: int) -> np.random.Generator:
    return np.random.default_rng([seed, *stream])


def prepare_out(out: Path, force: bool = True) -> None:
    """Create ``out``; an existing dataset there is replaced, anything else is refused."""
    if out.exists():
        if not out.is_dir():
            raise InputError("exists and is not a directory", str(out))
        if any(out.iterdir()):
            if not (out / "meta.json").is_file() or not force:
                raise InputError("directory is not empty and holds no minutiae dataset; refusing to "
                                 "overwrite it", str(out))
            shutil.rmtree(out)
    try:
        (out / "nodes").mkdir(parents=True, exist_ok=True)
        (out / "timings").mkdir(exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create dataset directory: {exc}", str(out)) from None


def _local(path: Path) -> str:
    """``path`` absolute: pyarrow reads a relative ``http:/…`` (``--out http://x``) as a URI
    and refused it with ArrowInvalid (a traceback)."""
    return str(path.absolute())


def write_dataset(plan: Plan, out: Path, progress: Progress = _noop,
                  workers: int | None = None) -> dict[str, int]:
    """Write every file of the dataset; returns counts (rows, lines, files) for the summary.
    ``workers`` 2: the jobs' timing files are written by a second process while this one writes
    the nodes' files (same bytes as ``workers=1``); None: 2 from ``PARALLEL_NODE_DAYS`` on."""
    prepare_out(out)
    prof = plan.profile
    g = plan.fleet.gpus_per_node
    counts = {"kern_lines": 0, "ib_rows": 0, "telemetry_rows": 0, "timing_rows": 0, "jobs": len(plan.jobs),
              "truth": len(plan.truth)}
    meta = {
        "nodes": len(plan.fleet.nodes), "gpus_per_node": g, "start": plan.start, "end": plan.end,
        "days": (plan.end - plan.start) / 86400.0, "seed": plan.seed, "profile": prof.name,
        "profile_path": prof.path, "version": __version__,
        "sampling": prof.sampling, "cost": prof.cost,
        "rates": {f.cls: f.rate for f in prof.faults},
        "explains": prof.explains.to_json(),   # what explains the truth's classes (scoring/explain.py)
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    with (out / "fleet.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["node", "rack", "leaf", "nvl_domain", "sku", *SOFTWARE])
        for nd in plan.fleet.nodes:
            sw = dict(nd.software)
            w.writerow([nd.name, nd.rack, nd.leaf, nd.nvl_domain, nd.sku, *(sw[a] for a in SOFTWARE)])
    with (out / "rollouts.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["time", "node", "attr", "old", "new"])
        for c in plan.fleet.changes:
            w.writerow([f"{c.time:.0f}", c.node, c.attr, c.old, c.new])
    with (out / "maintenance.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["time", "node", "what"])
        for m in plan.maintenance:
            w.writerow([f"{m.time:.0f}", m.node, m.what])
    write_truth(out / "truth.jsonl", plan.truth)
    with (out / "boots.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["time", "node"])
        for node, times in sorted(plan.boots.items()):
            for t in times:
                w.writerow([f"{t:.0f}", node])

    by_node = _events_by_node(plan)
    jobs_by_node: dict[str, list[Job]] = {}
    for j in plan.jobs:
        for nm in j.nodes:
            jobs_by_node.setdefault(nm, []).append(j)
    if workers is None:
        workers = 2 if len(plan.fleet.nodes) * (plan.end - plan.start) / 86400.0 >= PARALLEL_NODE_DAYS else 1
    if workers > 1 and plan.jobs:
        _write_both(plan, out, by_node, jobs_by_node, counts, progress)
    else:
        _write_nodes(plan, out, by_node, jobs_by_node, counts, progress)
        _write_jobs(plan, out, by_node, counts, progress)
    write_manifest(out)
    return counts


#: the files a replay reads, whose written size ``manifest.json`` keeps (docs/dataset.md)
MANIFEST_GLOBS = ("*.csv", "*.jsonl", "*.parquet", "nodes/*/kern.log", "nodes/*/ib.csv",
                  "timings/*.parquet")


def write_manifest(out: Path) -> None:
    """``manifest.json``, written last: every replayed file's size in bytes as written, so a
    reader tells a file cut at a row boundary (or a missing one) from a whole one."""
    sizes = {p.relative_to(out).as_posix(): p.stat().st_size
             for pattern in MANIFEST_GLOBS for p in sorted(out.glob(pattern)) if p.is_file()}
    (out / "manifest.json").write_text(json.dumps({"files": sizes}, indent=0, sort_keys=True) + "\n")


def _jobs_child(plan: Plan, out: Path, done: Any, conn: Any) -> None:
    """The jobs' files, in a worker process: counts (or the error) go back through ``conn``.
    Ctrl-C is the parent's to handle (it terminates this worker)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        counts = {"timing_rows": 0}
        _write_jobs(plan, out, _events_by_node(plan), counts,
                    lambda _p, k, _t: setattr(done, "value", k))
        conn.send(("ok", counts["timing_rows"]))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def _write_both(plan: Plan, out: Path, by_node: dict[str, list[TruthEvent]],
                jobs_by_node: dict[str, list[Job]], counts: dict[str, int], progress: Progress) -> None:
    """Nodes in this process and jobs in a worker at the same time (they write different files
    from independent random streams: the bytes are those of the one-process run). The worker
    starts from a clean forkserver (no thread pools inherited)."""
    import multiprocessing

    mp = multiprocessing.get_context("forkserver")
    done = mp.Value("i", 0, lock=False)
    recv, send = mp.Pipe(duplex=False)
    child = mp.Process(target=_jobs_child, args=(plan, out, done, send), daemon=True)
    child.start()
    send.close()
    total = len(plan.jobs)

    def both(phase: str, k: int, n: int) -> None:
        progress(phase, k, n)
        progress("jobs", int(done.value), total)

    try:
        _write_nodes(plan, out, by_node, jobs_by_node, counts, both)
        while child.is_alive() and not recv.poll(0.2):
            progress("jobs", int(done.value), total)
        try:
            status, value = recv.recv()
        except EOFError:
            child.join()
            raise InputError(f"the jobs' writer process died (exit {child.exitcode}); the dataset "
                             "is incomplete", str(out)) from None
        child.join()
    finally:
        if child.is_alive():
            child.terminate()
            child.join()
    if status != "ok":
        raise InputError(f"writing the jobs' files failed: {value}", str(out))
    counts["timing_rows"] += int(value)
    progress("jobs", total, total)


def majority(values: list[str]) -> str:
    """The most common value; a tie goes to the one seen first (the job's first node). It went
    to a set's hash order before, which differs between processes: runs.csv differed between
    two runs of the same seed whenever a rollout had reached half of a job's nodes."""
    return Counter(values).most_common(1)[0][0]


def _events_by_node(plan: Plan) -> dict[str, list[TruthEvent]]:
    by_node: dict[str, list[TruthEvent]] = {}
    for ev in plan.truth:
        if ev.node is not None:
            by_node.setdefault(ev.node, []).append(ev)
        elif ev.cls == "peermem_teardown":
            for nm in ev.details.get("nodes", ()):
                by_node.setdefault(nm, []).append(ev)
    return by_node


def _write_nodes(plan: Plan, out: Path, by_node: dict[str, list[TruthEvent]],
                 jobs_by_node: dict[str, list[Job]], counts: dict[str, int], progress: Progress) -> None:
    prof = plan.profile
    g = plan.fleet.gpus_per_node
    s = prof.sampling
    tel_times = np.arange(plan.start, plan.end, float(s["telemetry_interval_s"]))
    ib_times = np.arange(plan.start, plan.end, float(s["ib_interval_s"]))
    settle = float(s.get("boot_settle_s", 180))
    noise = float(s.get("log_noise_per_node_day", 0))
    amp = float(prof.jobs.get("diurnal_amplitude", 0.0))
    writer = pq.ParquetWriter(_local(out / "telemetry.parquet"), TELEMETRY_SCHEMA, compression="zstd",
                              use_dictionary=TELEMETRY_DICT)
    chunk: list[pa.Table] = []
    total = len(plan.fleet.nodes)
    try:
        for k, nd in enumerate(plan.fleet.nodes):
            rng = _rng(plan.seed, 1, nd.index)
            evs = by_node.get(nd.name, [])
            jobs = jobs_by_node.get(nd.name, [])
            boots = plan.boots.get(nd.name, [plan.start - 86400])
            ndir = out / "nodes" / nd.name
            ndir.mkdir(parents=True, exist_ok=True)
            # kernel log
            lines = kernlog.noise_lines(plan.start, plan.end, noise, rng)
            for b in boots:
                if plan.start <= b < plan.end:
                    sw = {a: plan.fleet.version_at(nd, a, b) for a in SOFTWARE}
                    deg = next((int(e.details.get("gpu", 0)) for e in evs
                                if e.cls == "pcie_degraded" and abs(e.start - b) < 1.0), None)
                    lines += kernlog.boot_lines(b, sw, g, rng, deg)
            for ev in evs:
                if "kern.log" in ev.signature:
                    lines += kernlog.fault_lines(ev, rng)
            for ev in evs:
                if ev.cls == "peermem_teardown":
                    lines += kernlog.job_end_lines(ev.start + 1.0, rng)
            lines = [ln for ln in lines if plan.start <= ln.time < plan.end]
            lines.sort(key=lambda ln: ln.time)
            fmt = kernlog.format_for(nd.index)
            with (ndir / "kern.log").open("w", encoding="utf-8") as fh:
                for text in kernlog.render(lines, fmt, nd.name, boots):
                    fh.write(text + "\n")
            counts["kern_lines"] += len(lines)
            # InfiniBand
            busy = np.zeros(len(ib_times), dtype=bool)
            for j in jobs:
                busy |= (ib_times >= j.start) & (ib_times < j.end)
            series = simulate_ib(ib_times, g, evs, boots, settle, busy, rng)
            with (ndir / "ib.csv").open("w", encoding="utf-8") as fh:
                fh.write("time,device,port,counter,value\n")
                counts["ib_rows"] += write_ib_csv(fh, series, str(prof.fleet.get("ib_rate")),
                                                  str(prof.fleet.get("ib_rate_degraded")))
            write_sysfs(ndir / "sysfs", series, prof.fleet, plan.fleet.version_at(nd, "firmware", plan.end), rng)
            # telemetry
            tab = node_telemetry(nd.name, tel_times, g, evs, [(j.start, j.end) for j in jobs], amp, rng, boots)
            counts["telemetry_rows"] += tab.num_rows
            chunk.append(tab)
            if len(chunk) >= NODE_CHUNK:
                writer.write_table(pa.concat_tables(chunk))
                chunk = []
            progress("nodes", k + 1, total)
        if chunk:
            writer.write_table(pa.concat_tables(chunk))
    finally:
        writer.close()


def _write_jobs(plan: Plan, out: Path, by_node: dict[str, list[TruthEvent]], counts: dict[str, int],
                progress: Progress) -> None:
    prof = plan.profile
    g = plan.fleet.gpus_per_node
    interval = float(prof.sampling["timing_interval_s"])
    total = len(plan.jobs)
    node_of = {nd.name: nd for nd in plan.fleet.nodes}
    cfg = jobs_config(prof)
    with (out / "jobs.csv").open("w", newline="") as jf, (out / "runs.csv").open("w", newline="") as rf:
        jw, rw = csv.writer(jf), csv.writer(rf)
        jw.writerow(JOB_COLUMNS)
        rw.writerow(["run_id", "time", "signature", "seconds_per_step", *SOFTWARE, "nodes"])
        for k, j in enumerate(plan.jobs):
            rng = _rng(plan.seed, 2, int(j.job_id))
            tab, sps = job_timings(j, g, by_node, interval, cfg, rng)
            pq.write_table(tab, _local(out / "timings" / f"{j.job_id}.parquet"), compression="lz4",
                           use_dictionary=["node"])
            counts["timing_rows"] += tab.num_rows
            jw.writerow(JobRow.of(j, g).to_csv())
            versions = []
            for a in SOFTWARE:
                vals = [plan.fleet.version_at(node_of[n], a, j.start) for n in j.nodes]
                versions.append(majority(vals))
            # runs are only comparable at the same scale: the signature carries the world size and
            # layout (nodes x ranks per node), e.g. llama-70b-bf16-ws64-8x8
            run_sig = f"{j.signature}-ws{len(j.nodes) * g}-{len(j.nodes)}x{g}"
            rw.writerow([j.job_id, f"{j.start:.0f}", run_sig, f"{sps:.5f}", *versions, len(j.nodes)])
            progress("jobs", k + 1, total)

