"""``minutiae status|nodes|explain|pause|unpause``: talk to the controller API. No logic here:
the client (``minutiae.controller.http.client``) fetches, the formatters print."""

from __future__ import annotations

import json
from typing import Any

import click

_controller = click.option("--controller", envvar="MINUTIAE_CONTROLLER",
                           default="http://127.0.0.1:8470", show_default=True,
                           help="controller URL ($MINUTIAE_CONTROLLER)")
_json = click.option("--json", "as_json", is_flag=True, help="print the API's JSON")
_token = click.option("--token-file", default=None, help="bearer token file (else "
                      "$MINUTIAE_TOKEN)")


def _out(data: Any, as_json: bool, text: str) -> None:
    click.echo(json.dumps(data, indent=2) if as_json else text)


@click.command("status")
@_controller
@_json
def status(controller: str, as_json: bool) -> None:
    """Fleet summary: health, unavailable nodes, pause/breaker, recent problems."""
    from minutiae.controller.http.client import Client, format_status

    data = Client(controller).get("/v1/status")
    _out(data, as_json, format_status(data))


@click.command("nodes")
@_controller
@_json
def nodes(controller: str, as_json: bool) -> None:
    """Every reporting node: health, scheduler state, reason, remediation step."""
    from minutiae.cli.tokens import read_only_token
    from minutiae.controller.http.client import Client, format_nodes

    data = Client(controller, read_only_token() or None).get("/v1/nodes")
    _out(data, as_json, format_nodes(data))


@click.command("explain")
@click.argument("node")
@_controller
@_json
def explain(node: str, controller: str, as_json: bool) -> None:
    """Why NODE is drained: evidence, rule, budget decision and the command that undoes it."""
    from minutiae.cli.tokens import read_only_token
    from minutiae.controller.http.client import Client, format_explain
    from minutiae.schedulers.base import validate_node

    data = Client(controller, read_only_token() or None).get(
        f"/v1/nodes/{validate_node(node)}/explain")
    _out(data, as_json, format_explain(data))


@click.command("pause")
@click.option("--reason", required=True, help="why (shown in status and every held decision)")
@_controller
@_token
def pause(reason: str, controller: str, token_file: str | None) -> None:
    """Stop the controller from acting (reports are still received and decisions recorded)."""
    from minutiae.cli.tokens import read_token
    from minutiae.controller.http.client import Client

    data = Client(controller, read_token(token_file)).post("/v1/pause", {"reason": reason})
    click.echo(f"paused: {data['reason']}")


@click.command("unpause")
@_controller
@_token
def unpause(controller: str, token_file: str | None) -> None:
    """Let the controller act again; also re-arms a tripped storm breaker."""
    from minutiae.cli.tokens import read_token
    from minutiae.controller.http.client import Client

    Client(controller, read_token(token_file)).post("/v1/unpause", None)
    click.echo("unpaused: the controller acts again (storm breaker re-armed)")


@click.command("jobs")
@click.option("--tolerance", "set_", metavar="JOB=N", default=None,
              help="job JOB survives losing N nodes at once (the budget's per-job check)")
@click.option("--forget", metavar="JOB", default=None,
              help="forget JOB's tolerance (the policy's per_job_max_nodes applies)")
@_controller
@_token
@_json
def jobs(set_: str | None, forget: str | None, controller: str, token_file: str | None,
         as_json: bool) -> None:
    """Per-job tolerances: list them, or set/forget one (with the token)."""
    from minutiae.cli.tokens import read_token
    from minutiae.controller.http.client import Client, format_jobs
    from minutiae.controller.wire import validate_job
    from minutiae.errors import ConfigError

    if set_ is not None or forget is not None:
        c = Client(controller, read_token(token_file))
        if set_ is not None:
            job, _, n = set_.partition("=")
            if not n.isdigit():
                raise ConfigError(f"--tolerance: expected JOB=N with N a number, got {set_!r}")
            c.put(f"/v1/jobs/{validate_job(job)}/tolerance", {"nodes": int(n)})
        if forget is not None:
            c.delete(f"/v1/jobs/{validate_job(forget)}/tolerance")
    data = Client(controller).get("/v1/jobs")
    _out(data, as_json, format_jobs(data))


commands: dict[str, click.Command] = {"status": status, "nodes": nodes, "explain": explain,
                                      "pause": pause, "unpause": unpause, "jobs": jobs}
