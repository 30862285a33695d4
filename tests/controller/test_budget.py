"""Safety budget (pure): global, per-domain, per-job caps, token buckets, storm breaker."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.controller.budget import (
    Bucket,
    BudgetConfig,
    BudgetLedger,
    NodeFacts,
    RateLimit,
    StormConfig,
    check_drain,
    storm_tripped,
    take_token,
)


def fleet(n: int, down: int = 0, racks: int = 4) -> list[NodeFacts]:
    return [NodeFacts(f"n{i:03d}", i < down, {"rack": f"r{i % racks}"}, ()) for i in range(n)]


def test_global_fraction_caps_the_number_of_unavailable_nodes():
    nodes = fleet(100, down=8)
    cfg = BudgetConfig(max_unavailable_fraction=0.10)
    led = BudgetLedger.build(nodes, {})
    verdicts = [check_drain(led, cfg, n, 0.0) for n in nodes[8:20]]
    assert [v.allowed for v in verdicts] == [True, True] + [False] * 10
    assert verdicts[2].check == "global"
    assert "11/100 nodes unavailable would exceed" in verdicts[2].detail


def test_domain_cap_counts_existing_and_planned_drains():
    nodes = fleet(40, down=1, racks=4)          # n000 (rack r0) already down
    cfg = BudgetConfig(max_unavailable_fraction=1.0, domain_caps={"rack": 2})
    led = BudgetLedger.build(nodes, {})
    r0 = [n for n in nodes[1:] if n.domains["rack"] == "r0"]
    assert check_drain(led, cfg, r0[0], 0.0).allowed
    v = check_drain(led, cfg, r0[1], 0.0)
    assert not v.allowed and v.check == "domain:rack"
    assert v.detail == "2 node(s) of rack r0 already unavailable; cap 2"
    r1 = [n for n in nodes if n.domains["rack"] == "r1"]
    assert check_drain(led, cfg, r1[0], 0.0).allowed


def test_job_cap_uses_known_tolerance_else_default():
    nodes = [NodeFacts(f"n{i}", False, {}, ("J1",) if i < 4 else ("J2",)) for i in range(8)]
    cfg = BudgetConfig(max_unavailable_fraction=1.0, per_job_max_nodes=1)
    led = BudgetLedger.build(nodes, {})
    tol = {"J2": 2}
    got = [check_drain(led, cfg, n, 0.0, tol).allowed for n in nodes]
    assert got == [True, False, False, False, True, True, False, False]
    v = check_drain(led, cfg, nodes[1], 0.0, tol)
    assert v.check == "job" and v.detail == "job J1 already lost 1 node(s); it survives 1"


def test_token_bucket_refills_at_its_rate():
    cfg = BudgetConfig(rates={"drain": RateLimit(per_minute=6, burst=2)})
    led = BudgetLedger.build([], {})
    assert take_token(led, cfg, "drain", 0.0).allowed
    assert take_token(led, cfg, "drain", 0.0).allowed
    v = take_token(led, cfg, "drain", 0.0)
    assert not v.allowed and v.check == "rate:drain" and "next token in 10s" in v.detail
    assert not take_token(led, cfg, "drain", 9.0).allowed
    assert take_token(led, cfg, "drain", 10.0).allowed
    assert led.buckets["drain"] == Bucket(0.0, 10.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1000), max_size=50),
       st.integers(min_value=1, max_value=200))
def test_storm_breaker_trips_exactly_above_the_fraction(times, total):
    cfg = StormConfig(fraction=0.1, window_s=300, min_nodes=3)
    recent = sum(1 for t in times if t >= 700)
    why = storm_tripped(times, total, cfg, 1000.0)
    assert (why is not None) == (recent >= 3 and recent / total > 0.1)
    if why:
        assert f"{recent}/{total} nodes" in why


@settings(max_examples=150, deadline=None)
@given(st.integers(min_value=1, max_value=120), st.floats(min_value=0, max_value=1),
       st.integers(min_value=1, max_value=5), st.data())
def test_budget_is_never_exceeded(total, frac, cap, data):
    racks = data.draw(st.integers(min_value=1, max_value=10))
    down = data.draw(st.integers(min_value=0, max_value=total))
    nodes = fleet(total, down=down, racks=racks)
    cfg = BudgetConfig(max_unavailable_fraction=frac, domain_caps={"rack": cap})
    led = BudgetLedger.build(nodes, {})
    allowed = [n for n in nodes if not n.unavailable and check_drain(led, cfg, n, 0.0).allowed]
    limit = int(frac * total + 1e-9)
    if allowed:
        assert down + len(allowed) <= limit
        for r in range(racks):
            in_rack = [n for n in nodes if n.domains["rack"] == f"r{r}"]
            taken = sum(1 for n in in_rack if n.unavailable) + sum(
                1 for n in allowed if n.domains["rack"] == f"r{r}")
            assert taken <= max(cap, sum(1 for n in in_rack if n.unavailable))
