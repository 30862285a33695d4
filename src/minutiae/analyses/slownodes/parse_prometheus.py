"""Prometheus matrix results -> tables (pure).

``dcgm_telemetry`` turns dcgm-exporter series (field names as in
../shared/realdata/dcgm/dcgm-exporter/*.csv; node from the ``Hostname`` label, GPU from ``gpu``)
into the telemetry table ``analyses.slownodes`` reads: ``time,node,gpu,<column>...``.
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from minutiae.errors import ParseError

#: telemetry column -> dcgm-exporter field names (newest first)
DCGM_COLUMNS: dict[str, tuple[str, ...]] = {
    "sm_clock_mhz": ("DCGM_FI_DEV_SM_CLOCK",),
    "power_w": ("DCGM_FI_DEV_POWER_USAGE",),
    "temp_c": ("DCGM_FI_DEV_GPU_TEMP",),
    "util": ("DCGM_FI_DEV_GPU_UTIL",),
    "power_limit_w": ("DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT"),
    "clock_event_reasons": ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"),
    "pcie_replay": ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER",),
    "nvlink_errors": ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",),
}
NODE_LABELS = ("Hostname", "hostname", "node", "instance")


def _value(v: Any) -> float | None:
    """A sample value; NaN, +-Inf (Prometheus' stale markers and gaps) and junk -> None."""
    try:
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None


def matrix_rows(result: list[dict[str, Any]], column: str, where: str) -> pl.DataFrame:
    """``time,node,gpu,<column>`` rows of a matrix result; series without a node or GPU label
    are skipped (a dcgm-exporter series always has both)."""
    times: list[float | None] = []
    nodes: list[str] = []
    gpus: list[int] = []
    values: list[float | None] = []
    for s in result:
        labels = s.get("metric") if isinstance(s, dict) else None
        if not isinstance(labels, dict):
            raise ParseError("series without labels", where)
        node = next((str(labels[k]) for k in NODE_LABELS if labels.get(k)), None)
        try:
            gpu = int(labels.get("gpu", ""))
        except ValueError:
            continue
        if node is None:
            continue
        if node.count(":") == 1 and "Hostname" not in labels:
            node = node.split(":")[0]
        for pair in s.get("values") or []:
            if not isinstance(pair, list | tuple) or len(pair) != 2:
                raise ParseError("matrix sample is not [time, value]", where)
            times.append(_value(pair[0]))
            nodes.append(node)
            gpus.append(gpu)
            values.append(_value(pair[1]))
    df = pl.DataFrame({"time": times, "node": nodes, "gpu": gpus, column: values},
                      schema={"time": pl.Float64, "node": pl.String, "gpu": pl.Int64,
                              column: pl.Float64})
    return df.filter(pl.col("time").is_not_null())


def dcgm_telemetry(results: dict[str, list[dict[str, Any]]], where: str) -> pl.DataFrame:
    """Join per-column matrix results (``results[column]``) on (time, node, gpu)."""
    frames = [matrix_rows(r, col, where) for col, r in results.items()]
    frames = [f.unique(["time", "node", "gpu"], keep="last") for f in frames if f.height]
    if not frames:
        return pl.DataFrame(schema={"time": pl.Float64, "node": pl.String, "gpu": pl.Int64,
                                    "sm_clock_mhz": pl.Float64})
    out = frames[0]
    for f in frames[1:]:
        out = out.join(f, on=["time", "node", "gpu"], how="full", coalesce=True)
    return out.sort("node", "gpu", "time")
