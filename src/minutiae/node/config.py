"""What a node check looks at (``CheckConfig``) and the ONE option table its commands share.

``OPTIONS`` is the general options plus every registered source's own (node/sources/*): both
``minutiae check`` and ``minutiae agent`` build their click options from it
(:func:`click_options`), and the agent daemon its ``CheckConfig`` (:func:`config_from_options`),
so a new source's option appears in both commands without editing either.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from minutiae.errors import ConfigError
from minutiae.node.sources.base import Kind, Option
from minutiae.node.sources.registry import GROUPS, REGISTRY

if TYPE_CHECKING:
    from minutiae.node.sources.nvml import NvmlApi

#: this machine's sysfs and procfs
SYS = Path("/sys")
PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class CheckConfig:
    """Where to look. Defaults check this node; set paths to check captured data instead.

    ``kmsg=None`` skips the kernel-log check (the CLI does that when it is pointed at captures
    without ``--kmsg``). ``expected_gpus``/``expected_driver`` turn on the GPU-count and driver
    rules; ``expected_ib_ports`` the InfiniBand port count (``ib.port-count-expected``; 0 declares
    the node IB-less: no ``class/infiniband`` is then OK, not UNKNOWN). ``nvml`` injects a
    ``pynvml``-like module (tests); ``use_nvml=False`` never loads it.
    ``checks`` limits the groups run (default: all of ``GROUPS``). ``ibstat`` (an ``ibstat`` or
    ``ibstatus`` capture) replaces sysfs for the IB check; ``nvlink_status`` (an ``nvidia-smi
    nvlink --status`` capture) adds NVLink link states to the GPU check, matched by UUID.
    ``proc_root`` is where ``uptime`` is read (the boot grace of the counter rules); left None
    it is ``/proc`` when ``sysfs_root`` is this machine's ``/sys`` and nowhere otherwise (a
    captured sysfs tree is never judged with this machine's uptime): see ``uptime_root``.
    ``options``: the options of sources that have no field here, keyed by source name
    (``{"<source>": {"<dest>": value}}``), as :func:`config_from_options` fills them.
    """

    sysfs_root: Path = SYS
    kmsg: Path | None = Path("/dev/kmsg")
    nvidia_smi_xml: Path | None = None
    dcgm: str | None = None
    nvlink_status: Path | None = None
    ibstat: Path | None = None
    expected_gpus: int | None = None
    expected_ib_ports: int | None = None
    expected_driver: str | None = None
    state_file: Path | None = None
    node: str | None = None
    use_nvml: bool = True
    nvml: NvmlApi | None = None
    checks: tuple[str, ...] = GROUPS
    year: int | None = None
    proc_root: Path | None = None
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def uptime_root(self) -> Path | None:
        """Where the uptime is read: ``proc_root``; else ``/proc`` when checking this machine
        (``sysfs_root`` is ``/sys``); else None (no uptime, hence no boot grace)."""
        if self.proc_root is not None:
            return self.proc_root
        return PROC if self.sysfs_root == SYS else None

    def option(self, source: str, dest: str, default: Any = None) -> Any:
        """A source's option value: the field ``dest`` if there is one, else ``options[source]``."""
        if dest in _FIELDS:
            return getattr(self, dest)
        return self.options.get(source, {}).get(dest, default)


_FIELDS = frozenset(f.name for f in dataclasses.fields(CheckConfig))

#: options of the check as a whole (the sources' own come from the registry)
GENERAL_HEAD = (
    Option("--sysfs-root", "sysfs_root", Kind.PATH, capture=True,
           check={"help": "Root of a sysfs tree (default /sys): class/infiniband, bus/pci/devices."},
           agent={"default": "/sys", "show_default": True}),
)
GENERAL_TAIL = (
    Option("--expected-gpus", "expected_gpus", Kind.INT,
           check={"range": (0, 1024), "help": "GPUs this node must have."}),
    Option("--expected-ib-ports", "expected_ib_ports", Kind.INT,
           check={"range": (0, 1024), "metavar": "N",
                  "help": "ACTIVE InfiniBand ports this node must have (0: none; no HCA is then OK)."}),
    Option("--expected-driver", "expected_driver", Kind.TEXT,
           check={"help": "Driver version this node must run."}),
    Option("--checks", "checks", Kind.TEXT,
           check={"metavar": "LIST", "help": f"Comma-separated subset of {','.join(GROUPS)} (default: all)."},
           agent={"default": ",".join(GROUPS), "show_default": True,
                  "help": "comma-separated check groups to run"}),
)

#: (owner, option): "" owns the general ones, else the source's name
OPTIONS: tuple[tuple[str, Option], ...] = (
    *(("", o) for o in GENERAL_HEAD),
    *((s.name, o) for s in REGISTRY for o in s.options),
    *(("", o) for o in GENERAL_TAIL),
)


def parse_checks(text: str | None) -> tuple[str, ...]:
    """``"gpu,ib"`` → ``("gpu", "ib")`` in display order; None → all. Raises ``ConfigError``."""
    if text is None:
        return GROUPS
    wanted = {c.strip() for c in text.split(",") if c.strip()}
    bad = sorted(wanted - set(GROUPS))
    if bad or not wanted:
        raise ConfigError(f"--checks: unknown {', '.join(bad) or '(none given)'} (known: {', '.join(GROUPS)})")
    return tuple(c for c in GROUPS if c in wanted)


def _spec(o: Option, command: str) -> Mapping[str, Any] | None:
    if command not in ("check", "agent"):
        raise ValueError(f"no options for command {command!r}")
    return o.check if command == "check" else o.agent


def option_defaults(command: str) -> dict[str, Any]:
    """``{click parameter: default}`` of ``command``'s node options (what it runs without flags)."""
    return {o.param: (spec.get("default", False if o.kind is Kind.FLAG else None))
            for _, o in OPTIONS if (spec := _spec(o, command)) is not None}


def config_from_options(values: Mapping[str, Any], command: str, **fixed: Any) -> CheckConfig:
    """The ``CheckConfig`` for ``command``'s option ``values`` (click parameter → value; a
    parameter not in ``values`` keeps its default) plus ``fixed`` fields (node, state_file …).

    A path or text given as ``''`` is none; ``check`` pointed at captured data (``--sysfs-root``,
    ``--nvidia-smi-xml``, ``--dcgm``, …) reads no kernel log without ``--kmsg``."""
    kwargs: dict[str, Any] = {}
    extra: dict[str, dict[str, Any]] = {}
    captured = False
    for owner, o in OPTIONS:
        if _spec(o, command) is None or values.get(o.param) is None:
            continue
        v = values[o.param]
        if o.kind is Kind.FLAG:
            v = not v if o.invert else bool(v)
        elif v == "":
            if o.dest != "kmsg":
                continue  # '' is "not given" (the kernel log: '' skips it)
            v = None
        elif o.kind is Kind.PATH:
            v = Path(v)
        elif o.kind is Kind.INT:
            v = _whole_number(o.flag, (o.check or {}).get("range"))(v)
        if o.dest == "checks":
            v = parse_checks(v)
        captured = captured or (o.capture and v is not None)
        if o.dest in _FIELDS:
            kwargs[o.dest] = v
        else:
            extra.setdefault(owner, {})[o.dest] = v
    if command == "check" and values.get("kmsg") is None and captured:
        kwargs["kmsg"] = None  # captures are not judged by this machine's kernel log
    return CheckConfig(**kwargs, **fixed, options=extra)


F = TypeVar("F", bound=Callable[..., Any])


def _whole_number(flag: str, bounds: tuple[int, int] | None) -> Callable[[Any], int]:
    """The click type of an INT option: a bad value (``abc``, ``-1``, past the range) raises
    ``ConfigError``, so the command exits 3 (UNKNOWN) with one line, like a bad ``--checks``:
    not click's usage error 2, which a Nagios/Slurm HealthCheckProgram reads as CRITICAL."""

    def integer(value: Any) -> int:  # click shows the name as the metavar: INTEGER
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        else:
            text = str(value).strip()
            if not re.fullmatch(r"-?[0-9]{1,12}", text):
                raise ConfigError(f"{flag}: expected a whole number, got {str(value)[:40]!r}")
            n = int(text)
        if bounds is not None and not bounds[0] <= n <= bounds[1]:
            raise ConfigError(f"{flag}: {n} is not in the range {bounds[0]}..{bounds[1]}")
        return n

    return integer


def click_options(command: str) -> Callable[[F], F]:
    """A decorator adding ``command``'s node options (from ``OPTIONS``) to a click command."""
    import click

    def apply(f: F) -> F:
        for _, o in reversed(OPTIONS):
            spec = _spec(o, command)
            if spec is None:
                continue
            kw = dict(spec)
            if o.kind is Kind.FLAG:
                kw["is_flag"] = True
                kw.setdefault("default", False)
            elif o.kind is Kind.INT:  # the range is the check's, in the agent too
                kw.pop("range", None)
                kw["type"] = _whole_number(o.flag, (o.check or {}).get("range"))
            elif o.kind is Kind.PATH:  # the agent has always taken its paths as text
                kw["type"] = click.Path(path_type=Path) if command == "check" else str
            kw.setdefault("default", None)
            f = click.option(o.flag, o.param, **kw)(f)
        return f

    return apply
