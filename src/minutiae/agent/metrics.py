"""The agent's Prometheus metrics (prometheus-client, its own registry, served on /metrics).

Series:
- ``minutiae_node_status`` — the node verdict as a Nagios code (0 OK … 3 UNKNOWN)
- ``minutiae_check_status{check}`` — each check group's status code
- ``minutiae_findings{check,kind,severity}`` — findings in the last run
- ``minutiae_node_action`` — the largest action the findings need (0 none … 4 inspect)
- ``minutiae_agent_cpu_seconds``, ``minutiae_agent_rss_bytes`` — the agent's own footprint
- ``minutiae_agent_check_duration_seconds``, ``minutiae_agent_last_check_timestamp_seconds``
- ``minutiae_agent_push_total{outcome}`` (ok, failed, rejected), ``minutiae_agent_buffered_reports``
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Mapping
from typing import Any

import psutil
from prometheus_client import CollectorRegistry, Counter, Gauge

from minutiae.model import Action, Status

_STATUS = {s.label: int(s) for s in Status}
_ACTION = {a.label: int(a) for a in Action}


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.node_status = Gauge("minutiae_node_status", "Node verdict (Nagios: 0 OK, 1 WARNING, "
                                 "2 CRITICAL, 3 UNKNOWN)", registry=r)
        self.node_status.set(3)   # before the first check run: UNKNOWN, never OK
        self.node_action = Gauge("minutiae_node_action", "Largest action needed (0 none, "
                                 "1 restart_app, 2 reset_gpu, 3 reboot, 4 inspect)", registry=r)
        self.check_status = Gauge("minutiae_check_status", "Check group status (Nagios code)",
                                  ["check"], registry=r)
        self.findings = Gauge("minutiae_findings", "Findings in the last run",
                              ["check", "kind", "severity"], registry=r)
        self.cpu = Gauge("minutiae_agent_cpu_seconds", "CPU seconds used by the agent process",
                         registry=r)
        self.rss = Gauge("minutiae_agent_rss_bytes", "Resident memory of the agent", registry=r)
        self.duration = Gauge("minutiae_agent_check_duration_seconds",
                              "Wall time of the last check run", registry=r)
        self.last = Gauge("minutiae_agent_last_check_timestamp_seconds",
                          "When the last check run finished (epoch s)", registry=r)
        self.push = Counter("minutiae_agent_push", "Report pushes to the controller",
                            ["outcome"], registry=r)
        self.follow_wakes = Counter("minutiae_agent_follow_wakes",
                                    "Immediate check cycles woken by the kernel-log follower",
                                    registry=r)
        self.follow_skipped = Gauge("minutiae_agent_follow_skipped_bytes",
                                    "Kernel-log bytes over the follower's rate cap (read by the "
                                    "interval check instead)", registry=r)
        self.buffered = Gauge("minutiae_agent_buffered_reports",
                              "Reports waiting for the controller", registry=r)
        for outcome in ("ok", "failed", "rejected"):
            self.push.labels(outcome)
        self._proc = psutil.Process()
        self._series: set[tuple[str, str, str]] = set()

    def observe(self, report: Mapping[str, Any], duration_s: float, now: float) -> None:
        """Update from one report in its JSON form (``NodeReport.to_json()``)."""
        self.node_status.set(_STATUS.get(str(report.get("status")), 3))
        self.node_action.set(_ACTION.get(str(report.get("action")), 0))
        counts: Tally[tuple[str, str, str]] = Tally()
        for c in report.get("checks", []):
            name = str(c.get("check"))
            self.check_status.labels(name).set(_STATUS.get(str(c.get("status")), 3))
            for f in c.get("findings", []):
                counts[(name, str(f.get("kind")), str(f.get("severity")))] += 1
        for key in self._series - set(counts):
            self.findings.labels(*key).set(0)
        for key, n in counts.items():
            self.findings.labels(*key).set(n)
        self._series |= set(counts)
        self.duration.set(duration_s)
        self.last.set(now)
        self.footprint()

    def footprint(self) -> None:
        t = self._proc.cpu_times()
        self.cpu.set(t.user + t.system)
        self.rss.set(self._proc.memory_info().rss)
