"""``minutiae serve``: the fleet controller (HTTP API + reconcile loop). No logic here."""

from __future__ import annotations

import click

from minutiae.cli.tokens import read_token
from minutiae.schedulers import serve_backends


@click.command("serve")
@click.option("--listen", default="127.0.0.1:8470", show_default=True, help="HOST:PORT")
@click.option("--db", default="minutiae-controller.db", show_default=True,
              help="SQLite store (WAL): reports, memory, audit log")
@click.option("--policy", "policy_path", default=None, help="policy TOML (default: shipped)")
@click.option("--backend", type=click.Choice(serve_backends()),
              default="dry-run", show_default=True)
@click.option("--slurm-conf", envvar="SLURM_CONF", default=None, help="slurm.conf for scontrol")
@click.option("--kubeconfig", envvar="KUBECONFIG", default=None)
@click.option("--act/--dry-run", "act", default=None,
              help="override the policy's dry_run (default: the policy decides; shipped: dry-run)")
@click.option("--interval", default=5.0, show_default=True,
              help="seconds between reconcile steps (a report that changes a node's health "
              "wakes it at once)")
@click.option("--token-file", default=None, help="file holding the bearer token "
              "(else $MINUTIAE_TOKEN)")
@click.option("--cluster", envvar="MINUTIAE_CLUSTER", default="default", show_default=True,
              help="cluster name: with --controller-id, the identity written into every drain "
              "(Slurm reason minutiae[<cluster>/<controller-id>]: …)")
@click.option("--controller-id", envvar="MINUTIAE_CONTROLLER_ID", default="controller",
              show_default=True, help="this controller's id within the cluster (replicas of "
              "one controller share it)")
@click.option("--read-token-file", default=None, help="file holding the read-only token for "
              "nodes/explain/audit (else $MINUTIAE_READ_TOKEN; unset: those reads are open)")
def command(listen: str, db: str, policy_path: str | None, backend: str,
            slurm_conf: str | None, kubeconfig: str | None, act: bool | None, interval: float,
            token_file: str | None, cluster: str, controller_id: str,
            read_token_file: str | None) -> None:
    """Run the controller: receive agent reports, reconcile, act through a scheduler backend."""
    from minutiae.controller.run import serve

    serve(listen=listen, db=db, policy_path=policy_path, backend=backend,
          slurm_conf=slurm_conf, kubeconfig=kubeconfig, act=act, interval=interval,
          token=read_token(token_file), cluster=cluster, controller_id=controller_id,
          read_token=_read_only(read_token_file))


def _read_only(token_file: str | None) -> str | None:
    import os

    if token_file:
        return read_token(token_file)
    return os.environ.get("MINUTIAE_READ_TOKEN", "").strip() or None
