"""Kernel-log parser: every real capture in ../shared/realdata (exact codes, PCI addresses,
kinds, counts, timestamps), every prefix style, multi-line messages, chunking, and properties
(garbage never raises; a fault line in noise is found whatever its prefix)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minutiae.node.sources.kernel_log.parse import (
    BROADCAST,
    KernelLogParser,
    normalize_pci,
    parse_bytes,
    parse_chunks,
    parse_lines,
    parse_text,
    prefilter_patterns,
)
from minutiae.node.sources.kernel_log.parse_prefix import split_prefix

GPUD = "kernel_logs/gpud"


def read(realdata, rel):
    path = realdata / rel
    if not path.exists():
        pytest.skip(f"missing {path}")
    return path.read_text(encoding="utf-8", errors="replace")


def kinds(events):
    return Counter((e.kind, e.code, e.pci) for e in events)


# --- real captures -------------------------------------------------------------------------

def test_dmesg_decode_iso_xid13_burst(realdata):
    evs = parse_text(read(realdata, f"{GPUD}/pkg_dmesg__dmesg.decode.iso.log.0"))
    assert kinds(evs) == {("xid", 13, "0000:38:00.0"): 629, ("xid", 43, "0000:38:00.0"): 7}
    first, last = evs[0], evs[-1]
    assert first.line_no == 1 and last.line_no == 636
    assert first.time == datetime(2025, 1, 21, 2, 21, 33, 498559, tzinfo=UTC)
    assert last.time == datetime(2025, 1, 21, 4, 41, 44, 287197, tzinfo=UTC)
    assert first.attrs["level"] == "warn" and first.attrs["style"] == "iso"
    assert "Graphics SM Warp Exception on (GPC 8, TPC 5, SM 0)" in first.message


def test_dmesg_ctime_xid119_gsp(realdata):
    evs = parse_text(read(realdata, f"{GPUD}/components_accelerator_nvidia_xid__dmesg-with-xid-119.log"))
    assert [(e.line_no, e.kind, e.code) for e in evs] == [
        (3, "xid", 119), (38, "xid", 119), (40, "xid", 119), (41, "gsp_timeout", None),
        (42, "xid", 119), (43, "xid", 119),
    ]
    assert {e.pci for e in evs} == {"0000:9b:00.0"}
    assert evs[0].time == datetime(2025, 2, 23, 16, 24, 18, tzinfo=UTC)
    assert evs[-1].time == datetime(2025, 2, 23, 16, 30, 13, tzinfo=UTC)
    assert evs[0].attrs["style"] == "ctime"


def test_query_log_tail_dbe_remap_contained(realdata):
    evs = parse_text(read(realdata, f"{GPUD}/components_query_log_tail__dmesg.0.log"))
    xids = [(e.line_no, e.code) for e in evs if e.kind == "xid"]
    assert xids == [(11, 48), (12, 63)] + [(n, 94) for n in range(13, 22)]
    assert {e.pci for e in evs if e.kind == "xid"} == {"0000:19:00.0"}
    assert sum(e.kind == "peermem_error" for e in evs) == 30
    dbe = evs[[e.code for e in evs].index(48)]
    assert dbe.time == datetime(2024, 11, 15, 12, 2, 3, 470068, tzinfo=UTC)


def test_memory_capture_oom_and_xids(realdata):
    evs = parse_text(read(realdata, f"{GPUD}/components_memory__dmesg.decode.iso.log"))
    c = kinds(evs)
    assert c[("xid", 13, "0000:38:00.0")] == 16 and c[("xid", 43, "0000:38:00.0")] == 1
    ooms = [e for e in evs if e.kind == "oom_kill"]
    # three kill lines; the oom-kill:constraint= lines are context of the same kills
    assert [e.attrs.get("pid") for e in ooms] == ["123", "456", "123"]
    assert ooms[1].attrs.get("process") == "python"


def test_mlx5_boot_log_nic_and_link_events(realdata):
    evs = parse_text(read(realdata, f"{GPUD}/pkg_dmesg__dmesg.decode.iso.log.1"))
    power = [e for e in evs if e.kind == "nic_error"]
    assert len(power) == 12 and {e.attrs["watts"] for e in power} == {"27"}
    assert power[0].pci == "0000:1a:00.0" and power[0].line_no == 1543
    links = [(e.line_no, e.pci, e.attrs["state"]) for e in evs if e.attrs.get("rule", "").startswith("ib-link")]
    assert links == [
        (2300, "0000:9d:00.1", "down"), (2301, "0000:9d:00.0", "down"),
        (2302, "0000:1b:00.1", "down"), (2303, "0000:1b:00.0", "up"),
    ]
    unplugged = [e.pci for e in evs if e.attrs.get("rule") == "ib-cable-unplugged"]
    assert unplugged == ["0000:1b:00.1", "0000:9d:00.1"]
    assert sum(e.attrs.get("rule") == "ib-cable-plugged" for e in evs) == 10
    # benign lines that naive patterns catch: "SATA link down", "_OSC ... AER", BAR failures
    assert not [e for e in evs if e.kind in ("pcie_aer", "fs_error", "edac_ce", "mce")]


def test_pstore_erst_dump_uptime_and_panic(realdata):
    evs = parse_text(read(realdata, f"{GPUD}/pkg_pstore__7530486857247_dmesg.txt"))
    assert [(e.line_no, e.kind, e.pci) for e in evs] == [
        (18, "ib_link", "0000:41:00.1"), (286, "ib_link", "0000:41:00.0"), (383, "kernel_panic", None),
    ]
    panic = evs[-1]
    assert panic.uptime_s == pytest.approx(3098.275469)
    assert panic.attrs["level"] == "emerg" and panic.attrs["style"] == "syslog_pri"
    assert panic.attrs["reason"] == "Test panic triggered by crash_test module"
    # the EDAC/MCE lines of the same boot are driver banners, not errors
    assert not [e for e in evs if e.kind in ("edac_ce", "edac_ue", "mce", "fs_error")]
    (oops,) = parse_text(read(realdata, f"{GPUD}/pkg_pstore__dmesg-erst.txt"))
    assert (oops.kind, oops.line_no, oops.attrs["level"]) == ("kernel_bug", 2, "alert")
    assert oops.attrs["what"] == "kernel NULL pointer dereference"


def test_kmsg_raw_records(realdata):
    assert parse_text(read(realdata, f"{GPUD}/pkg_kmsg__kmsg.1.log")) == []
    evs = parse_text(read(realdata, f"{GPUD}/pkg_kmsg__kmsg.2.peermem.log"))
    assert len(evs) == 7 and {e.kind for e in evs} == {"peermem_error"}
    assert evs[0].uptime_s == pytest.approx(227.996636)
    assert evs[0].attrs["style"] == "kmsg" and evs[0].attrs["level"] == "info"


def test_journalctl_short_iso_host(realdata):
    evs = parse_text(read(realdata, f"{GPUD}/pkg_dmesg__journalctl-time-format-short-iso-2.log"))
    assert len(evs) == 14 and {e.kind for e in evs} == {"peermem_error"}
    assert evs[0].host == "exp03-ft-896z-1-lan.exp03-ft-896z-job-svc"
    assert evs[0].time == datetime(2025, 1, 17, 17, 39, 30, tzinfo=UTC)
    assert evs[0].line_no == 34


def test_segfault_and_nccl_lines_are_not_kernel_faults(realdata):
    assert parse_text(read(realdata, f"{GPUD}/components_accelerator_nvidia_nccl__dmesg.decode.iso.log")) == []
    assert parse_text(read(realdata, "kernel_logs/ml-engineering/nccl_ib_completion_error12_vendor129.log")) == []


def test_xid63_line_from_ml_engineering(realdata):
    (ev,) = parse_text(read(realdata, "nvidia_smi/ml-engineering/xid63_row_remapper_line.txt"))
    assert (ev.kind, ev.code, ev.pci, ev.attrs["style"]) == ("xid", 63, "0000:10:1c.0", "none")


def test_fabricmanager_log(realdata):
    evs = parse_text(read(realdata, "nvidia_smi/gpud/fabricmanager.log"))
    (ev,) = evs
    assert (ev.kind, ev.code, ev.pci) == ("fabric_manager", 12028, "0000:86:00.0")
    assert ev.attrs["fm_severity"] == "non-fatal" and ev.attrs["port"] == "61"
    assert ev.time == datetime(2025, 2, 27, 15, 10, 2, tzinfo=UTC)


# rule ids per real capture, each count checked by grep on the file (see the assertions above)
PER_FILE = {
    "components_accelerator_nvidia_nccl__dmesg.decode.iso.log": {},
    "components_accelerator_nvidia_xid__dmesg-with-xid-119.log": {"gsp-timeout": 1, "xid": 5},
    "components_memory__dmesg.decode.iso.log": {"oom-kill": 3, "xid": 17},
    "components_query_log_tail__dmesg.0.log": {"peermem-invalid-context": 30, "xid": 11},
    "pkg_dmesg__dmesg.decode.iso.log.0": {"xid": 636},
    "pkg_dmesg__dmesg.decode.iso.log.1": {"ib-cable-plugged": 10, "ib-cable-unplugged": 2,
                                          "ib-link-down": 3, "ib-link-up": 1, "nic-power": 12},
    "pkg_dmesg__dmesg.peermem.log.0": {"peermem-invalid-context": 7},
    "pkg_dmesg__journalctl-time-format-short-iso-2.log": {"peermem-invalid-context": 14},
    "pkg_kmsg__kmsg.1.log": {},
    "pkg_kmsg__kmsg.2.peermem.log": {"peermem-invalid-context": 7},
    "pkg_pstore__7530486857247_dmesg.txt": {"ib-cable-unplugged": 1, "ib-link-up": 1,
                                            "kernel-panic": 1},
    "pkg_pstore__dmesg-erst.txt": {"kernel-oops": 1},
}


@pytest.mark.parametrize("name", sorted(PER_FILE))
def test_every_gpud_capture_rule_counts(realdata, name):
    evs = parse_text(read(realdata, f"{GPUD}/{name}"))
    assert dict(Counter(str(e.attrs["rule"]) for e in evs)) == PER_FILE[name]
    # the same through the streaming and line APIs
    data = (realdata / GPUD / name).read_bytes()
    assert [e.line_no for e in parse_chunks([data[:777], data[777:]])] == [e.line_no for e in evs]


def test_no_capture_is_forgotten(realdata):
    on_disk = {p.name for p in (realdata / GPUD).iterdir()}
    assert on_disk == set(PER_FILE)


# --- prefix styles -------------------------------------------------------------------------

FAULT = "NVRM: Xid (PCI:0000:44:00): 79, pid=1234, name=python, GPU has fallen off the bus."

STYLES = [
    # (line, style, time, uptime, host)
    (f"[ 1234.567890] {FAULT}", "uptime", None, 1234.56789, None),
    (f"<4>[ 1234.567890] {FAULT}", "syslog_pri", None, 1234.56789, None),
    (f"[Sun Feb 23 16:24:18 2025] {FAULT}", "ctime", datetime(2025, 2, 23, 16, 24, 18, tzinfo=UTC), None, None),
    (f"2025-01-21T04:41:44,283302+00:00 {FAULT}", "iso", datetime(2025, 1, 21, 4, 41, 44, 283302, tzinfo=UTC), None, None),
    (f"kern  :err   : 2025-01-21T04:41:44,283302+01:00 {FAULT}", "iso",
     datetime(2025, 1, 21, 4, 41, 44, 283302, tzinfo=timezone(timedelta(hours=1))), None, None),
    (f"kern  :err   : [ 1234.567890] {FAULT}", "syslog_pri", None, 1234.56789, None),
    (f"2025-01-17T17:10:43+0000 gpu017 kernel: {FAULT}", "journal_iso",
     datetime(2025, 1, 17, 17, 10, 43, tzinfo=UTC), None, "gpu017"),
    (f"2025-01-17T17:10:43.123456+00:00 gpu017 kernel: [  99.5] {FAULT}", "journal_iso",
     datetime(2025, 1, 17, 17, 10, 43, 123456, tzinfo=UTC), 99.5, "gpu017"),
    (f"Jan 17 17:10:43 gpu017 kernel: [  99.500000] {FAULT}", "syslog",
     datetime(2024, 1, 17, 17, 10, 43, tzinfo=UTC), 99.5, "gpu017"),
    (f"Jan  7 17:10:43.250000 gpu017 kernel: {FAULT}", "syslog",
     datetime(2024, 1, 7, 17, 10, 43, 250000, tzinfo=UTC), None, "gpu017"),
    (f"6,1234,5678901,-;{FAULT}", "kmsg", None, 5.678901, None),
    (FAULT, "none", None, None, None),
]


@pytest.mark.parametrize("line, style, time, uptime, host", STYLES)
def test_each_prefix_style(line, style, time, uptime, host):
    (ev,) = parse_text(line + "\n", year=2024)
    assert (ev.kind, ev.code, ev.pci) == ("xid", 79, "0000:44:00.0")
    assert ev.attrs["style"] == style
    assert ev.time == time
    assert ev.uptime_s == (pytest.approx(uptime) if uptime is not None else None)
    assert ev.host == host
    assert ev.message.startswith("NVRM: Xid") and ev.line == line


def test_syslog_without_year_leaves_time_unknown():
    (ev,) = parse_text(f"Jan 17 17:10:43 gpu017 kernel: {FAULT}")
    assert ev.time is None and ev.host == "gpu017"


def test_non_english_month_is_not_a_crash():
    (ev,) = parse_text(f"Mär 17 17:10:43 gpu017 kernel: {FAULT}", year=2024)
    assert ev.code == 79 and ev.time is None  # no prefix recognised: message is the whole line


def test_broadcast_two_lines_one_event():
    text = ("Message from syslogd@gpu017 at Mar  2 10:11:12 ...\n"
            " kernel:[ 4012.772812] NMI watchdog: BUG: soft lockup - CPU#3 stuck for 22s! [kworker/3:1:211]\n"
            "[ 4013.0] something else\n")
    (ev,) = parse_text(text, year=2025)
    assert ev.kind == "soft_lockup" and ev.attrs["cpu"] == "3" and ev.attrs["seconds"] == "22"
    assert ev.host == "gpu017" and ev.time == datetime(2025, 3, 2, 10, 11, 12, tzinfo=UTC)
    assert ev.line_no == 1 and ev.line.count("\n") == 1


def test_kmsg_continuation_lines_give_device():
    text = ("3,812,73112100220,-;mlx5_core: poll_health:835:(pid 0): device's health compromised - reached miss count\n"
            " SUBSYSTEM=pci\n"
            " DEVICE=+pci:0000:1a:00.0\n"
            "6,813,73112100300,-;next record\n"
            "4,814,73112100400,-;mlx5_core 0000:1b:00.0: mlx5_pcie_event:299:(pid 9): Detected insufficient power on the PCIe slot (27W).\n")
    evs = parse_text(text)
    assert [(e.kind, e.pci, e.line_no) for e in evs] == [
        ("nic_error", "0000:1a:00.0", 1), ("nic_error", "0000:1b:00.0", 5)]
    assert evs[0].attrs["subsystem"] == "pci" and evs[0].attrs["level"] == "err"


def test_old_three_line_fallen_off_the_bus_is_one_event():
    text = ("[  610.9] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.161.08\n"
            "[  611.000001] NVRM: The NVIDIA GPU 0000:65:00.0 (PCI ID: 10de:20b5)\n"
            "[  611.000002] NVRM: installed in this system has\n"
            "[  611.000003] NVRM: fallen off the bus and is not responding to commands.\n")
    (ev,) = parse_text(text)
    assert (ev.kind, ev.pci, ev.line_no) == ("gpu_off_bus", "0000:65:00.0", 2)
    assert ev.line.count("\n") == 2 and ev.message.startswith("NVRM: The NVIDIA GPU")
    # split across chunk boundaries it is still one event with the same line number
    chunks = [text[:90].encode(), text[90:150].encode(), text[150:].encode()]
    (ev2,) = parse_chunks(chunks)
    assert (ev2.kind, ev2.pci, ev2.line_no) == ("gpu_off_bus", "0000:65:00.0", 2)


def test_multi_line_join_across_blocks(monkeypatch):
    from minutiae.node.sources.kernel_log import parse as kl
    monkeypatch.setattr(kl, "BLOCK_LINES", 2)
    lines = ["noise", "NVRM: The NVIDIA GPU 0000:65:00.0 (PCI ID: 10de:20b5)",
             "NVRM: installed in this system has",
             "NVRM: fallen off the bus and is not responding to commands.", "noise"]
    (ev,) = KernelLogParser().parse_lines(lines)
    assert (ev.pci, ev.line_no) == ("0000:65:00.0", 2)


def test_line_numbers_survive_any_chunking():
    lines = [f"[{i}.0] benign line {i}" for i in range(5000)]
    for n in (17, 1234, 4999):
        lines[n] = f"[{n}.0] NVRM: Xid (PCI:0000:44:00): 48, pid=1, DBE"
    text = "\n".join(lines) + "\n"
    data = text.encode()
    want = [18, 1235, 5000]
    assert [e.line_no for e in parse_text(text)] == want
    assert [e.line_no for e in parse_lines(iter(lines))] == want
    for size in (1, 7, 4096, len(data)):
        chunks = [data[i:i + size] for i in range(0, len(data), size)]
        assert [e.line_no for e in parse_chunks(chunks)] == want


def test_no_trailing_newline_and_crlf():
    evs = parse_text("a\r\nb\r\n[ 1.0] NVRM: Xid (PCI:0000:44:00): 48, DBE\r")
    assert [(e.line_no, e.code) for e in evs] == [(3, 48)]
    assert not evs[0].line.endswith("\r")


@pytest.mark.parametrize("raw, want", [
    ("PCI:0000:44:00", "0000:44:00.0"), ("0000:44:00.0", "0000:44:00.0"),
    ("00000000:86:00.0", "0000:86:00.0"), ("44:00.1", "0000:44:00.1"),
    ("0000:9B:00", "0000:9b:00.0"), ("+pci:0000:1a:00.0", "0000:1a:00.0"),
    ("garbage", None), ("", None), (None, None), ("123456789:00:00.0", None),
])
def test_normalize_pci(raw, want):
    assert normalize_pci(raw) == want


def test_prefilter_is_the_union_of_keywords():
    pats = prefilter_patterns()
    assert "Xid" in pats and "SXid" in pats and BROADCAST in pats
    assert len(pats) == len(set(pats))


def test_split_prefix_never_raises_on_bad_dates():
    for line in ["[Sun Feb 31 16:24:18 2025] x", "2025-13-45T99:99:99,1+99:99 x",
                 "Feb 30 25:61:61 host kernel: x", "[Feb 30 2025 25:00:00] [ERROR] x"]:
        p = split_prefix(line, year=2025)
        assert p.time is None


# --- bad input and properties ----------------------------------------------------------------

def test_garbage_nul_and_huge_lines():
    big = b"A" * (1 << 20)
    data = (b"\x00\xff\xfe garbage \x80\x81\n" + big + b"\n"
            + "Xid (PCI:0000:44:00): 79, caf\u00e9 \udcff".encode("utf-8", "surrogatepass") + b"\n"
            + b"\xc3\x28 NVRM: Xid (PCI:0000:44:00): 79, latin1 \xe9t\xe9\n" + big)
    evs = parse_bytes(data)
    assert [(e.line_no, e.code) for e in evs] == [(3, 79), (4, 79)]
    assert "\ufffd" in evs[1].line


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=4096))
def test_property_garbage_bytes_never_raise(data):
    evs = parse_bytes(data)
    assert all(e.line_no >= 1 for e in evs)


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=2000))
def test_property_garbage_text_never_raises(text):
    parse_text(text)
    list(parse_lines(text.splitlines()))


PREFIXES = [s[0][: -len(FAULT)] for s in STYLES]
NOISE = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r"),
                max_size=80).filter(lambda s: "Xid" not in s)


@settings(max_examples=100, deadline=None)
@given(st.lists(NOISE, max_size=30), st.lists(NOISE, max_size=30), st.sampled_from(PREFIXES),
       st.integers(min_value=0, max_value=255))
def test_property_fault_in_noise_is_found_whatever_the_prefix(before, after, prefix, code):
    line = f"{prefix}NVRM: Xid (PCI:0000:44:00): {code}, pid=1, something"
    lines = [f"[ 1.0] {n}" if n.startswith(" ") else n for n in before] + [line] + after
    evs = [e for e in parse_lines(lines, year=2024) if e.kind == "xid"]
    assert [(e.code, e.pci, e.line_no) for e in evs] == [(code, "0000:44:00.0", len(before) + 1)]


def test_yearless_syslog_crosses_new_year():
    text = ("Dec 31 23:59:58 gpu017 kernel: NVRM: Xid (PCI:0000:44:00): 13, pid=1, x\n"
            "Jan  1 00:00:03 gpu017 kernel: NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.\n")
    a, b = parse_text(text, year=2024)
    assert a.time == datetime(2024, 12, 31, 23, 59, 58, tzinfo=UTC)
    assert b.time == datetime(2025, 1, 1, 0, 0, 3, tzinfo=UTC)


def test_pathological_megabyte_line_is_linear():
    import time

    line = ("nvlink error XFS ( EDAC Xid " * 40_000)[: 1 << 20]
    t = time.process_time()
    evs = parse_text(line + "\n" + "[ 1.0] NVRM: Xid (PCI:0000:44:00): 48, DBE\n")
    assert time.process_time() - t < 5.0
    assert [(e.line_no, e.code) for e in evs if e.kind == "xid"] == [(2, 48)]
