"""A recording fake of the ``scontrol``/``squeue`` commands behind ``SlurmBackend``.

It keeps nodes in memory and answers ``scontrol show node -o NAME`` in the layout of real
Slurm 22.05 output (``... State=IDLE+DRAIN ... Reason=<text> [root@<time>] Comment=<note>``),
applies ``scontrol update NodeName=X State=DRAIN|RESUME Reason=.. Extra=..`` like slurmctld,
and records every argument list and environment in ``calls``. ``unreachable=True`` answers as
scontrol does when slurmctld is down. The contract tests run the same checks against the
real slurmctld (tests/test_slurm_backend_real.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from minutiae.schedulers.slurm.backend import Completed


@dataclass
class FakeNode:
    state: str = "IDLE"
    drain: bool = False
    reason: str | None = None
    comment: str | None = None
    extra: str | None = None
    jobs: list[str] = field(default_factory=list)


@dataclass
class FakeSlurm:
    nodes: dict[str, FakeNode] = field(default_factory=dict)
    calls: list[tuple[list[str], dict[str, str]]] = field(default_factory=list)
    unreachable: bool = False
    user: str = "root"
    stamp: str = "2026-01-01T00:00:00"

    def add(self, name: str, **kw: object) -> FakeNode:
        self.nodes[name] = FakeNode(**kw)  # type: ignore[arg-type]
        return self.nodes[name]

    def updates(self) -> list[list[str]]:
        return [argv for argv, _ in self.calls if argv[1:2] == ["update"]]

    def __call__(self, argv: Sequence[str], env: Mapping[str, str], timeout: float) -> Completed:
        args = list(argv)
        self.calls.append((args, dict(env)))
        if self.unreachable:
            return Completed(1, "", "slurm_load_node error: Unable to contact slurm controller (connect failure)\n")
        prog = args[0].rsplit("/", 1)[-1]
        if prog == "squeue":
            node = args[args.index("-w") + 1]
            n = self.nodes.get(node)
            return Completed(0, "".join(f"{j}\n" for j in (n.jobs if n else [])), "")
        if args[1:4] == ["show", "node", "-o"]:
            return self._show(args[4])
        if args[1] == "update":
            return self._update(args[2:])
        return Completed(1, "", f"scontrol: unexpected arguments {args[1:]}\n")

    def _show(self, name: str) -> Completed:
        n = self.nodes.get(name)
        if n is None:
            return Completed(1, "", f"Node {name} not found\n")
        state = n.state + ("+DRAIN" if n.drain else "")
        line = (
            f"NodeName={name} Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 "
            f"CPULoad=0.10 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:8 "
            f"NodeAddr=127.0.0.1 NodeHostName=vm Port=17001 Version=22.05.8 OS=Linux 6.1.0 #1 SMP "
            f"PREEMPT_DYNAMIC @0  RealMemory=1000 AllocMem=0 FreeMem=22512 Sockets=2 Boards=1 "
            f"State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A "
            f"Partitions=gpu  BootTime=2026-01-01T00:00:00 SlurmdStartTime=2026-01-01T00:00:00 "
            f"LastBusyTime=2026-01-01T00:00:00 CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES= "
            f"CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 "
            f"ExtSensorsTemp=n/s"
        )
        if n.extra:
            line += f" Extra={n.extra}"
        if n.reason:
            line += f" Reason={n.reason} [{self.user}@{self.stamp}]"
        if n.comment:
            line += f" Comment={n.comment}"
        return Completed(0, line + "\n", "")

    def _update(self, kv: list[str]) -> Completed:
        fields = dict(item.split("=", 1) for item in kv)
        n = self.nodes.get(fields.get("NodeName", ""))
        if n is None:
            return Completed(1, "", "slurm_update error: Invalid node name specified\n")
        state = fields.get("State")
        if state == "DRAIN":
            if not fields.get("Reason"):
                return Completed(1, "", "You must specify a reason when DOWNING or DRAINING a node. Request denied\n")
            n.drain = True
            n.reason = fields["Reason"]
        elif state == "RESUME":
            if not n.drain and n.state != "DOWN":
                return Completed(1, "", "slurm_update error: Invalid node state specified\n")
            n.drain = False
            n.state = "IDLE" if n.state == "DOWN" else n.state
            n.reason = None
        if "Extra" in fields:
            n.extra = fields["Extra"] or None
        if "Comment" in fields:
            n.comment = fields["Comment"] or None
        return Completed(0, "", "")
