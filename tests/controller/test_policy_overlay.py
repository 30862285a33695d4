"""Policy overlays: a file sets only what it changes over the shipped default; `minutiae policy
show` prints the merged, validated result; NaN/inf/out-of-range values are refused naming the key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from minutiae.cli.main import main
from minutiae.cli.policy import dump_toml
from minutiae.controller.policy import load_policy, policy_data


def test_an_overlay_changes_only_what_it_sets(tmp_path: Path) -> None:
    f = tmp_path / "site.toml"
    f.write_text("healthy_delay_s = 300\n[budget]\nmax_unavailable_fraction = 0.2\n")
    base, site = load_policy(), load_policy(f)
    assert (site.healthy_delay_s, site.budget.max_unavailable_fraction) == (300.0, 0.2)
    assert site.rules == base.rules and site.ladder == base.ladder
    assert site.budget.storm == base.budget.storm
    assert site.budget.domain_caps == base.budget.domain_caps
    assert site.source == str(f)


def test_show_prints_the_merged_policy_as_toml_that_reads_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "site.toml"
    f.write_text('fleet_nodes = "gpu[0-9]+"\n[budget.domain_caps]\nrack = 4\n')
    assert main(["policy", "show", "--policy", str(f)]) == 0
    out = capsys.readouterr().out
    data, _ = policy_data(f)
    assert tomllib.loads(out) == data
    assert data["fleet_nodes"] == "gpu[0-9]+"
    assert data["budget"]["domain_caps"] == {"rack": 4}  # the site's domains, replaced whole
    assert tomllib.loads(dump_toml(policy_data()[0])) == policy_data()[0]


@pytest.mark.parametrize(("text", "key"), [
    ("healthy_delay_s = nan\n", "healthy_delay_s"),
    ("stale_after_s = inf\n", "stale_after_s"),
    ("[budget]\nmax_unavailable_fraction = -inf\n", "budget.max_unavailable_fraction"),
    ("[budget]\nmax_unavailable_fraction = 1.5\n", "budget.max_unavailable_fraction"),
    ("[budget.storm]\nfraction = nan\n", "fraction"),
])
def test_non_finite_and_out_of_range_values_are_refused_naming_the_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, key: str) -> None:
    f = tmp_path / "bad.toml"
    f.write_text(text)
    assert main(["policy", "show", "--policy", str(f)]) == 3
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err and err.count("\n") == 1
