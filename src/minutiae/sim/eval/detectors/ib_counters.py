"""Eval detector: the counter rules over each node's InfiniBand sysfs history (ib.csv),
replayed as the agent would read the ports."""

from __future__ import annotations

import math
from typing import Any

from minutiae.model import Observation
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
    from minutiae.model.snapshot import SnapshotBuilder
    from minutiae.node.replay import GateSeries
    from minutiae.node.sources.ib.parse_sysfs import SOURCE, parse_ib_port
    from minutiae.rules.counters.load import counter_rules
    from minutiae.rules.counters.model import boot_grace_s, context, evaluate

    rules = counter_rules()
    plain = tuple(r for r in rules if r.gate is None)
    # rules with persistence / healthy delay / flapping: the agent's engine, as in the backtest
    gated = tuple(r for r in rules if r.gate is not None and r.component == "ib")
    # a rule quiet in a boot's first minutes is judged again when that grace ends (a port that
    # is still down then did not change, so the change log has no row for it)
    graced = tuple(r for r in plain if boot_grace_s(r) > 0)
    grace = max((boot_grace_s(r) for r in rules if r.component == "ib"), default=0.0)
    gated_metrics = {m for r in gated for c in (r.cond, *r.unless) for m in c.metrics}
    interval = float(ctx.ds.meta.get("sampling", {}).get("ib_interval_s", 300))
    out: list[Detection] = []
    notes: list[str] = []
    histories = ctx.node_files("ib.csv", notes)
    for node, path in histories:
        files: dict[tuple[str, str], dict[str, str]] = {}
        prev_vals: dict[tuple[str, str], float] = {}
        port_vals: dict[str, dict[str, Any]] = {}
        rows = list(ib_rows(path))
        active = _Active()
        gate_active = _Active()
        gates = GateSeries(gated, node, end=ctx.ds.end)   # the agent's engine, as in the backtest
        rates: dict[tuple[str, str], float] = {}
        i = 0
        boots = ctx.ds.boots.get(node, [])
        # at the first sample (every `interval` from the start) at or after the grace's end
        recheck = sorted(ctx.ds.start + math.ceil((b + grace - ctx.ds.start) / interval) * interval
                         for b in boots if grace > 0 and b + grace > ctx.ds.start)
        while i < len(rows) or recheck or gates.ticks:
            t = min(x for x in (rows[i][0] if i < len(rows) else None,
                                recheck[0] if recheck else None,
                                gates.next_tick()) if x is not None)
            graced_now = bool(recheck) and recheck[0] == t
            while recheck and recheck[0] == t:
                recheck.pop(0)
            tick_now = gates.due(t)     # a persistence / window / healthy delay can end
            changed: set[tuple[str, str]] = set()
            regroup = False
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
            # changed: the rate rule compares a port with its node's other ports, and when a
            # boot grace ended: by the rules with a grace, rates would see no time pass)
            judged = plain
            if not changed:
                judged = graced if graced_now else ()
            ports = set(files) if regroup or (graced_now and not changed) else changed
            b = SnapshotBuilder(SOURCE)
            for dev, port in sorted(ports):
                parse_ib_port(b, dev, port, files[(dev, port)], str(path))
            obs = [Observation(o.source, o.component, o.metric, o.value, t) for o in b.build().observations]
            gate_dirty = False      # a value the gated rules read changed
            for o in obs:
                vals = port_vals.setdefault(o.component, {})
                gate_dirty |= o.metric in gated_metrics and vals.get(o.metric) != o.value
                vals[o.metric] = o.value
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
            if judged:
                scope = {f"ib:{d}/{p}" for d, p in ports}
                found = [f for f in evaluate(judged, context(obs, previous, t, extra))
                         if (f.component or "") in scope or not (f.component or "").startswith("ib:")]
                only = None if judged is plain else {r.id for r in judged}
                for f in active.fresh(found, scope, only):
                    d = ctx.detection("ib_counters", node, t, f)
                    if d is not None:
                        out.append(d)
            # the gates see every port whenever what they read changed, a boot grace ended or a
            # persistence / window / healthy delay can end (between those their verdicts are
            # the same; the engine keeps the time, as the agent's does)
            if gated and (gate_dirty or graced_now or tick_now):
                values: dict[str, Any] = dict(port_vals)
                if up is not None:
                    values["node"] = {"uptime_s": up}
                for f in gate_active.fresh(gates.check(values, previous, t, bool(changed) or graced_now)):
                    d = ctx.detection("ib_counters", node, t, f)
                    if d is not None:
                        out.append(d)
            for o in obs:
                if isinstance(o.value, int | float) and not isinstance(o.value, bool):
                    prev_vals[(o.component, o.metric)] = float(o.value)
    return out, notes, len(histories)
