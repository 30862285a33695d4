"""Kernel-log parser (pure): text in any common prefix style → ``LogEvent``\\ s.

Speed comes from a prefilter: one compiled alternation of every rule's literal keywords runs over
a whole block of lines at once (google-re2 over bytes when installed, the stdlib ``re``
otherwise); only lines it hits are decoded, split into prefix and message
(:mod:`minutiae.node.sources.kernel_log.parse_prefix`) and tried against the per-kind rules of
``checks/catalog/kernel_log.toml`` (first matching rule wins, in file order).

Multi-line messages become one event: a ``Message from syslogd@`` broadcast header with its
`` kernel:`` body line, a /dev/kmsg record with its dictionary continuation lines (`` KEY=value``;
``DEVICE=+pci:...`` supplies the PCI address), and rules with ``join_back`` (the old three-line
"has fallen off the bus") join the lines before the hit.

Public API (stable): :func:`parse_lines`, :func:`parse_text`, :func:`parse_bytes`,
:func:`parse_chunks`, :func:`normalize_pci`, :func:`prefilter_patterns`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from minutiae.model.findings import LogEvent, Scalar
from minutiae.node.sources.kernel_log.parse_prefix import Prefix, broadcast_body, split_prefix
from minutiae.node.sources.kernel_log.prefilter import (
    BROADCAST,
    compile_prefilter,
    finder,
    prefilter_patterns,
)
from minutiae.rules.logs import PROVISIONAL_LINES, SPECIAL_GROUPS, LogRule, kernel_log_rules

_YEARLESS = frozenset({"syslog", "broadcast"})
BLOCK_LINES = 8192
#: characters of a message the rule regexes look at (printk records are < 1 KiB)
MAX_MESSAGE = 4096
#: bytes of one line kept (the rest up to its newline is dropped): bounded memory on any input
MAX_LINE = 1 << 20
_PCI_ANY = re.compile(
    r"(?<![0-9A-Fa-f:])(?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
    r"(?![0-9A-Fa-f])")
_PCI_SHORT = re.compile(r"([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.([0-7]))?")
_PCI_FULL = re.compile(r"(?:PCI:|pci:|\+pci:)?([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.([0-7]))?")


def normalize_pci(text: str | None) -> str | None:
    """``PCI:0000:44:00`` / ``00000000:44:00.0`` / ``44:00.0`` → ``0000:44:00.0``; else None."""
    if not text:
        return None
    s = text.strip()
    m = _PCI_FULL.fullmatch(s)
    if m:
        dom = int(m.group(1), 16)
        if dom > 0xFFFF:
            return None
        return f"{dom:04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4) or '0'}"
    m = _PCI_SHORT.fullmatch(s)
    if m:
        return f"0000:{m.group(1).lower()}:{m.group(2).lower()}.{m.group(3) or '0'}"
    return None


#: what a message's rule match gives every event of it: kind, message, code, pci, attrs
_Memo = tuple[str, str, int | None, str | None, Mapping[str, Scalar]]

__all__ = ["BROADCAST", "BLOCK_LINES", "MAX_LINE", "MAX_MESSAGE", "KernelLogParser", "normalize_pci",
           "parse_bytes", "parse_chunks", "parse_lines", "parse_text", "prefilter_patterns"]


@dataclass
class _State:
    """What one scan carries across blocks."""

    line_no: int = 0  # number of the first line of the next block (0-based count so far)
    tail: list[bytes] = field(default_factory=list)  # last lines of the previous block
    last_month: int = 0  # of the last yearless timestamp (syslog), to detect New Year
    years_added: int = 0
    held: LogEvent | None = None  # a provisional event (AER header) a following line may replace


class KernelLogParser:
    """A compiled rule set. ``year`` is used for prefixes without one (RFC 3164, broadcasts)."""

    def __init__(self, rules: Sequence[LogRule] | None = None, *, year: int | None = None) -> None:
        self.rules: tuple[LogRule, ...] = tuple(kernel_log_rules() if rules is None else rules)
        self.year = year
        self._prefilter = compile_prefilter(prefilter_patterns(self.rules))
        self._max_back = max((r.join_back for r in self.rules), default=0)
        self._provisional = frozenset(r.id for r in self.rules if r.provisional)
        masks: dict[str, int] = {}
        for i, r in enumerate(self.rules):
            for k in r.keywords:
                masks[k] = masks.get(k, 0) | (1 << i)
        self._kw_masks = tuple(masks.items())
        self._cands: dict[str, tuple[LogRule, ...]] = {}  # message → rules whose keywords it has
        self._matches: dict[str, _Memo | None] = {}  # message → its event's fields; None: no rule

    # -- entry points -------------------------------------------------------------------------
    def parse_chunks(self, chunks: Iterable[bytes]) -> Iterator[LogEvent]:
        """Bytes chunks (any split) → events; the chunks are re-split at line ends."""
        st = _State()
        rest = b""
        skipping = False  # dropping the bytes of an over-long line up to its newline
        for chunk in chunks:
            if not chunk:
                continue
            if skipping:
                nl = chunk.find(b"\n")
                if nl < 0:
                    continue
                chunk, skipping = chunk[nl:], False
            data = rest + chunk if rest else chunk
            cut = data.rfind(b"\n")
            rest = data[cut + 1:]
            if len(rest) > MAX_LINE:  # bounded memory whatever the input: a line is cut here
                rest, skipping = rest[:MAX_LINE], True
            if cut >= 0:
                yield from self._scan_block(data[:cut + 1], st)
        if rest:
            yield from self._scan_block(rest, st)
        if st.held is not None:
            yield st.held

    def parse_lines(self, lines: Iterable[str]) -> Iterator[LogEvent]:
        """Lines (with or without their trailing newline; no newline inside) → events, in
        order, line numbers from 1."""
        st = _State()
        block: list[str] = []
        for line in lines:
            block.append(line.rstrip("\n"))
            if len(block) >= BLOCK_LINES:
                yield from self._scan_block(_encode("\n".join(block) + "\n"), st)
                block.clear()
        if block:
            yield from self._scan_block(_encode("\n".join(block) + "\n"), st)
        if st.held is not None:
            yield st.held

    # -- the scan -----------------------------------------------------------------------------
    def _candidates(self, message: str) -> tuple[LogRule, ...]:
        """The rules (file order) with a keyword in ``message``, memoised: fleet logs repeat."""
        got = self._cands.get(message)
        if got is None:
            mask = 0
            for k, bits in self._kw_masks:
                if k in message:
                    mask |= bits
            got = tuple(r for i, r in enumerate(self.rules) if mask >> i & 1)
            if len(self._cands) >= 4096:
                self._cands.clear()
            self._cands[message] = got
        return got

    def _scan_block(self, buf: bytes, st: _State) -> Iterator[LogEvent]:
        find = finder(self._prefilter)
        n = len(buf)
        pos = 0
        counted = 0  # buffer offset up to which newlines are counted into ``line_no``
        line_no = st.line_no
        while pos < n:
            hit = find(buf, pos)
            if hit < 0:
                break
            start = buf.rfind(b"\n", 0, hit) + 1
            end = buf.find(b"\n", hit)
            if end < 0:
                end = n
            line_no += buf.count(b"\n", counted, start)
            counted = start
            conts: list[bytes] = []
            nxt = end
            while nxt + 1 < n and buf[nxt + 1] == 0x20:  # continuation lines start with a space
                e = buf.find(b"\n", nxt + 1)
                e = n if e < 0 else e
                conts.append(buf[nxt + 1:e])
                nxt = e
            ev, used = self._event(buf, start, end, conts, line_no + 1, st)
            if ev is not None:
                yield from self._emit(ev, st)
            if used:
                line_no += buf.count(b"\n", counted, nxt)
                counted = nxt
                pos = nxt + 1
            else:
                pos = end + 1
        line_no += buf.count(b"\n", counted, n)
        if n and buf[-1] != 0x0A:
            line_no += 1
        st.line_no = line_no
        if st.held is not None and line_no + 1 - st.held.line_no > PROVISIONAL_LINES:
            yield st.held
            st.held = None
        if self._max_back:
            end = n - 1 if n and buf[-1] == 0x0A else n
            lines: list[bytes] = []
            while len(lines) < self._max_back and end > 0:
                s = buf.rfind(b"\n", 0, end) + 1
                lines.append(buf[s:end])
                end = s - 1
            lines.reverse()
            st.tail = (st.tail + lines)[-self._max_back:]

    def _emit(self, ev: LogEvent, st: _State) -> Iterator[LogEvent]:
        """``ev`` in order; a held provisional event first, unless ``ev`` (same kind, within
        ``PROVISIONAL_LINES`` lines, not provisional itself) replaces it."""
        held, st.held = st.held, None
        provisional = ev.attrs.get("rule") in self._provisional
        if held is not None and (provisional or ev.kind != held.kind
                                 or ev.line_no - held.line_no > PROVISIONAL_LINES):
            yield held
        if provisional:
            st.held = ev
        else:
            yield ev

    def _before(self, buf: bytes, start: int, k: int, st: _State) -> list[bytes]:
        """Up to ``k`` physical lines before offset ``start`` (oldest first)."""
        out: list[bytes] = []
        end = start - 1
        while len(out) < k and end > 0:
            s = buf.rfind(b"\n", 0, end) + 1
            out.append(buf[s:end])
            end = s - 1
        if len(out) < k and end <= 0 and st.tail:
            out.extend(reversed(st.tail[-(k - len(out)):]))
        out.reverse()
        return out

    def _event(self, buf: bytes, start: int, end: int, conts: list[bytes], line_no: int,
               st: _State) -> tuple[LogEvent | None, bool]:
        """The event for the hit line (or None) and whether continuation lines were used."""
        line = _decode(buf[start:end])
        pre = split_prefix(line, year=self.year)
        if pre.time is not None and pre.style in _YEARLESS:
            pre = self._roll_year(pre, st)
        attrs: dict[str, Scalar] = {}
        used = False
        message = pre.message[:MAX_MESSAGE]  # the kernel caps a record at ~1 KiB: bound regex work
        if pre.tag is not None and pre.tag != "kernel":
            message = f"{pre.tag}: {message}"  # a daemon's line (nv-fabricmanager, ...)
        if pre.style == "broadcast":
            body = broadcast_body(_decode(conts[0])) if conts else None
            if body is None:
                return None, False
            message = body
            line = line + "\n" + _decode(conts[0])
            used = True
            conts = []
        elif pre.style == "kmsg" and conts:
            used = True
            for c in conts:
                key, sep, value = _decode(c).strip().partition("=")
                if sep and key.isupper() and len(key) <= 32:
                    attrs[key.lower()] = value
        cands = self._candidates(message)
        if not attrs and not any(r.join_back for r in cands):
            return self._memo_event(cands, message, pre, line, line_no), used
        for rule in cands:
            text, first_no, full = message, line_no, line
            if rule.join_back:
                joined = self._join(buf, start, rule, st)
                if joined is not None:
                    prev_msgs, prev_lines = joined
                    text = " ".join([*prev_msgs, message])
                    first_no = line_no - len(prev_lines)
                    full = "\n".join([*prev_lines, line])
            m = rule.pattern.search(text)
            if m is None:
                continue
            return self._make(rule, m, pre, text, full, first_no, attrs), used
        return None, used

    @staticmethod
    def _roll_year(pre: Prefix, st: _State) -> Prefix:
        """Yearless syslog times crossing New Year (Dec → Jan) move to the next year."""
        assert pre.time is not None
        month = pre.time.month
        if st.last_month >= 11 and month <= 2:
            st.years_added += 1
        st.last_month = month
        if not st.years_added:
            return pre
        try:
            return replace(pre, time=pre.time.replace(year=pre.time.year + st.years_added))
        except ValueError:  # 29 February
            return pre

    def _join(self, buf: bytes, start: int, rule: LogRule,
              st: _State) -> tuple[list[str], list[str]] | None:
        prev = [_decode(b) for b in self._before(buf, start, rule.join_back, st)]
        msgs = [split_prefix(p, year=self.year).message for p in prev]
        assert rule.join_start is not None
        for i in range(len(msgs) - 1, -1, -1):
            if rule.join_start.search(msgs[i]):
                return msgs[i:], prev[i:]
        return None

    def _memo_event(self, cands: tuple[LogRule, ...], message: str, pre: Prefix, line: str,
                    line_no: int) -> LogEvent | None:
        """The event of a single-line message, its rule match memoised by message (a fleet log
        repeats the same message thousands of times: one regex pass for all of them)."""
        if message not in self._matches:
            for rule in cands:
                m = rule.pattern.search(message)
                if m is not None:
                    ev = self._make(rule, m, pre, message, line, line_no, {})
                    self._remember(message, (ev.kind, ev.message, ev.code, ev.pci, ev.attrs))
                    return ev
            self._remember(message, None)
            return None
        memo = self._matches[message]
        if memo is None:
            return None
        kind, text, code, pci, base = memo
        attrs = dict(base)
        attrs["style"] = pre.style
        if pre.level:
            attrs["level"] = pre.level
        else:
            attrs.pop("level", None)
        return LogEvent(kind=kind, message=text, line=line, line_no=line_no, time=pre.time,
                        uptime_s=pre.uptime_s, code=code, pci=pci, host=pre.host, attrs=attrs)

    def _remember(self, message: str, memo: _Memo | None) -> None:
        if len(self._matches) >= 4096:
            self._matches.clear()
        self._matches[message] = memo

    def _make(self, rule: LogRule, m: re.Match[str], pre: Prefix, text: str, line: str,
              line_no: int, extra: dict[str, Scalar]) -> LogEvent:
        groups = m.groupdict()
        code: int | None = None
        raw_code = groups.get("code")
        if raw_code:
            try:
                code = int(raw_code)
            except ValueError:
                code = None
        pci = normalize_pci(groups.get("pci"))
        if pci is None:
            pm = _PCI_ANY.search(text)
            pci = normalize_pci(pm.group(1)) if pm else None
        if pci is None and isinstance(extra.get("device"), str):
            pci = normalize_pci(str(extra["device"]))
        attrs: dict[str, Scalar] = dict(rule.attrs)
        attrs.update(extra)
        for name, value in groups.items():
            if name not in SPECIAL_GROUPS and value is not None:
                attrs[name] = value
        attrs["rule"] = rule.id
        attrs["style"] = pre.style
        if pre.level:
            attrs["level"] = pre.level
        return LogEvent(
            kind=rule.kind, message=text.strip(), line=line, line_no=line_no, time=pre.time,
            uptime_s=pre.uptime_s, code=code, pci=pci, host=pre.host, attrs=attrs,
        )


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rstrip("\r")


_DEFAULT: dict[int | None, KernelLogParser] = {}


def _parser(year: int | None) -> KernelLogParser:
    p = _DEFAULT.get(year)
    if p is None:
        p = _DEFAULT[year] = KernelLogParser(year=year)
    return p


def parse_lines(lines: Iterable[str], *, year: int | None = None) -> Iterator[LogEvent]:
    """Kernel-log lines in any supported prefix style → events (lazy; never raises on content)."""
    return _parser(year).parse_lines(lines)


def parse_text(text: str, *, year: int | None = None) -> list[LogEvent]:
    """A whole log as one string → events."""
    return list(_parser(year).parse_chunks([_encode(text)]))


def parse_bytes(data: bytes, *, year: int | None = None) -> list[LogEvent]:
    """Raw bytes (any encoding; undecodable bytes become U+FFFD) → events."""
    return list(_parser(year).parse_chunks([data]))


def parse_chunks(chunks: Iterable[bytes], *, year: int | None = None) -> Iterator[LogEvent]:
    """Streamed bytes chunks (e.g. from :mod:`minutiae.node.sources.kernel_log.read_kmsg`) → events."""
    return _parser(year).parse_chunks(chunks)
