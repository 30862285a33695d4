"""Kernel-log lines counted without splitting their prefix or building events (pure).

A fleet log repeats a few messages tens of thousands of times, and its prefixes all have the
same form (``kern  :info  : 2025-01-17T07:46:40,370000+00:00 ``). An aggregating scan needs of
each line only its message (to find its rule and group) and its time. Once a line has been
split the normal way, :class:`RepeatCounter` remembers the *shape* of its prefix (its bytes with
the digits masked) with the split's style and where its time stamp is. A later hit line whose
first bytes have a remembered shape splits the same way: the prefix regexes look at character
classes, which the mask keeps, never at digit values; the message is what follows, and the time
is read from the stamp with the style's own code. Lines whose split could also depend on what
follows the prefix (a message starting with ``[`` or a space, ISO stamps without a host field
that a ``host tag:`` message would change, syslog lines without a tag) are never remembered by
shape or taken that way.

A message's rule match is the parser's memo; how it counts is the finding mapper's (the same
plan for every line of a plain rule, a plan per line for a catalog rule such as the XIDs). What
neither can say (a provisional rule, a rule joining earlier lines, a per-line message template)
takes the normal path, so the groups and counts are those of building every finding.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from minutiae.model.vocab import Severity
from minutiae.node.sources.kernel_log.parse import MAX_MESSAGE, Memo
from minutiae.node.sources.kernel_log.parse_prefix import Prefix, iso_time, stamp_at, time_at
from minutiae.node.sources.kernel_log.state import YEARLESS, ScanState
from minutiae.rules.log_findings import Counted, GroupPlan

__all__ = ["RepeatCounter"]

_MASK = bytes.maketrans(b"0123456789", b"0000000000")
#: distinct prefix shapes and message plans remembered (cleared when full)
MAX_REMEMBERED = 4096
#: prefix lengths tried per line (a merged log of several hosts has a few)
MAX_CUTS = 4
#: prefix styles remembered by shape ("none" has no prefix; broadcasts take their next line)
_SHAPED = frozenset({"iso", "journal_iso", "syslog", "ctime", "fmlog", "uptime", "syslog_pri",
                     "kmsg"})

Match = Callable[[str], tuple[bool, Memo | None]]
HowCounted = Callable[[Memo], Counted]
LinePlan = Callable[[Memo, datetime | None], GroupPlan]
Sink = Callable[[GroupPlan, datetime | None, int, str | bytes], None]
#: ``count`` lines of one plan at once: plan, earliest and latest time, last line number, count
Tally = Callable[[GroupPlan, datetime | None, datetime | None, int, int], None]
#: style, stamp start and end (-1: no stamp), ISO offset length (-1: not ISO), tag prefix
_Form = tuple[str, int, int, int, str]
#: a plain rule's repeats of one message not yet given to the sink: count, earliest and latest
#: time, last line number
_Acc = list[Any]
_Seen = tuple[_Form, str, Memo | None, GroupPlan | Counted | None, _Acc | None]


class RepeatCounter:
    """The parser's ``repeats`` hook: lines it can count go to ``sink`` as (plan, time, line
    number, line) when their severity is ``floor`` or more (the line is the raw bytes when it
    was never decoded: the sink decodes it only if it keeps it). With ``tally``, the repeats of
    a message of a plain rule after its first line are counted here (count, earliest and latest
    time, last line) and given to ``tally`` by :meth:`flush`: a call per message, not per line."""

    def __init__(self, match: Match, counted: HowCounted, line_plan: LinePlan, sink: Sink, *,
                 year: int | None, floor: Severity = Severity.INFO,
                 tally: Tally | None = None) -> None:
        self._match, self._counted, self._line_plan = match, counted, line_plan
        self._sink, self._year, self._floor, self._tally = sink, year, floor, tally
        self._plans: dict[str, GroupPlan | Counted] = {}  # message → its plan, or how counted
        self._forms: dict[bytes, _Form] = {}  # prefix shape → how lines of that shape split
        #: (prefix shape, message bytes) → form, message, its match, how it counts
        self._seen: dict[tuple[bytes, bytes], _Seen] = {}
        self._cuts: list[int] = []  # prefix lengths (bytes) of the shapes, most recent first

    def take(self, buf: bytes, start: int, end: int, line_no: int, st: ScanState) -> bool:
        if buf[end - 1] == 0x0D:  # a CR is stripped the slow way
            return False
        for cut in self._cuts:
            at = start + cut
            if at >= end:
                continue
            shape = buf[start:at].translate(_MASK)
            seen = self._seen.get((shape, buf[at:end]))
            if seen is None:
                form = self._forms.get(shape)
                if form is not None:
                    return self._first(form, shape, buf, start, at, end, line_no, st)
                continue
            acc = seen[4]
            if acc is None:  # not tallied: no rule, or a plan per line
                return self._again(seen, buf, start, at, end, line_no, st)
            # a plain rule's repeat (most of a dense log's hits): tallied here, given to the
            # sink by flush(); its time read inline when the stamp is ISO (the common form)
            form = seen[0]
            offset = form[3]
            if offset >= 0:
                stamp = buf[start + form[1]:start + form[2]].decode("latin-1")
                t = iso_time(stamp, stamp[len(stamp) - offset:] if offset else None)
            else:
                t = self._time(form, buf, start, at, st)
            acc[0] += 1
            if t is not None:
                lo = acc[1]
                if lo is None or t < lo:
                    acc[1] = t
                hi = acc[2]
                if hi is None or t > hi:
                    acc[2] = t
            acc[3] = line_no
            return True
        return False

    def _again(self, seen: _Seen, buf: bytes, start: int, at: int, end: int, line_no: int,
               st: ScanState) -> bool:
        """A line of a message after a prefix shape seen before that is not tallied."""
        form, _, memo, plan, _ = seen
        if plan is None or memo is None:
            return True  # no rule matches: no event
        t = self._time(form, buf, start, at, st)
        if not isinstance(plan, GroupPlan):  # Counted.PER_LINE: a catalog rule
            plan = self._line_plan(memo, t)
        if plan.severity >= self._floor:
            self._sink(plan, t, line_no, buf[start:end])
        return True

    def _first(self, form: _Form, shape: bytes, buf: bytes, start: int, at: int, end: int,
               line_no: int, st: ScanState) -> bool:
        """A line of a known prefix shape with a message not counted after it yet."""
        if buf[at] in b" [":  # the prefix regexes might have read on into the message
            return False
        message = buf[at:end].decode("utf-8", "replace")[:MAX_MESSAGE]
        if form[4]:
            message = form[4] + message
        single, memo = self._match(message)
        if not single:
            return False
        plan: GroupPlan | Counted | None = None
        if memo is not None:
            plan = self._count(message, memo, self._time(form, buf, start, at, st), line_no,
                               buf[start:end])
            if plan is None:
                return False
        if len(self._seen) >= MAX_REMEMBERED:
            self.flush()
            self._seen.clear()
        acc = None
        if self._tally is not None and isinstance(plan, GroupPlan) and plan.severity >= self._floor:
            acc = [0, None, None, 0]
        self._seen[shape, buf[at:end]] = (form, message, memo, plan, acc)
        return True

    def flush(self) -> None:
        """Give the tallied repeats to ``tally`` (at the end of a scan; before forgetting)."""
        tally = self._tally
        if tally is None:
            return
        for _, _, _, plan, acc in self._seen.values():
            if acc is not None and acc[0] and isinstance(plan, GroupPlan):
                tally(plan, acc[1], acc[2], acc[3], acc[0])
                acc[:] = [0, None, None, 0]

    def _time(self, form: _Form, buf: bytes, start: int, at: int,
              st: ScanState) -> datetime | None:
        """The time of a line of a known prefix shape, read from its stamp."""
        style, a, b, offset, _ = form
        if a < 0:
            return None
        if offset >= 0:  # an ISO stamp: ASCII digits and punctuation, as the shape says
            stamp = buf[start + a:start + b].decode("latin-1")
            return iso_time(stamp, stamp[len(stamp) - offset:] if offset else None)
        t = time_at(buf[start:at].decode("utf-8", "replace"), style, a, self._year)
        if t is not None and style in YEARLESS:
            t = st.roll_year(t)
        return t

    def offer(self, message: str, memo: Memo, pre: Prefix, line: str, line_no: int) -> bool:
        if self._count(message, memo, pre.time, line_no, line) is None:
            return False
        self._remember(pre, line)
        return True

    def _count(self, message: str, memo: Memo, t: datetime | None, line_no: int,
               line: str | bytes) -> GroupPlan | Counted | None:
        """Count one line of ``message``: how its lines count (a plan, or PER_LINE), or None
        when it needs its event built."""
        how = self._plans.get(message)
        if how is None:
            counted = self._counted(memo)
            how = self._line_plan(memo, t) if counted is Counted.PER_MESSAGE else counted
            if len(self._plans) >= MAX_REMEMBERED:
                self._plans.clear()
            self._plans[message] = how
        if how is Counted.EVENT:
            return None
        plan = how if isinstance(how, GroupPlan) else self._line_plan(memo, t)
        if plan.severity >= self._floor:
            self._sink(plan, t, line_no, line)
        return how

    def _remember(self, pre: Prefix, line: str) -> None:
        """Remember how a line split, by its prefix's shape, when every line of that shape is
        bound to split the same way (see the module's docstring)."""
        cut = len(line) - len(pre.message)
        prefix = line[:cut]
        if (pre.style not in _SHAPED or not cut or not pre.message or line[cut:] != pre.message
                or "\ufffd" in prefix):
            return  # (an empty message: the host-tag regex may have stopped at the line end)
        if pre.style == "syslog" and pre.tag is None:
            return  # the host-tag regex looked at the message and found none
        if pre.tag is not None and any("0" <= c <= "9" for c in pre.tag):
            return  # a daemon's tag goes into the message: its digits would matter
        raw = prefix.encode("utf-8", "surrogatepass")
        shape = raw.translate(_MASK)
        if shape in self._forms:
            return
        stamp = stamp_at(line, pre.style, cut)
        if stamp is None:
            if pre.time is not None:
                return
            stamp = (-1, -1, -1)
        elif not _same_clock(time_at(prefix, pre.style, stamp[0], self._year), pre.time):
            return
        a, b, offset = stamp
        if pre.style == "iso" and offset >= 0 and "," not in line[a:b]:
            return  # ISO with a '.': the host-tag regex looked at the message
        if a >= 0 and offset >= 0:  # ISO stamps are read from the bytes: byte offsets
            a = len(prefix[:a].encode("utf-8", "surrogatepass"))
            b = len(prefix[:b].encode("utf-8", "surrogatepass"))
        tag = f"{pre.tag}: " if pre.tag not in (None, "kernel") else ""
        if len(self._forms) >= MAX_REMEMBERED:
            self._forms.clear()
        self._forms[shape] = (pre.style, a, b, offset, tag)
        cuts = self._cuts
        if not cuts or cuts[0] != len(raw):
            self._cuts = [len(raw), *(c for c in cuts if c != len(raw))][:MAX_CUTS]


def _same_clock(a: datetime | None, b: datetime | None) -> bool:
    """Equal but for the year (a yearless time was rolled over New Year after it was read)."""
    if a is None or b is None:
        return a is b
    return (a.month, a.day, a.time(), a.utcoffset()) == (b.month, b.day, b.time(), b.utcoffset())
