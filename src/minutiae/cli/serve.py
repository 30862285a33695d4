"""``minutiae serve``: the fleet controller (HTTP API + reconcile loop). No logic here."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import click

from minutiae.cli.tokens import read_token
from minutiae.errors import ConfigError, InputError
from minutiae.inputs import read_text
from minutiae.schedulers import serve_backends

#: the config file read when --config is not given (and it exists)
DEFAULT_CONFIG = "/etc/minutiae/minutiae.toml"
#: a config file is a few lines: past this it is not one (and is never read whole)
MAX_CONFIG = 1 << 20
#: [controller] keys → this command's parameters
_KEYS = {"listen": "listen", "db": "db", "policy": "policy_path", "backend": "backend",
         "slurm_conf": "slurm_conf", "kubeconfig": "kubeconfig", "act": "act",
         "interval": "interval", "token_file": "token_file", "cluster": "cluster",
         "controller_id": "controller_id", "read_token_file": "read_token_file",
         "agent_tokens": "agent_tokens"}


def config_defaults(path: str | None) -> dict[str, Any]:
    """The ``[controller]`` table of the config file as this command's defaults (flags and
    environment variables override them). ``path`` None: ``$MINUTIAE_CONFIG`` or
    ``/etc/minutiae/minutiae.toml`` when it exists."""
    where = path or os.environ.get("MINUTIAE_CONFIG") or DEFAULT_CONFIG
    p = Path(where)
    if path is None and not p.exists():
        return {}
    try:
        data = tomllib.loads(read_text(p, limit=MAX_CONFIG, what="config file"))
    except InputError as exc:   # bounded: /dev/zero, a log given by mistake
        why = str(exc).removeprefix(f"{p}: ")
        raise ConfigError(f"{p}: cannot read config: {why}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from None
    table = data.get("controller", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{p}: [controller] must be a table")
    bad = sorted(set(table) - set(_KEYS))
    if bad:
        raise ConfigError(f"{p}: [controller]: unknown key(s) {', '.join(bad)} "
                          f"(known: {', '.join(_KEYS)})")
    return {_KEYS[k]: v for k, v in table.items()}


def _load_config(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    ctx.default_map = {**(ctx.default_map or {}), **config_defaults(value)}
    return value


@click.command("serve")
@click.option("--config", default=None, is_eager=True, expose_value=False,
              callback=_load_config, help="config file ([controller] table; default "
              "$MINUTIAE_CONFIG or /etc/minutiae/minutiae.toml when present); flags override it")
@click.option("--listen", default="127.0.0.1:8470", show_default=True, help="HOST:PORT")
@click.option("--db", "--store", "db", default="minutiae-controller.db", show_default=True,
              help="the store: a SQLite file (WAL), or postgresql://… shared by replicas")
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
@click.option("--agent-tokens", default=None, help="per-node agent tokens file ('<node> "
              "sha256:<hex>' lines): such a token posts its own node's reports only")
def command(listen: str, db: str, policy_path: str | None, backend: str,
            slurm_conf: str | None, kubeconfig: str | None, act: bool | None, interval: float,
            token_file: str | None, cluster: str, controller_id: str,
            read_token_file: str | None, agent_tokens: str | None) -> None:
    """Run the controller: receive agent reports, reconcile, act through a scheduler backend."""
    from minutiae.controller.run import serve

    serve(listen=listen, db=db, policy_path=policy_path, backend=backend,
          slurm_conf=slurm_conf, kubeconfig=kubeconfig, act=act, interval=interval,
          token=read_token(token_file), cluster=cluster, controller_id=controller_id,
          read_token=_read_only(read_token_file), agent_tokens=agent_tokens)


def _read_only(token_file: str | None) -> str | None:
    import os

    if token_file:
        return read_token(token_file)
    return os.environ.get("MINUTIAE_READ_TOKEN", "").strip() or None
