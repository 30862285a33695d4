"""SlurmBackend against the recording scontrol fake (argument lists, env, NHC etiquette), the
``--slurm`` step, and the parser on lines captured from a real slurmctld 22.05."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence

import pytest

from minutiae.agent.healthcheck import SlurmOutcome, slurm_step
from minutiae.errors import BackendError, BackendUnavailable, ValidationError
from minutiae.model import Action, CheckResult, Finding, Severity, Status
from minutiae.node.check import NodeReport
from minutiae.schedulers.base import HCP_OWNER, NodeSchedState
from minutiae.schedulers.slurm.backend import Completed, SlurmBackend, parse_show_node, sched_state
from minutiae.testing.slurm_runner import FakeSlurm

# verbatim `scontrol show node -o` lines from slurm-wlm 22.05.8 (scripts/services/slurm-up.sh)
REAL_IDLE = ("NodeName=gpu001 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=1.72 "
             "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:8 NodeAddr=127.0.0.1 NodeHostName=vm "
             "Port=17001 Version=22.05.8 OS=Linux 6.18.44-fc-v657 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1000 "
             "AllocMem=0 FreeMem=22512 Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 "
             "Owner=N/A MCS_label=N/A Partitions=gpu  BootTime=2026-11-30T09:25:16 "
             "SlurmdStartTime=2026-11-30T09:31:17 LastBusyTime=2026-11-30T09:31:17 "
             "CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 "
             "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s")
REAL_ADMIN = REAL_IDLE.replace("State=IDLE", "State=IDLE+DRAIN") + \
    " Reason=admin: bad fan [root@2026-11-30T09:38:01]"
REAL_OURS_WITH_COMMENT = REAL_IDLE.replace("State=IDLE", "State=IDLE+DRAIN") + \
    " Reason=minutiae: r1 [root@2026-11-30T09:38:23] Comment=admin note"


def test_parse_real_lines() -> None:
    n = parse_show_node(REAL_IDLE)
    assert (n.name, n.state, n.flags, n.reason) == ("gpu001", "IDLE", frozenset(), None)
    assert sched_state(n) is NodeSchedState.AVAILABLE
    a = parse_show_node(REAL_ADMIN)
    assert (a.state, a.flags, a.reason, a.reason_user) == ("IDLE", frozenset({"DRAIN"}), "admin: bad fan", "root")
    assert sched_state(a) is NodeSchedState.DRAINED
    o = parse_show_node(REAL_OURS_WITH_COMMENT)
    assert (o.reason, o.comment) == ("minutiae: r1", "admin note")


@pytest.mark.parametrize(("state", "want"), [
    ("IDLE+DRAIN", NodeSchedState.DRAINED), ("MIXED+DRAIN", NodeSchedState.DRAINING),
    ("ALLOCATED+DRAIN", NodeSchedState.DRAINING), ("DOWN*", NodeSchedState.DOWN),
    ("DOWN+DRAIN+NOT_RESPONDING", NodeSchedState.DRAINED), ("IDLE*", NodeSchedState.AVAILABLE),
    ("MIXED", NodeSchedState.AVAILABLE), ("FUTURE", NodeSchedState.UNKNOWN),
])
def test_state_flags(state: str, want: NodeSchedState) -> None:
    assert sched_state(parse_show_node(REAL_IDLE.replace("State=IDLE", f"State={state}"))) is want


def test_garbage_output_is_a_backend_error() -> None:
    with pytest.raises(BackendError, match="unexpected scontrol output"):
        parse_show_node("slurm_load_node error: something")


def _backend(fake: FakeSlurm) -> SlurmBackend:
    return SlurmBackend("/etc/slurm/test.conf", runner=fake)


def _hcp(fake: FakeSlurm) -> SlurmBackend:
    """The HealthCheckProgram's backend (``minutiae check --slurm``): owner ``hcp``."""
    return SlurmBackend("/etc/slurm/test.conf", runner=fake, owner=HCP_OWNER)


def test_drain_is_an_argument_list_with_a_safe_reason_and_slurm_conf() -> None:
    fake = FakeSlurm()
    fake.add("gpu003")
    _backend(fake).drain("gpu003", "xid 79 gpu 0000:44:00 fell off bus; rm -rf / `x` $(y)")
    argv, env = fake.calls[-1]
    assert argv == ["scontrol", "update", "NodeName=gpu003", "State=DRAIN",
                    "Reason=minutiae[default/controller]: xid 79 gpu 0000:44:00 fell off bus "
                    "rm -rf / x (y)"]
    assert env["SLURM_CONF"] == "/etc/slurm/test.conf"
    st = _backend(fake).state("gpu003")
    assert st.state is NodeSchedState.DRAINED and st.ours


def test_drain_is_idempotent_and_updates_our_reason() -> None:
    fake = FakeSlurm()
    fake.add("gpu003")
    b = _backend(fake)
    b.drain("gpu003", "minutiae: a")
    b.drain("gpu003", "minutiae: a")
    b.drain("gpu003", "b")
    assert [u[-1] for u in fake.updates()] == ["Reason=minutiae[default/controller]: a",
                                               "Reason=minutiae[default/controller]: b"]


def test_admin_drain_is_never_overwritten_or_resumed() -> None:
    fake = FakeSlurm()
    fake.add("gpu004", drain=True, reason="admin: bad fan", comment="ticket 42")
    b = _backend(fake)
    b.drain("gpu004", "xid 79")
    with pytest.raises(BackendError, match="refusing to resume gpu004"):
        b.resume("gpu004")
    assert fake.updates() == []
    assert fake.nodes["gpu004"].reason == "admin: bad fan"
    st = b.state("gpu004")
    assert not st.ours and st.reason == "admin: bad fan"


def test_slurms_own_down_is_left_alone() -> None:
    fake = FakeSlurm()
    fake.add("gpu005", state="DOWN", reason="Not responding")
    b = _backend(fake)
    b.drain("gpu005", "x")
    assert fake.updates() == [] and b.state("gpu005").state is NodeSchedState.DOWN


def test_resume_ours_keeps_the_admin_comment() -> None:
    fake = FakeSlurm()
    fake.add("gpu006", comment="admin note")
    b = _backend(fake)
    b.drain("gpu006", "x")
    b.resume("gpu006")
    b.resume("gpu006")  # idempotent
    assert fake.updates()[-1] == ["scontrol", "update", "NodeName=gpu006", "State=RESUME"]
    assert len(fake.updates()) == 2
    assert fake.nodes["gpu006"].comment == "admin note"


def test_annotate_keeps_other_extra() -> None:
    fake = FakeSlurm()
    fake.add("gpu007", extra="rack=r12")
    b = _backend(fake)
    b.annotate("gpu007", "since", "2026-11-30T09:00:00")
    b.annotate("gpu007", "since", "2026-11-30 10:00")
    assert fake.nodes["gpu007"].extra == "rack=r12 minutiae.since=2026-11-30_10:00"
    with pytest.raises(ValidationError):
        b.annotate("gpu007", "Bad Key", "x")


def test_invalid_node_names_never_reach_a_command() -> None:
    fake = FakeSlurm()
    for bad in ("gpu001;reboot", "-rf", "a b", "$(id)", ""):
        with pytest.raises(ValidationError):
            _backend(fake).drain(bad, "x")
    assert fake.calls == []


def test_jobs_from_squeue() -> None:
    fake = FakeSlurm()
    fake.add("gpu002", state="MIXED", jobs=["101", "102"])
    assert _backend(fake).state("gpu002").jobs == ("101", "102")
    assert fake.calls[-1][0] == ["squeue", "-h", "-w", "gpu002", "-o", "%i"]


def test_unreachable_timeout_missing_binary_unknown_node() -> None:
    fake = FakeSlurm(unreachable=True)
    with pytest.raises(BackendUnavailable, match="cannot reach slurmctld"):
        _backend(fake).state("gpu001")

    def slow(argv: Sequence[str], env: Mapping[str, str], timeout: float) -> Completed:
        raise subprocess.TimeoutExpired(list(argv), timeout)

    with pytest.raises(BackendUnavailable, match="timed out after 30s"):
        SlurmBackend(runner=slow).state("gpu001")
    with pytest.raises(BackendUnavailable, match="not found"):
        SlurmBackend(scontrol="/nonexistent/scontrol").state("gpu001")
    with pytest.raises(BackendError, match="Node gpu099 not found"):
        _backend(FakeSlurm()).state("gpu099")


# -- the --slurm step --------------------------------------------------------------------------

def _report(status: Status, *findings: Finding) -> NodeReport:
    return NodeReport("gpu001", 0.0, (CheckResult("gpu", status, findings),))


XID79 = Finding("xid", Severity.CRITICAL, Action.REBOOT,
                "Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS) on GPU 0000:44:00.0", code=79,
                pci="0000:44:00.0")


def test_step_drains_then_resumes_our_drain() -> None:
    fake = FakeSlurm()
    fake.add("gpu001")
    b = _hcp(fake)
    step = slurm_step(_report(Status.CRITICAL, XID79), b)
    assert step.outcome is SlurmOutcome.DRAINED
    assert fake.nodes["gpu001"].reason == \
        "minutiae[hcp]: Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS) on GPU 0000:44:00.0"
    assert slurm_step(_report(Status.CRITICAL, XID79), b).outcome is SlurmOutcome.ALREADY_DRAINED
    assert slurm_step(_report(Status.UNKNOWN), b).outcome is SlurmOutcome.NOTHING  # unknown ≠ healthy
    assert fake.nodes["gpu001"].drain
    assert slurm_step(_report(Status.WARNING), b).outcome is SlurmOutcome.RESUMED
    assert not fake.nodes["gpu001"].drain


def test_step_leaves_an_admin_drain_alone() -> None:
    fake = FakeSlurm()
    fake.add("gpu001", drain=True, reason="admin: bad fan")
    b = _hcp(fake)
    assert slurm_step(_report(Status.CRITICAL, XID79), b).outcome is SlurmOutcome.LEFT_ALONE
    assert slurm_step(_report(Status.OK), b).outcome is SlurmOutcome.LEFT_ALONE
    assert fake.updates() == [] and fake.nodes["gpu001"].reason == "admin: bad fan"


def test_app_caused_xid_does_not_drain() -> None:
    fake = FakeSlurm()
    fake.add("gpu001")
    xid13 = Finding("xid", Severity.WARNING, Action.RESTART_APP, "Xid 13 (GRAPHICS_SM_EXCEPTION)", code=13)
    assert slurm_step(_report(Status.WARNING, xid13), _hcp(fake)).outcome is SlurmOutcome.NOTHING
    assert fake.updates() == []


# -- acknowledgement: an admin's resume of our drain for kernel-log faults -----------------------

def _ack_setup(realdata, tmp_path):  # type: ignore[no-untyped-def]
    from pathlib import Path

    from minutiae.node.check import CheckConfig

    log = Path(tmp_path) / "kern.log"
    log.write_bytes(realdata.joinpath(
        "kernel_logs", "gpud", "components_accelerator_nvidia_xid__dmesg-with-xid-119.log").read_bytes())
    cfg = CheckConfig(sysfs_root=Path(tmp_path), kmsg=log, node="gpu001", checks=("kernel_log",),
                      state_file=Path(tmp_path) / "state.json")
    return log, cfg


def test_admin_resume_acknowledges_log_faults_until_they_recur(realdata, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from minutiae.agent.healthcheck import check_with_slurm
    from minutiae.testing import FakeClock

    log, cfg = _ack_setup(realdata, tmp_path)
    fake = FakeSlurm()
    fake.add("gpu001")
    b, clock = _hcp(fake), FakeClock()
    _, step = check_with_slurm(cfg, clock, b)
    assert step.outcome is SlurmOutcome.DRAINED and fake.nodes["gpu001"].drain
    # the admin resets the GPU and resumes the node by hand
    fake.nodes["gpu001"].drain, fake.nodes["gpu001"].reason = False, None
    report, step = check_with_slurm(cfg, clock, b)
    assert report.status is Status.CRITICAL  # the log still says what happened
    assert step.outcome is SlurmOutcome.NOTHING and len(step.acknowledged) == 2
    assert not fake.nodes["gpu001"].drain
    _, step = check_with_slurm(cfg, clock, b)  # and stays acknowledged
    assert step.outcome is SlurmOutcome.NOTHING and not fake.nodes["gpu001"].drain
    # the fault happens again: drained again
    with log.open("ab") as fh:
        fh.write(b"[Wed Oct  2 12:00:00 2024] NVRM: Xid (PCI:0000:9b:00): 119, pid=1, name=python, "
                 b"Timeout after 6s of waiting for RPC response from GPU1 GSP!\n")
    _, step = check_with_slurm(cfg, clock, b)
    assert step.outcome is SlurmOutcome.DRAINED and fake.nodes["gpu001"].drain


def test_counter_conditions_are_not_acknowledged_by_a_resume(realdata, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    from minutiae.agent.healthcheck import check_with_slurm
    from minutiae.node.check import CheckConfig
    from minutiae.node.sources.nvidia_smi.parse.text import parse_nvidia_smi_text
    from minutiae.testing import FakeClock
    from minutiae.testing.fake_nvml import FakeNvml

    path = realdata / "nvidia_smi" / "gpud" / "nvidia-smi-query.535.161.08.out.0.valid"
    fake_gpu = FakeNvml.from_snapshot(parse_nvidia_smi_text(path.read_text()))
    fake_gpu.gpus[0].values["remap_pending"] = True
    cfg = CheckConfig(sysfs_root=Path(tmp_path), kmsg=None, node="gpu001", checks=("gpu",), nvml=fake_gpu,
                      state_file=Path(tmp_path) / "state.json")
    fake = FakeSlurm()
    fake.add("gpu001")
    b, clock = _hcp(fake), FakeClock()
    assert check_with_slurm(cfg, clock, b)[1].outcome is SlurmOutcome.DRAINED
    fake.nodes["gpu001"].drain, fake.nodes["gpu001"].reason = False, None
    assert check_with_slurm(cfg, clock, b)[1].outcome is SlurmOutcome.DRAINED  # still pending
