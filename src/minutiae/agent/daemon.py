"""Wiring for ``minutiae agent``: the real node checks, the /metrics server, the pusher."""

from __future__ import annotations

import signal
import socket
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minutiae.agent.follow import KernelLogFollower
from minutiae.agent.metrics import AgentMetrics
from minutiae.agent.push import Pusher
from minutiae.agent.runner import Agent, AgentConfig, ReportLike
from minutiae.clock import SystemClock
from minutiae.errors import ConfigError, SourceUnavailable
from minutiae.node.config import CheckConfig, config_from_options, option_defaults
from minutiae.schedulers.base import validate_node


@dataclass
class AgentOptions:
    """The agent's own options; ``sources`` holds the node-check options (click parameter →
    value, from the one table in ``minutiae.node.config``; missing ones keep the agent's
    defaults)."""

    controller: str | None
    token: str
    interval_s: float = 10.0
    state_dir: str = "/var/lib/minutiae"
    metrics_listen: str = "0.0.0.0:9470"
    node: str | None = None
    domains: Mapping[str, str] = field(default_factory=dict)
    cycles: int | None = None
    sources: Mapping[str, Any] = field(default_factory=dict)
    #: follow the kernel log between cycles and push a drain-worthy finding at once
    follow: bool = True


def check_config(o: AgentOptions, node: str, state: Path) -> CheckConfig:
    """The agent's ``CheckConfig``: its node-check options over the agent's defaults."""
    values = {**option_defaults("agent"), **o.sources}
    return config_from_options(values, "agent", state_file=state / "check-state.json", node=node)


def run_agent(o: AgentOptions) -> None:
    from prometheus_client import start_http_server

    from minutiae.node.check import run_check

    node = validate_node(o.node or socket.gethostname().split(".")[0])
    state = Path(o.state_dir)
    cfg = check_config(o, node, state)  # bad --checks: ConfigError before anything is created
    try:
        state.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--state-dir {state}: {exc.strerror or exc}") from None
    clock = SystemClock()

    def check() -> ReportLike:
        return run_check(cfg, clock)

    metrics = AgentMetrics()
    if o.metrics_listen:
        host, _, port = o.metrics_listen.rpartition(":")
        if not (port.isascii() and port.isdigit() and int(port) < 65536):
            raise ConfigError(f"--metrics-listen: expected HOST:PORT, got {o.metrics_listen!r}")
        try:
            start_http_server(int(port), addr=host or "0.0.0.0", registry=metrics.registry)
        except (OSError, ValueError) as exc:   # ValueError: a host name IDNA cannot encode
            raise ConfigError(f"--metrics-listen {o.metrics_listen}: {getattr(exc, 'strerror', None) or exc}"
                              ) from None
    pusher = Pusher(o.controller, o.token, clock) if o.controller else None
    agent = Agent(AgentConfig(node, o.interval_s, state, o.domains), check, clock, pusher,
                  metrics)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # state is saved after every cycle
    wake = threading.Event()
    follower = start_follower(o, cfg, wake, agent)
    agent.log(f"node {node}: checks every {o.interval_s:g}s; metrics on "
              f"{o.metrics_listen or 'off'}; controller {o.controller or 'none'}; kernel-log "
              f"follow {'on ' + str(cfg.kmsg) if follower else 'off'}")
    try:
        agent.run(o.cycles, stop=stop.is_set, wake=wake if follower else None)
    finally:
        if follower is not None:
            follower.stop()


def start_follower(o: AgentOptions, cfg: CheckConfig, wake: threading.Event,
                   agent: Agent) -> KernelLogFollower | None:
    """The kernel-log follower when asked for and the kernel-log check is on (else None; a
    log that cannot be opened is said once, and the interval check reports it UNKNOWN)."""
    if not o.follow or cfg.kmsg is None or "kernel_log" not in cfg.checks:
        return None
    try:
        return KernelLogFollower(cfg.kmsg, wake, year=cfg.year, log=agent.log,
                                 metrics=agent.metrics).start()
    except SourceUnavailable as exc:
        agent.log(f"kernel-log follow off: {exc.reason}")
        return None
