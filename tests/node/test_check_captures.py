"""Every real nvidia-smi capture in ../shared/realdata through the GPU check (in process):
the status and the rules that fire, as they are in the captures."""

from __future__ import annotations

from pathlib import Path

import pytest

from minutiae.node.check import CheckConfig, CheckMemory, run_check
from minutiae.testing import FakeClock

CASES = [
    ("telegraf/3090-v13.xml", "ok", []),  # idle at P8: gen 1 of 4 is power saving
    ("telegraf/a100-sxm4-v12.xml", "critical", ["gpu.count-attached"]),  # 1 <gpu> of 4 attached kept
    ("telegraf/a10g.xml", "warning", ["gpu.pcie-width"]),  # x8 of x16
    ("telegraf/dual_2070-v13.xml", "warning", ["gpu.pcie-width"]),
    ("telegraf/dual_2080-v13.xml", "warning", ["gpu.pcie-width"]),
    ("telegraf/dual_a5000-v13.xml", "ok", []),
    ("telegraf/gt-1030.xml", "ok", []),
    ("telegraf/gtx-1070-ti.xml", "ok", []),
    ("telegraf/gtx-1660-ti.xml", "ok", []),
    ("telegraf/pro-6000-maxq-blackwell-v13.xml", "ok", []),
    ("telegraf/quadro-p2000-v12.xml", "warning", ["gpu.pcie-width"]),
    ("telegraf/quadro-p400.xml", "ok", []),
    ("telegraf/rtx-3060-v12.xml", "ok", []),
    ("telegraf/rtx-3080-v12.xml", "ok", []),
    ("telegraf/rtx-3080-v13.xml", "ok", []),
    ("telegraf/rtx-3090-v12.xml", "ok", []),
    ("telegraf/rtx-4000-sff-ada-v13.xml", "ok", []),
    ("telegraf/tesla-t4.xml", "warning", ["gpu.pcie-width"]),
    ("telegraf/tesla_p4.xml", "ok", []),
    ("gpud/nvidia-smi-query.535.129.03.out.0.valid.a10", "critical", ["gpu.row-remap-pending"]),
    ("gpud/nvidia-smi-query.535.154.05.out.0.valid", "ok", []),
    ("gpud/nvidia-smi-query.535.154.05.out.0.valid.4090", "ok", []),
    ("gpud/nvidia-smi-query.535.154.05.out.1.valid", "ok", []),
    ("gpud/nvidia-smi-query.535.154.05.out.2.valid", "ok", []),
    ("gpud/nvidia-smi-query.535.154.05.out.3.valid", "ok", []),
    ("gpud/nvidia-smi-query.535.161.08.out.0.valid", "warning", ["gpu.throttle-hw"]),
    ("gpud/nvidia-smi-query.535.183.01.out.0.invalid", "critical", ["gpu.count-attached"]),  # truncated
    ("gpud/nvidia-smi-query.535.183.01.out.0.valid", "warning", ["gpu.throttle-hw", "gpu.throttle-sw-thermal"]),
    ("gpud/nvidia-smi-query.560.35.03.out.0.valid", "ok", []),
    ("ml-engineering/nvidia-smi-q_a100_xid63_remapped_rows_pending_excerpt.txt", "critical",
     ["gpu.count-attached", "gpu.row-remap-pending"]),
]


#: rules that alarm only once their condition has held for 5 minutes (for_s = 300)
PERSISTENT = {"gpu.throttle-hw", "gpu.throttle-sw-thermal"}


@pytest.mark.parametrize(("rel", "status", "rules"), CASES, ids=[c[0].rsplit("/", 1)[-1] for c in CASES])
def test_capture(realdata: Path, tmp_path: Path, rel: str, status: str, rules: list[str]) -> None:
    """The capture checked twice, 5 minutes apart (a capture's state lasts): the first check
    has the persistent rules pending (notes), the second has every rule alarmed."""
    cfg = CheckConfig(sysfs_root=tmp_path, kmsg=None, nvidia_smi_xml=realdata / "nvidia_smi" / rel,
                      node="n", checks=("gpu",))
    clock, mem = FakeClock(), CheckMemory()
    first = run_check(cfg, clock, memory=mem)
    assert sorted({f.rule for f in first.results[0].findings if f.rule}) == [r for r in rules if r not in PERSISTENT]
    assert [n.split(":", 1)[0] for n in first.notes] == [f"pending {r}" for r in rules if r in PERSISTENT]
    clock.advance(300)
    report = run_check(cfg, clock, memory=mem)
    gpu = report.results[0]
    assert report.notes == ()
    assert gpu.status.label == status
    assert sorted({f.rule for f in gpu.findings if f.rule}) == rules
    assert gpu.reason is None  # every value in the real captures was understood


def test_every_capture_is_covered(realdata: Path) -> None:
    base = realdata / "nvidia_smi"
    files = {str(p.relative_to(base)) for p in base.glob("telegraf/*.xml")}
    files |= {str(p.relative_to(base)) for p in base.glob("gpud/nvidia-smi-query.*")}
    assert files <= {c[0] for c in CASES}
