"""Render a ``BindingPlan`` in the formats its consumers read (pure text).

``exports`` (bash: global exports + a ``case`` on the local rank), ``numactl`` and ``taskset``
(one launcher line per rank), ``slurm`` (``srun --cpu-bind=mask_cpu:… --gpu-bind=map_gpu:…``),
``torchrun`` (a wrapper script torchrun runs per rank), ``systemd`` (``CPUAffinity=`` drop-ins
pinning system daemons to the reserved CPUs).

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

_DEV = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
_RANK_VAR = '${LOCAL_RANK:-${SLURM_LOCALID:-${OMPI_COMM_WORLD_LOCAL_RANK:-0}}}'


class PlanFormat(Enum):
    EXPORTS = "exports"
    NUMACTL = "numactl"
    TASKSET = "taskset"
    SLURM = "slurm"
    TORCHRUN = "torchrun"
    SYSTEMD = "systemd"


def _dev(name: str) -> str:
    if not _DEV.fullmatch(name):
        raise ValidationError(f"device name {name!r} is not safe on a command line")
    return name


def _hca(r: RankBinding) -> str | None:
    return ",".join(_dev(n) for n in r.nics) if r.nics else None


def _ucx(r: RankBinding) -> str | None:
    return ",".join(f"{_dev(n)}:1" for n in r.nics) if r.nics else None


def _rank_env(plan: BindingPlan, r: RankBinding) -> list[str]:
    env = [f"LOCAL_RANK={r.local_rank}",
           f"CUDA_VISIBLE_DEVICES={','.join(map(str, plan.gpus))}"]
    if (hca := _hca(r)) is not None:
        env.append(f"NCCL_IB_HCA={shlex.quote('=' + hca)}")
        env.append(f"UCX_NET_DEVICES={_ucx(r)}")
    return env


def _header(plan: BindingPlan) -> list[str]:
    lines = [f"# minutiae binding plan: {len(plan.ranks)} local rank(s) on GPU(s) "
             f"{','.join(map(str, plan.gpus))}; reserved CPUs for system services: "
             f"{format_cpulist(plan.reserved) or 'none'}"]
    for r in plan.ranks:
        lines.append(f"#   rank {r.local_rank}: GPU{r.gpu} cpus={format_cpulist(r.cpus) or '-'} "
                     f"mem={','.join(map(str, r.mems)) or '-'} nic={','.join(r.nics) or '-'}"
                     f" ({r.nic_path.value}) nvme={r.nvme or '-'}")
    lines += [f"# warning: {w}" for w in plan.warnings]
    return lines


def _launcher(plan: BindingPlan, r: RankBinding, tool: str) -> str:
    parts: list[str] = []
    cpus = format_cpulist(r.cpus)
    if tool == "numactl" and (cpus or r.mems):
        parts.append("numactl")
        if cpus:
            parts.append(f"--physcpubind={cpus}")
        if r.mems:
            parts.append(f"--membind={','.join(map(str, r.mems))}")
        parts.append("--")
    elif tool == "taskset" and cpus:
        parts += ["taskset", "-c", cpus]
    parts += ["env", *_rank_env(plan, r), '"$@"']
    return " ".join(parts)


def render(plan: BindingPlan, fmt: PlanFormat) -> str:
    lines = _header(plan)
    if fmt is PlanFormat.EXPORTS:
        lines += ["export CUDA_DEVICE_ORDER=PCI_BUS_ID",
                  f"export CUDA_VISIBLE_DEVICES={','.join(map(str, plan.gpus))}",
                  f'case "{_RANK_VAR}" in']
        for r in plan.ranks:
            body = []
            if (hca := _hca(r)) is not None:
                body += [f"export NCCL_IB_HCA={shlex.quote('=' + hca)}",
                         f"export UCX_NET_DEVICES={_ucx(r)}"]
            if r.cpus:
                body.append(f"export MINUTIAE_CPUS={format_cpulist(r.cpus)}")
            if r.mems:
                body.append(f"export MINUTIAE_MEMS={','.join(map(str, r.mems))}")
            if r.nvme:
                body.append(f"export MINUTIAE_GDS_NVME={_dev(r.nvme)}")
            lines.append(f"  {r.local_rank}) {'; '.join(body) or ':'} ;;")
        lines.append("esac")
    elif fmt in (PlanFormat.NUMACTL, PlanFormat.TASKSET):
        lines.insert(0, "#!/usr/bin/env bash")
        lines += ["# usage: bash this-script.sh COMMAND [ARGS...]  (one process per rank)",
                  "set -u"]
        lines += [f"{_launcher(plan, r, fmt.value)} &" for r in plan.ranks]
        lines.append("wait")
    elif fmt is PlanFormat.SLURM:
        masks = ",".join(format_hexmask(r.cpus) if r.cpus else format_hexmask(plan.all_cpus)
                         for r in plan.ranks)
        hcas = sorted({n for r in plan.ranks for n in r.nics})
        if hcas:
            lines.append(f"export NCCL_IB_HCA={shlex.quote('=' + ','.join(map(_dev, hcas)))}")
        lines.append(f"srun --ntasks-per-node={len(plan.ranks)} --cpu-bind=mask_cpu:{masks} "
                     f"--gpu-bind=map_gpu:{','.join(map(str, plan.gpus))} \"$@\"")
    elif fmt is PlanFormat.TORCHRUN:
        lines = ["#!/usr/bin/env bash", *_header(plan),
                 f"# usage: torchrun --nproc-per-node={len(plan.ranks)} --no-python "
                 "bash this-script.sh python train.py",
                 "set -euo pipefail",
                 f"export CUDA_VISIBLE_DEVICES={','.join(map(str, plan.gpus))}",
                 'case "${LOCAL_RANK:?torchrun sets LOCAL_RANK}" in']
        for r in plan.ranks:
            body = [f"CPUS={format_cpulist(r.cpus)}", f"MEMS={','.join(map(str, r.mems))}"]
            if (hca := _hca(r)) is not None:
                body += [f"export NCCL_IB_HCA={shlex.quote('=' + hca)}",
                         f"export UCX_NET_DEVICES={_ucx(r)}"]
            lines.append(f"  {r.local_rank}) {'; '.join(body)} ;;")
        lines += ['  *) echo "minutiae: no binding for LOCAL_RANK=$LOCAL_RANK" >&2; exit 1 ;;',
                  "esac",
                  'args=()',
                  '[ -n "$CPUS" ] && args+=("--physcpubind=$CPUS")',
                  '[ -n "$MEMS" ] && args+=("--membind=$MEMS")',
                  'if [ ${#args[@]} -gt 0 ]; then exec numactl "${args[@]}" -- "$@"; fi',
                  'exec "$@"']
    elif fmt is PlanFormat.SYSTEMD:
        affinity = " ".join(_systemd_ranges(plan.reserved))
        if not affinity:
            raise ValidationError("no reserved CPUs: nothing to pin system services to "
                                  "(use --reserve-cores LIST)")
        lines += ["# 1) /etc/systemd/system.conf.d/50-minutiae-cpuaffinity.conf "
                  "(the manager and every service it starts; needs a reboot or daemon-reexec)",
                  "[Manager]", f"CPUAffinity={affinity}", "",
                  "# 2) or per service: /etc/systemd/system/<unit>.service.d/"
                  "50-minutiae-cpuaffinity.conf",
                  "[Service]", f"CPUAffinity={affinity}"]
    return "\n".join(lines) + "\n"


def _systemd_ranges(cpus: tuple[int, ...]) -> list[str]:
    return format_cpulist(cpus).split(",") if cpus else []
