"""Agent push with several controller URLs: a heartbeat whose replica went away is sent again
in full to the next one (the digest meant nothing there), with no backoff; all URLs down is a
failure that backs off and keeps the reports."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from minutiae.agent.push import Outbox, Pusher
from minutiae.testing import FakeClock


class Replicas:
    def __init__(self) -> None:
        self.down: set[str] = set()
        self.sent: list[tuple[str, bool]] = []   # (url, full report?)

    def post(self, url: str, json: Any, headers: Mapping[str, str]) -> tuple[int, Any]:
        if any(url.startswith(d) for d in self.down):
            raise httpx.ConnectError("connection refused")
        self.sent.append((url, "status" in json))
        return 202, {"digest": "0" * 32} if "status" in json else {}


def rep(clock: FakeClock) -> dict[str, Any]:
    return {"node": "gpu001", "status": "ok", "time": clock.now(), "checks": [],
            "agent": {"created": clock.now()}}


def test_heartbeat_fails_over_as_a_full_report_without_backoff() -> None:
    clock, tr = FakeClock(), Replicas()
    p = Pusher("http://a:8470, http://b:8470/", "t" * 20, clock, tr, retries=0)
    box = Outbox()
    box.add(rep(clock))
    box.add(rep(clock))
    assert p.flush(box).sent == 2
    assert tr.sent == [("http://a:8470/v1/reports", True), ("http://a:8470/v1/reports", False)]
    tr.down.add("http://a")
    box.add(rep(clock))
    t0 = clock.now()
    res = p.flush(box)
    assert (res.sent, res.failed) == (1, False) and clock.now() == t0
    assert tr.sent[-1] == ("http://b:8470/v1/reports", True)   # in full, to b


def test_every_replica_down_keeps_the_reports_and_backs_off() -> None:
    clock, tr = FakeClock(), Replicas()
    tr.down |= {"http://a", "http://b"}
    p = Pusher(["http://a:8470", "http://b:8470"], "t" * 20, clock, tr, retries=1,
               backoff_s=1.0)
    box = Outbox()
    box.add(rep(clock))
    res = p.flush(box)
    assert res.failed and len(box.items) == 1 and "retry in" in (res.error or "")
    assert p.next_try > clock.now()
