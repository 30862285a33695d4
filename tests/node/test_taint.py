"""The taint source (/proc/sys/kernel/tainted, Documentation/admin-guide/tainted-kernels.rst):
a node source added as one folder + one registry line + its counter rules in TOML + this test."""

from __future__ import annotations

from pathlib import Path

from minutiae.model import Status
from minutiae.node import CheckConfig, run_check
from minutiae.node.sources.taint.parse import COMPONENT, parse_taint
from minutiae.testing import FakeClock


def _proc(tmp_path: Path, tainted: str | None) -> Path:
    proc = tmp_path / "proc"
    (proc / "sys" / "kernel").mkdir(parents=True)
    (proc / "uptime").write_text("350735.47 234388.90\n")
    if tainted is not None:
        (proc / "sys" / "kernel" / "tainted").write_text(tainted)
    return proc


def _check(tmp_path: Path, tainted: str | None):  # type: ignore[no-untyped-def]
    cfg = CheckConfig(sysfs_root=tmp_path / "nosys", proc_root=_proc(tmp_path, tainted), kmsg=None,
                      use_nvml=False, node="n1", checks=("kernel",))
    return run_check(cfg, FakeClock())


def test_parse_names_the_flags() -> None:
    # 4097 = P (proprietary module, the NVIDIA driver) + O (out-of-tree module): every GPU node
    snap = parse_taint(b"4097\n")
    assert {o.metric: o.value for o in snap} == {"tainted": 4097, "taint_machine_check": False,
                                                 "taint_died": False}
    assert {o.metric: o.value for o in parse_taint("4241")} == {  # + M (16) + D (128)
        "tainted": 4241, "taint_machine_check": True, "taint_died": True}
    bad = parse_taint(b"-1\n", "t")
    assert not bad.observations and bad.problems[0].component == COMPONENT


def test_a_machine_check_since_boot_is_critical(tmp_path: Path) -> None:
    rep = _check(tmp_path, "4113\n")
    r = rep.result("kernel")
    assert r is not None and r.status is Status.CRITICAL
    (f,) = r.findings
    assert (f.kind, f.rule, f.component, f.action.label) == (
        "mce", "kernel.taint-machine-check", "kernel:taint", "inspect")
    assert rep.drain


def test_a_vendor_module_taint_is_healthy(tmp_path: Path) -> None:
    r = _check(tmp_path, "4097\n").result("kernel")
    assert r is not None and (r.status, r.findings, r.observed) == (Status.OK, (), 3)


def test_garbage_is_unknown_and_a_tree_without_the_file_says_nothing(tmp_path: Path) -> None:
    r = _check(tmp_path, "tainted?\n").result("kernel")
    assert r is not None and r.status is Status.UNKNOWN and "not a taint mask" in (r.reason or "")
    assert _check(tmp_path / "b", None).result("kernel") is None
    # a captured sysfs tree without --proc-root is never judged by this machine's kernel
    cfg = CheckConfig(sysfs_root=tmp_path / "nosys", kmsg=None, use_nvml=False, node="n1")
    assert run_check(cfg, FakeClock()).result("kernel") is None
