"""What one kernel-log scan carries from block to block (line count, the lines a joining rule
may need, the New Year roll of yearless times, a held provisional event)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from minutiae.model.findings import LogEvent

__all__ = ["YEARLESS", "ScanState", "continuations"]

#: prefix styles whose time has no year (RFC 3164 syslog, wall broadcasts)
YEARLESS = frozenset({"syslog", "broadcast"})


@dataclass
class ScanState:
    """Mutable on purpose: one per scan, advanced line by line."""

    line_no: int = 0  # number of the first line of the next block (0-based count so far)
    tail: list[bytes] = field(default_factory=list)  # last lines of the previous block
    last_month: int = 0  # of the last yearless timestamp (syslog), to detect New Year
    years_added: int = 0
    held: LogEvent | None = None  # a provisional event (AER header) a following line may replace

    def roll_year(self, t: datetime) -> datetime:
        """A yearless time, moved on a year for each New Year (Dec → Jan) seen so far."""
        month = t.month
        if self.last_month >= 11 and month <= 2:
            self.years_added += 1
        self.last_month = month
        if not self.years_added:
            return t
        try:
            return t.replace(year=t.year + self.years_added)
        except ValueError:  # 29 February
            return t

    def before(self, buf: bytes, start: int, k: int) -> list[bytes]:
        """Up to ``k`` physical lines before offset ``start`` of ``buf`` (a line start), oldest
        first, reaching back into the previous block's tail."""
        out, end = _lines_back(buf, start - 1, k)
        if len(out) < k and end <= 0 and self.tail:
            out.extend(reversed(self.tail[-(k - len(out)):]))
        out.reverse()
        return out

    def keep_tail(self, buf: bytes, n: int, k: int) -> None:
        """Keep the last ``k`` lines of a block (``buf[:n]``) for the next block's
        :meth:`before`."""
        lines, _ = _lines_back(buf, n - 1 if n and buf[n - 1] == 0x0A else n, k)
        lines.reverse()
        self.tail = (self.tail + lines)[-k:]


def _lines_back(buf: bytes, end: int, k: int) -> tuple[list[bytes], int]:
    """Up to ``k`` lines ending at offset ``end`` and before, newest first; where they start."""
    out: list[bytes] = []
    while len(out) < k and end > 0:
        s = buf.rfind(b"\n", 0, end) + 1
        out.append(buf[s:end])
        end = s - 1
    return out, end


def continuations(buf: bytes, end: int, n: int) -> tuple[list[bytes], int]:
    """The lines after offset ``end`` (a line end) of ``buf[:n]`` that start with a space
    (/dev/kmsg dictionary lines, a wall broadcast's body), and where they end."""
    conts: list[bytes] = []
    while end + 1 < n and buf[end + 1] == 0x20:
        e = buf.find(b"\n", end + 1, n)
        e = n if e < 0 else e
        conts.append(buf[end + 1:e])
        end = e
    return conts, end
