"""Megatron's per-rank timer lines read from the bytes with array arithmetic (pure numpy).

``--timing-log-option all`` prints one line per rank, timer and logging interval
(``megatron/core/timers.py``, ``Timers._get_all_ranks_time_string``:
``'\\n     rank {:2d}: {:.2f}'``): about 10⁸ lines in a 1 GB log, and read as strings they are
the whole cost of the log. Here the short lines of a piece (at most ``WIDTH`` bytes) are taken
by length, then by shape: the first pending line's shape (which bytes are fixed, which are
digits) is matched against all pending lines of its length at once, as 8-byte words (every fixed
byte equal, every digit 0-9), and the matching lines' rank and milliseconds computed as
integers. A shape is used only if the general reader (``check``), given one line of it, reads
the same rank and seconds; lines not taken are left to the general reader, so the table is the
one it would make, only faster.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: the widest line read here (Megatron's is 21 bytes for 2-digit ranks; launcher labels fit)
WIDTH = 32
#: shapes tried per piece (a Megatron piece has ~10: rank and milliseconds widths); each try
#: costs a pass over the pending lines of one length
MAX_GROUPS = 256
#: a line of Megatron's shape: anything ending in spaces, ``rank``, its number, the value
#: (the general reader decides whether the lead is a launcher prefix it strips)
_SHAPE = re.compile(rb"(?P<lead>.*? )rank +(?P<rank>\d{1,9}):(?P<gap> *)(?P<int>\d+)"
                    rb"(?:\.(?P<frac>\d+))? *")
_U = np.uint64

#: the general reader on one line (without its newline): its (rank, seconds as float32), or None
Check = Callable[[bytes], "tuple[int, float] | None"]


@dataclass(frozen=True, slots=True)
class Taken:
    """Rank lines read here: their line index in the chunk (ascending), rank and seconds."""

    lines: np.ndarray
    rank: np.ndarray
    seconds: np.ndarray
    newlines: np.ndarray  # every newline's offset in the chunk

    @property
    def count(self) -> int:
        return int(self.lines.size)


@dataclass(frozen=True, slots=True)
class _Shape:
    """One line shape as masks over the line's 8-byte words: fixed bytes must be equal, digit
    bytes 0-9, bytes past the line's end are not looked at."""

    mask: tuple[int, ...]     # per word: 0xFF on fixed bytes, 0xF0 on digits, 0 past the end
    fixed: tuple[int, ...]    # the fixed bytes, 0x30 on digits
    six: tuple[int, ...]      # 0x06 on digits: a digit's byte + 6 stays below 0x40
    rank_at: tuple[int, ...]  # byte offsets of the rank's digits
    value_at: tuple[int, ...]  # of the milliseconds' digits (the point skipped)
    frac: int

    def accepts(self, words: list[np.ndarray]) -> np.ndarray:
        ok = np.ones(words[0].size, bool)
        for w, m, v, six in zip(words, self.mask, self.fixed, self.six, strict=True):
            ok &= (w & _U(m)) == _U(v)
            if six:
                ok &= ((w + _U(six)) & _U(six * 0x40 // 6)) == 0
        return ok

    def parse(self, words: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        rank = _digits(words, self.rank_at).astype(np.int32)
        ms = _digits(words, self.value_at).astype(np.float64) / float(10 ** self.frac)
        return rank, (ms / 1000.0).astype(np.float32)


def _digits(words: list[np.ndarray], at: tuple[int, ...]) -> np.ndarray:
    """The number whose digits are at byte offsets ``at`` (the low nibble of each byte)."""
    nibbles: dict[int, np.ndarray] = {}
    out = np.zeros(words[0].size, np.uint64)
    for j in at:
        k = j // 8
        if k not in nibbles:  # the word's low nibbles, seen as 8 bytes per line
            nibbles[k] = (words[k] & _U(0x0F0F0F0F0F0F0F0F)).view(np.uint8).reshape(-1, 8)
        out *= _U(10)
        out += nibbles[k][:, j % 8]
    return out


def _shape(line: bytes) -> tuple[_Shape, bool]:
    """``line``'s shape and whether it is a rank line we compute exactly (at most 15 digits in
    the value: an exact float64 mantissa); a line that is not gets the shape of its kind
    (digits free), which is then left to the general reader."""
    m = _SHAPE.fullmatch(line)
    ok = m is not None and len(m["int"]) + len(m["frac"] or b"") <= 15
    if m is None or not ok:
        rank, value, frac = [], [], 0
        digits = [i for i, b in enumerate(line) if 48 <= b <= 57]
    else:
        rank = list(range(*m.span("rank")))
        frac = len(m["frac"] or b"")
        value = list(range(*m.span("int"))) + (list(range(*m.span("frac"))) if frac else [])
        digits = rank + value
    nw = (len(line) + 7) // 8
    mask, fixed, six = bytearray(8 * nw), bytearray(8 * nw), bytearray(8 * nw)
    mask[:len(line)] = b"\xff" * len(line)
    fixed[:len(line)] = line
    for c in digits:
        mask[c], fixed[c], six[c] = 0xF0, 0x30, 0x06

    def words(b: bytearray) -> tuple[int, ...]:
        return tuple(int(x) for x in np.frombuffer(bytes(b), "<u8"))

    return _Shape(words(mask), words(fixed), words(six), tuple(rank), tuple(value), frac), ok


def _no_match(nl: np.ndarray) -> Taken:
    return Taken(np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32), nl)


@dataclass(frozen=True, slots=True)
class _Piece:
    buf: np.ndarray
    w64: np.ndarray       # every 8-byte window of ``buf`` (unaligned loads)
    starts: np.ndarray    # each line's first byte
    check: Check
    known: dict[bytes, bool]
    rank: np.ndarray      # per line, filled where taken
    seconds: np.ndarray
    took: np.ndarray


def scan(buf: np.ndarray, size: int, check: Check, known: dict[bytes, bool] | None = None
         ) -> Taken:
    """The rank lines of ``buf[:size]`` (whole lines; ``buf`` may run on past ``size``: the
    last line's words are then read in place) that ``check`` confirms by shape. ``known``
    caches the verdict per shape across the pieces of one file."""
    nl = np.flatnonzero(buf[:size] == 10)
    if nl.size == 0:
        return _no_match(nl)
    starts = np.empty(nl.size, np.int64)
    starts[0] = 0
    starts[1:] = nl[:-1] + 1
    length = nl - starts
    # a line's words are read whole: the last one may need up to 7 bytes past its end
    cand = np.flatnonzero((length <= WIDTH) & (length >= 8) & (starts + length + 8 <= buf.size))
    lens = length[cand].astype(np.uint8)
    order = np.argsort(lens, kind="stable")
    cand, lens = cand[order], lens[order]
    bounds = np.searchsorted(lens, np.arange(WIDTH + 2, dtype=np.uint8))
    p = _Piece(buf, np.ndarray((buf.size - 7,), "<u8", buf, 0, (1,)), starts, check,
               {} if known is None else known, np.zeros(nl.size, np.int32),
               np.zeros(nl.size, np.float32), np.zeros(nl.size, bool))
    budget = MAX_GROUPS
    for n in range(8, WIDTH + 1):
        lines = cand[bounds[n]:bounds[n + 1]]
        if lines.size and budget > 0:
            budget = _by_shape(p, lines, n, budget)
    got = np.flatnonzero(p.took)
    return Taken(got, p.rank[got], p.seconds[got], nl)


def _by_shape(p: _Piece, lines: np.ndarray, n: int, budget: int) -> int:
    """Lines of length ``n``, one shape at a time (the first pending line's); returns the
    shapes left to try in this piece."""
    s = p.starts[lines]
    words = [p.w64[s + 8 * k] for k in range((n + 7) // 8)]
    while lines.size and budget > 0:
        budget -= 1
        first = int(s[0])
        line = p.buf[first:first + n].tobytes()
        shape, ok = _shape(line)
        hit = shape.accepts(words)
        if ok and _confirmed(line, shape, [w[:1] for w in words], p.check, p.known):
            rows = lines[hit]
            p.rank[rows], p.seconds[rows] = shape.parse([w[hit] for w in words])
            p.took[rows] = True
        keep = ~hit
        lines, s, words = lines[keep], s[keep], [w[keep] for w in words]
    return budget


def _confirmed(line: bytes, shape: _Shape, first: list[np.ndarray], check: Check,
               known: dict[bytes, bool]) -> bool:
    """The general reader reads this line as a rank line with the same rank and seconds
    (once per shape: the verdict depends on the fixed bytes and the digits' places only)."""
    sig = bytes(b if not 48 <= b <= 57 else 48 for b in line)
    if sig not in known:
        rank, seconds = shape.parse(first)
        known[sig] = check(line) == (int(rank[0]), float(seconds[0]))
    return known[sig]


def rest(buf: np.ndarray, taken: Taken) -> tuple[bytes, np.ndarray]:
    """The lines not taken (bytes, newlines kept) and their line indices."""
    nl = taken.newlines
    keep = np.ones(nl.size, bool)
    keep[taken.lines] = False
    numbers = np.flatnonzero(keep)
    starts = np.zeros(nl.size, np.int64)
    starts[1:] = nl[:-1] + 1
    if numbers.size < 20000:
        return b"".join(buf[s:e].tobytes() for s, e in zip(
            starts[numbers].tolist(), (nl[numbers] + 1).tolist(), strict=True)), numbers
    lengths = nl - starts + 1
    return buf[:int(nl[-1]) + 1][np.repeat(keep, lengths)].tobytes(), numbers
