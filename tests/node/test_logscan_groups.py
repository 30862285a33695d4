"""The grouped scan (``scan_groups``: the default table, ``--summary``, ``--aggregate``) counts
repeated lines without building their events, by the shape of their prefix. Whatever the log,
its groups, counts, first/last times, line numbers and totals must be exactly those of adding
every finding of ``scan_chunks`` to an Aggregator: real captures, the corpus, and generated
logs mixing every prefix style with the messages whose split or verdict is delicate (Xid 45
after another Xid, AER headers replaced by their details, multi-line joins, messages starting
with ``[`` or a space, CR line ends, daemon tags with digits, New Year in yearless syslog)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minutiae.model.vocab import Severity
from minutiae.node.sources.kernel_log.scan import scan_chunks, scan_groups
from minutiae.rules.log_findings import Aggregator
from minutiae.rules.logs import LogRule, kernel_log_rules, load_log_rules

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"


# A site rule anchored at the message start whose code comes from the message and whose
# message template is the message: any difference in where a line's prefix ends shows.
SITE = """
[[rule]]
id = "site-anchored"
kind = "site_check"
keywords = ["SITECHECK"]
pattern = '^(?:daemon(?P<code>\\d): )?SITECHECK (?P<n>\\d+)'
severity = "warning"
action = "none"
message = "site {message}"
examples = ["SITECHECK 1 tail"]
counter_examples = ["x SITECHECK 1"]
"""


@pytest.fixture(scope="module")
def site_rules(tmp_path_factory: pytest.TempPathFactory) -> tuple[LogRule, ...]:
    p = tmp_path_factory.mktemp("rules") / "site.toml"
    p.write_text(SITE)
    return (*kernel_log_rules(), *load_log_rules(p))


def _both(data: bytes, floor: Severity = Severity.INFO, chunk: int = 0,
          rules: Sequence[LogRule] | None = None) -> tuple[Aggregator, Aggregator]:
    def chunks() -> list[bytes]:
        if not chunk:
            return [data]
        return [data[i:i + chunk] for i in range(0, len(data), chunk)]

    grouped = scan_groups(chunks(), year=2025, floor=floor, rules=rules)
    each = Aggregator()
    for f in scan_chunks(chunks(), year=2025, rules=rules):
        if f.severity >= floor:
            each.add(f)
    return grouped, each


def _assert_same(data: bytes, floor: Severity = Severity.INFO, chunk: int = 0,
                 rules: Sequence[LogRule] | None = None) -> Aggregator:
    grouped, each = _both(data, floor, chunk, rules)
    assert grouped.groups() == each.groups()
    assert (grouped.total, grouped.by_severity, grouped.worst_action, grouped.overflow) == (
        each.total, each.by_severity, each.worst_action, each.overflow)
    return grouped


def test_real_captures(realdata: Path) -> None:
    logs = [p for p in sorted((realdata / "kernel_logs").rglob("*")) if p.is_file()]
    assert len(logs) >= 10
    for p in logs:
        data = p.read_bytes()
        for floor in (Severity.INFO, Severity.WARNING):
            _assert_same(data, floor)
        _assert_same(data * 3)  # every line repeated: the counted-by-shape path


def test_the_corpus_repeated() -> None:
    lines = [json.loads(x)["line"] for f in sorted(CORPUS.glob("*.jsonl"))
             for x in f.read_text().splitlines() if x.strip()]
    assert len(lines) >= 300
    data = ("\n".join(lines) + "\n").encode()
    agg = _assert_same(data * 4, chunk=4096)
    assert agg.total > 0


# -- generated logs ---------------------------------------------------------------------------

PREFIXES = [
    "kern  :info  : 2025-01-17T07:46:{s:02d},{us:06d}+00:00 ",
    "kern  :warn  : 2025-01-17T07:46:{s:02d},{us:06d}+00:00 ",
    "kern  :err   : 2025-01-17T07:46:{s:02d},{us:06d}+05:30 ",
    "2025-01-17T07:46:{s:02d},{us:06d}+00:00 ",
    "2025-01-17T07:46:{s:02d}.{us:06d}+0000 ",           # no host field: the message decides
    "2025-01-17T07:46:{s:02d}+0000 gpu017 kernel: ",
    "2025-01-17T07:46:{s:02d}+0000 gpu017 kernel: [ 1{s:02d}.{us:06d}] ",
    "2025-01-17T07:46:{s:02d}+0000 gpu017 nv-fabricmanager[12]: ",
    "2025-01-17T07:46:{s:02d}+0000 gpu017 daemon{d}[12]: ",  # a tag with a digit
    "Dec 31 23:59:{s:02d} gpu017 kernel: ",
    "Jan  1 00:00:{s:02d} gpu017 kernel: [  1{s:02d}.{us:06d}] ",
    "Jan  1 00:00:{s:02d} gpu017 ",                        # no tag: the message decides
    "Jan  1 00:00:{s:02d} ",
    "[ 1{s:02d}.{us:06d}] ",
    "[ 1{s:02d}.{us:06d}]",                                 # no space after the bracket
    "<4>[ 1{s:02d}.{us:06d}] ",
    "[Sun Feb 23 16:24:{s:02d} 2025] ",
    "[Feb 27 2025 15:10:{s:02d}] [ERROR] [tid 12727] ",
    "[Feb 27 2025 15:10:{s:02d}] [ERROR] ",
    "4,{us},1{s:02d}{us:06d},-;",
    "2025-13-45T99:99:{s:02d},{us:06d}+99:99 ",            # a stamp that is no time
    "",
]
MESSAGES = [
    "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing",
    "NVRM: Xid (PCI:0000:44:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
    "NVRM: Xid (PCI:0000:9b:00): 13, pid={us}, name=python, Graphics SM Warp Exception",
    "NVRM: Xid (PCI:0000:9b:00): 45, pid={us}, name=python, Ch 00000010",
    "NVRM: Xid (PCI:0000:9b:00): 119, pid={us}, name=nvidia-smi, Timeout after 6s of waiting for RPC response from GPU0 GSP!",
    "pcieport 0000:00:01.0: AER: Corrected error received: 0000:44:00.0",
    "nvidia 0000:44:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)",
    "NVRM: GPU at PCI:0000:44:00: GPU-12345678-abcd-ef01-2345-6789abcdef01",
    "NVRM: GPU Board Serial Number: 1234567890123",
    "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.",
    "[Hardware Error]: Machine check events logged",
    " leading space EDAC MC0: 1 CE memory read error",
    "EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x4a1b2)",
    "mlx5_core 0000:{bus}:00.1 enp{s}s0f1np1: Link down",
    "watchdog: BUG: soft lockup - CPU#{s} stuck for 23s! [python:{us}]",
    "systemd[1]: Started Session {s} of User root.",
    "nvidia-nvswitch2: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error",
    "Out of memory: Killed process {us} (python3) total-vm:1234567kB, anon-rss:987654kB",
    "gpu017 kernel: NVRM: Xid (PCI:0000:9b:00): 48, pid='<unknown>', name=<unknown>, DBE",
    "ERROR detected invalid context\r",
    "SITECHECK {s} tail",
    "[ 12.000001] SITECHECK {s} tail",
    "gpu017 kernel: SITECHECK {s} tail",
    "gpu017 kernel: [ 12.000001] SITECHECK {s} tail",
]

_line = st.tuples(st.sampled_from(PREFIXES), st.sampled_from(MESSAGES), st.integers(0, 59),
                  st.integers(0, 999_999), st.sampled_from(["44", "9b", "1b"]), st.integers(1, 3))


def _render(spec: list[tuple[tuple[str, str, int, int, str, int], int]]) -> bytes:
    out: list[str] = []
    for (prefix, message, s, us, bus, d), times in spec:
        for k in range(times):  # repeats: the second one on is counted by shape
            fields = {"s": (s + k) % 60, "us": (us + 7919 * k) % 1_000_000, "bus": bus, "d": d}
            out.append(prefix.format(**fields) + message.format(**fields))
    return ("\n".join(out) + "\n").encode()


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(_line, st.integers(1, 6)), min_size=1, max_size=60),
       st.sampled_from([0, 97, 4096]), st.sampled_from(list(Severity)))
def test_generated_logs(site_rules: tuple[LogRule, ...],
                        spec: list[tuple[tuple[str, str, int, int, str, int], int]], chunk: int,
                        floor: Severity) -> None:
    _assert_same(_render(spec), floor, chunk, site_rules)


# Each guard of the shape path, on its own: the line after a remembered prefix shape would
# split differently if the prefix regexes' view past the shape were ignored.
@pytest.mark.parametrize("lines", [
    # an uptime after "host kernel: " is part of the prefix (syslog, journal)
    ["2025-01-17T07:46:01+0000 h kernel: SITECHECK 1 x"] * 2
    + ["2025-01-17T07:46:02+0000 h kernel: [ 12.3] SITECHECK 2 x"] * 2,
    # an ISO stamp with '.' and no host field: a "host tag:" message makes it journal style
    ["2025-01-17T07:46:01.5+0000 SITECHECK 1 x"] * 2
    + ["2025-01-17T07:46:02.5+0000 h kernel: SITECHECK 2 x"] * 2,
    # syslog without a tag likewise
    ["Jan 17 07:46:01 SITECHECK 1 x"] * 2 + ["Jan 17 07:46:02 h kernel: SITECHECK 2 x"] * 2,
    # a daemon's tag with a digit goes into the message
    ["2025-01-17T07:46:01+0000 h daemon2[1]: SITECHECK 1 x"] * 2
    + ["2025-01-17T07:46:02+0000 h daemon3[1]: SITECHECK 1 x"] * 2,
    # a space after "[uptime]" that the prefix's optional space did not take
    ["[ 11.000001] SITECHECK 1 x"] * 2 + ["[ 12.000001]  SITECHECK 2 x"] * 2,
], ids=["uptime-after-tag", "iso-dot-no-host", "syslog-no-tag", "tag-digit", "second-space"])
def test_each_guard(site_rules: tuple[LogRule, ...], lines: list[str]) -> None:
    each = _both(("\n".join(lines) + "\n").encode(), rules=site_rules)[1]
    assert len(each.groups()) >= 1
    _assert_same(("\n".join(lines) + "\n").encode(), rules=site_rules)


def test_yearless_times_roll_over_new_year_on_the_shape_path() -> None:
    msg = MESSAGES[0]
    lines = [f"Dec 31 23:59:58 h kernel: {msg}", f"Dec 31 23:59:59 h kernel: {msg}",
             f"Jan  1 00:00:01 h kernel: {msg}", f"Jan  1 00:00:02 h kernel: {msg}",
             f"Jan  1 00:00:03 h kernel: {msg}"]
    agg = _assert_same(("\n".join(lines) + "\n").encode())
    (g,) = agg.groups()
    assert g.count == 5 and g.last == datetime(2026, 1, 1, 0, 0, 3, tzinfo=UTC)


def test_a_fleet_log_is_counted_without_building_findings(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The point of the grouped scan: 5,000 repeats of a benign line and 50 of an Xid build
    no LogEvent past the first few."""
    from minutiae.node.sources.kernel_log import parse

    built = {"n": 0}
    real = parse.KernelLogParser._from_memo

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        built["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(parse.KernelLogParser, "_from_memo", staticmethod(counting))
    lines = []
    for i in range(5000):
        lines.append(f"kern  :info  : 2025-01-17T07:{i // 600 % 60:02d}:{i // 10 % 60:02d},"
                     f"{i:06d}+00:00 {MESSAGES[0]}")
        if i % 100 == 0:
            lines.append(f"kern  :err   : 2025-01-17T07:{i // 600 % 60:02d}:{i // 10 % 60:02d},"
                         f"{i:06d}+00:00 {MESSAGES[2].format(us=i)}")
    agg = scan_groups([("\n".join(lines) + "\n").encode()], year=2025)
    assert agg.total == 5050
    assert built["n"] <= 3, built


def test_a_repeated_message_group_carries_count_first_last_and_example() -> None:
    """A message repeated out of time order (a merged log), between other lines, across
    blocks: one group whose count is its lines, first/last its earliest/latest time (not the
    first/last line's), first/last line numbers its first/last line, and its example the
    first line as written, whichever path counted the repeats."""
    msg = MESSAGES[0]
    stamps = ["07:46:05", "07:46:01", "07:46:09", "07:46:03", "07:46:07", "07:46:02"]
    lines: list[str] = []
    for i, s in enumerate(stamps):
        lines.append(f"kern  :info  : 2025-01-17T{s},{i:06d}+00:00 {msg}")
        lines.append(f"kern  :info  : 2025-01-17T{s},{i:06d}+00:00 systemd[1]: Started x.")
    data = ("\n".join(lines) + "\n").encode()
    for chunk in (0, 150):  # one block, and repeats split across many
        agg = _assert_same(data, chunk=chunk)
        (g,) = [g for g in agg.groups() if g.kind == "peermem_error"]
        assert g.count == len(stamps) == agg.total
        assert g.first == datetime(2025, 1, 17, 7, 46, 1, 1, tzinfo=UTC)
        assert g.last == datetime(2025, 1, 17, 7, 46, 9, 2, tzinfo=UTC)
        assert (g.first_line_no, g.last_line_no) == (1, 2 * len(stamps) - 1)
        assert g.example == lines[0]
        assert g.rule == "peermem-invalid-context"


def test_a_repeated_xid_message_still_moves_its_gpus_last_xid() -> None:
    """The grouped scan remembers an Xid message's verdict, not the time of the GPU's last Xid:
    Xid 45 ten minutes after an Xid 13 line but one minute after its repeat follows it."""
    xid13 = "NVRM: Xid (PCI:0000:9b:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp"
    xid45 = "NVRM: Xid (PCI:0000:9b:00): 45, pid='<unknown>', name=<unknown>, Ch 00000010"
    lines = [f"kern  :warn  : 2025-01-17T07:{m:02d}:00,000000+00:00 {msg}"
             for m, msg in ((0, xid13), (10, xid13), (11, xid45), (30, xid45))]
    agg = _assert_same(("\n".join(lines) + "\n").encode())
    by_code = {g.code: g for g in agg.groups()}
    assert by_code[13].count == 2
    assert by_code[45].count == 2 and by_code[45].message.endswith(": follows Xid 13")
    assert by_code[45].last_line_no == 4  # the second Xid 45 (solo) is in the group too


def test_an_xid_79_line_is_counted_like_any_xid(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """"GPU has fallen off the bus" is also a keyword of the old three-line rule (which joins
    the lines before it), but the Xid rule comes first and matches the line alone: its repeats
    are counted by shape like any Xid's, not built one event each, and count the same."""
    from minutiae.node.sources.kernel_log import parse

    built = {"n": 0}
    real = parse.KernelLogParser._from_memo

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        built["n"] += 1
        return real(*args, **kwargs)

    xid79 = "NVRM: Xid (PCI:0000:{bus}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    lines = [f"kern  :err   : 2025-01-17T07:{i // 60 % 60:02d}:{i % 60:02d},{i:06d}+00:00 "
             + xid79.format(bus=("1b", "9b")[i % 2]) for i in range(400)]
    data = ("\n".join(lines) + "\n").encode()
    agg = _assert_same(data, chunk=4096)
    assert {(g.code, g.pci, g.count) for g in agg.groups()} >= {
        (79, "0000:1b:00.0", 200), (79, "0000:9b:00.0", 200)}
    monkeypatch.setattr(parse.KernelLogParser, "_from_memo", staticmethod(counting))
    assert scan_groups([data], year=2025).total == 400
    assert built["n"] <= 4, built


def test_the_grouped_scan_leaves_no_cycles_and_the_collector_as_it_was() -> None:
    """scan_groups pauses the cyclic garbage collector while it runs, which is safe because it
    makes no reference cycles: nothing is left for a collection to find after it (the parser
    and its repeat counter, which refer to each other, are parted), and the collector is left
    enabled or disabled as it was."""
    import gc

    lines = [json.loads(x)["line"] for f in sorted(CORPUS.glob("*.jsonl"))
             for x in f.read_text().splitlines() if x.strip()]
    data = ("\n".join(lines) + "\n").encode() * 3
    gc.collect()
    gc.disable()
    try:
        assert scan_groups([data], year=2025).total > 0
        assert not gc.isenabled()
        # only minutiae's own objects are judged: a thread an earlier test left running (a server
        # of the full suite) may make garbage of its own meanwhile (a clean-clone run: 30 objects)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        ours = [type(o).__qualname__ for o in gc.garbage if type(o).__module__.startswith("minutiae")]
        assert ours == []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    scan_groups([data], year=2025)
    assert gc.isenabled()


_PCI_TEXT = st.text(alphabet="0123456789abcdefABCDEFgx:.PCI +-_()", max_size=30)
#: addresses and near misses (too few or many digits, letters past f, a function past 7)
_PCI_LIKE = st.from_regex(r"(?:PCI:|pci:)?[0-9A-Ga-g]{3,9}:[0-9A-Ga-g]{1,3}:[0-9A-Ga-g]{1,3}"
                          r"(?:\.[0-9])?", fullmatch=True)


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.one_of(_PCI_TEXT, _PCI_LIKE), max_size=6))
def test_a_pci_address_is_found_wherever_the_full_search_finds_one(parts: list[str]) -> None:
    """The scan looks for an address in a new message only where the text has the ``:hh:hh``
    each one has: whatever the text, what it finds is what PCI_ANY finds."""
    from minutiae.node.sources.kernel_log.pci import PCI_ANY, pci_in

    text = "".join(parts)
    m = PCI_ANY.search(text)
    assert pci_in(text) == (m.group(1) if m else None)
