"""Eval detectors over node signals: kernel log, IB counters, GPU telemetry — each through
minutiae's own rules, unchanged."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import numpy as np

from minutiae.model import Observation
from minutiae.sim.detector_base import Context, _Active
from minutiae.sim.plan import REBOOT_S
from minutiae.sim.score import Detection
from minutiae.sources.sim_dataset import (
    ib_rows,
    read_text,
    telemetry_batches,
)


# ------------------------------------------------------------------ kernel log
def _kernel_log(ctx: Context) -> tuple[list[Detection], list[str], int]:
    from minutiae.checks.logrules import findings_from_events
    from minutiae.parsers.kernel_log import parse_lines

    year = datetime.fromtimestamp(ctx.ds.start, tz=None).year
    out: list[Detection] = []
    notes: list[str] = []
    n = 0
    for node in ctx.ds.nodes:
        path = ctx.ds.node_dir(node) / "kern.log"
        if not path.is_file():
            notes.append(f"{path}: missing")
            continue
        n += 1
        events = list(parse_lines(read_text(path).splitlines(), year=year))
        untimed = 0
        for f in findings_from_events(events):
            if f.time is None:
                untimed += 1
                continue
            d = ctx.detection("kernel_log", node, f.time.timestamp(), f)
            if d is not None:
                out.append(d)
        if untimed:
            notes.append(f"{path}: {untimed} finding(s) without a time")
    return out, notes, n


# ------------------------------------------------------------------ IB counters (sysfs replay)
def _ib_counters(ctx: Context) -> tuple[list[Detection], list[str], int]:
    from minutiae.checks.counters import boot_grace_s, context, counter_rules, evaluate
    from minutiae.parsers.snapshot import SnapshotBuilder
    from minutiae.parsers.sysfs_ib import SOURCE, parse_ib_port

    rules = counter_rules()
    # a rule quiet in a boot's first minutes is judged again when that grace ends (a port that
    # is still down then did not change, so the change log has no row for it)
    graced = tuple(r for r in rules if boot_grace_s(r) > 0)
    grace = max((boot_grace_s(r) for r in graced), default=0.0)
    interval = float(ctx.ds.meta.get("sampling", {}).get("ib_interval_s", 300))
    out: list[Detection] = []
    notes: list[str] = []
    n = 0
    for node in ctx.ds.nodes:
        path = ctx.ds.node_dir(node) / "ib.csv"
        if not path.is_file():
            notes.append(f"{path}: missing")
            continue
        n += 1
        files: dict[tuple[str, str], dict[str, str]] = {}
        prev_vals: dict[tuple[str, str], float] = {}
        rows = list(ib_rows(path))
        active = _Active()
        rates: dict[tuple[str, str], float] = {}
        i = 0
        boots = ctx.ds.boots.get(node, [])
        # at the first sample (every `interval` from the start) at or after the grace's end
        recheck = sorted(ctx.ds.start + math.ceil((b + grace - ctx.ds.start) / interval) * interval
                         for b in boots if grace > 0 and b + grace > ctx.ds.start)
        while i < len(rows) or recheck:
            changed: set[tuple[str, str]] = set()
            regroup = False
            judged = rules
            if recheck and (i >= len(rows) or recheck[0] < rows[i][0]):
                t = recheck.pop(0)  # a boot grace ended: every port is judged again, by the
                judged = graced     # rules with a grace (rates would see no time pass)
            elif recheck and recheck[0] == rows[i][0]:
                t = rows[i][0]      # a sample at that time: the ports it changed are applied
                recheck.pop(0)      # first, then every port is judged by every rule
                regroup = True
                regroup = bool(files)
                if not regroup:
                    continue
            else:
                t = rows[i][0]
            while i < len(rows) and rows[i][0] == t:
                _, dev, port, counter, value = rows[i]
                key = counter if counter in ("state", "phys_state", "rate") else f"counters/{counter}"
                files.setdefault((dev, port), {"link_layer": "InfiniBand"})[key] = value
                changed.add((dev, port))
                regroup |= counter == "rate"
                i += 1
            if any(b - REBOOT_S <= t < b for b in boots):
                continue    # the node is down for a reboot: no agent reads its ports then
            # only the ports that changed can change their findings (all of them when a rate
            # changed: the rate rule compares a port with its node's other ports)
            ports = set(files) if regroup else changed
            b = SnapshotBuilder(SOURCE)
            for dev, port in sorted(ports):
                parse_ib_port(b, dev, port, files[(dev, port)], str(path))
            obs = [Observation(o.source, o.component, o.metric, o.value, t) for o in b.build().observations]
            if not regroup:     # the group rule needs every port's rate
                obs += [Observation(SOURCE, f"ib:{d}/{p}", "rate_gbps", rates[(d, p)], t)
                        for (d, p) in files if (d, p) not in ports and (d, p) in rates]
            for o in obs:
                if o.metric == "rate_gbps" and isinstance(o.value, float):
                    dp = o.component[3:].rsplit("/", 1)
                    rates[(dp[0], dp[1])] = o.value
            previous = {k: (v, t - interval) for k, v in prev_vals.items()}
            up = ctx.ds.uptime(node, t)
            extra = {"node": {"uptime_s": up}} if up is not None else None
            scope = {f"ib:{d}/{p}" for d, p in ports}
            found = [f for f in evaluate(judged, context(obs, previous, t, extra))
                     if (f.component or "") in scope or not (f.component or "").startswith("ib:")]
            only = None if judged is rules else {r.id for r in judged}
            for f in active.fresh(found, scope, only):
                d = ctx.detection("ib_counters", node, t, f)
                if d is not None:
                    out.append(d)
            for o in obs:
                if isinstance(o.value, int | float) and not isinstance(o.value, bool):
                    prev_vals[(o.component, o.metric)] = float(o.value)
    return out, notes, n


# ------------------------------------------------------------------ GPU telemetry (DCGM fields)
QUIET_REASONS = 0x1 | 0x4          # GPU idle, SW power cap: not a slowdown worth a look
HEARTBEAT_S = 86400.0
COUNTER_CADENCE_S = 900.0
COUNTERS = ("pcie_replay", "nvlink_errors", "ecc_sbe", "ecc_dbe")


def _telemetry(ctx: Context) -> tuple[list[Detection], list[str], int]:
    from minutiae.checks.counters import context, counter_rules, evaluate
    from minutiae.parsers.dcgm import FIELDS
    from minutiae.sim.fleet import gpu_bus
    from minutiae.sim.telemetry import DCGM_FIELDS

    rules = counter_rules()
    g_n = ctx.ds.gpus
    cols = ["time", "node", "gpu", *DCGM_FIELDS, "pcie_width"]
    metric = {c: FIELDS[f][0] for c, (f, _t, _h) in DCGM_FIELDS.items() if f in FIELDS}
    metric["pcie_width"] = FIELDS["DCGM_FI_DEV_PCIE_LINK_WIDTH"][0]
    width_max = FIELDS["DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH"][0]
    comps = [f"gpu:0000:{gpu_bus(g)}:00.0" for g in range(g_n)]
    out: list[Detection] = []
    n = 0
    for batch in telemetry_batches(ctx.ds.root / "telemetry.parquet", cols):
        arrs = {c: batch.column(c).to_numpy(zero_copy_only=False) for c in cols if c != "node"}
        nodes = batch.column("node").dictionary_encode()
        codes = nodes.indices.to_numpy(zero_copy_only=False)
        names = nodes.dictionary.to_pylist()
        bounds = np.flatnonzero(codes[1:] != codes[:-1]) + 1
        for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(codes)], strict=True):
            node = str(names[codes[lo]])
            n += 1
            times, ti = np.unique(arrs["time"][lo:hi], return_inverse=True)
            gi = arrs["gpu"][lo:hi].astype(int)
            present = np.zeros((len(times), g_n), dtype=bool)
            present[ti, gi] = True
            grid = {}
            for c in metric:
                m = np.zeros((len(times), g_n), dtype=np.float64)
                m[ti, gi] = arrs[c][lo:hi]
                grid[c] = m
            dirty, node_dirty, cad_s = _telemetry_triggers(grid, present, times)
            last: dict[tuple[str, str], float] = {}
            active = _Active()
            for k in np.flatnonzero(dirty.any(axis=1) | node_dirty):
                t = float(times[k])
                gs = np.flatnonzero(dirty[k])
                obs: list[Observation] = []
                scope = {comps[g] for g in gs}
                for g in gs:
                    if not present[k, g]:
                        continue
                    for c, mname in metric.items():
                        v = grid[c][k, g]
                        obs.append(Observation("dcgm", comps[g], mname,
                                               float(v) if c in ("power_w", "temp_c") else int(v), t))
                    obs.append(Observation("dcgm", comps[g], width_max, 16, t))
                extra: dict[str, dict[str, Any]] | None = None
                if node_dirty[k]:
                    scope.add("node")
                    obs.append(Observation("dcgm", "node", "gpu_count", int(present[k].sum()), t))
                    extra = {"node": {"expected_gpus": g_n, "uptime_s": ctx.ds.uptime(node, t)}}
                prev = {(o.component, o.metric): (last[(o.component, o.metric)], t - cad_s)
                        for o in obs if (o.component, o.metric) in last}
                found = evaluate(rules, context(obs, prev, t, extra))
                for f in active.fresh(found, scope):
                    d = ctx.detection("telemetry", node, t, f)
                    if d is not None:
                        out.append(d)
                for o in obs:
                    if isinstance(o.value, int | float) and not isinstance(o.value, bool):
                        last[(o.component, o.metric)] = float(o.value)
    return out, [], n


def _telemetry_triggers(grid: dict[str, np.ndarray], present: np.ndarray,
                        times: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Which GPUs an agent's check must look at, per sample: a GPU appears/vanishes or its PCIe
    width, >= 80 C reading or non-quiet clock-event reason changes (at once); a counter moved
    (at a 15-minute counter cadence); every GPU once a day. Between those samples every value
    a rule reads is unchanged or quiet, so the rules' outcome is unchanged. Returns the (T, G)
    mask, the (T,) mask of node-level checks (GPU count) and the counter cadence in seconds."""
    t_n = len(times)
    dt = float(times[1] - times[0]) if t_n > 1 else 300.0
    dirty = np.zeros(present.shape, dtype=bool)
    for m in (present, np.where(present, grid["pcie_width"], 0), grid["temp_c"] >= 80,
              grid["clock_event_reasons"].astype(np.int64) & ~QUIET_REASONS):
        dirty[1:] |= m[1:] != m[:-1]
    cad = max(1, int(round(COUNTER_CADENCE_S / dt)))
    idx = np.arange(cad, t_n, cad)
    for c in COUNTERS:
        dirty[idx] |= grid[c][idx] != grid[c][idx - cad]
    beat = np.zeros(t_n, dtype=bool)
    beat[:: max(1, int(HEARTBEAT_S / dt))] = True
    dirty[beat] |= present[beat]
    cnt = present.sum(axis=1)
    node_dirty = beat.copy()
    node_dirty[1:] |= cnt[1:] != cnt[:-1]
    return dirty, node_dirty, cad * dt
