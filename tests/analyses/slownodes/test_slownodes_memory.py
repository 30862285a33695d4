"""slownodes' peak memory grows with one chunk, not with the table (measured in fresh processes:
the peak RSS of the child's own address space (VmHWM, reset after the table is read) vs its RSS then;
ru_maxrss would start at pytest's own peak, inherited through fork and exec)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from peak_rss import CHILD_SNIPPET

CHILD = CHILD_SNIPPET + """
import json, sys
import polars as pl
from minutiae.analyses.slownodes.analysis import analyse_telemetry
tel, fleet = pl.read_parquet(sys.argv[1]), pl.read_csv(sys.argv[2])
reset_peak()
before = peak_kib()
report = analyse_telemetry(tel, fleet, None, None, "t", None if sys.argv[3] == "whole" else int(sys.argv[3]))
grew = peak_kib() - before
print(json.dumps({"grew_mib": grew / 1024, "table_mib": tel.estimated_size() / 2**20,
                  "report": report.to_json()}))
"""


def _run(tel: Path, fleet: Path, chunk: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-c", CHILD, str(tel), str(fleet), chunk], check=True,
                         capture_output=True, text=True, timeout=120).stdout
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_peak_memory_growth_is_bounded_by_the_chunk_not_the_table(tmp_path: Path) -> None:
    nodes, gpus, steps = 128, 8, 1000                   # 1,024,000 rows, ~50 MiB in memory
    rng = np.random.default_rng(0)
    n = nodes * gpus * steps
    names = [f"n{i:03d}" for i in range(nodes)]
    clock = 1980 + rng.normal(0, 8, n)
    clock[np.arange(n) % (nodes * gpus) == 42] /= 1.1    # one GPU 9 % slow throughout
    pl.DataFrame({"time": np.repeat(np.arange(steps) * 300.0, nodes * gpus),
                  "node": np.tile(np.repeat(names, gpus), steps), "gpu": np.tile(np.arange(gpus), nodes * steps),
                  "sm_clock_mhz": clock.round(), "power_w": 640 + rng.normal(0, 15, n),
                  "temp_c": (63 + rng.normal(0, 2, n)).round(),
                  "ib_xmit_mbps": 160_000 * rng.uniform(0.95, 1.05, n)}).write_parquet(tmp_path / "t.parquet")
    pl.DataFrame({"node": names, "rack": [f"r{i // 16}" for i in range(nodes)], "sku": "H100"}).write_csv(
        tmp_path / "fleet.csv")
    whole = _run(tmp_path / "t.parquet", tmp_path / "fleet.csv", "whole")
    chunked = _run(tmp_path / "t.parquet", tmp_path / "fleet.csv", "50000")
    assert chunked["report"] == whole["report"]
    assert [(s["node"], s["gpu"]) for s in whole["report"]["suspects"]] == [("n005", 2)]
    # measured 87 MiB chunked (110 before pass 2 joined only its rows of the medians) vs
    # 750-800 MiB whole for a 50 MiB table
    assert chunked["grew_mib"] < 2.5 * chunked["table_mib"]
    assert whole["grew_mib"] > 4 * chunked["grew_mib"]
