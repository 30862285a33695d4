"""Binding plans on real captures per platform against the expected plans in
tests/data/platforms/ (written from the vendors' documentation, see its SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minutiae.analyses.topology.parse.detect import parse_topology
from minutiae.analyses.topology.plan import Transport, make_plan
from minutiae.analyses.topology.read_sysfs import read_sysfs_topology
from minutiae.model.topology import NicKind, parse_cpulist
from minutiae.testing.topology import assert_all_formats_agree

PLATFORMS = Path(__file__).resolve().parents[2] / "data" / "platforms"
CASES = sorted(p.stem for p in PLATFORMS.glob("*.json"))


def test_every_platform_file_is_checked() -> None:
    assert len(CASES) >= 8


@pytest.mark.parametrize("name", CASES)
def test_platform_plan_matches_the_vendor_expectation(realdata: Path, name: str) -> None:
    spec = json.loads((PLATFORMS / f"{name}.json").read_text())
    # vendored here (platforms/captures/), else a ../shared/realdata capture
    cap = PLATFORMS.parent / spec["capture"] if spec["capture"].startswith("platforms/") else realdata / spec["capture"]
    t = parse_topology(cap.read_bytes(), str(cap))
    tr = Transport(spec["transport"]) if spec["transport"] else None
    plan = make_plan(t, transport=tr)
    want = spec["expect"]
    assert plan.transport.value == want["transport"]
    assert dict(plan.env) == want["env"]
    assert not set(want["absent"]) & set(dict(plan.env))
    assert [{"gpu": r.gpu, "mems": list(r.mems), "nic_path": r.nic_path.value, "nics": list(r.nics)}
            for r in plan.ranks] == want["ranks"]
    for key in ("numa_cpus",):
        if key in want:
            assert {str(k): v for k, v in want[key].items()} == {
                str(k): ",".join(_ranges(v)) for k, v in t.numa_cpus.items()}
    if want.get("warning"):
        assert any(want["warning"] in w for w in plan.warnings), plan.warnings
    if want.get("no_warning"):
        assert not any(want["no_warning"] in w for w in plan.warnings), plan.warnings
    if want.get("auto_warning"):
        auto = make_plan(t)
        assert auto.transport is Transport.UNKNOWN
        assert any(want["auto_warning"] in w for w in auto.warnings)
    # CPUs: within the rank's NUMA node (when the source gives one), disjoint, never empty,
    # never the reserved ones
    seen: set[int] = set()
    for r in plan.ranks:
        assert r.cpus, (name, r)
        local = t.numa_cpus.get(r.mems[0], ()) if r.mems else ()
        assert not local or set(r.cpus) <= set(local)
        assert not set(r.cpus) & set(plan.reserved) and not set(r.cpus) & seen
        seen |= set(r.cpus)
    assert_all_formats_agree(plan)


def _ranges(cpus: tuple[int, ...]) -> list[str]:
    from minutiae.model.topology import format_cpulist

    return format_cpulist(cpus).split(",")


def test_dgx_h100_nic_kinds_from_sysfs(realdata: Path, tmp_path: Path) -> None:
    """gpud's /sys/class/infiniband of a DGX H100: 8 ConnectX-7 NDR ports are InfiniBand (their
    link_layer says so), the bonded storage port is Ethernet (RoCE) — kinds from sysfs, not names."""
    src = realdata / "infiniband/gpud/sys-class-infiniband-h100.0"
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "infiniband").symlink_to(src)
    t = read_sysfs_topology(tmp_path)
    kinds = {n.name: (n.kind, n.rate_gbps) for n in t.nics}
    assert [k for k, v in kinds.items() if v == (NicKind.INFINIBAND, 400.0)] == [
        "mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7", "mlx5_8", "mlx5_9"]
    assert kinds["mlx5_bond_0"][0] is NicKind.ETHERNET
    assert parse_cpulist("0-3") == (0, 1, 2, 3)
