"""Slow GPUs and nodes from the telemetry agents already collect, without touching the job.

Input: one row per GPU per sample, ``time,node,gpu,sm_clock_mhz`` and optionally ``power_w,
temp_c,clock_event_reasons,pcie_replay,nvlink_errors,ib_xmit_mbps`` (the simulator's
telemetry.parquet, or DCGM fields read from Prometheus). Method, all columnar (polars):

1. keep busy samples (not ``GpuIdle``, clock above zero): idle GPUs say nothing about speed;
2. peers = the GPUs of the same SKU at the same sample time, in the same job when jobs.csv
   says so, otherwise in the same rack; groups under ``min_peers`` fall back to the same SKU;
3. each sample's deficit = its value / the peer median - 1 (SM clock, IB transmit rate);
4. a sample is slow when its SM-clock deficit is below ``-max(min_deficit, z x noise)``, where
   noise is the robust (1.4826 x MAD) spread of all deficits; IB when below ``-ib_deficit``;
5. persistent = consecutive slow samples (one sampling gap allowed) lasting ``min_duration``;
6. half or more of a node's GPUs persistently slow at overlapping times -> the node.

Each finding carries its evidence: how far below peers, for how long, which clock-event
reasons were active (NVML ``nvmlClocksEventReason*`` bits), temperature and power against peers,
PCIe replay and NVLink error rates. A PCIe link replaying at least ``pcie_per_hour`` for
``min_duration`` is reported too (metric ``pcie_replay``), even at full clock: its transfers are
retried.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from minutiae.analyses.slownodes.core import (
    GPU_IDLE,
    REASONS,
    SlowFinding,
    SlowOptions,
    SlowReport,
    decode_reasons,
)

__all__ = ["GPU_IDLE", "REASONS", "SlowFinding", "SlowOptions", "SlowReport", "analyse_telemetry",
           "decode_reasons", "detect_dataset"]


def analyse_telemetry(tel: pl.DataFrame, fleet: pl.DataFrame | None = None,
                      jobs: pl.DataFrame | None = None, opts: SlowOptions | None = None,
                      where: str = "telemetry", chunk_rows: int | None = 250_000) -> SlowReport:
    """Slow GPUs, nodes and links in ``tel``, processed about ``chunk_rows`` rows (whole sample
    times) at a time, ``None``: all at once; the result is the same (see ``chunked``)."""
    from minutiae.analyses.slownodes.chunked import analyse_chunked

    return analyse_chunked(tel, fleet, jobs, opts, where, chunk_rows)


def detect_dataset(root: Path | str, opts: SlowOptions | None = None) -> list[SlowFinding]:
    """Findings on a simulator dataset directory (what ``minutiae eval`` scores)."""
    from minutiae.analyses.slownodes.read import read_dataset

    tel, fleet, jobs = read_dataset(Path(root))
    return list(analyse_telemetry(tel, fleet, jobs, opts, str(root)).findings)
