"""Eval detector: the counter rules over the GPU telemetry (DCGM fields, telemetry.parquet),
judged at the samples where an agent's check could see something change."""

from __future__ import annotations

from typing import Any

import numpy as np

from minutiae.model import Finding, Observation
from minutiae.node.replay import GateSeries
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
    spec = _Spec(ctx.ds.gpus)
    out: list[Detection] = []
    n = 0
    for node, arrs in _node_runs(telemetry_batches(ctx.ds.root / "telemetry.parquet", spec.cols), spec.cols):
        n += 1
        out.extend(_NodeReplay(ctx, spec, node, arrs).run())
    return out, [], n


class _Spec:
    """The rules and the DCGM field ↔ metric mapping the replay reads."""

    def __init__(self, g_n: int) -> None:
        from minutiae.node.sources.dcgm.parse import FIELDS
        from minutiae.rules.counters.load import counter_rules
        from minutiae.sim.emit.telemetry import DCGM_FIELDS
        from minutiae.sim.world.fleet import gpu_bus

        self.rules = tuple(r for r in counter_rules() if r.gate is None)
        # rules with persistence / healthy delay (a throttle must last 5 min): the agent's engine
        self.gated = tuple(r for r in counter_rules() if r.gate is not None and r.component == "gpu")
        self.g_n = g_n
        self.cols = ["time", "node", "gpu", *DCGM_FIELDS, "pcie_width"]
        self.metric = {c: FIELDS[f][0] for c, (f, _t, _h) in DCGM_FIELDS.items() if f in FIELDS}
        self.metric["pcie_width"] = FIELDS["DCGM_FI_DEV_PCIE_LINK_WIDTH"][0]
        self.width_max = FIELDS["DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH"][0]
        self.comps = [f"gpu:0000:{gpu_bus(g)}:00.0" for g in range(g_n)]
        self.gated_cols = sorted({c for c, m in self.metric.items()
                                  for r in self.gated for cond in (r.cond, *r.unless) if m in cond.metrics})


class _NodeReplay:
    """One node's telemetry as a (time, GPU) grid, judged where an agent's check could see a
    change (``_telemetry_triggers``) and where a gate's wait can end."""

    def __init__(self, ctx: Context, spec: _Spec, node: str, arrs: dict[str, np.ndarray]) -> None:
        self.ctx, self.spec, self.node = ctx, spec, node
        self.times, ti = np.unique(arrs["time"], return_inverse=True)
        gi = arrs["gpu"].astype(int)
        self.present = np.zeros((len(self.times), spec.g_n), dtype=bool)
        self.present[ti, gi] = True
        self.grid = {}
        for c in spec.metric:
            m = np.zeros((len(self.times), spec.g_n), dtype=np.float64)
            m[ti, gi] = arrs[c]
            self.grid[c] = m
        self.dirty, self.node_dirty, self.cad_s = _telemetry_triggers(self.grid, self.present, self.times)
        self.last: dict[tuple[str, str], float] = {}
        self.active = _Active()
        self.gate_active = _Active()
        self.gates = GateSeries(spec.gated, node, end=float(self.times[-1]))   # the agent's engine, as in the backtest
        self.gate_last: np.ndarray | None = None
        self.out: list[Detection] = []

    def run(self) -> list[Detection]:
        ks = np.flatnonzero(self.dirty.any(axis=1) | self.node_dirty).tolist()
        j = 0
        while j < len(ks) or self.gates.ticks:
            sample = False
            nxt = self.gates.next_tick()
            if nxt is not None and (j >= len(ks) or nxt < self.times[ks[j]]):
                # no new sample: the values of the latest one, judged later (a persistence can end)
                t = nxt
                k = int(np.searchsorted(self.times, t, side="right")) - 1
            else:
                sample = True
                k = ks[j]
                j += 1
                t = float(self.times[k])
            tick_now = self.gates.due(t)
            if self.spec.gated_cols:
                self._gated(k, t, tick_now)
            if sample:
                self._sample(k, t)
        return self.out

    def _gated(self, k: int, t: float, tick_now: bool) -> None:
        spec = self.spec
        cur = np.stack([np.where(self.present[k], self.grid[c][k], -1) for c in spec.gated_cols])
        gate_dirty = self.gate_last is None or not np.array_equal(cur, self.gate_last)
        if gate_dirty or tick_now:
            self.gate_last = cur
            vals = {spec.comps[g]: {spec.metric[c]: int(self.grid[c][k, g]) for c in spec.gated_cols}
                    for g in np.flatnonzero(self.present[k])}
            self._detect(t, self.gate_active.fresh(self.gates.check(vals, {}, t, gate_dirty)))

    def _sample(self, k: int, t: float) -> None:
        """The ungated rules over the GPUs whose values may have changed at sample ``k``."""
        from minutiae.rules.counters.model import context, evaluate

        spec = self.spec
        gs = np.flatnonzero(self.dirty[k])
        obs: list[Observation] = []
        scope = {spec.comps[g] for g in gs}
        for g in gs:
            if not self.present[k, g]:
                continue
            for c, mname in spec.metric.items():
                v = self.grid[c][k, g]
                obs.append(Observation("dcgm", spec.comps[g], mname,
                                       float(v) if c in ("power_w", "temp_c") else int(v), t))
            obs.append(Observation("dcgm", spec.comps[g], spec.width_max, 16, t))
        extra: dict[str, dict[str, Any]] | None = None
        if self.node_dirty[k]:
            scope.add("node")
            obs.append(Observation("dcgm", "node", "gpu_count", int(self.present[k].sum()), t))
            extra = {"node": {"expected_gpus": spec.g_n, "uptime_s": self.ctx.ds.uptime(self.node, t)}}
        prev = {(o.component, o.metric): (self.last[(o.component, o.metric)], t - self.cad_s)
                for o in obs if (o.component, o.metric) in self.last}
        found = evaluate(spec.rules, context(obs, prev, t, extra))  # ungated rules
        self._detect(t, self.active.fresh(found, scope))
        for o in obs:
            if isinstance(o.value, int | float) and not isinstance(o.value, bool):
                self.last[(o.component, o.metric)] = float(o.value)

    def _detect(self, t: float, findings: list[Finding]) -> None:
        for f in findings:
            d = self.ctx.detection("telemetry", self.node, t, f)
            if d is not None:
                self.out.append(d)


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
