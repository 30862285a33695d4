"""``minutiae policy show [--policy FILE] [--json]``: the policy in force — the shipped default
with FILE (an overlay: it sets only what it changes) merged over it — validated, as TOML (or
JSON). A bad value (NaN, inf, out of range, unknown key) exits 3 naming the key."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import click

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE.fullmatch(k) else json.dumps(k)


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise click.ClickException(f"cannot write {type(v).__name__} as TOML")


def _tables_of(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, Mapping) for x in v)


def dump_toml(data: Mapping[str, Any], prefix: str = "") -> str:
    """TOML for policy-shaped data (tables, arrays of tables, scalars, arrays, inline tables
    inside arrays); ``tomllib.loads`` of it gives ``data`` back."""
    lines = [f"{_key(k)} = {_value(v)}" for k, v in data.items()
             if not isinstance(v, Mapping) and not _tables_of(v)]
    out = "\n".join(lines) + ("\n" if lines else "")
    for k, v in data.items():
        path = f"{prefix}{_key(k)}"
        if isinstance(v, Mapping):
            out += f"\n[{path}]\n" + dump_toml(v, path + ".")
        elif _tables_of(v):
            for item in v:
                out += f"\n[[{path}]]\n" + dump_toml(item, path + ".")
    return out


@click.group("policy")
def command() -> None:
    """The remediation policy."""


@command.command("show")
@click.option("--policy", "path", default=None, help="an overlay over the shipped default")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of TOML")
def show(path: str | None, as_json: bool) -> None:
    """Print the merged, validated policy (what `minutiae serve --policy FILE` would use)."""
    from minutiae.controller.policy import parse_policy, policy_data

    data, where = policy_data(path)
    parse_policy(data, where)  # refuses NaN/inf/out-of-range values, naming the key
    click.echo(json.dumps(data, indent=2) if as_json else
               f"# minutiae policy: shipped default + {where}\n" + dump_toml(data))
