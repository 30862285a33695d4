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
from typing import Protocol

from minutiae.model.findings import LogEvent, Scalar
from minutiae.node.sources.kernel_log.parse_prefix import Prefix, broadcast_body, split_prefix
from minutiae.node.sources.kernel_log.pci import normalize_pci, pci_in
from minutiae.node.sources.kernel_log.prefilter import (
    BROADCAST,
    compile_prefilter,
    matcher,
    prefilter_patterns,
)
from minutiae.node.sources.kernel_log.state import YEARLESS, ScanState, continuations
from minutiae.rules.logs import PROVISIONAL_LINES, SPECIAL_GROUPS, LogRule, kernel_log_rules

BLOCK_LINES = 8192
#: characters of a message the rule regexes look at (printk records are < 1 KiB)
MAX_MESSAGE = 4096
#: bytes of one line kept (the rest up to its newline is dropped): bounded memory on any input
MAX_LINE = 1 << 20
#: what a message's rule match gives every event of it: kind, message, code, pci, attrs
Memo = tuple[str, str, int | None, str | None, Mapping[str, Scalar]]


_DIGITS = bytes.maketrans(b"0123456789", b"0000000000")
_MISS: Memo = ("", "", None, None, {})  # not matched yet (a memo of None: no rule matches)


class Repeats(Protocol):
    """A consumer that counts repeated single-line messages instead of taking their events."""

    def take(self, buf: bytes, start: int, end: int, line_no: int, st: ScanState) -> bool:
        """The hit line ``buf[start:end]`` before anything is done with it: True if taken."""

    def offer(self, message: str, memo: Memo, pre: Prefix, line: str, line_no: int) -> bool:
        """A message seen before, split and matched (``memo``): True if taken."""

__all__ = ["BROADCAST", "BLOCK_LINES", "MAX_LINE", "MAX_MESSAGE", "KernelLogParser", "Memo",
           "Repeats", "normalize_pci", "parse_bytes", "parse_chunks", "parse_lines", "parse_text",
           "prefilter_patterns"]


class KernelLogParser:
    """A compiled rule set. ``year`` is used for prefixes without one (RFC 3164, broadcasts).

    ``repeats``, when set, is offered each hit line first, then every single-line message seen
    before (its rule match memoised) before an event is built for it: a consumer that only
    counts (the aggregated table) takes them and no ``LogEvent`` is made. Not offered while a
    provisional event is held, nor for lines with continuation lines or rules that join
    earlier lines."""

    def __init__(self, rules: Sequence[LogRule] | None = None, *, year: int | None = None) -> None:
        self.rules: tuple[LogRule, ...] = tuple(kernel_log_rules() if rules is None else rules)
        self.year = year
        self._prefilter = compile_prefilter(prefilter_patterns(self.rules))
        self._match = matcher(self._prefilter)
        self._max_back = max((r.join_back for r in self.rules), default=0)
        self._provisional = frozenset(r.id for r in self.rules if r.provisional)
        masks: dict[str, int] = {}
        for i, r in enumerate(self.rules):
            for k in r.keywords:
                masks[k] = masks.get(k, 0) | (1 << i)
        self._kw_plain = tuple((k, b) for k, b in masks.items() if not _has_digit(k))
        self._kw_digits = tuple((k, b) for k, b in masks.items() if _has_digit(k))
        self._shapes: dict[bytes, int] = {}  # message shape → its digitless keywords' rules
        self._cands: dict[int, tuple[LogRule, ...]] = {}  # keyword mask → rules (file order)
        self._matches: dict[str, Memo | None] = {}  # message → its event's fields; None: no rule
        self.repeats: Repeats | None = None

    # -- entry points -------------------------------------------------------------------------
    def parse_chunks(self, chunks: Iterable[bytes]) -> Iterator[LogEvent]:
        """Bytes chunks (any split) → events; the chunks are re-split at line ends."""
        st = ScanState()
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
                yield from self._scan_block(data, cut + 1, st)  # (not a copy)
        if rest:
            yield from self._scan_block(rest, len(rest), st)
        if st.held is not None:
            yield st.held

    def parse_lines(self, lines: Iterable[str]) -> Iterator[LogEvent]:
        """Lines (with or without their trailing newline; no newline inside) → events, in
        order, line numbers from 1."""
        st = ScanState()
        block: list[str] = []
        for line in lines:
            block.append(line.rstrip("\n"))
            if len(block) >= BLOCK_LINES:
                data = _encode("\n".join(block) + "\n")
                yield from self._scan_block(data, len(data), st)
                block.clear()
        if block:
            data = _encode("\n".join(block) + "\n")
            yield from self._scan_block(data, len(data), st)
        if st.held is not None:
            yield st.held

    # -- the scan -----------------------------------------------------------------------------
    def _candidates(self, message: str) -> tuple[LogRule, ...]:
        """The rules (file order) with a keyword in ``message``. Keywords without digits are
        looked for once per message *shape* (digits masked): such a keyword is in every message
        of the same shape, and fleet logs vary in their pids, addresses and counts, not their
        text; the few keywords with digits are looked for each time."""
        shape = message.encode("utf-8", "surrogatepass").translate(_DIGITS)  # 10x str.translate
        mask = self._shapes.get(shape)
        if mask is None:
            mask = 0
            for k, bits in self._kw_plain:
                if k in message:
                    mask |= bits
            if len(self._shapes) >= 4096:
                self._shapes.clear()
            self._shapes[shape] = mask
        for k, bits in self._kw_digits:
            if k in message:
                mask |= bits
        got = self._cands.get(mask)
        if got is None:
            rules = tuple(r for i, r in enumerate(self.rules) if mask >> i & 1)
            if len(self._cands) >= 4096:
                self._cands.clear()
            got = self._cands[mask] = rules
        return got

    def _scan_block(self, buf: bytes, n: int, st: ScanState) -> Iterator[LogEvent]:
        """The events of the lines of ``buf[:n]`` (what follows ``n`` is not looked at)."""
        match, anchor = self._match
        take = self.repeats.take if self.repeats is not None else None
        pos = 0
        counted = 0  # buffer offset up to which newlines are counted into ``line_no``
        line_no = st.line_no
        while pos < n:
            hit = match(anchor, buf, pos, n)[0][0]
            if hit < 0:
                break
            start = buf.rfind(b"\n", 0, hit) + 1
            end = buf.find(b"\n", hit)
            if end < 0:
                end = n
            line_no += buf.count(b"\n", counted, start)
            counted = start
            if end + 1 < n and buf[end + 1] == 0x20:  # continuation lines start with a space
                conts, nxt = continuations(buf, end, n)
            else:
                if take is not None and st.held is None and take(buf, start, end, line_no + 1, st):
                    pos = end + 1
                    continue
                conts, nxt = [], end
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
        if n and buf[n - 1] != 0x0A:
            line_no += 1
        st.line_no = line_no
        if st.held is not None and line_no + 1 - st.held.line_no > PROVISIONAL_LINES:
            yield st.held
            st.held = None
        if self._max_back:
            st.keep_tail(buf, n, self._max_back)

    def _emit(self, ev: LogEvent, st: ScanState) -> Iterator[LogEvent]:
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

    def _event(self, buf: bytes, start: int, end: int, conts: list[bytes], line_no: int,
               st: ScanState) -> tuple[LogEvent | None, bool]:
        """The event for the hit line (or None) and whether continuation lines were used."""
        line = _decode(buf[start:end])
        pre = split_prefix(line, year=self.year)
        if pre.time is not None and pre.style in YEARLESS:
            pre = pre._replace(time=st.roll_year(pre.time))
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
        if not attrs:
            single, memo = self.match_single(message)
            if single:
                return self._memo_event(memo, message, pre, line, line_no, st), used
        for rule in self._candidates(message):
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

    def _join(self, buf: bytes, start: int, rule: LogRule,
              st: ScanState) -> tuple[list[str], list[str]] | None:
        prev = [_decode(b) for b in st.before(buf, start, rule.join_back)]
        msgs = [split_prefix(p, year=self.year).message for p in prev]
        assert rule.join_start is not None
        for i in range(len(msgs) - 1, -1, -1):
            if rule.join_start.search(msgs[i]):
                return msgs[i:], prev[i:]
        return None

    def match_single(self, message: str) -> tuple[bool, Memo | None]:
        """The rule match of a single-line message, memoised by message (a fleet log repeats
        the same message thousands of times: one regex pass for all of them): (True, its
        event's fields, or None when no rule matches), or (False, None) when a rule that joins
        earlier lines comes before the first rule that matches (file order, as :meth:`_event`
        tries them: an Xid 79 line, which says "fallen off the bus", is the Xid rule's, and the
        old three-line rule after it is never tried)."""
        memo = self._matches.get(message, _MISS)
        if memo is not _MISS:
            return True, memo
        memo = None
        for rule in self._candidates(message):
            if rule.join_back:  # its match depends on the lines before this one
                return False, None
            m = rule.pattern.search(message)
            if m is not None:
                memo = self._fields(rule, m, message, {})
                break
        if len(self._matches) >= 4096:
            self._matches.clear()
        self._matches[message] = memo
        return True, memo

    def _memo_event(self, memo: Memo | None, message: str, pre: Prefix, line: str,
                    line_no: int, st: ScanState) -> LogEvent | None:
        """The event of a single-line message (``repeats`` is offered it first)."""
        if memo is None:
            return None
        if self.repeats is not None and st.held is None and self.repeats.offer(
                message, memo, pre, line, line_no):
            return None
        return self._from_memo(memo, pre, line, line_no)

    @staticmethod
    def _from_memo(memo: Memo, pre: Prefix, line: str, line_no: int) -> LogEvent:
        kind, text, code, pci, base = memo
        attrs = dict(base)
        attrs["style"] = pre.style
        if pre.level:
            attrs["level"] = pre.level
        return LogEvent(kind=kind, message=text, line=line, line_no=line_no, time=pre.time,
                        uptime_s=pre.uptime_s, code=code, pci=pci, host=pre.host, attrs=attrs)

    def _make(self, rule: LogRule, m: re.Match[str], pre: Prefix, text: str, line: str,
              line_no: int, extra: dict[str, Scalar]) -> LogEvent:
        return self._from_memo(self._fields(rule, m, text, extra), pre, line, line_no)

    @staticmethod
    def _fields(rule: LogRule, m: re.Match[str], text: str, extra: dict[str, Scalar]) -> Memo:
        """What a rule's match says whatever the line's prefix: kind, message, code, PCI
        address, attributes (without the prefix style and level)."""
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
            pci = normalize_pci(pci_in(text))
        if pci is None and isinstance(extra.get("device"), str):
            pci = normalize_pci(str(extra["device"]))
        attrs: dict[str, Scalar] = dict(rule.attrs)
        attrs.update(extra)
        for name, value in groups.items():
            if name not in SPECIAL_GROUPS and value is not None:
                attrs[name] = value
        attrs["rule"] = rule.id
        attrs.pop("style", None)
        attrs.pop("level", None)
        return rule.kind, text.strip(), code, pci, attrs


def _has_digit(text: str) -> bool:
    return any("0" <= c <= "9" for c in text)


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
