"""The sysfs topology source on a built tree, on the real H100 /sys/class/infiniband snapshot
(linked in place, never copied) and on this machine's /sys."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from minutiae.analyses.topology.placement import place_gpus
from minutiae.analyses.topology.read_sysfs import read_sysfs_topology
from minutiae.errors import SourceUnavailable
from minutiae.model.topology import NicKind, PathType, format_cpulist
from minutiae.testing.topology import build_sysfs, dgx_like_spec


def test_built_dgx_like_tree(tmp_path: Path) -> None:
    t = read_sysfs_topology(build_sysfs(tmp_path, dgx_like_spec()))
    assert [g.pci for g in t.gpus][:2] == ["0000:13:00.0", "0000:23:00.0"]
    assert [g.numa for g in t.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert format_cpulist(t.gpus[5].cpus) == "56-111,168-223"
    pl = place_gpus(t)
    assert [(p.nearest_nics, p.nic_path) for p in pl] == [
        ((f"mlx5_{i}",), PathType.PIX) for i in range(8)]
    assert [p.nearest_nvme for p in pl] == [("nvme0",)] * 4 + [("nvme1",)] * 4
    assert pl[0].nvme_path is PathType.NODE
    assert t.gpu_nic[(0, "mlx5_1")] is PathType.NODE  # other host bridge, same NUMA node
    assert t.gpu_nic[(0, "mlx5_7")] is PathType.SYS
    n = t.nic("mlx5_3")
    assert n is not None and (n.rate_gbps, n.state, n.firmware, n.netdev, n.numa) == (
        400.0, "ACTIVE", "28.41.1000", "ibp3s0", 0)
    assert (t.gpus[0].pcie_gen, t.gpus[0].pcie_width) == (5, 16)
    assert t.facts["driver"] == "535.161.08"
    assert any("NVLink" in m for m in t.missing)


def test_switch_depth_gives_pxb(tmp_path: Path) -> None:
    spec = dgx_like_spec(gpus=2)
    gpu = spec.devices[0]
    gpu.chain = (*gpu.chain, "0000:12:00.0", "0000:15:00.0")  # a second switch below the first
    t = read_sysfs_topology(build_sysfs(tmp_path, spec))
    assert t.gpu_nic[(0, "mlx5_0")] is PathType.PXB


def test_real_h100_infiniband_snapshot(realdata: Path, tmp_path: Path) -> None:
    snap = realdata / "infiniband/gpud/sys-class-infiniband-h100.0"
    if not snap.exists():
        pytest.skip(f"missing {snap}")
    (tmp_path / "class").mkdir()
    os.symlink(snap, tmp_path / "class" / "infiniband")  # read in place
    t = read_sysfs_topology(tmp_path)
    assert [n.name for n in t.nics] == ["mlx5_0", "mlx5_1", "mlx5_4", "mlx5_5", "mlx5_6",
                                        "mlx5_7", "mlx5_8", "mlx5_9", "mlx5_bond_0"]
    ib = [n for n in t.nics if n.kind is NicKind.INFINIBAND]
    assert len(ib) == 8
    assert {(n.rate_gbps, n.state, n.link_layer, n.firmware) for n in ib} == {
        (400.0, "ACTIVE", "InfiniBand", "28.41.1000")}
    bond = t.nic("mlx5_bond_0")
    assert bond is not None and (bond.rate_gbps, bond.link_layer, bond.firmware, bond.kind) == (
        200.0, "Ethernet", "32.38.3056", NicKind.ETHERNET)
    assert t.gpus == ()
    assert any("no PCI device link" in m for m in t.missing)
    assert any("GPUs not visible" in m for m in t.missing)


def test_missing_root_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(SourceUnavailable, match="no such directory"):
        read_sysfs_topology(tmp_path / "nope")
    with pytest.raises(SourceUnavailable, match="neither bus/pci/devices"):
        read_sysfs_topology(tmp_path)


def test_unreadable_attribute_is_reported(tmp_path: Path) -> None:
    root = build_sysfs(tmp_path, dgx_like_spec(gpus=2))
    (root / "class" / "infiniband" / "mlx5_0" / "fw_ver").unlink()
    (root / "class" / "infiniband" / "mlx5_0" / "fw_ver").mkdir()  # read() fails: a directory
    t = read_sysfs_topology(root)
    n = t.nic("mlx5_0")
    assert n is not None and n.firmware is None
    assert any("fw_ver" in m for m in t.missing)


def test_this_machines_sys() -> None:
    if not Path("/sys/bus/pci/devices").is_dir():
        pytest.skip("no /sys/bus/pci/devices here")
    t = read_sysfs_topology("/sys")
    assert t.source == "sysfs"
    assert len(os.listdir("/sys/bus/pci/devices")) >= 1
    # whatever the hardware, every GPU found is an NVIDIA display-class function
    for g in t.gpus:
        assert Path(f"/sys/bus/pci/devices/{g.pci}/vendor").read_text().strip() == "0x10de"


def test_cli_sysfs_root_json_and_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from minutiae.cli.main import main

    spec = dgx_like_spec()
    spec.devices[1].ib_rate = "200 Gb/sec (4X HDR)"        # mlx5_0 trained at HDR
    spec.devices[2].link = ("32.0 GT/s PCIe", "8", "32.0 GT/s PCIe", "16")  # GPU1 at x8
    root = build_sysfs(tmp_path / "sys", spec)
    assert main(["topo", "--sysfs-root", str(root), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gpus"][1]["nearest_nics"] == ["mlx5_1"] and out["gpus"][1]["pcie_width"] == 8
    prof = tmp_path / "p.toml"
    prof.write_text("[nics]\nrate_gbps = 400\ncount = 8\n[gpus]\ncount = 8\n")
    rc = main(["topo", "--sysfs-root", str(root), "--check", "--expect", str(prof), "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 2 and res["status"] == "critical"
    assert sorted(f["kind"] for f in res["findings"]) == ["ib_rate_degraded", "pcie_link_degraded"]


def test_live_merge_adds_nvlinks_from_nvidia_smi(tmp_path: Path) -> None:
    from minutiae.analyses.topology.parse.detect import merge_matrix
    from minutiae.analyses.topology.parse.matrix import parse_topo_matrix
    from minutiae.testing.topology import dgx_like_topology, render_topo_matrix

    base = read_sysfs_topology(build_sysfs(tmp_path, dgx_like_spec()))
    matrix = parse_topo_matrix(render_topo_matrix(dgx_like_topology()), "nvidia-smi topo -m")
    t = merge_matrix(base, matrix)
    assert t.source == "sysfs+nvidia-smi-topo"
    assert t.gpus[0].nvlink_peers == (1, 2, 3, 4, 5, 6, 7) and t.gpus[0].nvlinks[0].links == 18
    assert t.gpus[0].pci == base.gpus[0].pci and t.gpu_nic == base.gpu_nic
    assert not any("NVLink" in m for m in t.missing)
