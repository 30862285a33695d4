"""``minutiae resolve NODE --reason "…" [--now]``: return a repaired node to service through the
controller (``POST /v1/nodes/{node}/resolve``, admin token). No logic here."""

from __future__ import annotations

import getpass
import socket

import click


@click.command("resolve")
@click.argument("node")
@click.option("--reason", required=True, help="what was done to the node (audited)")
@click.option("--now", "now", is_flag=True,
              help="resume at once (default: after the policy's healthy delay of clean reports)")
@click.option("--controller", envvar="MINUTIAE_CONTROLLER", default="http://127.0.0.1:8470",
              show_default=True, help="controller URL ($MINUTIAE_CONTROLLER)")
@click.option("--token-file", default=None, help="bearer token file (else $MINUTIAE_TOKEN)")
@click.option("--json", "as_json", is_flag=True, help="print the API's JSON")
def command(node: str, reason: str, now: bool, controller: str, token_file: str | None,
            as_json: bool) -> None:
    """Acknowledge NODE's current findings (that evidence no longer drains it; new evidence
    does) and resume it. This is the undo `minutiae explain` prints for a drain."""
    import json

    from minutiae.cli.tokens import read_token
    from minutiae.controller.http.client import Client
    from minutiae.schedulers.base import validate_node

    try:
        who = f"{getpass.getuser()}@{socket.gethostname()}"
    except (KeyError, OSError):
        who = "cli"
    data = Client(controller, read_token(token_file)).post(
        f"/v1/nodes/{validate_node(node)}/resolve", {"reason": reason, "now": now, "by": who})
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    acked = data.get("acknowledged") or []
    when = {"now": "resumed now", "after the healthy delay":
            "resumes after the policy's healthy delay of clean reports"}.get(
        data.get("resumed") or "", "not resumed (not drained by this controller)")
    click.echo(f"{node}: resolved by {who}; {len(acked)} finding(s) acknowledged; {when}"
               + (" [dry-run]" if data.get("dry_run") else ""))
    for line in acked:
        click.echo(f"  acknowledged: {line}")
    if data.get("note"):
        click.echo(f"  note: {data['note']}")
