"""Checks against a hand-written profile and a profile learned from a fleet with a planted
minority; the CLI end to end (exit codes are Nagios statuses)."""

from __future__ import annotations

import json
import os
import re
from importlib import resources
from pathlib import Path

import pytest

from minutiae.analyses.topology.check import check_against, check_topology
from minutiae.analyses.topology.learn import FingerprintCache, learn
from minutiae.analyses.topology.parse.detect import parse_topology
from minutiae.analyses.topology.placement import report
from minutiae.analyses.topology.profile import (
    ATTRIBUTES,
    Profile,
    fingerprint,
    profile_from_toml,
    profile_to_toml,
)
from minutiae.cli.main import main
from minutiae.errors import ConfigError
from minutiae.model.vocab import Status
from minutiae.testing.limits import memory_cap
from minutiae.testing.topology import dgx_like_topology, render_topo_matrix, with_facts

PLANTED = {
    # a lost GPU also leaves its NUMA node one short and its NIC without a GPU
    "node-0007": (dict(gpus=7), {"gpu_missing", "nvlink_down", "numa_unbalanced",
                                 "nic_pairing_mismatch"}),
    "node-0013": (dict(slow_nic=3), {"ib_rate_degraded"}),
    "node-0021": (dict(driver="550.54.15"), {"driver_mismatch"}),
    "node-0034": (dict(firmware="28.39.1002"), {"firmware_mismatch"}),
    "node-0042": (dict(gpu_pcie=(4, 16)), {"pcie_link_degraded"}),
    "node-0055": (dict(drop_nic=5), {"nic_missing", "gpu_without_local_nic", "nic_pairing_mismatch"}),
    "node-0061": (dict(numa_of_gpu={3: 1}), {"numa_unbalanced"}),
    "node-0077": (dict(nic_state="DOWN"), {"ib_port_down"}),
}


def _fleet(tmp_path: Path, n: int = 80) -> Path:
    d = tmp_path / "captures"
    d.mkdir()
    base = json.dumps(report(dgx_like_topology()))
    for i in range(n):
        name = f"node-{i:04d}"
        if name in PLANTED:
            text = json.dumps(report(dgx_like_topology(**PLANTED[name][0])))  # type: ignore[arg-type]
        else:
            text = base
        (d / f"{name}.json").write_text(text)
    # the same majority node as an nvidia-smi topo -m capture, and one unreadable capture
    (d / "node-0090.txt").write_text(render_topo_matrix(dgx_like_topology()))
    (d / "node-0091.json").write_text('{"gpus": [')
    return d


def test_learn_finds_golden_config_and_planted_minority(tmp_path: Path) -> None:
    d = _fleet(tmp_path)
    cache = FingerprintCache()
    fps = []
    bad = []
    for p in sorted(d.iterdir()):
        fp = cache.fingerprint(p.read_bytes(), str(p))
        (bad if isinstance(fp, str) else fps).append((p.stem, fp))
    assert [b[0] for b in bad] == ["node-0091"]
    assert cache.parsed == 1 + len(PLANTED) + 2  # identical captures parsed once
    res = learn(fps)  # type: ignore[arg-type]
    e = res.profile.expect
    assert (e["gpus.count"], e["gpus.nvlinks"], e["gpus.per_numa"], e["nics.rate_gbps"]) == (
        8, 18, "0:4,1:4", 400.0)
    assert e["software.driver"] == "535.161.08" and e["nics.firmware"] == "28.41.1000"
    assert res.profile.support["gpus.count"] == pytest.approx(80 / 81)
    assert res.nodes == 81 and res.groups == 1 + len(PLANTED) + 1
    problem_nodes = {dv.node for dv in res.deviations if dv.problem}
    # the nvidia-smi capture cannot tell driver/firmware/rates: listed as unknown (actual None)
    assert set(PLANTED) | {"node-0090"} == problem_nodes
    assert {dv.attribute for dv in res.deviations if dv.node == "node-0090"} >= {
        "software.driver", "nics.rate_gbps"}
    assert all(dv.actual is None for dv in res.deviations if dv.node == "node-0090")
    # each planted node, checked against the learned profile, shows its planted fault
    prof = profile_from_toml(profile_to_toml(res.profile), "learned.toml")
    assert prof.expect == res.profile.expect and prof.nodes == 81
    for name, (knobs, kinds) in PLANTED.items():
        result = check_topology(dgx_like_topology(**knobs), prof)  # type: ignore[arg-type]
        assert {f.kind for f in result.findings} == kinds, name
        assert result.status in (Status.WARNING, Status.CRITICAL)
    ok = check_topology(dgx_like_topology(), prof)
    assert ok.findings == () and ok.status is Status.OK


def test_no_majority_is_reported_as_ambiguous() -> None:
    fps = [(f"n{i}", fingerprint(with_facts(dgx_like_topology(), driver=f"5{i % 3}0.0")))
           for i in range(9)]
    res = learn(fps)
    assert "software.driver" not in res.profile.expect
    assert [v for v, _ in res.ambiguous["software.driver"]] == ["500.0", "510.0"]


def test_shipped_profile_validates_and_unknown_is_not_ok(realdata: Path) -> None:
    text = resources.files("minutiae.analyses.topology").joinpath("profiles/dgx-h100.toml").read_text()
    prof = profile_from_toml(text, "dgx-h100.toml")
    assert prof.expect["gpus.nvlinks"] == 18
    p = realdata / "nvidia_smi/ml-engineering/topo_m_8xH100_nv18_numa.txt"
    res = check_topology(parse_topology(p.read_bytes(), str(p)), prof)
    assert res.findings == ()
    assert res.status is Status.UNKNOWN  # the capture has no NIC columns: cannot tell
    assert "nics.rate_gbps" in (res.reason or "") and "gpus.local_nic" in (res.reason or "")
    a100 = realdata / "nvidia_smi/ml-engineering/topo_m_8xA100_nv12_compact.txt"
    res = check_topology(parse_topology(a100.read_bytes(), str(a100)), prof)
    assert [f.kind for f in res.findings] == ["nvlink_down"]
    assert res.findings[0].attrs["actual"] == "12" and res.status is Status.CRITICAL


@pytest.mark.parametrize("bad,msg", [
    ("[gpus]\ncount = 'eight'\n", "gpus.count must be int"),
    ("[gpus]\ncolour = 1\n", "unknown key gpus.colour"),
    ("[gpus\n", "not valid TOML"),
    ("[profile]\nname='x'\n", "expects nothing"),
])
def test_bad_profiles(bad: str, msg: str) -> None:
    with pytest.raises(ConfigError, match=msg):
        profile_from_toml(bad, "p.toml")


def test_self_check_on_real_ndv2(realdata: Path) -> None:
    p = realdata / "nccl_topo/azhpc-images/ndv2-topo.xml"
    res = check_topology(parse_topology(p.read_bytes(), str(p)))
    assert [f.kind for f in res.findings] == ["gpu_without_local_nic"] * 8
    assert res.status is Status.WARNING


# --- CLI ---------------------------------------------------------------------------------------

def test_cli_learn_json_and_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    d = _fleet(tmp_path)
    prof = tmp_path / "golden.toml"
    rc = main(["topo", "--learn", str(d), "--json", "--write-profile", str(prof)])
    out = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert out["nodes"] == 81 and out["profile"]["gpus.count"] == 8
    assert set(out["deviating_nodes"]) == set(PLANTED) | {"node-0090"}
    assert out["skipped"][0]["path"].endswith("node-0091.json")
    node = tmp_path / "n13.json"
    node.write_text(json.dumps(report(dgx_like_topology(slow_nic=3))))
    rc = main(["topo", "--from", str(node), "--check", "--expect", str(prof), "--json"])
    res = json.loads(capsys.readouterr().out)
    assert rc == 2 and res["status"] == "critical"
    assert [f["kind"] for f in res["findings"]] == ["ib_rate_degraded"]


def test_cli_contract_json(realdata: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = realdata / "nccl_topo/aws-ofi-nccl/p4d-24xl-topo.xml"
    assert main(["topo", "--from", str(p), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    g = out["gpus"][6]
    assert (g["index"], g["numa"], g["nearest_nics"]) == (6, 1, ["0000:a0:1b.0"])
    assert g["cpus"][:2] == [24, 25] and all(isinstance(c, int) for c in g["cpus"])
    assert {n["name"] for n in out["nics"]} == {"0000:10:1b.0", "0000:20:1b.0", "0000:90:1b.0",
                                                "0000:a0:1b.0"}


def test_cli_errors_are_messages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topo", "--from", str(tmp_path / "none.xml")]) == 3
    assert "none.xml: no such file" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    assert main(["topo", "--from", str(empty)]) == 3
    assert "empty.txt: empty file" in capsys.readouterr().err
    assert main(["topo", "--learn", str(tmp_path / "nodir")]) == 3
    assert "not a directory" in capsys.readouterr().err
    assert main(["topo", "--from", str(empty), "--sysfs-root", str(tmp_path)]) == 3
    assert "not both" in capsys.readouterr().err


def test_cli_plan_and_table(realdata: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = realdata / "nvidia_smi/ml-engineering/topo_m_8xH100_nv18_numa.txt"
    assert main(["topo", "--from", str(p), "--plan", "--ranks", "2", "--reserve-cores", "none",
                 "--format", "taskset"]) == 0
    out = capsys.readouterr().out
    assert ("taskset -c 0-25,104-129 env LOCAL_RANK=0 CUDA_DEVICE_ORDER=PCI_BUS_ID "
            "CUDA_VISIBLE_DEVICES=0,1") in out
    assert main(["topo", "--from", str(p), "--plan", "--reserve-cores", "x"]) == 3
    assert "--reserve-cores" in capsys.readouterr().err
    os.environ.setdefault("COLUMNS", "200")
    assert main(["topo", "--from", str(p)]) == 0
    assert "52-103,156-207" in capsys.readouterr().out


def test_parallel_fingerprinting_matches_serial(tmp_path: Path) -> None:
    from minutiae.analyses.topology.learn import fingerprint_files
    from minutiae.analyses.topology.read_sysfs import read_capture_bytes

    d = _fleet(tmp_path)
    items = [(p.stem, p) for p in sorted(d.iterdir())]
    serial = fingerprint_files(items, read_capture_bytes, workers=1)
    forked = fingerprint_files(items, read_capture_bytes, workers=2, chunk=10)
    assert sorted(serial[0], key=lambda x: x[0]) == sorted(forked[0], key=lambda x: x[0])
    assert serial[1] == forked[1] and serial[1][0][0].endswith("node-0091.json")
    assert serial[2] == 1 + len(PLANTED) + 2 and forked[2] >= serial[2]
    assert learn(forked[0]).profile.expect == learn(serial[0]).profile.expect


def test_every_shipped_rule_example() -> None:
    from minutiae.analyses.topology.rules import rules

    shipped = rules()
    assert set(shipped) == set(ATTRIBUTES)
    ran = 0
    for attr, rule in shipped.items():
        for ex in rule.examples:
            assert rule.deviates(ex.actual, ex.expected) is ex.finding, (attr, ex)
            found = check_against({attr: ex.actual}, Profile("p", {attr: ex.expected}))[0]
            assert [f.kind for f in found] == ([rule.kind] if ex.finding else []), (attr, ex)
            ran += 1
    assert ran >= 25


@pytest.mark.parametrize("bad,msg", [
    ('[[rule]]\nattribute = "gpus.colour"\n', "unknown attribute"),
    ('[[rule]]\nattribute = "gpus.count"\nkind = "x"\nseverity = "dire"\naction = "none"\n'
     'compare = "equal"\nexamples = []\n', "unknown severity"),
    ('[[rule]]\nattribute = "gpus.count"\nkind = "x"\nseverity = "error"\naction = "none"\n'
     'compare = "equal"\nexamples = []\n', "no examples"),
    ('', "no rule for gpus.count"),
])
def test_bad_rules_are_refused(bad: str, msg: str) -> None:
    from minutiae.analyses.topology.rules import parse_rules

    with pytest.raises(ConfigError, match=msg):
        parse_rules(bad, "rules.toml")


def test_every_profile_finding_names_its_device() -> None:
    from dataclasses import replace

    from minutiae.analyses.topology.profile import Profile, fingerprint
    from minutiae.testing.topology import dgx_like_topology

    prof = Profile("p", fingerprint(dgx_like_topology()))
    bad = dgx_like_topology(slow_nic=3, nic_state="DOWN", drop_nic=6)
    bad = replace(bad, gpus=tuple(replace(g, pcie_width=8) if g.index == 5 else g for g in bad.gpus))
    found = {f.rule: f.message for f in check_topology(bad, prof).findings}
    assert "[GPU5 (0000:63:00.0)]" in found["gpus.pcie"]
    assert "[mlx5_3 (0000:44:00.0)]" in found["nics.rate_gbps"]
    assert "mlx5_6" in found["nics.names"] and "GPU6 (0000:73:00.0) nearest" in found["gpus.pairing"]
    assert all("[" in m for r, m in found.items() if not r.startswith("self.")), found
    assert all(re.search(r"GPU\d|mlx5_\d|node", m) for m in found.values()), found


def test_learn_table_never_cuts_values(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    d = _fleet(tmp_path)
    main(["topo", "--learn", str(d)])
    out = capsys.readouterr().out
    assert "…" not in out
    flat = re.sub(r"[\s│┃|]", "", out)
    assert "0>mlx5_0;1>mlx5_1;2>mlx5_2" in flat  # the long pairing value, folded, all there


def _planted() -> dict[str, object]:
    """One node per shipped rule attribute, each with one fault that rule finds."""
    from dataclasses import replace

    from minutiae.model.topology import NvLink, PathType
    from minutiae.testing.topology import dgx_like_topology, with_facts

    base = dgx_like_topology()

    def gpu(i: int, **kw: object) -> object:
        return replace(base, gpus=tuple(replace(g, **kw) if g.index == i else g for g in base.gpus))

    def nic(i: int, **kw: object) -> object:
        return replace(base, nics=tuple(replace(n, **kw) if n.name == f"mlx5_{i}" else n for n in base.nics))

    far = {**base.gpu_nic, (0, "mlx5_0"): PathType.SYS}
    return {
        "gpus.count": dgx_like_topology(gpus=7), "gpus.model": gpu(2, model="NVIDIA H100 PCIe"),
        "gpus.nvlinks": gpu(3, nvlinks=tuple(NvLink(peer=j, links=12) for j in range(8) if j != 3)),
        "gpus.nvlink_peers": gpu(1, nvlinks=()), "gpus.pcie": gpu(5, pcie_width=8),
        "gpus.per_numa": dgx_like_topology(numa_of_gpu={3: 1}),
        "gpus.local_nic": replace(base, gpu_nic=far), "gpus.pairing": replace(base, gpu_nic=far),
        "nics.count": dgx_like_topology(drop_nic=6), "nics.names": dgx_like_topology(drop_nic=6),
        "nics.rate_gbps": dgx_like_topology(slow_nic=3), "nics.state": nic(4, state="DOWN"),
        "nics.firmware": nic(2, firmware="28.39.1002"), "nics.pcie": nic(1, pcie_width=8),
        "nvme.count": replace(base, nvmes=base.nvmes[:1]),
        "software.driver": with_facts(base, driver="550.54.15"),
        "software.kernel": with_facts(base, kernel="6.8.0-40-generic"),
        "software.vbios": with_facts(base, vbios="96.00.99.00.01"),
    }


def test_every_rule_names_the_device_or_node() -> None:
    """Issue 18: `--check` names the device in every finding (or the node, for a node-wide
    attribute): a fault planted for each shipped rule, each finding's message checked."""
    from minutiae.analyses.topology.profile import Profile, fingerprint
    from minutiae.analyses.topology.rules import rules
    from minutiae.testing.topology import dgx_like_topology, with_facts

    good = with_facts(dgx_like_topology(), kernel="6.8.0-31-generic", vbios="96.00.89.00.01")
    prof = Profile("p", fingerprint(good))
    planted = _planted()
    assert set(planted) == set(rules()), set(rules()) ^ set(planted)  # every shipped rule
    device = re.compile(r"\[(GPU\d+ \(0000:[0-9a-f:.]+\)|mlx5_\d+ \(0000:[0-9a-f:.]+\)|NICs present: |"
                        r"NVMe present: |GPUs present: |node )")
    for key, t in planted.items():
        if key.startswith("software.") or key in ("gpus.model",):
            t = with_facts(t, **{k: v for k, v in good.facts.items() if k not in t.facts})  # type: ignore[arg-type]
        found = [f for f in check_topology(t, prof).findings if f.rule == key]  # type: ignore[arg-type]
        assert found, key
        assert all(device.search(f.message) for f in found), (key, [f.message for f in found])
    numa = [f for f in check_topology(planted["gpus.per_numa"]).findings  # type: ignore[arg-type]
            if f.kind == "numa_unbalanced"]
    assert numa and "GPU3" in numa[0].message and "GPU0" in numa[0].message, numa


@pytest.mark.parametrize("bad", ["/dev/zero", "binary"])
def test_cli_expect_an_endless_or_binary_profile_is_one_line_exit_3(
        bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--expect /dev/zero`` was read whole (a MemoryError traceback on main)."""

    node = tmp_path / "n.json"
    node.write_text(json.dumps(report(dgx_like_topology())))
    prof = Path(bad) if bad.startswith("/") else tmp_path / "p.toml"
    if not bad.startswith("/"):
        prof.write_bytes(b"[profile]\n\0\0\0")
    with memory_cap():  # main: a MemoryError, not the machine
        rc = main(["topo", "--from", str(node), "--check", "--expect", str(prof)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 3 and len(err) == 1, err
    assert err[0].startswith(f"minutiae: error: {prof}: binary data"), err
