"""Slurm backend: drain/resume/annotate/state through ``scontrol`` argument lists.

Commands never go through a shell; node names are validated (``validate_node``) and reasons
made by ``make_reason`` before they reach a command line; ``SLURM_CONF`` is passed in the
environment. The runner is injectable (``Runner``; ``minutiae.testing.slurm_runner`` is the
recording fake) so policy tests run without Slurm; the contract tests run against a real
slurmctld.

Etiquette (LBNL NHC's rule, with owners): every drain is written ``minutiae[<owner>]: …`` where the
owner is the controller's ``<cluster>/<controller>`` or the HealthCheckProgram's ``hcp``. A drain
whose reason is not this backend's own owner (an admin's, another tool's, the other minutiae
path's) is someone else's — ``drain`` leaves it (and its reason) alone and ``resume`` refuses it.
A plain ``minutiae:`` reason (written before owner tags) is ``legacy``: see ``owns``.
Admin notes in ``Comment=`` are never touched; ``annotate`` writes ``minutiae.<key>=<value>``
pairs into ``Extra=`` and keeps whatever else is there.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from minutiae.errors import BackendError, BackendUnavailable, ValidationError
from minutiae.schedulers.base import (
    DEFAULT_OWNER,
    BackendOptions,
    NodeSchedState,
    NodeState,
    UndoVerb,
    make_reason,
    owns,
    reason_owner,
    validate_node,
    validate_owner,
)

SCONTROL = "scontrol"
SQUEUE = "squeue"
_UNREACHABLE = (
    "Unable to contact slurm controller",
    "Unable to process configuration file",
    "Zero Bytes were transmitted or received",
    "Socket timed out",
    "Connection refused",
)
_KEY = re.compile(r"(?:^| )([A-Z][A-Za-z_]*)=")
_REASON = re.compile(r" Reason=(.*?)(?: \[([^\]\s@]+)@([^\]\s]+)\])?(?= Comment=| Extra=|$)")
_ANNOT_KEY = re.compile(r"^[a-z][a-z0-9_.-]{0,40}$")
_HOSTLIST = re.compile(r"^[A-Za-z0-9._\-\[\],]{1,4096}$")


@dataclass(frozen=True, slots=True)
class Completed:
    returncode: int
    stdout: str
    stderr: str


class Runner(Protocol):
    """Runs one command (an argument list) with ``env``; raises ``FileNotFoundError`` when the
    program is missing and ``subprocess.TimeoutExpired`` on timeout."""

    def __call__(self, argv: Sequence[str], env: Mapping[str, str], timeout: float) -> Completed: ...


def subprocess_runner(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> Completed:
    """The real runner: ``subprocess.run`` with an argument list, never a shell."""
    proc = subprocess.run(  # noqa: S603 - argument list, validated inputs
        list(argv), env=dict(env), capture_output=True, text=True, timeout=timeout, check=False
    )
    return Completed(proc.returncode, proc.stdout, proc.stderr)


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """``scontrol show node -o`` reduced to what minutiae needs."""

    name: str
    state: str
    flags: frozenset[str]
    reason: str | None
    reason_user: str | None
    comment: str | None
    extra: str | None


_TOLERANCE = re.compile(r"(?:^|[\s,;])minutiae:tolerance=(\d{1,6})(?=$|[\s,;])")


def parse_job_tolerances(text: str) -> dict[str, int]:
    """``squeue -h -o '%i|%k'`` (job id | comment) → job → nodes it survives losing, for jobs
    whose comment holds ``minutiae:tolerance=N`` (set with ``sbatch --comment``). Lines that do
    not parse are skipped (pure; never raises)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        job, sep, comment = line.partition("|")
        job = job.strip()
        if not sep or not re.fullmatch(r"[0-9]+(?:_[0-9]+)?", job):
            continue
        m = _TOLERANCE.search(comment.strip())
        if m:
            out[job] = int(m.group(1))
    return out


def parse_show_node(line: str) -> SlurmNode:
    """Parse one line of ``scontrol show node -o NAME`` (Slurm 20.11–24.x layouts)."""
    text = line.strip()
    m = _REASON.search(text)
    reason = user = None
    head = text
    if m:
        reason = m.group(1).strip() or None
        user = m.group(2)
        head = text[: m.start()] + text[m.end():]
    fields: dict[str, str] = {}
    keys = list(_KEY.finditer(head))
    for i, k in enumerate(keys):
        end = keys[i + 1].start() if i + 1 < len(keys) else len(head)
        fields[k.group(1)] = head[k.end():end].strip()
    name = fields.get("NodeName")
    state = fields.get("State")
    if not name or not state:
        raise BackendError(f"slurm: unexpected scontrol output: {text[:120]!r}")
    parts = state.split("+")
    base = parts[0]
    flags = set(parts[1:])
    if base.endswith("*"):
        base = base[:-1]
        flags.add("NOT_RESPONDING")
    for f in list(flags):
        if f.endswith("*"):
            flags.discard(f)
            flags.update({f[:-1], "NOT_RESPONDING"})
    return SlurmNode(
        name=name, state=base, flags=frozenset(flags), reason=reason, reason_user=user,
        comment=fields.get("Comment") or None, extra=fields.get("Extra") or None,
    )


def sched_state(n: SlurmNode) -> NodeSchedState:
    """DRAIN on an idle/down node is DRAINED, on a busy one DRAINING; DOWN without DRAIN is DOWN."""
    if "DRAIN" in n.flags or n.state in ("DRAINED", "DRAINING", "DRAIN"):
        if n.state in ("IDLE", "DOWN", "DRAINED", "FUTURE"):
            return NodeSchedState.DRAINED
        return NodeSchedState.DRAINING
    if n.state == "DOWN":
        return NodeSchedState.DOWN
    if n.state in ("IDLE", "ALLOCATED", "MIXED", "COMPLETING", "PLANNED", "RESERVED"):
        return NodeSchedState.AVAILABLE
    return NodeSchedState.UNKNOWN


class SlurmBackend:
    """``SchedulerBackend`` for Slurm. ``slurm_conf`` (path) goes into ``SLURM_CONF``."""

    name = "slurm"

    @classmethod
    def create(cls, opts: BackendOptions) -> SlurmBackend:
        return cls(slurm_conf=opts.slurm_conf, owner=opts.owner or DEFAULT_OWNER)

    @staticmethod
    def undo_hint(verb: UndoVerb, node: str, reason: str = "") -> str:
        """``scontrol update`` that reverses a drain (RESUME) or a resume (DRAIN again)."""
        if verb == "drain":
            return shlex.join(["scontrol", "update", f"NodeName={node}", "State=RESUME"])
        return shlex.join(["scontrol", "update", f"NodeName={node}", "State=DRAIN",
                           f"Reason={reason or make_reason('manual', DEFAULT_OWNER)}"])

    def __init__(
        self,
        slurm_conf: str | None = None,
        runner: Runner = subprocess_runner,
        timeout_s: float = 30.0,
        scontrol: str = SCONTROL,
        squeue: str = SQUEUE,
        owner: str = DEFAULT_OWNER,
    ) -> None:
        self.owner = validate_owner(owner)
        self.slurm_conf = slurm_conf
        self.runner = runner
        self.timeout_s = timeout_s
        self.scontrol = scontrol
        self.squeue = squeue

    # -- plumbing --------------------------------------------------------------------------
    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "USER")}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        conf = self.slurm_conf or os.environ.get("SLURM_CONF")
        if conf:
            env["SLURM_CONF"] = conf
        return env

    def _run(self, argv: list[str]) -> Completed:
        try:
            res = self.runner(argv, self._env(), self.timeout_s)
        except FileNotFoundError:
            raise BackendUnavailable(f"slurm: {argv[0]} not found (is slurm-client installed?)") from None
        except subprocess.TimeoutExpired:
            raise BackendUnavailable(
                f"slurm: {argv[0]} timed out after {self.timeout_s:.0f}s (slurmctld unreachable?)"
            ) from None
        if res.returncode != 0:
            err = (res.stderr or res.stdout).strip()
            if any(s in err for s in _UNREACHABLE):
                raise BackendUnavailable(f"slurm: cannot reach slurmctld: {err.splitlines()[-1] if err else ''}")
            raise BackendError(f"slurm: {' '.join(argv[:3])} failed (exit {res.returncode}): {err[:300]}")
        return res

    def _show(self, node: str) -> SlurmNode:
        res = self._run([self.scontrol, "show", "node", "-o", validate_node(node)])
        lines = [ln for ln in res.stdout.splitlines() if ln.startswith("NodeName=")]
        if not lines:
            raise BackendError(f"slurm: node {node} not found")
        return parse_show_node(lines[0])

    def _jobs(self, node: str) -> tuple[str, ...]:
        try:
            res = self._run([self.squeue, "-h", "-w", node, "-o", "%i"])
        except BackendError:
            return ()
        return tuple(j.strip() for j in res.stdout.split() if j.strip())

    def _node_state(self, n: SlurmNode, jobs: tuple[str, ...]) -> NodeState:
        st = sched_state(n)
        out = st in (NodeSchedState.DRAINED, NodeSchedState.DRAINING, NodeSchedState.DOWN)
        tag = reason_owner(n.reason) if out else None
        return NodeState(n.name, st, n.reason, owns(self.owner, tag), jobs, tag)

    # -- SchedulerBackend ------------------------------------------------------------------
    def state(self, node: str) -> NodeState:
        return self._node_state(self._show(node), self._jobs(node))

    def drain(self, node: str, reason: str) -> None:
        """Drain with ``reason`` (made safe by ``make_reason``). A node already drained or down by
        someone else keeps its state and reason; our own drain gets the new reason."""
        validate_node(node)
        safe = make_reason(reason, self.owner)
        n = self._show(node)
        st = sched_state(n)
        if st is not NodeSchedState.AVAILABLE and not owns(self.owner, reason_owner(n.reason)):
            return  # an admin's (another tool's, the other minutiae path's, Slurm's): leave it
        if st in (NodeSchedState.DRAINED, NodeSchedState.DRAINING) and n.reason == safe:
            return  # idempotent
        self._run([self.scontrol, "update", f"NodeName={node}", "State=DRAIN", f"Reason={safe}"])

    def resume(self, node: str) -> None:
        """Resume a node *we* drained. Raises ``BackendError`` for a drain that is not ours."""
        validate_node(node)
        n = self._show(node)
        st = sched_state(n)
        if st is NodeSchedState.AVAILABLE:
            return
        if not owns(self.owner, reason_owner(n.reason)):
            raise BackendError(f"slurm: refusing to resume {node}: not drained by "
                               f"minutiae[{self.owner}] (reason {n.reason!r})")
        self._run([self.scontrol, "update", f"NodeName={node}", "State=RESUME"])

    def states(self, nodes: Sequence[str]) -> dict[str, NodeState]:
        """Bulk ``state`` (used by the controller when present): one ``scontrol show node -o``
        and one ``squeue`` (plus ``scontrol show hostnames`` per multi-node job) instead of two
        commands per node. Nodes Slurm does not know are left out of the answer."""
        wanted = {validate_node(n) for n in nodes}
        res = self._run([self.scontrol, "show", "node", "-o"])
        parsed: dict[str, SlurmNode] = {}
        for ln in res.stdout.splitlines():
            if ln.startswith("NodeName="):
                sn = parse_show_node(ln)
                if sn.name in wanted:
                    parsed[sn.name] = sn
        jobs: dict[str, list[str]] = {}
        try:
            q = self._run([self.squeue, "-h", "-t", "R,CG", "-o", "%i %N"])
            for line in q.stdout.splitlines():
                parts = line.split()
                if len(parts) != 2 or not _HOSTLIST.fullmatch(parts[1]):
                    continue
                job, nodelist = parts
                hosts = ([nodelist] if "[" not in nodelist and "," not in nodelist else
                         self._run([self.scontrol, "show", "hostnames", nodelist]).stdout.split())
                for h in hosts:
                    if h in parsed:
                        jobs.setdefault(h, []).append(job)
        except BackendUnavailable:
            raise
        except BackendError:
            pass
        return {name: self._node_state(sn, tuple(jobs.get(name, ())))
                for name, sn in parsed.items()}

    def all_states(self) -> dict[str, NodeState]:
        """``states`` of every node Slurm knows (the controller counts fleet nodes whose agent
        never reported as silent)."""
        res = self._run([self.scontrol, "show", "node", "-o"])
        return self.states([parse_show_node(ln).name for ln in res.stdout.splitlines()
                            if ln.startswith("NodeName=")])

    def job_tolerances(self) -> dict[str, int]:
        """Running jobs' own tolerance (``sbatch --comment minutiae:tolerance=N``)."""
        res = self._run([self.squeue, "-h", "-t", "R,CG", "-o", "%i|%k"])
        return parse_job_tolerances(res.stdout)

    def annotate(self, node: str, key: str, value: str) -> None:
        """Set ``minutiae.<key>=<value>`` in the node's ``Extra`` (other content kept)."""
        validate_node(node)
        if not _ANNOT_KEY.fullmatch(key):
            raise ValidationError(f"invalid annotation key {key!r}")
        clean = re.sub(r"[^A-Za-z0-9._:@/+-]", "_", value)[:120]
        n = self._show(node)
        pairs = [p for p in (n.extra or "").split() if not p.startswith(f"minutiae.{key}=")]
        pairs.append(f"minutiae.{key}={clean}")
        self._run([self.scontrol, "update", f"NodeName={node}", f"Extra={' '.join(pairs)}"])
