"""Eval detector: the counter rules over the GPU telemetry (DCGM fields, telemetry.parquet),
judged at the samples where an agent's check could see something change."""

from __future__ import annotations

from typing import Any

import numpy as np

from minutiae.model import Observation
from minutiae.scoring.score import Detection
from minutiae.sim.dataset import telemetry_batches
from minutiae.sim.eval.detectors.base import Context, _Active, register

QUIET_REASONS = 0x1 | 0x4          # GPU idle, SW power cap: not a slowdown worth a look
HEARTBEAT_S = 86400.0
COUNTER_CADENCE_S = 900.0
COUNTERS = ("pcie_replay", "nvlink_errors", "ecc_sbe", "ecc_dbe")


def _kinds() -> list[str]:
    from minutiae.rules.counters.load import counter_rules

    return [r.kind for r in counter_rules() if r.component in ("gpu", "node")]


@register("telemetry", what="counter rules over the GPU telemetry (DCGM fields)",
          needs=("telemetry.parquet", "boots.csv"), kinds=_kinds, order=30,
          requires=("minutiae.node.sources.dcgm.parse:FIELDS", "minutiae.rules.counters.model:evaluate"))
def detect(ctx: Context) -> tuple[list[Detection], list[str], int]:
    from minutiae.node.replay import GateSeries
    from minutiae.node.sources.dcgm.parse import FIELDS
    from minutiae.rules.counters.load import counter_rules
    from minutiae.rules.counters.model import context, evaluate
    from minutiae.sim.emit.telemetry import DCGM_FIELDS
    from minutiae.sim.world.fleet import gpu_bus

    rules = tuple(r for r in counter_rules() if r.gate is None)
    # rules with persistence / healthy delay (a throttle must last 5 min): the agent's engine
    gated = tuple(r for r in counter_rules() if r.gate is not None and r.component == "gpu")
    g_n = ctx.ds.gpus
    cols = ["time", "node", "gpu", *DCGM_FIELDS, "pcie_width"]
    metric = {c: FIELDS[f][0] for c, (f, _t, _h) in DCGM_FIELDS.items() if f in FIELDS}
    metric["pcie_width"] = FIELDS["DCGM_FI_DEV_PCIE_LINK_WIDTH"][0]
    width_max = FIELDS["DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH"][0]
    comps = [f"gpu:0000:{gpu_bus(g)}:00.0" for g in range(g_n)]
    gated_cols = sorted({c for c, m in metric.items()
                         for r in gated for cond in (r.cond, *r.unless) if m in cond.metrics})
    out: list[Detection] = []
    n = 0
    for node, arrs in _node_runs(telemetry_batches(ctx.ds.root / "telemetry.parquet", cols), cols):
        lo, hi = 0, len(arrs["time"])
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
        gate_active = _Active()
        gates = GateSeries(gated, node, end=float(times[-1]))   # the agent's engine, as in the backtest
        gate_last: np.ndarray | None = None
        ks = np.flatnonzero(dirty.any(axis=1) | node_dirty).tolist()
        j = 0
        while j < len(ks) or gates.ticks:
            tick_now = sample = False
            nxt = gates.next_tick()
            if nxt is not None and (j >= len(ks) or nxt < times[ks[j]]):
                # no new sample: the values of the latest one, judged later (a persistence can end)
                t = nxt
                k = int(np.searchsorted(times, t, side="right")) - 1
                tick_now = gates.due(t)
            else:
                sample = True
                k = ks[j]
                j += 1
                t = float(times[k])
                tick_now = gates.due(t)
            if gated_cols:
                cur = np.stack([np.where(present[k], grid[c][k], -1) for c in gated_cols])
                gate_dirty = gate_last is None or not np.array_equal(cur, gate_last)
                if gate_dirty or tick_now:
                    gate_last = cur
                    vals = {comps[g]: {metric[c]: int(grid[c][k, g]) for c in gated_cols}
                            for g in np.flatnonzero(present[k])}
                    for f in gate_active.fresh(gates.check(vals, {}, t, gate_dirty)):
                        d = ctx.detection("telemetry", node, t, f)
                        if d is not None:
                            out.append(d)
            if not sample:
                continue
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
            found = evaluate(rules, context(obs, prev, t, extra))  # ungated rules
            for f in active.fresh(found, scope):
                d = ctx.detection("telemetry", node, t, f)
                if d is not None:
                    out.append(d)
            for o in obs:
                if isinstance(o.value, int | float) and not isinstance(o.value, bool):
                    last[(o.component, o.metric)] = float(o.value)
    return out, [], n


def _node_runs(batches: Any, cols: list[str]) -> Any:
    """``(node, {column: array})`` per node from record batches of rows grouped by node: a
    node whose rows continue in the next batch is yielded once, whole (a series cut at a batch
    boundary would show half the GPUs of the boundary sample missing)."""
    carry: tuple[str, dict[str, np.ndarray]] | None = None
    for batch in batches:
        arrs = {c: batch.column(c).to_numpy(zero_copy_only=False) for c in cols if c != "node"}
        nodes = batch.column("node").dictionary_encode()
        codes = nodes.indices.to_numpy(zero_copy_only=False)
        if not len(codes):
            continue
        names = nodes.dictionary.to_pylist()
        bounds = np.flatnonzero(codes[1:] != codes[:-1]) + 1
        for lo, hi in zip(np.r_[0, bounds], np.r_[bounds, len(codes)], strict=True):
            node = str(names[codes[lo]])
            part = {c: a[lo:hi] for c, a in arrs.items()}
            if carry is not None and carry[0] == node:
                part = {c: np.concatenate([carry[1][c], part[c]]) for c in part}
            elif carry is not None:
                yield carry
            carry = (node, part)
    if carry is not None:
        yield carry


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
