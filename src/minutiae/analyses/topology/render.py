"""Render one ``BindingPlan`` in the formats its consumers read (pure text). Every format is
produced from the same plan (its ``env``, each rank's ``env``, CPUs and memory nodes), so they
cannot disagree; ``tests/analyses/topology/test_topo_plan_formats.py`` decodes each back.

``exports`` (bash: global exports + a ``case`` on the local rank), ``numactl`` and ``taskset``
(one launcher line per rank; taskset cannot bind memory and says so), ``slurm`` (``srun
--cpu-bind=mask_cpu:… --mem-bind=map_mem:… --gpu-bind=none``: every task sees the plan's GPUs and
local rank *r* uses ``cuda:r``, the same contract as the others), ``torchrun`` (a wrapper script
torchrun runs per rank), ``systemd`` (what system services to confine to the reserved CPUs:
the slice form, which leaves job cgroups their CPUs, and the ``CPUAffinity=`` form).

Every value placed on a command line is built from integers or validated device names, and
quoted with ``shlex.quote``.
"""

from __future__ import annotations

import re
import shlex
from enum import Enum

from minutiae.analyses.topology.plan import BindingPlan, RankBinding
from minutiae.errors import ValidationError
from minutiae.model.topology import format_cpulist, format_hexmask

_SAFE = re.compile(r"^[A-Za-z0-9=_.:,/-]{0,4096}$")
_RANK_VAR = '${LOCAL_RANK:-${SLURM_LOCALID:-${OMPI_COMM_WORLD_LOCAL_RANK:-0}}}'


class PlanFormat(Enum):
    EXPORTS = "exports"
    NUMACTL = "numactl"
    TASKSET = "taskset"
    SLURM = "slurm"
    TORCHRUN = "torchrun"
    SYSTEMD = "systemd"


def _val(v: str) -> str:
    if not _SAFE.fullmatch(v):
        raise ValidationError(f"value {v!r} is not safe on a command line")
    return shlex.quote(v)


def _assign(env: dict[str, str] | tuple[tuple[str, str], ...]) -> list[str]:
    items = env.items() if isinstance(env, dict) else env
    return [f"{k}={_val(v)}" for k, v in items]


def _mems(r: RankBinding) -> str:
    return ",".join(map(str, r.mems))


def _header(plan: BindingPlan) -> list[str]:
    lines = [f"# minutiae binding plan: {len(plan.ranks)} local rank(s) on GPU(s) "
             f"{','.join(map(str, plan.gpus))} (local rank r uses cuda:r); transport "
             f"{plan.transport.value}; reserved CPUs for system services: "
             f"{format_cpulist(plan.reserved) or 'none'}"]
    for r in plan.ranks:
        cpus = "unknown (unpinned)" if r.cpus is None else format_cpulist(r.cpus)
        lines.append(f"#   rank {r.local_rank}: GPU{r.gpu} cpus={cpus} mem={_mems(r) or '-'} "
                     f"nic={','.join(r.nics) or '-'} ({r.nic_path.value}) nvme={r.nvme or '-'}")
    lines += [f"# warning: {w}" for w in plan.warnings]
    lines += [f"# note: {w}" for w in plan.notes]
    return lines


def _exports(plan: BindingPlan) -> list[str]:
    lines = [f"export {a}" for a in _assign(plan.env)]
    lines.append(f'case "{_RANK_VAR}" in')
    for r in plan.ranks:
        body = [f"export {a}" for a in _assign(r.env)]
        if r.cpus is not None:
            body.append(f"export MINUTIAE_CPUS={format_cpulist(r.cpus)}")
        if r.mems:
            body.append(f"export MINUTIAE_MEMS={_mems(r)}")
        if r.nvme:
            body.append(f"export MINUTIAE_GDS_NVME={_val(r.nvme)}")
        lines.append(f"  {r.local_rank}) {'; '.join(body) or ':'} ;;")
    lines.append("esac")
    return lines


def _launcher(plan: BindingPlan, r: RankBinding, tool: str) -> str:
    parts: list[str] = []
    cpus = format_cpulist(r.cpus) if r.cpus is not None else ""
    if tool == "numactl" and (cpus or r.mems):
        parts.append("numactl")
        if cpus:
            parts.append(f"--physcpubind={cpus}")
        if r.mems:
            parts.append(f"--membind={_mems(r)}")
        parts.append("--")
    elif tool == "taskset" and cpus:
        parts += ["taskset", "-c", cpus]
    parts += ["env", *_assign(plan.rank_env(r)), '"$@"']
    return " ".join(parts)


def _numactl_args(r: RankBinding) -> list[str]:
    args = [f"--physcpubind={format_cpulist(r.cpus)}"] if r.cpus is not None else []
    return args + ([f"--membind={_mems(r)}"] if r.mems else [])


def _slurm(plan: BindingPlan) -> list[str]:
    """srun binds CPUs and memory itself when every rank's are known; otherwise (Slurm binds
    every task of a step or none) ``--cpu-bind=none --mem-bind=none`` and each task binds
    itself with numactl in a ``case`` on ``SLURM_LOCALID``, so unknown ranks stay unpinned
    and no mask is ever empty."""
    direct = all(r.cpus is not None and r.mems for r in plan.ranks)
    lines = [
        "# GPUs: --gpu-bind=none, so every task sees all of the step's GPUs; CUDA_VISIBLE_DEVICES "
        f"(set below, over Slurm's own) lists the plan's GPUs {','.join(map(str, plan.gpus))} by "
        "the node's indices in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID), and task "
        "$SLURM_LOCALID uses cuda:$SLURM_LOCALID.",
        "# Run it in a whole-node allocation (sbatch/salloc --exclusive, or --gres=gpu:<all the "
        "node's GPUs>): with ConstrainDevices=yes Slurm and CUDA number the step's GPUs from 0 "
        "(srun(1), --gpu-bind), which are the node's indices only when the step holds them all, "
        "and srun honours explicit CPU masks only when the step holds every CPU of the node "
        "(srun(1), --cpu-bind). --cpu-bind/--mem-bind need TaskPlugin=task/affinity."]
    if direct:
        cpu = "mask_cpu:" + ",".join(format_hexmask(r.cpus or ()) for r in plan.ranks)
        mem = "map_mem:" + ",".join(str(r.mems[0]) for r in plan.ranks)
    else:
        cpu = mem = "none"
        lines.append("# some rank's CPUs or NUMA node are unknown: Slurm binds no task; each task "
                     "binds itself (numactl) below, the unknown ones stay unpinned")
    run = ["env", *_assign(plan.env)]
    if not direct or any(r.env for r in plan.ranks):
        cases = []
        for r in plan.ranks:
            body = [f"export {' '.join(_assign(r.env))}"] if r.env else []
            bind = [] if direct else _numactl_args(r)
            body.append(f"exec numactl {' '.join(bind)} -- \"$@\"" if bind else 'exec "$@"')
            cases.append(f"{r.local_rank}) {'; '.join(body)};;")
        script = (f'case "$SLURM_LOCALID" in {" ".join(cases)} esac; '
                  'echo "minutiae: no binding for SLURM_LOCALID=$SLURM_LOCALID" >&2; exit 1')
        run += ["bash", "-c", shlex.quote(script), "bash"]
    lines.append(f"srun --ntasks-per-node={len(plan.ranks)} --cpu-bind={cpu} --mem-bind={mem} "
                 f"--gpu-bind=none {' '.join(run)} \"$@\"")
    return lines


def _torchrun(plan: BindingPlan) -> list[str]:
    lines = [f"# usage: torchrun --nproc-per-node={len(plan.ranks)} --no-python "
             "bash this-script.sh python train.py", "set -euo pipefail"]
    lines += [f"export {a}" for a in _assign(plan.env)]
    lines.append('case "${LOCAL_RANK:?torchrun sets LOCAL_RANK}" in')
    for r in plan.ranks:
        body = [f"CPUS={format_cpulist(r.cpus) if r.cpus is not None else ''}", f"MEMS={_mems(r)}"]
        body += [f"export {a}" for a in _assign(r.env)]
        lines.append(f"  {r.local_rank}) {'; '.join(body)} ;;")
    return lines + ['  *) echo "minutiae: no binding for LOCAL_RANK=$LOCAL_RANK" >&2; exit 1 ;;',
                    "esac", "args=()",
                    '[ -n "$CPUS" ] && args+=("--physcpubind=$CPUS")',
                    '[ -n "$MEMS" ] && args+=("--membind=$MEMS")',
                    'if [ ${#args[@]} -gt 0 ]; then exec numactl "${args[@]}" -- "$@"; fi',
                    'exec "$@"']


def _systemd(plan: BindingPlan) -> list[str]:
    cpus = format_cpulist(plan.reserved)
    if not cpus:
        raise ValidationError("no reserved CPUs: nothing to pin system services to "
                              "(use --reserve-cores LIST)")
    aff = " ".join(cpus.split(","))
    return [
        f"# Confines system services to CPUs {cpus}; the ranks use the others.",
        "# A) slices (cgroup v2, systemd >= 244; `systemctl daemon-reload`, no reboot): every",
        "#    service (sshd, slurmd, kubelet, containerd, ...) and every login session is held",
        "#    to these CPUs; cgroups outside these slices (kubepods.slice, machine.slice) keep",
        "#    theirs. Slurm with cgroup/v2 starts job steps under system.slice/slurmstepd.scope:",
        "#    there the slice form would confine the jobs too; use C) for the daemons instead.",
        "# /etc/systemd/system/system.slice.d/50-minutiae-cpus.conf", "[Slice]",
        f"AllowedCPUs={cpus}", "",
        "# /etc/systemd/system/user.slice.d/50-minutiae-cpus.conf", "[Slice]",
        f"AllowedCPUs={cpus}", "",
        "# B) /etc/systemd/system.conf.d/50-minutiae-cpuaffinity.conf: the CPU affinity of PID 1",
        "#    and of EVERY process it starts, inherited by their children: sshd, slurmd, kubelet",
        "#    and the jobs they launch, unless the launcher sets its own (Slurm task/affinity,",
        "#    the kubelet CPU manager); needs a reboot or `systemctl daemon-reexec`.",
        "[Manager]", f"CPUAffinity={aff}", "",
        "# C) one service: /etc/systemd/system/<unit>.service.d/50-minutiae-cpuaffinity.conf",
        "#    (e.g. irqbalance, dcgm, node-exporter; not slurmd or kubelet, whose children are jobs)",
        "[Service]", f"CPUAffinity={aff}"]


def render(plan: BindingPlan, fmt: PlanFormat) -> str:
    lines = _header(plan)
    if fmt is PlanFormat.EXPORTS:
        lines += _exports(plan)
    elif fmt in (PlanFormat.NUMACTL, PlanFormat.TASKSET):
        lines.insert(0, "#!/usr/bin/env bash")
        if fmt is PlanFormat.TASKSET and any(r.mems for r in plan.ranks):
            lines.append("# taskset pins CPUs only: memory is NOT bound (use --format numactl)")
        lines += ["# usage: bash this-script.sh COMMAND [ARGS...]  (one process per rank)", "set -u"]
        lines += [f"{_launcher(plan, r, fmt.value)} &" for r in plan.ranks]
        lines.append("wait")
    elif fmt is PlanFormat.SLURM:
        lines += _slurm(plan)
    elif fmt is PlanFormat.TORCHRUN:
        lines = ["#!/usr/bin/env bash", *lines, *_torchrun(plan)]
    elif fmt is PlanFormat.SYSTEMD:
        lines += _systemd(plan)
    return "\n".join(lines) + "\n"
