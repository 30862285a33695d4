"""Reads a simulated fleet dataset (layout: docs/dataset.md) for ``minutiae eval``/``demo``.

The only code that opens a dataset's files; the root is a parameter. Missing or malformed files
raise ``InputError`` subclasses naming the path.
"""

from __future__ import annotations

import bisect
import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minutiae.errors import DataError, InputError, ParseError
from minutiae.scoring.explain import Explains, default_explains
from minutiae.scoring.truth import TruthEvent, read_truth

if TYPE_CHECKING:
    from minutiae.sim.world.plan import Job

META_KEYS = ("nodes", "gpus_per_node", "start", "end", "days", "seed")


#: the columns of jobs.csv, in the order the writer writes them
JOB_COLUMNS = ("job_id", "start", "end", "nodes", "signature", "world_size", "ranks_per_node", "outcome")


@dataclass(frozen=True, slots=True)
class JobRow:
    """One row of jobs.csv: the one record the writer writes (``of`` a planned job) and the
    reader reads back. ``outcome``: completed | failed | preempted ("" in a dataset without it)."""

    job_id: str
    start: float
    end: float
    nodes: tuple[str, ...]
    signature: str
    world_size: int
    ranks_per_node: int
    outcome: str = ""

    @staticmethod
    def of(job: Job, ranks_per_node: int) -> JobRow:
        """A planned job's row, its times in whole seconds as jobs.csv holds them."""
        return JobRow(job.job_id, float(round(job.start)), float(round(job.end)), job.nodes, job.signature,
                      len(job.nodes) * ranks_per_node, ranks_per_node, job.outcome)

    def to_csv(self) -> list[str | int]:
        return [self.job_id, f"{self.start:.0f}", f"{self.end:.0f}", " ".join(self.nodes), self.signature,
                self.world_size, self.ranks_per_node, self.outcome]


@dataclass(frozen=True, slots=True)
class Dataset:
    """What eval needs from a dataset, read once: meta, fleet, jobs, maintenance, truth."""

    root: Path
    meta: dict[str, Any]
    fleet: tuple[dict[str, str], ...]
    jobs: tuple[JobRow, ...]
    maintenance: tuple[tuple[float, str, str], ...]
    truth: tuple[TruthEvent, ...]
    boots: dict[str, list[float]] = field(default_factory=dict)
    #: what explains the truth's classes: the profile's, as the simulator wrote it into meta.json
    #: (a dataset written before it carried one: the default profile's)
    explains: Explains = field(default_factory=default_explains)

    def uptime(self, node: str, t: float) -> float | None:
        """Seconds since the node's last boot at ``t`` (what /proc/uptime says); None if unknown."""
        k = bisect.bisect_right(self.boots.get(node, []), t)
        return t - self.boots[node][k - 1] if k else None

    @property
    def nodes(self) -> list[str]:
        return [r["node"] for r in self.fleet]

    @property
    def gpus(self) -> int:
        return int(self.meta["gpus_per_node"])

    @property
    def start(self) -> float:
        return float(self.meta["start"])

    @property
    def end(self) -> float:
        return float(self.meta["end"])

    @property
    def node_days(self) -> float:
        return len(self.fleet) * (self.end - self.start) / 86400.0

    def node_dir(self, node: str) -> Path:
        return self.root / "nodes" / node

    def timings_path(self, job_id: str) -> Path:
        return self.root / "timings" / f"{job_id}.parquet"


def _csv(path: Path, required: tuple[str, ...]) -> list[dict[str, str]]:
    if not path.is_file():
        raise DataError("missing file (not a minutiae sim dataset?)", str(path))
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rd = csv.DictReader(fh)
            missing = [c for c in required if c not in (rd.fieldnames or [])]
            if missing:
                raise DataError(f"missing columns {missing}", str(path))
            return list(rd)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ParseError(f"not a CSV file ({exc})", str(path)) from None


def _float(path: Path, row: int, key: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ParseError(f"row {row}: {key} is not a number: {value!r}", str(path)) from None


def load_dataset(root: Path | str) -> Dataset:
    root = Path(root)
    if not root.is_dir():
        raise InputError("not a directory (give the --out directory of `minutiae sim`)", str(root))
    mp = root / "meta.json"
    try:
        meta = json.loads(mp.read_text("utf-8"))
    except FileNotFoundError:
        raise DataError("missing meta.json (not a minutiae sim dataset?)", str(mp)) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ParseError(f"unreadable meta.json ({exc})", str(mp)) from None
    if not isinstance(meta, dict) or any(k not in meta for k in META_KEYS):
        raise DataError(f"meta.json needs the keys {list(META_KEYS)}", str(mp))
    fp = root / "fleet.csv"
    fleet = tuple(_csv(fp, ("node", "rack", "leaf")))
    jp = root / "jobs.csv"
    jobs = []
    for i, r in enumerate(_csv(jp, JOB_COLUMNS[:-1]), 2):
        try:
            jobs.append(JobRow(r["job_id"], _float(jp, i, "start", r["start"]), _float(jp, i, "end", r["end"]),
                               tuple(r["nodes"].split()), r["signature"], int(r["world_size"]),
                               int(r["ranks_per_node"]), r.get("outcome") or ""))
        except ValueError as exc:
            raise ParseError(f"row {i}: {exc}", str(jp)) from None
    mtp = root / "maintenance.csv"
    maint = tuple((_float(mtp, i, "time", r["time"]), r["node"], r["what"])
                  for i, r in enumerate(_csv(mtp, ("time", "node", "what")), 2))
    boots: dict[str, list[float]] = {}
    bp = root / "boots.csv"
    if bp.is_file():
        for i, r in enumerate(_csv(bp, ("time", "node")), 2):
            boots.setdefault(r["node"], []).append(_float(bp, i, "time", r["time"]))
        for v in boots.values():
            v.sort()
    explains = Explains.from_json(meta["explains"], str(mp)) if "explains" in meta else default_explains()
    return Dataset(root, meta, fleet, tuple(jobs), maint, tuple(read_truth(root / "truth.jsonl")), boots,
                   explains)


def read_text(path: Path) -> str:
    try:
        return path.read_text("utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"cannot read: {exc}", str(path)) from None


def ib_rows(path: Path) -> Iterator[tuple[float, str, str, str, str]]:
    """Rows of a node's ib.csv: (time, device, port, counter, value)."""
    for i, r in enumerate(_csv(path, ("time", "device", "port", "counter", "value")), 2):
        yield _float(path, i, "time", r["time"]), r["device"], r["port"], r["counter"], r["value"]


def telemetry_batches(path: Path, columns: list[str]) -> Iterator[Any]:
    """The telemetry parquet, one pyarrow RecordBatch at a time (row groups of a few nodes)."""
    import pyarrow.parquet as pq

    if not path.is_file():
        raise DataError("missing telemetry.parquet", str(path))
    try:
        pf = pq.ParquetFile(path)
        yield from pf.iter_batches(batch_size=1 << 20, columns=columns)
    except (OSError, ValueError) as exc:
        raise ParseError(f"unreadable parquet ({exc})", str(path)) from None


def read_timings(path: Path) -> Any:
    """One job's timings as a polars DataFrame."""
    import polars as pl

    try:
        return pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError) as exc:
        raise ParseError(f"unreadable parquet ({exc})", str(path)) from None


def read_runs(path: Path) -> Any:
    from minutiae.history.read import read_runs_file

    return read_runs_file(path)
