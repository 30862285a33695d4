"""GateReplay: the gated counter rules over a replayed change log (the simulator's eval, the
controller's backtest) conclude what the agent concludes judging every 10 s through the same
engine (counter_gate.gated_findings). Property: on any history of port states, the replay's
alarms start within one second of the agent's (its re-checks come 1 s after a wait ends)."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.rules.counters.gate import AGENT_INTERVAL_S, GateReplay, gated_findings
from minutiae.rules.counters.load import counter_rules
from minutiae.rules.counters.model import Context, CounterRule, judge

PORT = "ib:mlx5_0/1"
T0 = 1_700_000_000.0


def _ib_gated() -> tuple[CounterRule, ...]:
    return tuple(r for r in counter_rules() if r.gate is not None and r.component == "ib")


def _verdicts(rules: Sequence[CounterRule], state: str, t: float):  # type: ignore[no-untyped-def]
    return judge(rules, Context({PORT: {"state": state}}, {}, t))


def _agent(changes: list[tuple[float, str]], end: float) -> dict[str, float]:
    """Judge every AGENT_INTERVAL_S with the latest state: first alarm time per rule."""
    rules = _ib_gated()
    state = None
    first: dict[str, float] = {}
    k, cur = 0, changes[0][1]
    t = changes[0][0]
    while t <= end:
        while k < len(changes) and changes[k][0] <= t:
            cur = changes[k][1]
            k += 1
        out = gated_findings(rules, _verdicts(rules, cur, t), t, state, "n1")
        state = out.state
        for f in out.findings:
            first.setdefault(f.rule or "", t)
        t += AGENT_INTERVAL_S
    return first


def _replay(changes: list[tuple[float, str]], end: float) -> dict[str, float]:
    """Judge at the changes and at the re-checks GateReplay asks for."""
    rules = _ib_gated()
    replay = GateReplay(rules, "n1", end=end)
    first: dict[str, float] = {}
    ticks: list[float] = []
    i, cur = 0, changes[0][1]
    while i < len(changes) or ticks:
        if ticks and (i >= len(changes) or ticks[0] < changes[i][0]):
            t, changed = ticks.pop(0), False
        else:
            t, cur = changes[i]
            i += 1
            changed = True
            ticks = [x for x in ticks if x > t]
        found, again = replay.check(_verdicts(rules, cur, t), t, changed)
        ticks = sorted({*ticks, *again})
        for f in found:
            first.setdefault(f.rule or "", t)
    return first


def _changes(spec: list[tuple[int, bool]]) -> list[tuple[float, str]]:
    """(seconds after the previous change on the 10-s agent grid, port down?) -> change log."""
    out = [(T0, "ACTIVE")]
    t = T0
    for gap, down in spec:
        t += 10.0 * gap
        state = "DOWN" if down else "ACTIVE"
        if state != out[-1][1]:
            out.append((t, state))
    return out


def test_a_port_down_for_minutes_alarms_after_for_s_and_a_flap_does_not() -> None:
    down = [(T0, "ACTIVE"), (T0 + 600, "DOWN")]
    assert _replay(down, T0 + 3600) == {"ib.port-down": T0 + 721} == {
        k: v + 1 for k, v in _agent(down, T0 + 3600).items()}
    # three 30-s flaps within an hour: flapping, never a port down
    flaps = [(T0, "ACTIVE")]
    for k in (1, 2, 3):
        flaps += [(T0 + 600 * k, "DOWN"), (T0 + 600 * k + 30, "ACTIVE")]
    assert _replay(flaps, T0 + 7200) == {"ib.port-flapping": T0 + 1800} == _agent(flaps, T0 + 7200)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.booleans()), min_size=1, max_size=12))
def test_replay_alarms_start_when_the_agents_do(spec: list[tuple[int, bool]]) -> None:
    changes = _changes(spec)
    end = changes[-1][0] + 600.0  # every alarm starts at an onset or for_s after one
    agent, replay = _agent(changes, end), _replay(changes, end)
    assert set(agent) == set(replay)
    for rule, t in agent.items():
        # the agent checks on a 10-s grid, the replay 1 s after a wait ends
        assert t - AGENT_INTERVAL_S <= replay[rule] <= t + 1.0, (rule, t, replay[rule])
