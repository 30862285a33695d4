"""Reads a simulated fleet dataset (layout: docs/dataset.md) for ``minutiae eval``/``demo``.

The only code that opens a dataset's files; the root is a parameter. Missing or malformed files
raise ``InputError`` subclasses naming the path. Damaged files (a row cut short or garbled, a
missing node folder or file, an ib.csv ending hours early, a Parquet file that does not open) are
``Dataset.damage`` (:mod:`minutiae.scoring.damage`): eval counts nothing inside the node-windows
they make UNKNOWN. A damaged fleet-wide file (fleet.csv, jobs.csv, maintenance.csv, boots.csv,
runs.csv, telemetry.parquet) raises ``DataError`` naming it unless ``allow_damaged``.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minutiae.errors import DataError, InputError, ParseError
from minutiae.inputs import read_bounded
from minutiae.scoring.damage import Damage, Harm
from minutiae.scoring.explain import Explains, default_explains
from minutiae.scoring.read_damage import IB_COLUMNS, read_node, scan_csv
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
    #: damaged inputs and the node-windows they make UNKNOWN
    damage: tuple[Damage, ...] = ()

    def unknown(self, node: str | None, t: float) -> Damage | None:
        """The damage that makes ``node`` UNKNOWN at ``t`` (None: its data is whole)."""
        return next((d for d in self.damage if d.covers(node, t)), None)

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


def _float(path: Path, row: int, key: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ParseError(f"row {row}: {key} is not a number: {value!r}", str(path)) from None


def _rows(root: Path, name: str, required: tuple[str, ...], time_column: str | None, start: float,
          damage: list[Damage], optional: bool = False) -> list[dict[str, str]]:
    """A fleet-wide CSV's good rows; its damage (fatal: every node from its last good row)."""
    _, rows, dmg = scan_csv(root, name, required, time_column, start)
    if dmg is not None and not (optional and dmg.harm is Harm.MISSING):
        damage.append(replace(dmg, fatal=True))
    return rows


def _parquet_damage(root: Path, ds: Dataset) -> list[Damage]:
    """telemetry.parquet (every node, fatal) and each job's timings that do not open (the
    job's nodes while it ran)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - pyarrow is a dependency; without it nothing reads them
        return []
    out = []
    for path, name, job in [(root / "telemetry.parquet", "telemetry.parquet", None),
                            *((ds.timings_path(j.job_id), f"timings/{j.job_id}.parquet", j) for j in ds.jobs)]:
        if not path.is_file():
            if job is None:
                out.append(Damage(name, Harm.MISSING, ds.start, fatal=True))
            continue
        try:
            pq.ParquetFile(path).close()
        except (OSError, ValueError) as exc:
            detail = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
            if job is None:
                out.append(Damage(name, Harm.UNREADABLE, ds.start, detail=detail, fatal=True))
            else:
                out.append(Damage(name, Harm.UNREADABLE, job.start, detail=detail, until=job.end,
                                  scope=job.nodes))
    return out


def _node_damage(ds: Dataset, unlisted: tuple[str, ...], fleet_dmg: Damage | None) -> list[Damage]:
    """Every node's folder, kern.log and ib.csv checked; fleet.csv against the folders."""
    want = ds.meta.get("nodes")
    if fleet_dmg is None and isinstance(want, int) and len(ds.fleet) < want:
        fleet_dmg = Damage("fleet.csv", Harm.TRUNCATED, ds.start, line=len(ds.fleet) + 2,
                           detail=f"{len(ds.fleet)} of meta.json's {want} nodes")
    if fleet_dmg is None and unlisted:
        fleet_dmg = Damage("fleet.csv", Harm.UNLISTED, ds.start, detail="node folders it does not list")
    out = [replace(fleet_dmg, scope=unlisted, fatal=True)] if fleet_dmg is not None else []
    sampling = ds.meta.get("sampling")
    ib_s = sampling.get("ib_interval_s") if isinstance(sampling, dict) else None
    year = datetime.fromtimestamp(ds.start, UTC).year
    for node in ds.nodes:
        out += read_node(ds.root, node, start=ds.start, end=ds.end, year=year,
                         ib_interval_s=float(ib_s) if isinstance(ib_s, int | float) else None)[2]
    return out


def _check(root: Path, damage: list[Damage], allow: bool) -> None:
    for d in damage:
        if d.fatal and not allow:
            line = f"line {d.line}: " if d.line is not None else ""
            raise DataError(f"{line}{d.detail or d.harm.value} ({d.harm.value}); every node depends "
                            "on it (--allow-damaged counts the nodes it affects as UNKNOWN)", str(root / d.path))


def _meta(root: Path) -> dict[str, Any]:
    mp = root / "meta.json"
    try:
        meta = json.loads(read_bounded(mp, limit=1 << 24, what="meta.json").decode("utf-8"))
    except InputError as exc:
        if not mp.exists():
            raise DataError("missing meta.json (not a minutiae sim dataset?)", str(mp)) from None
        raise ParseError(f"unreadable meta.json ({exc})", str(mp)) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ParseError(f"unreadable meta.json ({exc})", str(mp)) from None
    if not isinstance(meta, dict) or any(k not in meta for k in META_KEYS):
        raise DataError(f"meta.json needs the keys {list(META_KEYS)}", str(mp))
    return meta


def load_dataset(root: Path | str, *, allow_damaged: bool = False) -> Dataset:
    root = Path(root)
    if not root.is_dir():
        raise InputError("not a directory (give the --out directory of `minutiae sim`)", str(root))
    meta = _meta(root)
    start = _float(root / "meta.json", 0, "start", str(meta["start"]))
    damage: list[Damage] = []
    _, fleet, fleet_dmg = scan_csv(root, "fleet.csv", ("node", "rack", "leaf"), None, start)
    if fleet_dmg is not None and fleet_dmg.line == 1:  # no usable header, or no file at all
        _check(root, [replace(fleet_dmg, fatal=True)], False)
    jp = root / "jobs.csv"
    jobs = []
    for i, r in enumerate(_rows(root, "jobs.csv", JOB_COLUMNS[:-1], "start", start, damage), 2):
        try:
            jobs.append(JobRow(r["job_id"], _float(jp, i, "start", r["start"]), _float(jp, i, "end", r["end"]),
                               tuple(r["nodes"].split()), r["signature"], int(r["world_size"]),
                               int(r["ranks_per_node"]), r.get("outcome") or ""))
        except ValueError as exc:
            raise ParseError(f"row {i}: {exc}", str(jp)) from None
    mtp = root / "maintenance.csv"
    maint = tuple((_float(mtp, i, "time", r["time"]), r["node"], r["what"])
                  for i, r in enumerate(_rows(root, "maintenance.csv", ("time", "node", "what"), "time",
                                              start, damage), 2))
    boots: dict[str, list[float]] = {}
    for r in _rows(root, "boots.csv", ("time", "node"), "time", start, damage, optional=True):
        boots.setdefault(r["node"], []).append(float(r["time"]))
    for v in boots.values():
        v.sort()
    _rows(root, "runs.csv", ("run_id", "time"), "time", start, damage, optional=True)
    mp = root / "meta.json"
    explains = Explains.from_json(meta["explains"], str(mp)) if "explains" in meta else default_explains()
    ds = Dataset(root, meta, tuple(fleet), tuple(jobs), maint, tuple(read_truth(root / "truth.jsonl")), boots,
                 explains)
    listed = set(ds.nodes)
    dirs = sorted(p.name for p in (root / "nodes").iterdir() if p.is_dir()) if (root / "nodes").is_dir() else []
    damage += _node_damage(ds, tuple(n for n in dirs if n not in listed), fleet_dmg)
    damage += _parquet_damage(root, ds)
    _check(root, damage, allow_damaged)
    return replace(ds, damage=tuple(damage))


def read_text(path: Path) -> str:
    try:
        return path.read_text("utf-8", errors="replace")
    except OSError as exc:
        raise InputError(f"cannot read: {exc}", str(path)) from None


def ib_rows(path: Path) -> Iterator[tuple[float, str, str, str, str]]:
    """Rows of a node's ib.csv: (time, device, port, counter, value), up to its first damaged
    row (the damage is in ``Dataset.damage``: the node is UNKNOWN from there)."""
    _, rows, _dmg = scan_csv(path.parent, path.name, IB_COLUMNS, "time", 0.0)
    for r in rows:
        yield float(r["time"]), r["device"], r["port"], r["counter"], r["value"]


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
