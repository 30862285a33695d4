"""Wiring for ``minutiae agent``: the real node checks, the /metrics server, the pusher."""

from __future__ import annotations

import signal
import socket
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from minutiae.agent.metrics import AgentMetrics
from minutiae.agent.push import Pusher
from minutiae.agent.runner import Agent, AgentConfig, ReportLike
from minutiae.clock import SystemClock
from minutiae.errors import ConfigError
from minutiae.schedulers.base import validate_node


@dataclass
class AgentOptions:
    controller: str | None
    token: str
    interval_s: float = 10.0
    state_dir: str = "/var/lib/minutiae"
    metrics_listen: str = "0.0.0.0:9470"
    node: str | None = None
    domains: Mapping[str, str] = field(default_factory=dict)
    sysfs_root: str = "/sys"
    proc_root: str | None = None  # None: /proc when sysfs_root is /sys (CheckConfig.uptime_root)
    kmsg: str | None = "/dev/kmsg"
    nvidia_smi_xml: str | None = None
    dcgm: str | None = None
    use_nvml: bool = True
    expected_gpus: int | None = None
    expected_driver: str | None = None
    checks: tuple[str, ...] = ("gpu", "ib", "pcie", "kernel_log")
    cycles: int | None = None


def run_agent(o: AgentOptions) -> None:
    from prometheus_client import start_http_server

    from minutiae.node.check import CHECKS, CheckConfig, run_check

    node = validate_node(o.node or socket.gethostname().split(".")[0])
    bad = [c for c in o.checks if c not in CHECKS]
    if bad or not o.checks:
        raise ConfigError(f"--checks: unknown {', '.join(bad) or '(none given)'} "
                          f"(known: {', '.join(CHECKS)})")
    state = Path(o.state_dir)
    try:
        state.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--state-dir {state}: {exc.strerror or exc}") from None
    cfg = CheckConfig(sysfs_root=Path(o.sysfs_root), kmsg=Path(o.kmsg) if o.kmsg else None,
                      nvidia_smi_xml=Path(o.nvidia_smi_xml) if o.nvidia_smi_xml else None,
                      dcgm=o.dcgm, expected_gpus=o.expected_gpus,
                      expected_driver=o.expected_driver, state_file=state / "check-state.json",
                      node=node, use_nvml=o.use_nvml, checks=o.checks,
                      proc_root=Path(o.proc_root) if o.proc_root else None)
    clock = SystemClock()

    def check() -> ReportLike:
        return run_check(cfg, clock)

    metrics = AgentMetrics()
    if o.metrics_listen:
        host, _, port = o.metrics_listen.rpartition(":")
        if not port.isdigit():
            raise ConfigError(f"--metrics-listen: expected HOST:PORT, got {o.metrics_listen!r}")
        try:
            start_http_server(int(port), addr=host or "0.0.0.0", registry=metrics.registry)
        except OSError as exc:
            raise ConfigError(f"--metrics-listen {o.metrics_listen}: {exc.strerror or exc}"
                              ) from None
    pusher = Pusher(o.controller, o.token, clock) if o.controller else None
    agent = Agent(AgentConfig(node, o.interval_s, state, o.domains), check, clock, pusher,
                  metrics)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # state is saved after every cycle
    agent.log(f"node {node}: checks every {o.interval_s:g}s; metrics on "
              f"{o.metrics_listen or 'off'}; controller {o.controller or 'none'}")
    agent.run(o.cycles, stop=stop.is_set)
