"""--rate-scale multiplies the faults and, by default, the must-not-alarm events too (a demo with
x20 the faults and x1 the noise would overstate precision); --noise-scale sets them apart."""

from __future__ import annotations

import json
from pathlib import Path

from minutiae.cli.main import main
from minutiae.sim.world.profile import load_profile


def _rates(**kw: float) -> dict[str, float]:
    return {f.cls: f.rate for f in load_profile(**kw).faults}  # type: ignore[arg-type]


def test_noise_scale_multiplies_event_rates_and_probabilities_not_standing_effects() -> None:
    base, scaled = _rates(), _rates(rate_scale=20.0, noise_scale=20.0)
    assert scaled["app_xid"] == base["app_xid"] * 20
    assert scaled["planned_reboot"] == base["planned_reboot"] * 20
    assert scaled["peermem_teardown"] == 1.0  # a probability per job node: capped at 1
    for cls in ("gc_pause", "seqlen_variance", "pipeline_imbalance", "diurnal_drift", "boot_settle"):
        assert scaled[cls] == base[cls]  # every job / the fleet has them: not a rate
    assert scaled["gpu_off_bus"] == base["gpu_off_bus"] * 20
    # the library default keeps the noise at 1 unless asked; a separate scale is independent
    assert _rates(rate_scale=20.0)["app_xid"] == base["app_xid"]
    apart = _rates(rate_scale=20.0, noise_scale=2.0)
    assert apart["app_xid"] == base["app_xid"] * 2 and apart["gpu_off_bus"] == base["gpu_off_bus"] * 20


def _benign(out: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in (out / "truth.jsonl").read_text().splitlines():
        ev = json.loads(line)
        if not ev.get("harmful", True):
            counts[ev["class"]] = counts.get(ev["class"], 0) + 1
    return counts


def test_sim_cli_scales_the_noise_with_the_faults_unless_told(tmp_path: Path) -> None:
    common = ["sim", "--nodes", "8", "--days", "1", "--seed", "3", "--quiet", "--rate-scale", "30"]
    assert main([*common, "--out", str(tmp_path / "a")]) == 0
    assert main([*common, "--noise-scale", "1", "--out", str(tmp_path / "b")]) == 0
    a, b = _benign(tmp_path / "a"), _benign(tmp_path / "b")
    # 8 node-days at 50 app Xids per 1,000 node-days: ~0.4 at x1, ~12 at x30
    assert a.get("app_xid", 0) >= 5 > b.get("app_xid", 0)
    assert a.get("planned_reboot", 0) >= b.get("planned_reboot", 0)
