"""``minutiae agent``: the per-node daemon (checks on an interval, /metrics, push). No logic.

Light import path on purpose: click, psutil, prometheus-client, httpx and the node checks only.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from minutiae.errors import ConfigError
from minutiae.node.config import click_options


def _domains(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for v in values:
        k, sep, val = v.partition("=")
        if not sep or not k or not val:
            raise ConfigError(f"--domain: expected KEY=VALUE (e.g. rack=r03), got {v!r}")
        out[k] = val
    return out


@click.command("agent")
@click.option("--controller", envvar="MINUTIAE_CONTROLLER", default=None,
              help="controller URL(s), e.g. http://ctl:8470 or http://a:8470,http://b:8470 "
              "(replicas: fail over in turn; none: metrics only)")
@click.option("--token-file", default=None, help="bearer token file (else $MINUTIAE_TOKEN)")
@click.option("--interval", default=10.0, show_default=True, help="seconds between runs")
@click.option("--state-dir", default="/var/lib/minutiae", show_default=True,
              help="check state, outbox and sequence number survive restarts here")
@click.option("--metrics-listen", default="0.0.0.0:9470", show_default=True,
              help="HOST:PORT for /metrics ('' to disable)")
@click.option("--node", default=None, help="node name (default: short hostname)")
@click.option("--domain", "domains", multiple=True,
              help="failure domain KEY=VALUE (rack=, leaf=, nvl_domain=); repeatable")
@click_options("agent")
@click.option("--follow/--no-follow", default=True, show_default=True,
              help="follow the kernel log between runs; push a drain-worthy finding at once")
@click.option("--cycles", type=int, default=None, help="stop after N runs (default: forever)")
def command(controller: str | None, token_file: str | None, interval: float, state_dir: str,
            metrics_listen: str, node: str | None, domains: tuple[str, ...], cycles: int | None,
            follow: bool,
            **sources: Any) -> None:
    """Run the node checks every --interval seconds, serve /metrics, push to the controller."""
    # httpx imports its own command line (rich + pygments, ~4 MiB resident) when those are
    # installed; the daemon never uses it, so keep it out of the footprint.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    from minutiae.agent.daemon import AgentOptions, run_agent
    from minutiae.cli.tokens import read_token

    if interval <= 0:
        raise ConfigError("--interval must be > 0")
    token = read_token(token_file) if controller else ""
    run_agent(AgentOptions(
        controller=controller, token=token, interval_s=interval, state_dir=state_dir,
        metrics_listen=metrics_listen, node=node, domains=_domains(domains), cycles=cycles,
        sources=sources, follow=follow))
