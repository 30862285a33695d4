"""docs/operations.md starts from `pip install`: every `$SHARE/...` file its commands use is
installed by the package (pyproject's data-files under share/minutiae/), and every data-files
pattern matches files in deploy/ (a renamed rule file or dashboard breaks this, not the admin)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "operations.md"


def installed() -> dict[str, Path]:
    """share/minutiae-relative path → the source file it is installed from."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    out = {}
    for target, patterns in data.items():
        assert target.startswith("share/minutiae"), target
        for pattern in patterns:
            files = sorted(ROOT.glob(pattern))
            assert files, f"data-files pattern {pattern} matches nothing"
            for f in files:
                out[f"{target.removeprefix('share/minutiae').strip('/')}/{f.name}".lstrip("/")] = f
    return out


def test_the_walk_through_uses_only_installed_files() -> None:
    files = installed()
    for name in ("prometheus/rules/alerts.yaml", "prometheus/rules/records.yaml",
                 "prometheus/alertmanager.yml", "grafana/minutiae-fleet.json",
                 "grafana/minutiae-agents.json", "kubernetes/monitoring/prometheusrule.yaml"):
        assert name in files, name
    used = re.findall(r"\$SHARE/([\w./*-]+)", DOC.read_text())
    assert len(used) >= 4
    for u in used:
        if u.endswith("/"):
            u = u.rstrip("/")
        pattern = re.compile(re.escape(u).replace(r"\*", "[^/]*") + r"(/.*)?$")
        assert any(pattern.match(f) for f in files), f"docs/operations.md uses $SHARE/{u}"
