"""Real captures pasted into public issue threads (tests/data/issue_pastes/README.md): a clean
clone without ../shared still parses a real ``ibstat``, ``nvidia-smi -q`` and ``topo -m``."""

from __future__ import annotations

from pathlib import Path

from minutiae.analyses.topology.parse.detect import parse_topology
from minutiae.model.topology import format_cpulist
from minutiae.node.sources.ib.parse_ibstat import parse_ibstat
from minutiae.node.sources.nvidia_smi.parse.text import parse_nvidia_smi_text

DATA = Path(__file__).resolve().parents[1] / "data" / "issue_pastes"


def test_ibstat_cx7_roce_ports_and_a_disabled_port() -> None:
    path = DATA / "ibstat-mooncake-1999.txt"
    s = parse_ibstat(path.read_text(), str(path))
    assert s.problems == ()
    assert s.components("ib:") == ["ib:mlx5_0/1", "ib:mlx5_1/1", "ib:mlx5_10/1"]
    for port in ("ib:mlx5_0/1", "ib:mlx5_1/1"):
        assert (s.value(port, "hca_type"), s.value(port, "fw_ver")) == ("MT4129", "28.39.1002")
        assert (s.value(port, "state"), s.value(port, "phys_state")) == ("ACTIVE", "LinkUp")
        assert (s.value(port, "rate_gbps"), s.value(port, "link_layer")) == (200.0, "Ethernet")
    down = "ib:mlx5_10/1"
    assert (s.value(down, "hca_type"), s.value(down, "fw_ver")) == ("MT4125", "22.31.1014")
    assert (s.value(down, "state"), s.value(down, "phys_state")) == ("DOWN", "Disabled")
    assert s.value(down, "rate_gbps") is None  # the paste ends before its Rate line


def test_nvidia_smi_q_gtx1080_driver_396() -> None:
    path = DATA / "nvidia-smi-q-gtx1080-nvidia-docker-954.txt"
    s = parse_nvidia_smi_text(path.read_text(), str(path))
    g = "gpu:0000:01:00.0"
    assert s.problems == ()
    assert s.components("gpu:") == [g]
    assert (s.value("node", "driver_version"), s.value("node", "gpu_count")) == ("396.54", 1)
    assert s.value(g, "name") == "GeForce GTX 1080"
    assert s.value(g, "uuid") == "GPU-0200523e-f473-3a45-9b4a-fbbe0e41ccf8"
    assert s.value(g, "vbios_version") == "86.04.60.00.80"


def test_nvidia_smi_topo_m_two_gpus_through_a_host_bridge() -> None:
    path = DATA / "nvidia-smi-topo-m-2x5090-club3090-1229.txt"
    t = parse_topology(path.read_bytes(), str(path))
    assert t.source == "nvidia-smi-topo"
    assert [(g.index, g.numa, format_cpulist(g.cpus), g.nvlink_peers) for g in t.gpus] == [
        (0, 0, "0-63", ()), (1, 0, "0-63", ())]
    assert t.nics == ()
