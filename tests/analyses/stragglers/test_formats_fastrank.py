"""Megatron's rank lines read from the bytes (formats.fastrank) give exactly what the general
reader gives: same rows, same order, same skipped lines, whatever the shape of the line."""

from __future__ import annotations

import mmap
import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from minutiae.analyses.stragglers.formats import fastrank, parse, parse_log
from minutiae.analyses.stragglers.formats.types import TrainLog

# lines Megatron never prints but a log can hold: each must be read (or refused) as the general
# reader does
_ODD = ["     rank {r}: nan", "     rank {r}: 1e3", "     rank  {r}:  12.5  ", "\trank {r}: 3.25",
        "     rank {r}: 12.50\r", "     rank {r}: 1234567890123456.5", "     rank 12345678901: 1.0",
        "     rank {r}: .5", "     rank {r}: 5.", "     rank {r}:7", "     rank {r}: 0001.10",
        "     rank {r}: 99999999999.9999", " rank {r}: 1.5", "xx   rank {r}: 1.5",
        "     rank {r}: 1.5 x", "     rank {r}: 1\x1f5", "     rank {r}: 2.5  ", "     rank {r}: -2.5",
        "     RANK {r}: 2.5", "[rank3]:     rank {r}: 2.5", " 7:      rank {r}: 2.5",
        "2026-01-02T03:04:05Z      rank {r}: 2.5", "     rank {r}: 1;5", "     rank {r}: 1:5",
        "     rank {r}:  3.25", "      rank   {r}:      123456.789012"]


def _log(seed: int, prefix: str = "", iters: int = 12, odd: float = 0.03,
         sizes: tuple[int, ...] = (4, 16, 130, 1100)) -> bytes:
    """Megatron iteration lines and ``times across ranks`` blocks (megatron/training/training.py
    ``training_log``, megatron/core/timers.py ``'\\n     rank {:2d}: {:.2f}'``), with odd lines,
    blank lines and a cut block mixed in."""
    rnd = random.Random(seed)
    out = ["     rank  3: 100.00", "garbage line"]  # a log cut mid-block
    for it in range(1, iters + 1):
        out.append(f" [2025-11-13 16:27:01] iteration {it:8d}/  500000 | consumed samples: "
                   f"{it * 8:12d} | elapsed time per iteration (ms): 1350.2 |")
        out += [""] if it % 7 == 0 else []
        out.append("times across ranks (ms):")
        for name in ("forward-backward", "forward-compute", "optimizer"):
            out.append(f"  {name}:")
            for r in range(rnd.choice(sizes)):
                if rnd.random() < odd:
                    out.append(rnd.choice(_ODD).format(r=r))
                else:
                    v = rnd.choice([rnd.uniform(0, 10), rnd.uniform(0, 1e5), 1180.0, 0.0])
                    out.append(f"     rank {r:2d}: {v:.{rnd.choice([2, 2, 2, 1, 3, 0])}f}"
                               if odd else f"     rank {r:2d}: {v:.2f}")
    return ("\n".join(prefix + line for line in out) + "\n     rank  4: 12").encode()


def _general(monkeypatch: pytest.MonkeyPatch) -> None:
    def nothing(buf: np.ndarray, size: int, check: object, known: object = None
                ) -> fastrank.Taken:
        return fastrank.Taken(np.zeros(0, np.int64), np.zeros(0, np.int32),
                              np.zeros(0, np.float32), np.flatnonzero(buf[:size] == 10))
    monkeypatch.setattr(parse.fastrank, "scan", nothing)


def _same(a: TrainLog, b: TrainLog) -> None:
    def rows(lg: TrainLog) -> pl.DataFrame:
        return lg.ranks.with_columns(pl.col("section").cast(pl.String),
                                     pl.col("seconds").fill_nan(-1.0))
    assert rows(a).equals(rows(b))
    assert a.steps.equals(b.steps) and a.minmax.equals(b.minmax)
    assert (a.formats, a.skipped, a.lines, a.first_line) == (b.formats, b.skipped, b.lines,
                                                              b.first_line)


@pytest.mark.parametrize("prefix", ["", " 7: ", "[default3]:", "12: [default1]:",
                                    "[1,15]<stdout>:", "2026-01-02T03:04:05.5Z "])
@pytest.mark.parametrize("chunk", [parse.CHUNK, 4093, 301])
def test_fast_path_gives_the_general_readers_table(prefix: str, chunk: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    small = chunk < 4096  # many pieces: a small log
    data = _log(len(prefix) + chunk, prefix, iters=2 if small else 12,
                sizes=(4, 16, 130) if small else (4, 16, 130, 1100))
    fast = parse_log(data, "x.log", chunk=chunk)
    _general(monkeypatch)
    general = parse_log(data, "x.log", chunk=chunk)
    _same(fast, general)
    assert fast.ranks.height and fast.skipped  # odd lines and the cut block said


def test_fast_path_takes_megatron_lines_and_leaves_the_rest() -> None:
    data = _log(1, odd=0.0) + b"\n" + _log(2)
    nl = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)
    known: dict[bytes, bool] = {}
    taken = fastrank.scan(np.frombuffer(data, np.uint8), int(nl[-1]) + 1, parse._general_rank,
                          known)
    log = parse_log(data, "x.log")
    assert taken.count >= 0.95 * log.ranks.height  # the bulk is read from the bytes
    assert known and not all(known.values())  # shapes the general reader refused were asked
    odd = [r.format(r=5).encode() for r in _ODD]
    lines = {int(i) for i in taken.lines}
    starts = np.concatenate(([0], nl[:-1] + 1))
    for i in lines:
        assert data[starts[i]:nl[i]] not in odd  # no odd line was taken by shape


def test_mapped_file_is_read_and_released(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_bytes(_log(2))
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        log = parse_log(m, str(path), chunk=65536)
    assert log.ranks.equals(parse_log(path.read_bytes(), str(path), chunk=65536).ranks)
