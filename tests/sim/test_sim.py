"""Simulator: the profile (every rate cited, validated), the plan (rates, determinism), truth I/O."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minutiae.errors import ConfigError, ParseError
from minutiae.scoring.truth import parse_truth_lines
from minutiae.sim.api import parse_rates, run_sim
from minutiae.sim.world.plan import make_plan
from minutiae.sim.world.profile import UNITS, default_profile_text, load_profile, parse_profile

T0 = 1_736_121_600.0


def test_every_rate_cites_its_source() -> None:
    prof = load_profile()
    assert len(prof.faults) >= 25
    for f in prof.faults:
        assert f.source.strip() and f.unit in UNITS and f.signature, f.cls
    harmful = {f.cls for f in prof.faults if f.harmful}
    assert {"gpu_off_bus", "gpu_dbe", "gsp_timeout", "gpu_nvlink", "row_remap_failure", "ib_link_flap",
            "ib_symbol_errors", "pcie_degraded", "thermal_throttle", "lemon_node", "persistent_straggler",
            "fail_slow", "mce_corrected", "edac_ue", "oom_kill", "hung_task", "nfs_timeout"} <= harmful
    benign = {f.cls for f in prof.faults if not f.harmful}
    assert {"app_xid", "pipeline_imbalance", "seqlen_variance", "gc_pause", "diurnal_drift",
            "planned_reboot"} <= benign
    # Llama 3: 419 interruptions / (16,384 GPUs x 54 days); the GPU-day classes must add up to
    # the same order (the profile splits the paper's categories)
    per_gpu = sum(f.rate for f in prof.faults if f.unit == "per_1000_gpu_days" and f.expect_drain)
    assert 0.25 < per_gpu < 0.474


def test_profile_without_source_is_refused_naming_the_file() -> None:
    text = default_profile_text().replace(
        'source = "Llama 3 Table 5: GPU system processor', 'sauce = "Llama 3 Table 5: GPU system processor', 1)
    with pytest.raises(ConfigError, match=r"my\.toml \[\[fault\]\] #6: missing 'source'"):
        parse_profile(text, "my.toml")


@pytest.mark.parametrize("bad, match", [
    ("rate = 0.067", "rate = -1.0"),
    ('unit = "per_1000_gpu_days"', 'unit = "per_fortnight"'),
    ("repair_hours = [4.0, 48.0]", "repair_hours = [48.0, 4.0]"),
    # what explains a class is data, validated at load: one class per kind's false alarms,
    # kinds spelled as kinds, no unknown keys
    ('explained_by = ["xid:79", "gpu_off_bus", "gpu_missing"]', 'explained_by = ["xid:79", "ib_link"]'),
    ('explained_by = ["xid:79", "gpu_off_bus", "gpu_missing"]', 'explained_by = ["Xid 79"]'),
    ('also_explained_by = ["xid:140"]', 'also_explained_by = ["xid:1400"]'),
    ('[rollouts]\nexplained_by = ["regression"]', '[rollouts]\nexplains = ["regression"]'),
])
def test_profile_validation(bad: str, match: str) -> None:
    with pytest.raises(ConfigError, match="p.toml"):
        parse_profile(default_profile_text().replace(bad, match, 1), "p.toml")


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300))
def test_profile_garbage_never_crashes(text: str) -> None:
    try:
        parse_profile(text, "fuzz.toml")
    except ConfigError as exc:
        assert "fuzz.toml" in str(exc)


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=400))
def test_truth_garbage_never_crashes(data: bytes) -> None:
    try:
        list(parse_truth_lines(data.decode("utf-8", "replace").splitlines(), "t.jsonl"))
    except ParseError as exc:
        assert "t.jsonl" in str(exc)


def test_truncated_truth_names_path_and_line() -> None:
    good = '{"id":"f1","class":"gpu_off_bus","node":"n1","start":1,"end":2}'
    with pytest.raises(ParseError, match=r"t\.jsonl: line 2"):
        list(parse_truth_lines([good, good[:30]], "t.jsonl"))


def test_rate_overrides_and_cli_parsing() -> None:
    assert parse_rates(["gpu_off_bus=0.5", " fail_slow = 2"]) == {"gpu_off_bus": 0.5, "fail_slow": 2.0}
    with pytest.raises(ConfigError, match="CLASS=NUMBER"):
        parse_rates(["gpu_off_bus"])
    with pytest.raises(ConfigError, match="no such fault class"):
        load_profile(rates={"nope": 1.0})
    prof = load_profile(rate_scale=0.0, rates={"gpu_off_bus": 50.0})
    plan = make_plan(prof, 64, 8, 2.0, 7, T0)
    harmful = [t for t in plan.truth if t.harmful and t.node is not None]
    assert harmful and {t.cls for t in harmful} == {"gpu_off_bus"}
    # the rollout with an effect is the only fleet-wide harmful record
    assert {t.cls for t in plan.truth if t.harmful and t.node is None} == {"perf_regression"}


def test_rates_follow_the_profile() -> None:
    """gpu_off_bus at 1 per 1,000 GPU-days on 2,000 nodes x 8 GPUs x 10 days: 160 expected."""
    prof = load_profile(rate_scale=0.0, rates={"gpu_off_bus": 1.0, "persistent_straggler": 0.02})
    plan = make_plan(prof, 2000, 8, 10.0, 3, T0)
    n = sum(1 for t in plan.truth if t.cls == "gpu_off_bus")
    # Poisson(160), minus faults that land while the node is still down from an earlier one
    assert 110 <= n <= 210
    strag = sum(1 for t in plan.truth if t.cls == "persistent_straggler")
    assert 15 <= strag <= 65          # Binomial(2000, 0.02): mean 40, sd 6.3 (+-4 sd)
    slow = [float(t.details["slowdown"]) for t in plan.truth if t.cls == "persistent_straggler"]
    assert all(0.08 <= s <= 0.12 for s in slow)


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_deterministic_for_a_seed(tmp_path: Path) -> None:
    kw = {"nodes": 6, "gpus_per_node": 8, "days": 0.5, "rate_scale": 50.0}
    run_sim(tmp_path / "a", seed=11, **kw)  # type: ignore[arg-type]
    run_sim(tmp_path / "b", seed=11, **kw)  # type: ignore[arg-type]
    run_sim(tmp_path / "c", seed=12, **kw)  # type: ignore[arg-type]
    a, b, c = _digest(tmp_path / "a"), _digest(tmp_path / "b"), _digest(tmp_path / "c")
    assert len(a) > 6 * 400 and a == b
    assert a["truth.jsonl"] != c["truth.jsonl"] and a["telemetry.parquet"] != c["telemetry.parquet"]


def test_refuses_to_overwrite_a_directory_that_is_not_a_dataset(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(Exception, match="refusing to overwrite"):
        run_sim(tmp_path, nodes=2, gpus_per_node=8, days=0.1, seed=1)
    assert (tmp_path / "precious.txt").read_text() == "keep me"


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["meta.json", "fleet.csv", "jobs.csv", "maintenance.csv", "boots.csv", "truth.jsonl"]),
       st.binary(max_size=300))
def test_dataset_reader_garbage_is_a_clear_error(tmp_path_factory: pytest.TempPathFactory, name: str,
                                                 data: bytes) -> None:
    from minutiae.errors import InputError
    from minutiae.sim.dataset import load_dataset

    root = tmp_path_factory.mktemp("ds")
    if not hasattr(test_dataset_reader_garbage_is_a_clear_error, "_base"):
        run_sim(root / "base", nodes=2, gpus_per_node=2, days=0.05, seed=1)
        test_dataset_reader_garbage_is_a_clear_error._base = root / "base"  # type: ignore[attr-defined]
    import shutil

    base = test_dataset_reader_garbage_is_a_clear_error._base  # type: ignore[attr-defined]
    ds = root / "d"
    shutil.copytree(base, ds, ignore=shutil.ignore_patterns("nodes", "timings"))
    (ds / name).write_bytes(data)
    try:
        load_dataset(ds)
    except InputError as exc:
        assert name in str(exc) or str(ds) in str(exc)


def test_a_dataset_is_scored_by_the_explanations_of_its_own_profile(tmp_path: Path) -> None:
    """The writer records the profile's map in meta.json; the reader uses it (another profile's
    map comes through), and a dataset written before it carried one gets the default's."""
    import json

    from minutiae.scoring.explain import Explains, default_explains
    from minutiae.sim.dataset import load_dataset

    run_sim(tmp_path / "d", nodes=2, gpus_per_node=2, days=0.05, seed=1)
    meta_path = tmp_path / "d" / "meta.json"
    meta = json.loads(meta_path.read_text())
    assert Explains.from_json(meta["explains"], "m") == load_profile().explains
    assert load_dataset(tmp_path / "d").explains == load_profile().explains
    meta["explains"] = {"xid:79": ["app_xid"]}
    meta_path.write_text(json.dumps(meta))
    assert load_dataset(tmp_path / "d").explains.of("xid:79", "xid") == ("app_xid",)
    del meta["explains"]
    meta_path.write_text(json.dumps(meta))
    assert load_dataset(tmp_path / "d").explains == default_explains()
