"""Binding plans: values on real captures, and every output format checked by the tool that
consumes it (numactl, taskset, bash, systemd-analyze) where it is installed here."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from minutiae.analyses.topology.parse.detect import parse_topology
from minutiae.analyses.topology.plan import Transport, default_reserved, make_plan, split_cpus
from minutiae.analyses.topology.read_sysfs import read_sysfs_topology
from minutiae.analyses.topology.render import PlanFormat, render
from minutiae.errors import ConfigError
from minutiae.model.topology import PathType, format_cpulist, parse_cpulist, parse_hexmask
from minutiae.testing.topology import build_sysfs, dgx_like_spec, dgx_like_topology

H100 = "nvidia_smi/ml-engineering/topo_m_8xH100_nv18_numa.txt"


def _real(realdata: Path, rel: str):  # type: ignore[no-untyped-def]
    p = realdata / rel
    if not p.exists():
        pytest.skip(f"missing {p}")
    return parse_topology(p.read_bytes(), str(p))


def test_split_keeps_hyperthread_siblings_aligned() -> None:
    cpus = parse_cpulist("1-51,105-155")
    parts = split_cpus(cpus, 4)
    assert [format_cpulist(p) for p in parts] == [
        "1-12,105-116", "13-25,117-129", "26-38,130-142", "39-51,143-155"]
    assert sorted(c for p in parts for c in p) == list(cpus)


def test_h100_plan_values(realdata: Path) -> None:
    t = _real(realdata, H100)
    assert default_reserved(t) == (0, 52, 104, 156)
    plan = make_plan(t)
    assert plan.gpus == tuple(range(8))
    assert [format_cpulist(r.cpus or ()) for r in plan.ranks[:1] + plan.ranks[4:5]] == [
        "1-12,105-116", "53-64,157-168"]
    assert [r.mems for r in plan.ranks] == [(0,)] * 4 + [(1,)] * 4
    all_cpus = [c for r in plan.ranks for c in r.cpus or ()]
    assert len(all_cpus) == len(set(all_cpus)) == 208 - 4  # disjoint, everything but reserved
    assert plan.ranks[0].nics == ()  # nvidia-smi capture without NIC columns


def test_plan_on_ndv5_uses_the_pix_nic_and_warns_on_unnamed(realdata: Path) -> None:
    t = _real(realdata, "nccl_topo/azhpc-images/ndv5-topo.xml")
    plan = make_plan(t, ranks=2, reserved=())
    assert [r.nic_path.value for r in plan.ranks] == ["PIX", "PIX"]
    assert plan.ranks[0].nics == ()  # NICs named by PCI id cannot go into NCCL_IB_HCA
    assert any("NCCL_IB_HCA/UCX_NET_DEVICES left out" in w for w in plan.warnings)
    assert "NCCL_IB_HCA" not in dict(plan.env)
    assert [format_cpulist(r.cpus or ()) for r in plan.ranks] == ["0-23", "24-47"]


def test_plan_on_p5_is_efa_without_ib_variables(realdata: Path) -> None:
    t = _real(realdata, "nccl_topo/aws-ofi-nccl/p5.48xl-topo.xml")
    auto = make_plan(t)  # the file does not say the NICs are EFA: nothing guessed
    assert auto.transport is Transport.UNKNOWN and any("--transport" in w for w in auto.warnings)
    assert not {"NCCL_IB_HCA", "UCX_NET_DEVICES", "FI_PROVIDER"} & set(dict(auto.env))
    plan = make_plan(t, transport=Transport.EFA)
    assert plan.ranks[2].nics == ("rdmap113s0", "rdmap114s0", "rdmap115s0", "rdmap116s0")
    env = dict(plan.env)
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    text = render(plan, PlanFormat.EXPORTS)
    assert "NCCL_IB_HCA" not in text and "UCX_NET_DEVICES" not in text


def test_ib_list_is_one_for_the_job_unless_per_rank(tmp_path: Path) -> None:
    t = read_sysfs_topology(build_sysfs(tmp_path / "sys", dgx_like_spec()))
    plan = make_plan(t)
    assert plan.transport is Transport.IB
    assert dict(plan.env)["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}" for i in range(8))
    assert all(r.env == () for r in plan.ranks)
    per = make_plan(t, per_rank_nics=True)
    assert "NCCL_IB_HCA" not in dict(per.env)
    assert [dict(r.env)["NCCL_IB_HCA"] for r in per.ranks] == [f"=mlx5_{i}" for i in range(8)]
    assert dict(per.ranks[3].env)["UCX_NET_DEVICES"] == "mlx5_3:1"


def test_nics_beyond_pxb_are_not_listed() -> None:
    from dataclasses import replace

    t = dgx_like_topology()
    far = {k: (PathType.NODE if k[1] == "mlx5_2" else v) for k, v in t.gpu_nic.items()}
    plan = make_plan(replace(t, gpu_nic=far))
    assert "mlx5_2" not in dict(plan.env)["NCCL_IB_HCA"]
    assert plan.ranks[2].nics == () and any("GPU2: no NIC within PXB" in w for w in plan.warnings)


def test_matrix_without_legend_never_names_column_labels() -> None:
    text = ("\tGPU0\tGPU1\tNIC0\tNIC1\tCPU Affinity\tNUMA Affinity\n"
            "GPU0\t X \tNV4\tPIX\tSYS\t0-7\t0\nGPU1\tNV4\t X \tSYS\tPIX\t8-15\t1\n"
            "NIC0\tPIX\tSYS\t X \tSYS\nNIC1\tSYS\tPIX\tSYS\t X \n")
    t = parse_topology(text.encode(), "x")
    for tr in (None, Transport.IB):
        plan = make_plan(t, reserved=(), transport=tr)
        for fmt in PlanFormat:
            if fmt is not PlanFormat.SYSTEMD:
                assert "NIC0" not in render(plan, fmt).split("# warning")[0].split("\n", 1)[1]
        assert all(r.nics == () for r in plan.ranks)


def test_more_ranks_than_free_cpus_share_them() -> None:
    from dataclasses import replace

    t = dgx_like_topology()
    tiny = replace(t, gpus=tuple(replace(g, cpus=(0, 1)) for g in t.gpus), numa_cpus={})
    plan = make_plan(tiny, reserved=(0,))
    assert [r.cpus for r in plan.ranks] == [(1,)] * 8
    assert any("share 1 free CPU" in w for w in plan.warnings)


def test_plan_on_ndv2_warns_gpu_without_local_nic(realdata: Path) -> None:
    t = _real(realdata, "nccl_topo/azhpc-images/ndv2-topo.xml")
    plan = make_plan(t, reserved=())
    assert sum("no NIC within PXB" in w for w in plan.warnings) == 8


def test_plan_errors() -> None:
    t = dgx_like_topology()
    with pytest.raises(ConfigError, match="more than the 8 GPU"):
        make_plan(t, ranks=9)
    with pytest.raises(ConfigError, match="at least 1"):
        make_plan(t, ranks=0)
    from dataclasses import replace
    with pytest.raises(ConfigError, match="no GPU"):
        make_plan(replace(t, gpus=()))


# --- syntax checked by the consumers -----------------------------------------------------------

@pytest.fixture
def local_plan(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A 2-GPU node whose CPUs are this machine's (so numactl/taskset can really run)."""
    here = sorted(os.sched_getaffinity(0))
    if len(here) < 2:
        pytest.skip("needs 2 CPUs")
    cpus = format_cpulist(here[:2])
    spec = dgx_like_spec(gpus=2, cpus_per_numa=(cpus, cpus))
    for d in spec.devices:
        d.numa = 0
    spec.numa = {0: cpus}
    t = read_sysfs_topology(build_sysfs(tmp_path / "sys", spec))
    return make_plan(t, reserved=())


def _lines(text: str, tool: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith(tool + " ")]


def test_numactl_lines_run(local_plan, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if shutil.which("numactl") is None:
        pytest.skip("numactl is not installed here")
    text = render(local_plan, PlanFormat.NUMACTL)
    lines = _lines(text, "numactl")
    assert len(lines) == 2
    for i, ln in enumerate(lines):
        cmd = ln.replace('"$@" &', "sh -c 'echo $LOCAL_RANK $NCCL_IB_HCA'")
        out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=20)
        if "Operation not permitted" in out.stderr:
            pytest.skip(f"numactl may not bind here: {out.stderr.strip()}")
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [str(i), "=mlx5_0,mlx5_1"]  # one list for the job
    # --show under the plan's binding reports exactly the planned CPU
    first = lines[0].split(" -- ")[0] + " --show"
    show = subprocess.run(["bash", "-c", first], capture_output=True, text=True, timeout=20)
    phys = re.search(r"physcpubind: ([\d ]+)", show.stdout)
    assert phys and [int(x) for x in phys.group(1).split()] == list(local_plan.ranks[0].cpus)


def test_taskset_lines_run_and_bind(local_plan) -> None:  # type: ignore[no-untyped-def]
    if shutil.which("taskset") is None:
        pytest.skip("taskset is not installed here")
    lines = _lines(render(local_plan, PlanFormat.TASKSET), "taskset")
    for r, ln in zip(local_plan.ranks, lines, strict=True):
        cmd = ln.replace('"$@" &', "grep Cpus_allowed_list /proc/self/status")
        out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=20)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split(":")[1].strip() == format_cpulist(r.cpus or ())


def test_whole_scripts_are_valid_bash(local_plan, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    for fmt in (PlanFormat.EXPORTS, PlanFormat.NUMACTL, PlanFormat.TASKSET, PlanFormat.SLURM,
                PlanFormat.TORCHRUN):
        script = tmp_path / f"{fmt.value}.sh"
        script.write_text(render(local_plan, fmt))
        out = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=20)
        assert out.returncode == 0, (fmt, out.stderr)
    # the exports block really sets the rank's variables
    out = subprocess.run(["bash", "-c", f". {tmp_path / 'exports.sh'}; echo $CUDA_VISIBLE_DEVICES "
                          "$NCCL_IB_HCA $UCX_NET_DEVICES $MINUTIAE_CPUS"],
                         env={"PATH": os.environ["PATH"], "LOCAL_RANK": "1"},
                         capture_output=True, text=True, timeout=20)
    assert out.stdout.split() == ["0,1", "=mlx5_0,mlx5_1", "mlx5_0:1,mlx5_1:1",
                                  format_cpulist(local_plan.ranks[1].cpus or ())]


def test_torchrun_wrapper_execs_the_command_bound(local_plan, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if shutil.which("numactl") is None:
        pytest.skip("numactl is not installed here")
    script = tmp_path / "wrap.sh"
    script.write_text(render(local_plan, PlanFormat.TORCHRUN))
    env = {"PATH": os.environ["PATH"], "LOCAL_RANK": "1"}
    out = subprocess.run(["bash", str(script), "grep", "Cpus_allowed_list", "/proc/self/status"],
                         env=env, capture_output=True, text=True, timeout=20)
    if "Operation not permitted" in out.stderr:
        pytest.skip(f"numactl may not bind here: {out.stderr.strip()}")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split(":")[1].strip() == format_cpulist(local_plan.ranks[1].cpus or ())
    bad = subprocess.run(["bash", str(script), "true"], env={**env, "LOCAL_RANK": "7"},
                         capture_output=True, text=True, timeout=20)
    assert bad.returncode == 1 and "no binding for LOCAL_RANK=7" in bad.stderr


def test_slurm_masks_memory_and_gpu_contract(realdata: Path) -> None:
    t = _real(realdata, H100)
    plan = make_plan(t)
    line = next(ln for ln in render(plan, PlanFormat.SLURM).splitlines() if ln.startswith("srun"))
    m = re.search(r"--cpu-bind=mask_cpu:(\S+) --mem-bind=map_mem:(\S+) --gpu-bind=none env "
                  r"CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=(\S+)", line)
    assert m, line
    masks = m.group(1).split(",")
    assert len(masks) == 8 and all(re.fullmatch(r"0x[0-9a-f]+", x) for x in masks)
    assert [parse_hexmask(x) for x in masks] == [r.cpus for r in plan.ranks]
    assert m.group(2) == "0,0,0,0,1,1,1,1" and m.group(3) == "0,1,2,3,4,5,6,7"


def test_slurm_never_pins_unknown_cpus_nor_emits_an_empty_mask() -> None:
    from dataclasses import replace

    t = dgx_like_topology()
    t = replace(t, gpus=tuple(replace(g, cpus=()) if g.index == 3 else g for g in t.gpus),
                numa_cpus={})
    plan = make_plan(t)
    assert plan.ranks[3].cpus is None
    text = render(plan, PlanFormat.SLURM)
    assert "--cpu-bind=none" in text and "0x0" not in text and "mask_cpu" not in text


# systemd.exec(5): CPUAffinity= takes CPU indices or ranges separated by whitespace or commas
_AFFINITY = re.compile(r"^\d+(-\d+)?([ ,]+\d+(-\d+)?)*$")


def _sections(text: str, header: str) -> list[str]:
    """The value lines following ``[header]`` in the systemd output."""
    lines = text.splitlines()
    return [lines[i + 1] for i, ln in enumerate(lines) if ln == f"[{header}]"]


def test_systemd_output_says_what_it_pins_and_offers_slices(realdata: Path, tmp_path: Path) -> None:
    t = _real(realdata, H100)
    text = render(make_plan(t), PlanFormat.SYSTEMD)
    assert _sections(text, "Slice") == ["AllowedCPUs=0,52,104,156"] * 2
    assert "system.slice.d" in text and "user.slice.d" in text and "slurmstepd.scope" in text
    assert "sshd, slurmd, kubelet" in text
    assert _sections(text, "Manager") == ["CPUAffinity=0 52 104 156"]
    service = _sections(text, "Service")[0].split("=", 1)[1]
    assert _AFFINITY.fullmatch(service)
    if shutil.which("systemd-analyze") is None:
        pytest.skip("systemd-analyze is not installed here (grammar checked above)")
    unit = tmp_path / "minutiae-plan-check.service"
    unit.write_text("[Unit]\nDescription=plan check\n[Service]\nExecStart=/bin/true\n"
                    f"CPUAffinity={service}\n")
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True,
                         timeout=60)
    assert "CPU affinity" not in out.stderr, out.stderr
    # the same verifier does reject a malformed value, so the check above can fail
    unit.write_text(unit.read_text().replace("CPUAffinity=0", "CPUAffinity=0x"))
    bad = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True,
                         timeout=60)
    assert "Failed to parse CPU affinity" in bad.stderr


def test_systemd_needs_reserved_cpus() -> None:
    from minutiae.errors import ValidationError
    with pytest.raises(ValidationError, match="no reserved CPUs"):
        render(make_plan(dgx_like_topology(), reserved=()), PlanFormat.SYSTEMD)
