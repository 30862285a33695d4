"""minutiae eval scores the kernel log as the agent reads it: each line's finding, and the
log-count engine rules (log_counts.toml) over them, through the same engine replay as the
backtest (a NIC link going down three times within an hour is nic-link-flapping: inspect)."""

from __future__ import annotations

import json
from pathlib import Path

from minutiae.cli.main import main


def test_eval_applies_the_agents_log_count_rules(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "ds"
    assert main(["sim", "--nodes", "2", "--days", "0.3", "--seed", "5", "--rate-scale", "0",
                 "--out", str(out), "--quiet"]) == 0
    capsys.readouterr()
    meta = json.loads((out / "meta.json").read_text())
    start = float(meta["start"])
    from datetime import UTC, datetime

    def line(dt: float, text: str) -> str:
        ts = datetime.fromtimestamp(start + dt, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S,%f+00:00")
        return f"kern  :info  : {ts} {text}\n"

    log = out / "nodes" / "gpu001" / "kern.log"
    log.chmod(0o644)
    with log.open("a") as fh:
        for k in range(3):  # after every line the sim wrote: three downs 10 min apart
            fh.write(line(6 * 3600 + 600 * k, "mlx5_core 0000:1a:00.0 ibp26s0: Link down"))
    assert main(["eval", str(out), "--detector", "kernel_log", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    drains = [d for d in doc["drains"] if d["node"] == "gpu001"]
    # one line alone is a warning; the third within the hour is the count rule's alarm
    assert [(d["kind"], round(d["time"] - start)) for d in drains] == [("ib_link", 6 * 3600 + 1200)]
    assert drains[0]["verdict"] == "wrong"  # nothing in the truth explains it
