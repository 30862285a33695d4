"""Timestamp/prefix styles of kernel-log lines (pure).

Recognised, in this order (first match wins):

=====================  =====================================================================
style                  example
=====================  =====================================================================
``kmsg``               ``6,3964,206764307,-;nvidia-nvswitch2: open (major=510)`` (/dev/kmsg)
``decode``             ``kern  :warn  : 2025-01-21T04:41:44,283302+00:00 msg`` (dmesg -x
                       with any of the time styles below after it)
``syslog_pri``         ``<6>[    2.608284] msg`` (dmesg -r, pstore/ERST dumps)
``uptime``             ``[ 1234.567890] msg`` (plain dmesg)
``ctime``              ``[Sun Feb 23 16:24:18 2025] msg`` (dmesg -T)
``iso``                ``2025-01-21T04:41:44,283302+00:00 msg`` (dmesg --time-format iso)
``journal_iso``        ``2025-01-17T17:10:43+0000 host kernel: msg`` (journalctl -o short-iso,
                       short-iso-precise, rsyslog RFC 3339)
``syslog``             ``Jan 17 17:10:43 host kernel: [  12.3] msg`` (RFC 3164 / journalctl
                       short / short-precise)
``fmlog``              ``[Feb 27 2025 15:10:02] [ERROR] [tid 12727] msg`` (fabricmanager.log)
``broadcast``          ``Message from syslogd@host at Jan 17 17:10:43 ...`` followed by a line
                       `` kernel:msg`` (the two become one event)
``none``               anything else: the whole line is the message
=====================  =====================================================================

Times without a UTC offset are taken as UTC. Formats without a year (RFC 3164, broadcasts)
take ``year`` from the caller; without one their time is left ``None`` (never guessed).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from functools import lru_cache
from typing import NamedTuple

MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
_MON = r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_DOW = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"

_KMSG = re.compile(r"(\d{1,3}),(\d+),(\d+),[^;]{0,16};")
_DECODE = re.compile(r"([a-z]{2,8}) *:([a-z]{3,7}) *: ")
_PRI = re.compile(r"<(\d{1,3})>")
_UPTIME = re.compile(r"\[ *(\d{1,10})\.(\d{1,9})\] ?")
_CTIME = re.compile(rf"\[{_DOW} {_MON} +(\d{{1,2}}) (\d\d):(\d\d):(\d\d) (\d{{4}})\] ?")
#: groups: the whole stamp (what ``datetime.fromisoformat`` reads), the decimal mark, the offset
_ISO = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:([.,])\d{1,9})?(Z|[+-]\d\d:?\d\d)?) ")
_ISO_FIELDS = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?")
_SYSLOG = re.compile(rf"{_MON} +(\d{{1,2}}) (\d\d):(\d\d):(\d\d)(?:\.(\d{{1,9}}))? ")
_HOST_TAG = re.compile(r"(\S{1,255}) ([A-Za-z_][\w.@/-]{0,63})(?:\[(\d+)\])?:(?: |$)")
_FMLOG = re.compile(rf"\[{_MON} +(\d{{1,2}}) (\d{{4}}) (\d\d):(\d\d):(\d\d)\] \[([A-Z]+)\] (?:\[tid \d+\] )?")
_BROADCAST = re.compile(
    rf"Message from syslogd@(\S+) at (?:{_DOW} )?{_MON} +(\d{{1,2}}) (\d\d):(\d\d):(\d\d)(?: (\d{{4}}))?")
_BROADCAST_BODY = re.compile(r" ?kernel: ?")
_LEVELS = ("emerg", "alert", "crit", "err", "warn", "notice", "info", "debug")


class Prefix(NamedTuple):
    """What a line's prefix said. ``message`` is the rest of the line (the kernel's text).
    (A named tuple, not a dataclass: one is built per matching line, and a frozen dataclass
    costs ~8x more to build.)"""

    style: str
    message: str
    time: datetime | None = None
    uptime_s: float | None = None
    host: str | None = None
    level: str | None = None
    seq: int | None = None
    tag: str | None = None


def _frac(digits: str | None) -> int:
    """Fractional-second digits → microseconds."""
    if not digits:
        return 0
    return int((digits + "000000")[:6])


@lru_cache(maxsize=256)
def _tz(text: str | None) -> timezone:
    if not text or text == "Z":
        return UTC
    sign = -1 if text[0] == "-" else 1
    hh, mm = int(text[1:3]), int(text[-2:])
    if hh > 23 or mm > 59:
        raise ValueError(text)
    return timezone(sign * timedelta(hours=hh, minutes=mm))


def _dt(y: int, mo: int, d: int, h: int, mi: int, s: int, us: int = 0,
        tz: timezone = UTC) -> datetime | None:
    try:
        return datetime(y, mo, d, h, mi, min(s, 59), us, tzinfo=tz)
    except (ValueError, OverflowError):
        return None


def iso_time(stamp: str, offset: str | None) -> datetime | None:
    """An ISO 8601 stamp (``,``/``.`` fraction, any offset form) → aware time, UTC without an
    offset. ``fromisoformat`` reads nearly all of them at C speed; what it refuses (second 60,
    offset hours > 23, a bad date) takes the field-by-field way, as lenient as the other styles
    (second 60 is read as 59, a bad offset as UTC, a bad date as no time)."""
    # fromisoformat takes offset minutes 60-99 and (newer Pythons) hour 24; we do not
    if stamp[11:13] != "24" and (offset is None or offset[-2:-1] < "6"):
        try:
            t = datetime.fromisoformat(stamp)
        except ValueError:
            pass
        else:
            return t if offset is not None else t.replace(tzinfo=UTC)
    try:
        tz = _tz(offset)
    except ValueError:
        tz = UTC
    f = _ISO_FIELDS.match(stamp)
    if f is None:  # pragma: no cover - _ISO matched the same text
        return None
    y, mo, d, h, mi, s, frac = f.groups()
    return _dt(int(y), int(mo), int(d), int(h), int(mi), int(s), _frac(frac), tz)


def _after_time(rest: str) -> tuple[float | None, str]:
    """An optional ``[ uptime]`` after a wall-clock prefix (kern.log, dmesg -x)."""
    m = _UPTIME.match(rest)
    if m:
        return int(m.group(1)) + _frac(m.group(2)) / 1e6, rest[m.end():]
    return None, rest


def _host_tag(rest: str) -> tuple[str | None, str | None, str]:
    m = _HOST_TAG.match(rest)
    if m is None:
        return None, None, rest
    return m.group(1), m.group(2), rest[m.end():]


def _ctime_time(m: re.Match[str], year: int | None) -> datetime | None:
    return _dt(int(m.group(6)), MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)),
               int(m.group(4)), int(m.group(5)))


def _iso_match_time(m: re.Match[str], year: int | None) -> datetime | None:
    return iso_time(m.group(1), m.group(3))


def _syslog_time(m: re.Match[str], year: int | None) -> datetime | None:
    if year is None:
        return None
    return _dt(year, MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)), int(m.group(4)),
               int(m.group(5)), _frac(m.group(6)))


def _fmlog_time(m: re.Match[str], year: int | None) -> datetime | None:
    return _dt(int(m.group(3)), MONTHS[m.group(1)], int(m.group(2)), int(m.group(4)),
               int(m.group(5)), int(m.group(6)))


_TimeOf = Callable[[re.Match[str], int | None], datetime | None]
#: style → the regex of its wall-clock stamp and how the match becomes a time
_STAMPS: dict[str, tuple[re.Pattern[str], _TimeOf]] = {
    "ctime": (_CTIME, _ctime_time), "iso": (_ISO, _iso_match_time),
    "journal_iso": (_ISO, _iso_match_time), "syslog": (_SYSLOG, _syslog_time),
    "fmlog": (_FMLOG, _fmlog_time)}


def stamp_at(line: str, style: str, end: int) -> tuple[int, int, int] | None:
    """Where the wall-clock stamp of a ``style`` prefix ending at ``end`` is: its start, its
    end and, for an ISO stamp (what :func:`iso_time` reads), the length of its UTC offset, else
    -1 (read it with :func:`time_at`). None: the style has no stamp."""
    got = _STAMPS.get(style)
    m = got[0].search(line, 0, end) if got is not None else None
    if m is None:
        return None
    if m.re is _ISO:
        return m.start(), m.end(1), len(m.group(3) or "")
    return m.start(), m.end(), -1


def time_at(line: str, style: str, pos: int, year: int | None) -> datetime | None:
    """The time of a ``style`` stamp at ``pos`` (see :func:`stamp_at`), as :func:`split_prefix`
    reads it (yearless styles take ``year``, unrolled)."""
    rx, time_of = _STAMPS[style]
    m = rx.match(line, pos)
    return None if m is None else time_of(m, year)


def split_prefix(line: str, *, year: int | None = None) -> Prefix:
    """Split one physical line into its prefix fields and the kernel message. Never raises."""
    level: str | None = None
    c = line[:1]  # each style starts with its own kind of character: skip the others' regexes
    m = _KMSG.match(line) if c.isdigit() else None
    if m:
        pri = int(m.group(1))
        return Prefix("kmsg", line[m.end():], uptime_s=int(m.group(3)) / 1e6,
                      level=_LEVELS[pri & 7], seq=int(m.group(2)))
    m = _DECODE.match(line) if c.islower() else None
    if m:
        level = m.group(2)
        line = line[m.end():]
        c = line[:1]
    m = _PRI.match(line) if c == "<" else None
    if m:
        level = _LEVELS[int(m.group(1)) & 7]
        line = line[m.end():]
        c = line[:1]
    if c == "[":
        return _bracketed(line, level)
    m = _ISO.match(line) if c.isdigit() else None
    if m:
        t = _iso_match_time(m, year)
        rest = line[m.end():]
        if m.group(2) == ",":  # dmesg --time-format iso: no host field
            return Prefix("iso", rest, time=t, level=level)
        host, tag, rest2 = _host_tag(rest)
        if tag is not None:
            up, msg = _after_time(rest2)
            return Prefix("journal_iso", msg, time=t, uptime_s=up, host=host, level=level, tag=tag)
        return Prefix("iso", rest, time=t, level=level)
    m = _SYSLOG.match(line) if c.isupper() else None
    if m:
        host, tag, rest = _host_tag(line[m.end():])
        up, msg = _after_time(rest)
        return Prefix("syslog", msg, time=_syslog_time(m, year), uptime_s=up, host=host,
                      level=level, tag=tag)
    m = _BROADCAST.match(line) if c == "M" else None
    if m:
        y = int(m.group(7)) if m.group(7) else year
        t = None
        if y is not None:
            t = _dt(y, MONTHS[m.group(2)], int(m.group(3)), int(m.group(4)), int(m.group(5)),
                    int(m.group(6)))
        return Prefix("broadcast", "", time=t, host=m.group(1), level=level)
    return Prefix("none", line, level=level)


def _bracketed(line: str, level: str | None) -> Prefix:
    """``[ uptime]``, ``[ctime]`` or ``[fabric manager time] [LEVEL]`` prefixes."""
    m = _UPTIME.match(line)
    if m:
        return Prefix("syslog_pri" if level else "uptime", line[m.end():],
                      uptime_s=int(m.group(1)) + _frac(m.group(2)) / 1e6, level=level)
    m = _CTIME.match(line)
    if m:
        return Prefix("ctime", line[m.end():], time=_ctime_time(m, None), level=level)
    m = _FMLOG.match(line)
    if m:
        return Prefix("fmlog", line[m.end():], time=_fmlog_time(m, None),
                      level=m.group(7).lower(), tag="nv-fabricmanager")
    return Prefix("none", line, level=level)


def broadcast_body(line: str) -> str | None:
    """The kernel message of the line after a ``Message from syslogd@`` header, else None."""
    m = _BROADCAST_BODY.match(line)
    if m is None:
        return None
    _, rest = _after_time(line[m.end():])
    return rest


def is_broadcast_header(line: str) -> bool:
    return line.startswith("Message from syslogd@")
