"""The node-source seam: what one source of node data is, and what it hands back.

A source (NVML, an nvidia-smi capture, DCGM, IB sysfs, an ``ibstat`` capture, PCIe sysfs, the
uptime, the kernel log …) is one module that declares a ``NodeSource``: its ``name``, the check
``group`` its findings are reported under (``CheckResult.check``; None for a node fact such as
the uptime), the counter-rule ``components`` whose findings belong to that group, its command-
line / config ``options`` (data: ``minutiae check``, ``minutiae agent`` and the agent daemon all
build theirs from them) and ``read(request) -> Reading | None``. It is then one line of
``node/sources/registry.py``; ``run_check`` is a loop over that registry (node/check.py).

Within a group the sources run in registry order: a ``fallback`` source runs only when no earlier
source of its group delivered a snapshot (NVML when no capture is given); ``request.base`` is what
the earlier ones delivered (an overlay such as NVLink states is matched against it). A source that
cannot be read returns a finished ``CheckResult`` (UNKNOWN with the reason, never OK): the group
stops there and the other groups still run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from minutiae.model import CheckResult
from minutiae.model.findings import Scalar
from minutiae.model.snapshot import Snapshot

if TYPE_CHECKING:
    from minutiae.clock import Clock
    from minutiae.node.config import CheckConfig
    from minutiae.node.memory import CheckMemory


class Kind(Enum):
    """What an option's value is (the click type it gets)."""

    PATH = "path"
    TEXT = "text"
    INT = "int"
    FLAG = "flag"


@dataclass(frozen=True, slots=True)
class Option:
    """One command-line / config option, as data.

    ``dest`` is the ``CheckConfig`` field it sets (or, for a source whose options are not
    fields, its key in ``CheckConfig.options[<source name>]``); the click parameter is the flag's
    name (``--no-nvml`` → ``no_nvml``). ``invert``: a ``--no-X`` flag sets ``dest`` to False.
    ``capture``: the option points ``check`` at captured data, so without ``--kmsg`` it does not
    read this machine's kernel log. ``check``/``agent``: the click keyword arguments of the option
    in each command (None: not an option of that command); the agent takes paths as text (``''``
    means none), ``check`` as paths.
    """

    flag: str
    dest: str
    kind: Kind = Kind.PATH
    check: Mapping[str, Any] | None = field(default_factory=dict)
    agent: Mapping[str, Any] | None = field(default_factory=dict)
    invert: bool = False
    capture: bool = False

    @property
    def param(self) -> str:
        return self.flag.lstrip("-").replace("-", "_")


@dataclass(frozen=True, slots=True)
class Request:
    """What a source is given for one check cycle."""

    cfg: CheckConfig
    now: float
    clock: Clock
    memory: CheckMemory
    node: str
    cache_dir: Path | None = None
    base: Snapshot | None = None


@dataclass(frozen=True, slots=True)
class Reading:
    """What a source delivered: a ``snapshot`` of observations (judged by the counter rules),
    or a finished ``result`` (the source failed, or it judges its own data, like the kernel
    log), plus ``facts`` about the node (``node.<metric>`` values for the counter rules, e.g.
    the uptime) and non-fatal ``notes``."""

    snapshot: Snapshot | None = None
    result: CheckResult | None = None
    facts: Mapping[str, Scalar] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


@runtime_checkable
class NodeSource(Protocol):
    """The seam (see the module docstring)."""

    @property
    def name(self) -> str: ...
    @property
    def group(self) -> str | None: ...
    @property
    def components(self) -> tuple[str, ...]: ...
    @property
    def options(self) -> tuple[Option, ...]: ...
    @property
    def fallback(self) -> bool: ...

    def read(self, request: Request) -> Reading | None:
        """This cycle's reading; None when the source is not configured (nothing to say)."""
        ...


@dataclass(frozen=True, slots=True)
class Source:
    """A ``NodeSource`` made of a read function: what most source modules declare."""

    name: str
    group: str | None
    reader: Callable[[Request], Reading | None]
    options: tuple[Option, ...] = ()
    components: tuple[str, ...] = ()
    fallback: bool = False

    def read(self, request: Request) -> Reading | None:
        return self.reader(request)
