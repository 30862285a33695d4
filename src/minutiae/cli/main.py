"""The ``minutiae`` entry point.

Sub-commands are loaded lazily (each module in ``minutiae.cli`` exports ``command``) so that
``minutiae agent`` or ``minutiae check`` never import numpy, polars or FastAPI.
"""

from __future__ import annotations

import importlib
import sys

import click

from minutiae import __version__
from minutiae.errors import MinutiaeError

#: command name -> module under minutiae.cli that defines ``command``. Add a line per command.
COMMANDS: dict[str, str] = {
    "logscan": "logscan",
    "check": "check",
    "stragglers": "stragglers",
    "slownodes": "slownodes",
    "topo": "topo",
    "neighbours": "neighbours",
    "regress": "regress",
    "whatchanged": "whatchanged",
    "impact": "impact",
    "sim": "sim",
    "eval": "evaluate",
    "demo": "demo",
    "agent": "agent",
    "serve": "serve",
    "status": "fleet",
    "nodes": "fleet",
    "explain": "fleet",
    "pause": "fleet",
    "unpause": "fleet",
    "jobs": "fleet",
    "resolve": "resolve",
    "policy": "policy",
    "backtest": "backtest",
}

#: exit code for a deliberate error (Nagios UNKNOWN: we could not tell)
EXIT_ERROR = 3


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        mod_name = COMMANDS.get(cmd_name)
        if mod_name is None:
            return None
        try:
            module = importlib.import_module(f"minutiae.cli.{mod_name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"minutiae.cli.{mod_name}":
                return None  # command not built yet
            raise
        cmd = getattr(module, "commands", {}).get(cmd_name) or getattr(module, "command", None)
        return cmd if isinstance(cmd, click.Command) else None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="minutiae")
def cli() -> None:
    """minutiae: keeps GPU supercomputers healthy and fast."""


def main(argv: list[str] | None = None) -> int:
    try:
        rv = cli.main(args=argv, prog_name="minutiae", standalone_mode=False)
    except MinutiaeError as exc:
        click.echo(f"minutiae: error: {exc}", err=True)
        return EXIT_ERROR
    except click.exceptions.Abort:
        click.echo("minutiae: aborted", err=True)
        return 130
    except click.BadParameter as exc:
        if not _is_file_param(exc.param):
            exc.show()
            return exc.exit_code
        # a file that cannot be read is UNKNOWN (exit 3), not a usage error (2, which Nagios and
        # Slurm's HealthCheckProgram read as CRITICAL)
        click.echo(f"minutiae: error: {exc.format_message()}", err=True)
        return EXIT_ERROR
    except click.ClickException as exc:
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except BrokenPipeError:
        return 0
    except OSError as exc:  # an input that vanished, a directory given for a file, no permission
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"minutiae: error: {where}{exc.strerror or exc}", err=True)
        return EXIT_ERROR
    return rv if isinstance(rv, int) else 0


def _is_file_param(param: click.Parameter | None) -> bool:
    return param is not None and isinstance(param.type, click.Path | click.File)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
