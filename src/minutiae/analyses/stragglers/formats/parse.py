"""Training logs → one ``TrainLog`` (pure: bytes in, frames out; bounded memory per chunk).

Per file: split into chunks of whole lines (``CHUNK`` bytes), number the lines, split tqdm's
``\\r`` redraws, drop ANSI colours, strip launcher prefixes (``formats.prefix``), read
Megatron's records vectorised (``formats.megatron``), then hand every other line to the line
readers of ``formats.registry`` in order. A truncated last line (no newline) is never read as a
value. Several files of one job are joined by :func:`join`: duplicate records (a rotated log
given twice, overlapping files) are kept once and counted.
"""

from __future__ import annotations

import bisect
import dataclasses
import io
import mmap
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import polars as pl

from minutiae.analyses.stragglers.formats import environment, fastrank, megatron
from minutiae.analyses.stragglers.formats.base import LineReader
from minutiae.analyses.stragglers.formats.prefix import strip_frame
from minutiae.analyses.stragglers.formats.registry import READERS
from minutiae.analyses.stragglers.formats.types import (
    MINMAX_SCHEMA,
    STEP_SCHEMA,
    Evidence,
    Skipped,
    TrainLog,
)

CHUNK = 16 << 20
Buffer = bytes | mmap.mmap
RANKS_OUT = {"step": pl.Int32, "rank": pl.Int32, "seconds": pl.Float32, "section": pl.Categorical}
_ANSI = r"\x1b\[[0-9;]*[A-Za-z]"


class _Renumber(Exception):
    """The lines left after the fast path did not come back one row each."""


def _spans(data: Buffer, size: int, stop: int) -> Iterator[tuple[int, int]]:
    """(start, end) of pieces of whole lines of ``data[:stop]`` (``data`` may be an mmap of the
    file: only one piece is in memory at a time)."""
    start = 0
    while start < stop:
        end = min(stop, start + size)
        if end < stop:
            cut = data.rfind(b"\n", start, end)
            end = cut + 1 if cut >= start else (data.find(b"\n", end) + 1 or stop)
        yield start, end
        start = end


def _release(data: Buffer, start: int, end: int) -> None:
    """Drop a mapped piece once read: its pages stay in the page cache, not in our memory."""
    if isinstance(data, mmap.mmap) and hasattr(mmap, "MADV_DONTNEED"):
        first = start - start % mmap.PAGESIZE
        data.madvise(mmap.MADV_DONTNEED, first, end - first)


#: the magic numbers polars's CSV reader takes for a compressed stream (gzip, zlib, zstd)
_COMPRESSED = (b"\x1f\x8b", b"x\x01", b"x\x5e", b"x\x9c", b"x\xda", b"(\xb5/\xfd")


def _lines(piece: bytes, line0: int, numbers: np.ndarray | None = None) -> pl.DataFrame:
    """Numbered lines of a chunk (blank lines kept, so numbers are the file's; ``numbers``: the
    chunk's line index of each line when some were taken out), tqdm's ``\r`` redraws split,
    ANSI colours dropped, launcher prefixes stripped."""
    if b"\x1f" in piece:  # the separator that keeps each line one cell
        piece = piece.replace(b"\x1f", b" ")
    # polars inflates a buffer that starts with a gzip, zlib or zstd magic: such bytes are read
    # after a blank line that is dropped again, so they stay text
    lead = piece.startswith(_COMPRESSED)
    df = pl.read_csv(io.BytesIO(b"\n" + piece if lead else piece), has_header=False,
                     separator="\x1f", quote_char=None, new_columns=["line"],
                     schema={"line": pl.String}, encoding="utf8-lossy",
                     truncate_ragged_lines=True) if piece else pl.DataFrame(schema={"line": pl.String})
    df = df.slice(1) if lead else df
    df = df.with_columns(pl.col("line").fill_null(""))
    if numbers is None:
        df = df.with_row_index("no", offset=line0).with_columns(pl.col("no").cast(pl.Int64))
    elif df.height == numbers.size:
        df = df.select(pl.Series("no", numbers + line0, pl.Int64), "line")
    else:
        raise _Renumber
    if b"\r" in piece:
        df = df.with_columns(pl.col("line").str.split("\r")).explode("line")
    if b"\x1b[" in piece:
        df = df.with_columns(pl.col("line").str.replace_all(_ANSI, ""))
    return strip_frame(df)


def first_line(data: Buffer) -> str:
    """The first non-empty line, verbatim (at most 300 characters; control characters such as
    tqdm's ``\\r`` or ANSI colours shown escaped, nothing else changed)."""
    for raw in data[:65536].split(b"\n"):
        line = raw.decode("utf-8", errors="replace").rstrip("\r")
        if line.strip():
            line = line if len(line) <= 300 else line[:300] + "…"
            return "".join(c if c.isprintable() else repr(c)[1:-1] for c in line)
    return ""


def parse_log(data: Buffer, where: str, chunk: int = CHUNK) -> TrainLog:
    """Every record of every known format in one file (``bytes`` or an ``mmap`` of it)."""
    skipped: list[Skipped] = []
    stop = len(data)
    truncated = bool(stop) and data[stop - 1:stop] != b"\n"
    if truncated:
        stop = data.rfind(b"\n") + 1
    readers: list[LineReader] = [r() for r in READERS]
    for r in readers:
        r.where = where
    carry = megatron.Carry()
    ranks, steps, minmax, bad, orphans = [], [], [], [], []
    lines = key_value = 0
    line0 = 1
    for df, taken, count in _pieces(data, chunk, stop):
        if line0 != 1:  # pieces are numbered from 1 each
            df = df.with_columns(pl.col("no") + (line0 - 1))
            taken = None if taken is None else taken.with_columns(pl.col("no") + (line0 - 1))
        lines = line0 + count - 1
        line0 += count
        found = megatron.read(df, carry, taken)
        carry = found.carry
        ranks.append(found.ranks)
        steps.append(found.steps)
        minmax.append(found.minmax)
        bad.append(found.bad)
        key_value += found.key_value
        orphans.append(found.orphans)
        _feed(readers, found.rest)
    for r in readers:
        r.finish()
    if truncated:
        skipped.insert(0, Skipped(f"{where}:{lines + 1}", "truncated last line (no newline), "
                                  "not read", 1))
    mega_ranks = megatron.drop_nested(pl.concat(ranks, rechunk=False)) if ranks else pl.DataFrame(
        schema=RANKS_OUT)
    lost = pl.concat(orphans) if orphans else pl.DataFrame(schema={"no": pl.Int64})
    if lost.height:
        skipped.append(Skipped(f"{where}:{lost['no'][0]}", "Megatron 'rank N: ms' line outside a "
                               "'times across ranks (ms):' block (log cut mid-block)",
                               lost.height))
    log = _assemble(where, data, readers, mega_ranks, steps, minmax, bad, skipped, lines)
    if key_value and log.formats[:1] == ("megatron",):
        log = dataclasses.replace(log, formats=("megatron-deepspeed", *log.formats[1:]))
    return log


Piece = tuple[pl.DataFrame, pl.DataFrame | None, int]


def _pieces(data: Buffer, chunk: int, stop: int) -> Iterator[Piece]:
    """Each piece split (``_split``, lines numbered from 1) in a second thread, one piece ahead
    of the caller, which reads the one before it meanwhile (numpy and polars release the GIL);
    a piece of a mapped file is released once split."""
    known: dict[bytes, bool] = {}
    with ThreadPoolExecutor(1) as pool:
        ahead: tuple[Future[Piece], int, int] | None = None
        for start, end in _spans(data, chunk, stop):
            job = pool.submit(_split, data, start, end, known)
            if ahead is not None:
                yield _done(data, *ahead)
            ahead = (job, start, end)
        if ahead is not None:
            yield _done(data, *ahead)


def _done(data: Buffer, job: Future[Piece], start: int, end: int) -> Piece:
    piece = job.result()
    _release(data, start, end)
    return piece


def _split(data: Buffer, start: int, end: int, known: dict[bytes, bool]) -> Piece:
    """The piece's lines for the general readers, Megatron's rank lines read from the bytes
    (``fastrank``: the bulk of an ``all`` log) when it has any, and its number of lines."""
    if data.find(b"rank ", start, end) < 0:
        piece = data[start:end]
        return _lines(piece, 1), None, piece.count(b"\n")
    # the piece in place (no copy), with up to 8 bytes after it for its last line's words
    view = np.frombuffer(data, np.uint8, min(end + 8, len(data)) - start, start)
    try:
        found = fastrank.scan(view, end - start, _general_rank, known)
        blob, numbers = fastrank.rest(view, found)
        taken: fastrank.Taken | None = found
    except Exception:  # noqa: BLE001 -- never worse than the general reader; and no array may
        taken = None   # outlive this frame in a traceback (an mmap with one cannot be closed)
    finally:
        del view
    if taken is None or taken.count == 0:
        piece = data[start:end]
        return _lines(piece, 1), None, piece.count(b"\n")
    count = taken.newlines.size
    try:
        rest = _lines(blob, 1, numbers)
    except _Renumber:  # the CSV reader saw a different number of lines: read it all as text
        return _lines(data[start:end], 1), None, count
    frame = pl.DataFrame({"no": taken.lines + 1, "rank": taken.rank,
                          "seconds": taken.seconds},
                         schema={"no": pl.Int64, "rank": pl.Int32, "seconds": pl.Float32})
    return rest, frame, count


def _general_rank(line: bytes) -> tuple[int, float] | None:
    """What the general reader makes of one line inside a ``times across ranks`` block."""
    found = megatron.read(_lines(line + b"\n", 1), megatron.Carry(1, "all", "t"))
    if found.ranks.height != 1 or found.orphans.height:
        return None
    rank, seconds = found.ranks.row(0)[1:3]
    return int(rank), float(seconds)


def _feed(readers: list[LineReader], rest: pl.DataFrame) -> None:
    """Each line to the readers that want it, in registry order, until one takes it. A reader's
    ``signs`` are tested on the whole frame at once (``LineReader.wants``, vectorised): lines no
    reader wants never reach Python; a reader with its own ``wants`` is asked line by line."""
    if rest.height == 0:
        return
    own = [type(r).wants is not LineReader.wants for r in readers]
    want = [pl.lit(True) if mine else pl.col("line").str.contains_any(list(r.signs))
            if r.signs else pl.lit(False) for r, mine in zip(readers, own, strict=True)]
    rows = rest.select("no", "line", "prefix_rank", *(w.alias(f"_w{i}") for i, w in enumerate(want)))
    rows = rows.filter(pl.any_horizontal(pl.col(f"_w{i}") for i in range(len(readers))))
    for no, line, rank, *wants in rows.iter_rows():
        for r, w, mine in zip(readers, wants, own, strict=True):
            if w and (not mine or r.wants(line)) and r.feed(no, rank, line):
                break


def _assemble(where: str, data: Buffer, readers: list[LineReader], mega_ranks: pl.DataFrame,
              steps: list[pl.DataFrame], minmax: list[pl.DataFrame], bad: list[pl.DataFrame],
              skipped: list[Skipped], lines: int) -> TrainLog:
    py_ranks = [row for r in readers for row in r.rows.ranks]
    py_steps = [row for r in readers for row in r.rows.steps]
    same = [str(t) for t in mega_ranks.dtypes] == ["Int32", "Int32", "Float32", "Categorical"]
    rank_frames = [mega_ranks if same else mega_ranks
                   .with_columns(pl.col("section").cast(pl.Categorical))
                   .cast(RANKS_OUT)]  # type: ignore[arg-type]
    if py_ranks:
        rank_frames.append(pl.DataFrame(py_ranks, schema=RANKS_OUT, orient="row"))
    step_df = pl.concat([*(s.cast(STEP_SCHEMA) for s in steps),  # type: ignore[arg-type]
                         pl.DataFrame(py_steps, schema=STEP_SCHEMA, orient="row")])
    mm = pl.concat([m.cast(MINMAX_SCHEMA) for m in minmax]  # type: ignore[arg-type]
                   ) if minmax else pl.DataFrame(schema=MINMAX_SCHEMA)
    bad_df = pl.concat(bad) if bad else pl.DataFrame(schema={"no": pl.Int64, "line": pl.String})
    if bad_df.height:
        skipped.append(Skipped(f"{where}:{bad_df['no'][0]}", "Megatron iteration line without a "
                               "readable elapsed time per iteration", bad_df.height))
    for r in readers:
        if r.bad:
            skipped.append(Skipped(f"{where}:{r.bad[0][0]}", r.bad[0][1], len(r.bad)))
    formats = tuple(n for n, hit in (
        ("megatron", mega_ranks.height > 0 or steps_height(steps) > 0 or mm.height > 0),
        *((r.name, r.seen > 0 or bool(r.totals)) for r in readers)) if hit)
    evidence = _with_steps(tuple(e for r in readers for e in r.rows.evidence), step_df)
    totals = tuple(sorted((f"{r.name}.{k}", v) for r in readers for k, v in r.totals.items()))
    facts = _facts(readers)
    skipped += facts.skipped(where)
    return TrainLog(formats, pl.concat(rank_frames, rechunk=False), step_df.sort("line"), mm, evidence,
                    tuple(skipped), first_line(data), lines, totals, facts.attrs(),
                    tuple(facts.hosts), *facts.placement())


def _facts(readers: list[LineReader]) -> environment.Facts:
    """The environment reader's facts (one per file; empty when the registry has none)."""
    found = [r.facts for r in readers if isinstance(r, environment.Reader)]
    return found[0] if found else environment.Facts()


def steps_height(steps: list[pl.DataFrame]) -> int:
    return sum(s.height for s in steps)


def _with_steps(evidence: tuple[Evidence, ...], steps: pl.DataFrame) -> tuple[Evidence, ...]:
    """Evidence lines take the step of the last step line before them (same file)."""
    if not evidence or steps.height == 0:
        return evidence
    known = steps.filter(pl.col("step").is_not_null()).sort("line")
    at, st = known["line"].to_list(), known["step"].to_list()
    out = []
    for e in evidence:
        if e.step is not None:
            out.append(e)
            continue
        no = int(e.where.rsplit(":", 1)[1])
        i = bisect.bisect_right(at, no) - 1
        out.append(Evidence(e.source, e.rank, st[i] if i >= 0 else None, e.value, e.spread,
                            e.line, e.where))
    return tuple(out)


def join(logs: Sequence[TrainLog]) -> TrainLog:
    """The logs of one job (one file per rank or node, rotated pieces) as one."""
    if len(logs) == 1:
        return logs[0]
    ranks = pl.concat([lg.ranks for lg in logs])
    n = ranks.height
    ranks = ranks.unique(subset=["step", "rank", "section"], keep="last", maintain_order=True)
    skipped = [s for lg in logs for s in lg.skipped]
    if ranks.height < n:
        skipped.append(Skipped("(joined files)", "duplicate (step, rank, timer) records in "
                               "several files (rotated or overlapping logs): kept once",
                               n - ranks.height))
    formats = tuple(dict.fromkeys(f for lg in logs for f in lg.formats))
    steps = pl.concat([lg.steps for lg in logs]).unique(
        subset=["step", "rank", "seconds", "tokens_per_s", "samples_per_s", "tflops"],
        keep="first", maintain_order=True)
    totals = tuple(t for lg in logs for t in lg.totals)
    hosts, left = environment.merge_hosts(lg.hosts for lg in logs)
    if left:
        skipped.append(Skipped("(joined files)", f"more than {environment.MAX_HOSTS} hosts in "
                               "NCCL line prefixes: the first kept", left))
    return TrainLog(formats, ranks, steps, pl.concat([lg.minmax for lg in logs]),
                    tuple(e for lg in logs for e in lg.evidence), tuple(skipped),
                    logs[0].first_line, sum(lg.lines for lg in logs), totals,
                    environment.merge_attrs(lg.attrs for lg in logs), hosts,
                    *environment.merge_places((lg.world, lg.places) for lg in logs))
