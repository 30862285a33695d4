"""run_check / minutiae check on real captures: statuses, UNKNOWN never OK, rates across runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minutiae.cli.main import main
from minutiae.model import Action, Status
from minutiae.node.check import CheckConfig, CheckMemory, NodeReport, run_check
from minutiae.node.sources.nvidia_smi.parse.text import parse_nvidia_smi_text
from minutiae.testing import FakeClock
from minutiae.testing.fake_nvml import FakeNvml
from minutiae.testing.sysfs import ib_port, ib_tree, pcie_device, set_file

IB = ("infiniband", "gpud", "sys-class-infiniband-h100.0")
H100_Q = ("nvidia_smi", "gpud", "nvidia-smi-query.535.161.08.out.0.valid")
XID119 = ("kernel_logs", "gpud", "components_accelerator_nvidia_xid__dmesg-with-xid-119.log")


@pytest.fixture()
def sysroot(realdata: Path, tmp_path: Path) -> Path:
    root = ib_tree(tmp_path / "sys", realdata.joinpath(*IB))
    for bus in ("19", "3b", "4c", "5d", "9b", "bb", "cb", "db"):
        pcie_device(root, f"0000:{bus}:00.0")
    pcie_device(root, "0000:1a:00.0", pci_class="0x020700", vendor="0x15b3")
    return root


def _cfg(root: Path, **kw: object) -> CheckConfig:
    base: dict[str, object] = {"sysfs_root": root, "kmsg": None, "node": "gpu001"}
    base.update(kw)
    return CheckConfig(**base)  # type: ignore[arg-type]


def test_h100_node_from_captures(realdata: Path, sysroot: Path) -> None:
    """The capture's GPUs are all throttled (hw_slowdown + power brake): a throttle warns once
    it has held for 5 minutes (two checks 300 s apart), before that it is a pending note."""
    clock, mem = FakeClock(), CheckMemory()
    cfg = _cfg(sysroot, nvidia_smi_xml=realdata.joinpath(*H100_Q), expected_gpus=8)
    first = run_check(cfg, clock, memory=mem)
    assert first.result("gpu").status is Status.OK and first.result("gpu").findings == ()  # type: ignore[union-attr]
    assert first.notes == ("pending gpu.throttle-hw: GPU 0000:19:00.0: clocks held down by "
                           "hw_slowdown, hw_power_brake_slowdown (+7 more): held 0 s, alarms once held 300 s",)
    clock.advance(299)
    assert run_check(cfg, clock, memory=mem).result("gpu").status is Status.OK  # type: ignore[union-attr]
    clock.advance(1)
    r = run_check(cfg, clock, memory=mem)
    assert [x.check for x in r.results] == ["gpu", "ib", "pcie"]
    gpu, ib, pcie = r.results
    assert gpu.status is Status.WARNING and {f.kind for f in gpu.findings} == {"throttle"}
    assert len(gpu.findings) == 8 and r.notes == ()
    assert {f.attrs["since"] for f in gpu.findings} == {clock.now()}
    assert gpu.observed == 195  # 187 before the 8 slowdown temperatures derived from T.Limit margins
    assert ib.status is Status.WARNING
    assert [(f.kind, f.component) for f in ib.findings] == [("ib_link_downed", "ib:mlx5_1/1")]
    assert pcie.status is Status.OK and pcie.findings == () and pcie.observed == 9 * 8 + 1  # + pcie_gpu_count
    assert r.status is Status.WARNING and r.action is Action.NONE and not r.drain
    assert r.reason() is None
    doc = r.to_json()
    assert doc["status"] == "warning" and doc["exit_code"] == 1 and doc["drain"] is False
    assert json.loads(json.dumps(doc))["checks"][1]["findings"][0]["kind"] == "ib_link_downed"


def test_no_nvml_is_unknown_and_the_other_checks_still_run(realdata: Path, sysroot: Path) -> None:
    snap = parse_nvidia_smi_text(realdata.joinpath(*H100_Q).read_text())
    fake = FakeNvml.from_snapshot(snap, init_error=12)
    r = run_check(_cfg(sysroot, nvml=fake, kmsg=realdata.joinpath(*XID119)), FakeClock())
    gpu = r.result("gpu")
    assert gpu is not None and gpu.status is Status.UNKNOWN
    assert gpu.reason == "nvml: NVML Shared Library Not Found"
    assert r.result("ib").status is Status.WARNING  # type: ignore[union-attr]
    assert r.result("pcie").status is Status.OK  # type: ignore[union-attr]
    kl = r.result("kernel_log")
    assert kl is not None and kl.status is Status.CRITICAL
    assert {f.code for f in kl.findings if f.kind == "xid"} == {119}
    assert r.status is Status.CRITICAL and r.action is Action.RESET_GPU and r.drain
    assert r.reason() is not None and "0000:9b:00.0" in r.reason()  # type: ignore[operator]


def test_real_pynvml_on_this_machine_gives_unknown(sysroot: Path) -> None:
    import pynvml

    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVML")
    except pynvml.NVMLError:
        pass
    r = run_check(_cfg(sysroot), FakeClock())
    assert r.result("gpu").status is Status.UNKNOWN  # type: ignore[union-attr]
    assert r.status is Status.UNKNOWN  # the IB warning does not hide the unknown GPUs


def test_nvml_version_mismatch_is_a_driver_fault(realdata: Path, sysroot: Path) -> None:
    fake = FakeNvml([], init_error=18)
    r = run_check(_cfg(sysroot, nvml=fake), FakeClock())
    gpu = r.result("gpu")
    assert gpu is not None and gpu.status is Status.CRITICAL
    assert [(f.kind, f.action) for f in gpu.findings] == [("driver_mismatch", Action.REBOOT)]


def test_nvml_fake_with_a_remap_pending_drains(realdata: Path, sysroot: Path) -> None:
    snap = parse_nvidia_smi_text(realdata.joinpath(*H100_Q).read_text())
    fake = FakeNvml.from_snapshot(snap)
    fake.gpus[2].values["remap_pending"] = True
    r = run_check(_cfg(sysroot, nvml=fake, expected_gpus=8), FakeClock())
    assert r.action is Action.RESET_GPU
    assert r.reason() == "GPU 0000:4c:00.0: a row remap is pending; reset the GPU to apply it"


def test_garbage_counter_makes_ib_unknown_naming_the_path(sysroot: Path) -> None:
    set_file(sysroot, f"{ib_port(sysroot, 'mlx5_5')}/counters/port_rcv_errors", "\x00\xff garbage")
    r = run_check(_cfg(sysroot, checks=("ib",)), FakeClock())
    ib = r.result("ib")
    assert ib is not None and ib.status is Status.UNKNOWN
    assert "mlx5_5/ports/1/counters/port_rcv_errors" in (ib.reason or "")
    assert [f.kind for f in ib.findings] == ["ib_link_downed"]  # what could be read still counts


def test_rates_across_runs_through_the_state_file(sysroot: Path, tmp_path: Path) -> None:
    state = tmp_path / "state" / "check.json"
    clock = FakeClock()
    cfg = _cfg(sysroot, checks=("ib",), state_file=state)
    first = run_check(cfg, clock)
    assert not [f for f in first.findings if f.kind == "ib_symbol_errors"]
    assert state.exists()
    clock.advance(1800)
    set_file(sysroot, f"{ib_port(sysroot, 'mlx5_8')}/counters/symbol_error", "25\n")
    second = run_check(cfg, clock)
    sym = [f for f in second.findings if f.kind == "ib_symbol_errors"]
    assert [(f.component, f.attrs["rate"], f.attrs["delta"]) for f in sym] == [("ib:mlx5_8/1", 50.0, 25.0)]


def test_corrupt_state_file_is_a_note_not_a_crash(sysroot: Path, tmp_path: Path) -> None:
    state = tmp_path / "check.json"
    state.write_text("{not json")
    r = run_check(_cfg(sysroot, checks=("ib",), state_file=state), FakeClock())
    assert r.notes and "check.json" in r.notes[0] and "corrupt" in r.notes[0]
    assert json.loads(state.read_text())["version"] == 2  # rewritten afresh


def test_in_process_memory_for_the_agent(sysroot: Path) -> None:
    memory = CheckMemory()
    clock = FakeClock()
    cfg = _cfg(sysroot, checks=("ib",))
    run_check(cfg, clock, memory=memory)
    assert memory.counters[("ib:mlx5_1/1", "link_downed")] == (255.0, clock.now())
    clock.advance(10)
    set_file(sysroot, f"{ib_port(sysroot, 'mlx5_0')}/counters/link_downed", "1")
    r = run_check(cfg, clock, memory=memory)
    assert [(f.rule, f.component) for f in r.findings if f.rule == "ib.link-downed-increase"] == [
        ("ib.link-downed-increase", "ib:mlx5_0/1")]


def test_report_status_order() -> None:
    from minutiae.model import CheckResult

    r = NodeReport("n", 0.0, (CheckResult("a", Status.WARNING), CheckResult("b", Status.UNKNOWN)))
    assert r.status is Status.UNKNOWN
    r = NodeReport("n", 0.0, (CheckResult("a", Status.CRITICAL), CheckResult("b", Status.UNKNOWN)))
    assert r.status is Status.CRITICAL


# -- the command line ----------------------------------------------------------------------------

def test_cli_json_and_exit_code(realdata: Path, sysroot: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", "--json", "--sysfs-root", str(sysroot), "--nvidia-smi-xml",
               str(realdata.joinpath(*H100_Q)), "--node", "gpu001", "--expected-gpus", "8"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and doc["status"] == "warning" and doc["node"] == "gpu001"
    assert [c["check"] for c in doc["checks"]] == ["gpu", "ib", "pcie"]  # no --kmsg: no kernel log


def test_cli_screen_names_unknown_sources(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    missing = tmp_path / "nope.xml"
    rc = main(["check", "--sysfs-root", str(tmp_path), "--nvidia-smi-xml", str(missing), "--node", "n1"])
    out = capsys.readouterr().out
    assert rc == 3
    assert "UNKNOWN" in out and "nope.xml" in out and "Traceback" not in out


def test_cli_kernel_log_drain_reason(realdata: Path, sysroot: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", "--json", "--no-nvml", "--sysfs-root", str(sysroot),
               "--kmsg", str(realdata.joinpath(*XID119)), "--node", "gpu001"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 2 and doc["action"] == "reset_gpu" and doc["drain"] is True
    assert "Xid 119" in doc["reason"]


def test_kernel_log_is_read_incrementally_and_faults_persist(realdata: Path, sysroot: Path, tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(b"[    1.000000] Linux version 6.8.0\n")
    state = tmp_path / "state.json"
    clock = FakeClock()
    cfg = _cfg(sysroot, checks=("kernel_log",), kmsg=log, state_file=state)
    r = run_check(cfg, clock)
    assert r.result("kernel_log").status is Status.OK  # type: ignore[union-attr]
    xid = realdata.joinpath(*XID119).read_bytes()
    with log.open("ab") as fh:
        fh.write(xid)
    r = run_check(cfg, clock)
    kl = r.result("kernel_log")
    assert kl is not None and kl.status is Status.CRITICAL
    counts = {f.message: f.attrs["count"] for f in kl.findings}
    assert counts == {"Xid 119 (GSP_RPC_TIMEOUT) on GPU 0000:9b:00.0": 5,
                      "GSP firmware RPC timeout on GPU 0000:9b:00.0": 1}
    seen = kl.observed
    # nothing new: the fault is still reported (from the state), nothing is parsed again
    r = run_check(cfg, clock)
    kl = r.result("kernel_log")
    assert kl is not None and kl.status is Status.CRITICAL and kl.observed == seen
    assert json.loads(state.read_text())["kernel_log"]["cursor"]["offset"] == log.stat().st_size
    # the log is replaced (rotation, reboot): the old faults go with it
    log.unlink()
    log.write_bytes(b"[    1.000000] Linux version 6.8.0\n")
    r = run_check(cfg, clock)
    assert r.result("kernel_log").status is Status.OK  # type: ignore[union-attr]


def test_unreadable_kernel_log_is_unknown(sysroot: Path, tmp_path: Path) -> None:
    r = run_check(_cfg(sysroot, checks=("kernel_log",), kmsg=tmp_path / "missing.log"), FakeClock())
    kl = r.result("kernel_log")
    assert kl is not None and kl.status is Status.UNKNOWN and "missing.log" in (kl.reason or "")


def test_log_count_rules_over_the_kernel_log(realdata: Path, sysroot: Path, tmp_path: Path) -> None:
    """The engine's log-count rules (log_counts.toml) run over the kernel-log findings: ten
    application Xid 13 on one GPU within an hour is a warning of its own (a real Xid 13 line,
    re-timed to the clock of this test), and its state survives in the state file."""
    from datetime import UTC, datetime

    real = next(line for line in realdata.joinpath("kernel_logs", "gpud", "components_memory__dmesg.decode.iso.log")
                .read_text().splitlines() if "Xid" in line and ": 13," in line)
    body = real.split("+00:00 ", 1)[1]
    clock = FakeClock()
    log = tmp_path / "kern.log"
    state = tmp_path / "state.json"
    cfg = _cfg(sysroot, checks=("kernel_log",), kmsg=log, state_file=state)
    lines = []
    for i in range(10):
        t = datetime.fromtimestamp(clock.now() - 600 + i * 30, UTC).strftime("%Y-%m-%dT%H:%M:%S,000000+00:00")
        lines.append(f"kern  :warn  : {t} {body}")
    log.write_text("\n".join(lines[:5]) + "\n")
    r = run_check(cfg, clock)
    assert not [f for f in r.findings if f.kind == "xid_repeats"]
    with log.open("a") as fh:
        fh.write("\n".join(lines[5:]) + "\n")
    r = run_check(cfg, clock)
    rep = [f for f in r.findings if f.kind == "xid_repeats"]
    assert [(f.rule, f.attrs["value"], f.action) for f in rep] == [("xid-app-repeats-same-gpu", 10, Action.NONE)]
    assert r.action is Action.RESTART_APP  # Xid 13 is the application's: never a drain


def test_cli_checks_subset_and_bad_names(realdata: Path, sysroot: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["check", "--json", "--sysfs-root", str(sysroot), "--checks", "ib,pcie", "--node", "n"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and [c["check"] for c in doc["checks"]] == ["ib", "pcie"]
    rc = main(["check", "--checks", "gpu,disk", "--node", "n"])
    err = capsys.readouterr().err
    assert rc == 3 and "--checks: unknown disk" in err


def test_driver_sees_fewer_gpus_than_the_pcie_bus(realdata: Path, sysroot: Path) -> None:
    snap = parse_nvidia_smi_text(realdata.joinpath(*H100_Q).read_text())
    fake = FakeNvml.from_snapshot(snap)
    del fake.gpus[5]  # the driver lost one; sysfs still lists 8 NVIDIA display controllers
    r = run_check(_cfg(sysroot, nvml=fake, checks=("gpu", "pcie")), FakeClock())
    gpu = r.result("gpu")
    assert gpu is not None
    assert [(f.rule, f.message) for f in gpu.findings if f.kind == "gpu_missing"] == [
        ("gpu.count-pcie", "7 GPU(s) visible to the driver, 8 NVIDIA GPUs on the PCIe bus")]
    assert r.action is Action.REBOOT


def test_ib_check_from_an_ibstat_capture(realdata: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cap = realdata / "infiniband" / "gpud" / "ibstat.47.0.h100.some.down.with.polling.1"
    rc = main(["check", "--json", "--checks", "ib", "--ibstat", str(cap), "--node", "n"])
    doc = json.loads(capsys.readouterr().out)
    # one check sees the ports down but not for how long: ib.port-down waits 120 s (a flap
    # is back sooner), so a single run says so in its notes
    # (a RoCE node: every port is Ethernet, so all are fabric ports; mlx5_5 is Disabled, switched
    # off by software, and only shown)
    pending = [n for n in doc["notes"] if n.startswith("pending ib.port-down: ")]
    assert len(pending) == 1 and "mlx5_11/1: port state DOWN: held 0 s, alarms once held 120 s" in pending[0]
    assert [f["component"] for f in doc["checks"][0]["findings"] if f["kind"] == "ib_port_disabled"] == [
        "ib:mlx5_5/1"]
    # checks 130 s apart (the agent, or one-shot runs with a state file): both ports alarm
    cfg = CheckConfig(kmsg=None, node="n", checks=("ib",), ibstat=cap, sysfs_root=tmp_path)
    clock, memory = FakeClock(1_700_000_000.0), CheckMemory()
    run_check(cfg, clock, memory=memory)
    clock.advance(130.0)
    rep = run_check(cfg, clock, memory=memory)
    ib = next(c for c in rep.results if c.check == "ib")
    assert rep.drain and rep.action is Action.INSPECT
    assert ib.status is Status.CRITICAL
    assert sorted((f.kind, f.component) for f in ib.findings if f.kind == "ib_port_down") == [
        ("ib_port_down", "ib:mlx5_11/1")]
    assert rc in (0, 1)
    panic = realdata / "infiniband" / "gpud" / "ibstat.39.0.a100.failed.ibpanic.exit-255.0"
    rc = main(["check", "--json", "--checks", "ib", "--ibstat", str(panic), "--node", "n"])
    ib = json.loads(capsys.readouterr().out)["checks"][0]
    assert rc == 3 and ib["status"] == "unknown" and "ibpanic" in ib["reason"]


def test_cli_nvlink_status_capture(realdata: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    q = realdata.joinpath(*H100_Q)
    snap = parse_nvidia_smi_text(q.read_text())
    uuid = snap.value("gpu:0000:db:00.0", "uuid")
    nv = tmp_path / "nvlink.txt"
    nv.write_text(f"GPU 7: NVIDIA H100 80GB HBM3 (UUID: {uuid})\n" + "".join(
        f"         Link {k}: {'<inactive>' if k == 9 else '26.562 GB/s'}\n" for k in range(18)))
    rc = main(["check", "--json", "--checks", "gpu", "--nvidia-smi-xml", str(q), "--nvlink-status", str(nv),
               "--node", "n"])
    doc = json.loads(capsys.readouterr().out)
    down = [f for f in doc["checks"][0]["findings"] if f["kind"] == "nvlink_down"]
    assert rc == 2 and [(f["pci"], f["action"]) for f in down] == [("0000:db:00.0", "reset_gpu")]
    assert doc["drain"] is True


def test_console_script_exit_codes(realdata: Path, sysroot: Path) -> None:
    """The installed ``minutiae`` script returns the Nagios code as its process exit status."""
    import subprocess
    import sys

    exe = Path(sys.executable).with_name("minutiae")
    if not exe.exists():
        pytest.skip(f"console script not installed next to {sys.executable}")
    base = [str(exe), "check", "--json", "--sysfs-root", str(sysroot), "--node", "gpu001"]
    ok = subprocess.run([*base, "--checks", "pcie"], capture_output=True, text=True, timeout=60, check=False)
    warn = subprocess.run([*base, "--checks", "ib"], capture_output=True, text=True, timeout=60, check=False)
    crit = subprocess.run([*base, "--checks", "kernel_log", "--kmsg", str(realdata.joinpath(*XID119))],
                          capture_output=True, text=True, timeout=60, check=False)
    unknown = subprocess.run([*base, "--checks", "gpu", "--no-nvml"], capture_output=True, text=True,
                             timeout=60, check=False)
    assert [p.returncode for p in (ok, warn, crit, unknown)] == [0, 1, 2, 3]
    assert json.loads(crit.stdout)["status"] == "critical" and crit.stderr == ""


def test_rates_survive_a_cycle_where_the_source_failed(sysroot: Path, tmp_path: Path) -> None:
    memory = CheckMemory()
    clock = FakeClock()
    cfg = _cfg(sysroot, checks=("ib",))
    run_check(cfg, clock, memory=memory)
    clock.advance(600)
    broken = _cfg(tmp_path / "gone", checks=("ib",))
    assert run_check(broken, clock, memory=memory).result("ib").status is Status.UNKNOWN  # type: ignore[union-attr]
    clock.advance(600)
    set_file(sysroot, f"{ib_port(sysroot, 'mlx5_9')}/counters/symbol_error", "100")
    r = run_check(cfg, clock, memory=memory)
    assert [(f.component, f.attrs["rate"]) for f in r.findings if f.kind == "ib_symbol_errors"] == [
        ("ib:mlx5_9/1", 300.0)]  # 100 over the 20 minutes since the last good read


def test_plain_screen_for_a_log_file_and_no_rich(realdata: Path, sysroot: Path) -> None:
    """Not a terminal (HealthCheckProgram appends to a log file): plain lines, and rich (~30 ms
    of imports) is never loaded; --json neither."""
    import subprocess
    import sys

    code = ("import sys; from minutiae.cli.main import main; rc = main(sys.argv[1:]); "
            "print('RICH' if 'rich' in sys.modules else 'NORICH'); sys.exit(rc)")
    args = ["check", "--sysfs-root", str(sysroot), "--nvidia-smi-xml", str(realdata.joinpath(*H100_Q)),
            "--kmsg", str(realdata.joinpath(*XID119)), "--node", "gpu017", "--expected-gpus", "8"]
    for extra in ([], ["--json"]):
        p = subprocess.run([sys.executable, "-c", code, *args, *extra], capture_output=True, text=True,
                           timeout=120, check=False)
        assert p.returncode == 2 and p.stdout.rstrip().endswith("NORICH"), p.stderr
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, check=False)
    lines = p.stdout.splitlines()
    assert lines[0].startswith("gpu017: CRITICAL  action needed: reset_gpu  — ")
    assert lines[1].split() == ["check", "status", "read", "findings", "/", "reason"]
    assert lines[2].split()[:3] == ["gpu", "OK", "195"]
    assert lines[3].split()[:3] == ["ib", "WARNING", "522"]
    assert "error: Xid 119 (GSP_RPC_TIMEOUT) on GPU 0000:9b:00.0 → reset_gpu (×5)" in p.stdout
    assert [ln.split(":")[1].strip() for ln in lines if ln.startswith("note: ")] == ["pending gpu.throttle-hw"]
