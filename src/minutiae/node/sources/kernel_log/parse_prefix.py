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
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from functools import lru_cache

MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1)}
_MON = r"(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_DOW = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"

_KMSG = re.compile(r"(\d{1,3}),(\d+),(\d+),[^;]{0,16};")
_DECODE = re.compile(r"([a-z]{2,8}) *:([a-z]{3,7}) *: ")
_PRI = re.compile(r"<(\d{1,3})>")
_UPTIME = re.compile(r"\[ *(\d{1,10})\.(\d{1,9})\] ?")
_CTIME = re.compile(rf"\[{_DOW} {_MON} +(\d{{1,2}}) (\d\d):(\d\d):(\d\d) (\d{{4}})\] ?")
_ISO = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:([.,])(\d{1,9}))?(Z|[+-]\d\d:?\d\d)? ")
_SYSLOG = re.compile(rf"{_MON} +(\d{{1,2}}) (\d\d):(\d\d):(\d\d)(?:\.(\d{{1,9}}))? ")
_HOST_TAG = re.compile(r"(\S{1,255}) ([A-Za-z_][\w.@/-]{0,63})(?:\[(\d+)\])?:(?: |$)")
_FMLOG = re.compile(rf"\[{_MON} +(\d{{1,2}}) (\d{{4}}) (\d\d):(\d\d):(\d\d)\] \[([A-Z]+)\] (?:\[tid \d+\] )?")
_BROADCAST = re.compile(
    rf"Message from syslogd@(\S+) at (?:{_DOW} )?{_MON} +(\d{{1,2}}) (\d\d):(\d\d):(\d\d)(?: (\d{{4}}))?")
_BROADCAST_BODY = re.compile(r" ?kernel: ?")
_LEVELS = ("emerg", "alert", "crit", "err", "warn", "notice", "info", "debug")


@dataclass(frozen=True, slots=True)
class Prefix:
    """What a line's prefix said. ``message`` is the rest of the line (the kernel's text)."""

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
    m = _UPTIME.match(line) if c == "[" else None
    if m:
        return Prefix("syslog_pri" if level else "uptime", line[m.end():],
                      uptime_s=int(m.group(1)) + _frac(m.group(2)) / 1e6, level=level)
    m = _CTIME.match(line) if c == "[" else None
    if m:
        t = _dt(int(m.group(6)), MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)),
                int(m.group(4)), int(m.group(5)))
        return Prefix("ctime", line[m.end():], time=t, level=level)
    m = _ISO.match(line)
    if m:
        try:
            tz = _tz(m.group(9))
        except ValueError:
            tz = UTC
        t = _dt(int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)),
                int(m.group(5)), int(m.group(6)), _frac(m.group(8)), tz)
        rest = line[m.end():]
        if m.group(7) == ",":  # dmesg --time-format iso: no host field
            return Prefix("iso", rest, time=t, level=level)
        host, tag, rest2 = _host_tag(rest)
        if tag is not None:
            up, msg = _after_time(rest2)
            return Prefix("journal_iso", msg, time=t, uptime_s=up, host=host, level=level, tag=tag)
        return Prefix("iso", rest, time=t, level=level)
    m = _SYSLOG.match(line)
    if m:
        t = None
        if year is not None:
            t = _dt(year, MONTHS[m.group(1)], int(m.group(2)), int(m.group(3)), int(m.group(4)),
                    int(m.group(5)), _frac(m.group(6)))
        host, tag, rest = _host_tag(line[m.end():])
        up, msg = _after_time(rest)
        return Prefix("syslog", msg, time=t, uptime_s=up, host=host, level=level, tag=tag)
    m = _FMLOG.match(line)
    if m:
        t = _dt(int(m.group(3)), MONTHS[m.group(1)], int(m.group(2)), int(m.group(4)),
                int(m.group(5)), int(m.group(6)))
        return Prefix("fmlog", line[m.end():], time=t, level=m.group(7).lower(),
                      tag="nv-fabricmanager")
    m = _BROADCAST.match(line)
    if m:
        y = int(m.group(7)) if m.group(7) else year
        t = None
        if y is not None:
            t = _dt(y, MONTHS[m.group(2)], int(m.group(3)), int(m.group(4)), int(m.group(5)),
                    int(m.group(6)))
        return Prefix("broadcast", "", time=t, host=m.group(1), level=level)
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
