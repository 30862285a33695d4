"""Eval detector: the counter rules over each node's InfiniBand sysfs history (ib.csv),
replayed as the agent would read the ports."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from minutiae.model import Finding, Observation
from minutiae.model.snapshot import SnapshotBuilder
from minutiae.node.replay import GateSeries
from minutiae.node.sources.ib.parse_sysfs import SOURCE, parse_ib_port
from minutiae.rules.counters.model import CounterRule, boot_grace_s, context, evaluate
from minutiae.scoring.score import Detection
from minutiae.sim.dataset import ib_rows
from minutiae.sim.eval.detectors.base import Context, _Active, register
from minutiae.sim.world.plan import REBOOT_S


def _kinds() -> list[str]:
    from minutiae.rules.counters.load import counter_rules

    return [r.kind for r in counter_rules() if r.component == "ib"]


@register("ib_counters", what="counter rules over the InfiniBand sysfs history (ib.csv)",
          needs=("ib.csv", "boots.csv"), kinds=_kinds, order=20,
          requires=("minutiae.node.sources.ib.parse_sysfs:parse_ib_port", "minutiae.rules.counters.model:evaluate"))
def detect(ctx: Context) -> tuple[list[Detection], list[str], int]:
    from minutiae.rules.counters.load import counter_rules

    rules = _Rules(counter_rules())
    interval = float(ctx.ds.meta.get("sampling", {}).get("ib_interval_s", 300))
    out: list[Detection] = []
    notes: list[str] = []
    histories = ctx.node_files("ib.csv", notes)
    for node, path in histories:
        out.extend(_NodeReplay(ctx, rules, node, path, interval).run())
    return out, notes, len(histories)


class _Rules:
    """The counter rules as the replay splits them."""

    def __init__(self, rules: tuple[CounterRule, ...]) -> None:
        self.plain = tuple(r for r in rules if r.gate is None)
        # rules with persistence / healthy delay / flapping: the agent's engine, as in the backtest
        self.gated = tuple(r for r in rules if r.gate is not None and r.component == "ib")
        # a rule quiet in a boot's first minutes is judged again when that grace ends (a port that
        # is still down then did not change, so the change log has no row for it)
        self.graced = tuple(r for r in self.plain if boot_grace_s(r) > 0)
        self.grace = max((boot_grace_s(r) for r in rules if r.component == "ib"), default=0.0)
        self.gated_metrics = {m for r in self.gated for c in (r.cond, *r.unless) for m in c.metrics}


class _NodeReplay:
    """One node's ib.csv, read as the agent reads its ports (see ``step``)."""

    def __init__(self, ctx: Context, rules: _Rules, node: str, path: Path, interval: float) -> None:
        self.ctx, self.rules, self.node, self.path, self.interval = ctx, rules, node, path, interval
        self.files: dict[tuple[str, str], dict[str, str]] = {}
        self.prev_vals: dict[tuple[str, str], float] = {}
        self.port_vals: dict[str, dict[str, Any]] = {}
        self.rows = list(ib_rows(path))
        self.active = _Active()
        self.gate_active = _Active()
        self.gates = GateSeries(rules.gated, node, end=ctx.ds.end)   # the agent's engine, as in the backtest
        self.rates: dict[tuple[str, str], float] = {}
        self.boots = ctx.ds.boots.get(node, [])
        start, grace = ctx.ds.start, rules.grace
        # at the first sample (every `interval` from the start) at or after the grace's end
        self.recheck = sorted(start + math.ceil((b + grace - start) / interval) * interval
                              for b in self.boots if grace > 0 and b + grace > start)
        self.out: list[Detection] = []
        self.i = 0

    def run(self) -> list[Detection]:
        while self.i < len(self.rows) or self.recheck or self.gates.ticks:
            t = min(x for x in (self.rows[self.i][0] if self.i < len(self.rows) else None,
                                self.recheck[0] if self.recheck else None,
                                self.gates.next_tick()) if x is not None)
            graced_now = bool(self.recheck) and self.recheck[0] == t
            while self.recheck and self.recheck[0] == t:
                self.recheck.pop(0)
            tick_now = self.gates.due(t)     # a persistence / window / healthy delay can end
            changed, regroup = self._rows_at(t)
            if any(b - REBOOT_S <= t < b for b in self.boots):
                continue    # the node is down for a reboot: no agent reads its ports then
            self.step(t, changed, regroup, graced_now, tick_now)
        return self.out

    def _rows_at(self, t: float) -> tuple[set[tuple[str, str]], bool]:
        """The files of the rows at ``t``: which ports changed, and whether a rate did."""
        changed: set[tuple[str, str]] = set()
        regroup = False
        while self.i < len(self.rows) and self.rows[self.i][0] == t:
            _, dev, port, counter, value = self.rows[self.i]
            key = counter if counter in ("state", "phys_state", "rate") else f"counters/{counter}"
            self.files.setdefault((dev, port), {"link_layer": "InfiniBand"})[key] = value
            changed.add((dev, port))
            regroup |= counter == "rate"
            self.i += 1
        return changed, regroup

    def step(self, t: float, changed: set[tuple[str, str]], regroup: bool, graced_now: bool,
             tick_now: bool) -> None:
        """Only the ports that changed can change their findings (all of them when a rate
        changed: the rate rule compares a port with its node's other ports, and when a boot
        grace ended: by the rules with a grace, rates would see no time pass)."""
        rules = self.rules
        judged = rules.plain
        if not changed:
            judged = rules.graced if graced_now else ()
        ports = set(self.files) if regroup or (graced_now and not changed) else changed
        obs, gate_dirty = self._observe(t, ports, regroup)
        previous = {k: (v, t - self.interval) for k, v in self.prev_vals.items()}
        up = self.ctx.ds.uptime(self.node, t)
        if judged:
            extra = {"node": {"uptime_s": up}} if up is not None else None
            scope = {f"ib:{d}/{p}" for d, p in ports}
            found = [f for f in evaluate(judged, context(obs, previous, t, extra))
                     if (f.component or "") in scope or not (f.component or "").startswith("ib:")]
            only = None if judged is rules.plain else {r.id for r in judged}
            self._detect(t, self.active.fresh(found, scope, only))
        # the gates see every port whenever what they read changed, a boot grace ended or a
        # persistence / window / healthy delay can end (between those their verdicts are
        # the same; the engine keeps the time, as the agent's does)
        if rules.gated and (gate_dirty or graced_now or tick_now):
            values: dict[str, Any] = dict(self.port_vals)
            if up is not None:
                values["node"] = {"uptime_s": up}
            self._detect(t, self.gate_active.fresh(
                self.gates.check(values, previous, t, bool(changed) or graced_now)))
        for o in obs:
            if isinstance(o.value, int | float) and not isinstance(o.value, bool):
                self.prev_vals[(o.component, o.metric)] = float(o.value)

    def _observe(self, t: float, ports: set[tuple[str, str]], regroup: bool) -> tuple[list[Observation], bool]:
        """The parsed ports' observations (plus every other port's rate for the group rule), and
        whether a value the gated rules read changed."""
        b = SnapshotBuilder(SOURCE)
        for dev, port in sorted(ports):
            parse_ib_port(b, dev, port, self.files[(dev, port)], str(self.path))
        obs = [Observation(o.source, o.component, o.metric, o.value, t) for o in b.build().observations]
        gate_dirty = False
        for o in obs:
            vals = self.port_vals.setdefault(o.component, {})
            gate_dirty |= o.metric in self.rules.gated_metrics and vals.get(o.metric) != o.value
            vals[o.metric] = o.value
        if not regroup:     # the group rule needs every port's rate
            obs += [Observation(SOURCE, f"ib:{d}/{p}", "rate_gbps", self.rates[(d, p)], t)
                    for (d, p) in self.files if (d, p) not in ports and (d, p) in self.rates]
        for o in obs:
            if o.metric == "rate_gbps" and isinstance(o.value, float):
                dp = o.component[3:].rsplit("/", 1)
                self.rates[(dp[0], dp[1])] = o.value
        return obs, gate_dirty

    def _detect(self, t: float, findings: list[Finding]) -> None:
        for f in findings:
            d = self.ctx.detection("ib_counters", self.node, t, f)
            if d is not None:
                self.out.append(d)
