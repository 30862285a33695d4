"""``minutiae logscan``: table and JSON output, Nagios exit codes, stdin, bad input; the kmsg
source (files, stdin, unreadable paths)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minutiae.cli.main import main
from minutiae.errors import SourceUnavailable
from minutiae.node.sources.kernel_log.read_stream import iter_kernel_log

ROOT = Path(__file__).resolve().parents[2]
XID119 = "kernel_logs/gpud/components_accelerator_nvidia_xid__dmesg-with-xid-119.log"


def run(argv, capsys):
    rc = main(["logscan", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_lines_from_real_capture(realdata, capsys):
    rc, out, _ = run([str(realdata / XID119), "--json"], capsys)
    rows = [json.loads(line) for line in out.splitlines()]
    assert rc == 2
    assert [(r["kind"], r["code"], r["pci"], r["line_no"]) for r in rows] == [
        ("xid", 119, "0000:9b:00.0", 3), ("xid", 119, "0000:9b:00.0", 38),
        ("xid", 119, "0000:9b:00.0", 40), ("gsp_timeout", None, "0000:9b:00.0", 41),
        ("xid", 119, "0000:9b:00.0", 42), ("xid", 119, "0000:9b:00.0", 43)]
    for r in rows:
        assert {"kind", "code", "pci", "severity", "action", "message", "line"} <= set(r)
        assert r["severity"] == "error" and r["action"] == "reset_gpu"
    assert rows[0]["message"] == "Xid 119 (GSP_RPC_TIMEOUT) on GPU 0000:9b:00.0"
    assert rows[0]["time"] == "2025-02-23T16:24:18+00:00"
    assert rows[0]["line"].startswith("[Sun Feb 23 16:24:18 2025] NVRM: Xid (PCI:0000:9b:00): 119")


def test_table_output(realdata, capsys):
    rc, out, _ = run([str(realdata / XID119)], capsys)
    assert rc == 2
    assert "GSP_RPC_TIMEOUT" in out and "0000:9b:00.0" in out and "reset_gpu" in out
    assert "6 findings (6 error); the node needs: reset_gpu" in out


@pytest.mark.parametrize("text, rc", [
    ("[ 1.0] nothing to see\n", 0),
    ("[ 1.0] mlx5_core 0000:41:00.0 enp65s0f0np0: Link up\n", 0),           # info only
    ("[ 1.0] INFO: task python:1 blocked for more than 122 seconds.\n", 1),  # warning
    ("[ 1.0] NVRM: Xid (PCI:0000:44:00): 13, pid=1, Graphics Exception\n", 1),
    ("[ 1.0] NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.\n", 2),
    ("", 0),
])
def test_nagios_exit_code_by_worst_finding(tmp_path, capsys, text, rc):
    f = tmp_path / "kern.log"
    f.write_text(text)
    assert run([str(f)], capsys)[0] == rc


def test_several_files_and_no_faults_message(tmp_path, capsys):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_text("benign\n")
    b.write_text("x\n[ 1.0] NVRM: Xid (PCI:0000:44:00): 48, DBE\n")
    rc, out, _ = run([str(a), str(b), "--json"], capsys)
    (row,) = [json.loads(x) for x in out.splitlines()]
    assert rc == 2 and row["attrs"]["file"] == str(b) and row["line_no"] == 2
    rc, out, _ = run([str(a)], capsys)
    assert rc == 0 and "no kernel-log faults" in out


def test_unreadable_file_names_the_path(tmp_path, capsys):
    rc, _, err = run([str(tmp_path / "missing.log")], capsys)
    assert rc == 3 and "missing.log" in err and "No such file" in err and "Traceback" not in err
    rc, _, err = run([str(tmp_path)], capsys)
    assert rc == 3 and str(tmp_path) in err


def test_bad_rules_file_is_exit_3(tmp_path, capsys):
    bad = tmp_path / "rules.toml"
    bad.write_text('[[rule]]\nid = "x"\nkind = "k"\nkeywords = ["a"]\npattern = "("\n')
    log = tmp_path / "k.log"
    log.write_text("a\n")
    rc, _, err = run([str(log), "--rules", str(bad)], capsys)
    assert rc == 3 and "rule 'x'" in err


def test_site_rules_file_extends_the_catalog(tmp_path, capsys):
    rules = tmp_path / "site.toml"
    rules.write_text(
        'require_all_kinds = false\n[[rule]]\nid = "site-ipmi"\nkind = "bmc_sel"\n'
        'keywords = ["ipmi_si"]\npattern = "ipmi_si .* Could not"\nseverity = "warning"\n'
        'action = "none"\nmessage = "BMC interface problem"\n'
        'examples = ["[ 3.0] ipmi_si dmi-ipmi-si.0: Could not set up I/O space"]\n')
    log = tmp_path / "k.log"
    log.write_text("[ 3.0] ipmi_si dmi-ipmi-si.0: Could not set up I/O space\n")
    rc, out, _ = run([str(log), "--rules", str(rules), "--json"], capsys)
    assert rc == 1 and json.loads(out)["kind"] == "bmc_sel"


def test_stdin_through_a_real_process(realdata):
    data = (realdata / "kernel_logs/gpud/pkg_pstore__7530486857247_dmesg.txt").read_bytes()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-m", "minutiae.cli.main", "logscan", "-", "--json"],
                          input=data, capture_output=True, timeout=60, env=env, check=False)
    rows = [json.loads(x) for x in proc.stdout.decode().splitlines()]
    assert proc.returncode == 2, proc.stderr
    assert [r["kind"] for r in rows] == ["ib_link", "ib_link", "kernel_panic"]
    assert rows[-1]["attrs"]["uptime_s"] == pytest.approx(3098.275469)


def test_binary_garbage_is_not_a_traceback(tmp_path, capsys):
    f = tmp_path / "garbage.bin"
    f.write_bytes(os.urandom(200_000) + b"\n[ 1.0] NVRM: Xid (PCI:0000:44:00): 31, pid=1, MMU Fault\n"
                  + b"\x00" * 1000)
    rc, out, err = run([str(f), "--json"], capsys)
    assert rc == 1 and "Traceback" not in err
    assert [json.loads(x)["code"] for x in out.splitlines()][-1] == 31


def test_kmsg_source_file_stdin_and_errors(tmp_path):
    f = tmp_path / "k.log"
    f.write_bytes(b"a\n" * 10)
    assert b"".join(iter_kernel_log(f)) == b"a\n" * 10
    assert b"".join(iter_kernel_log("-", stdin=io.BytesIO(b"xyz"))) == b"xyz"
    with pytest.raises(SourceUnavailable, match="nope"):
        list(iter_kernel_log(tmp_path / "nope"))
    if os.geteuid() != 0:
        locked = tmp_path / "locked.log"
        locked.write_text("x")
        locked.chmod(0)
        with pytest.raises(SourceUnavailable, match="Permission denied"):
            list(iter_kernel_log(locked))


def test_dev_kmsg_when_readable():
    dev = Path("/dev/kmsg")
    try:
        chunks = list(iter_kernel_log(dev))
    except SourceUnavailable as exc:
        assert "/dev/kmsg" in str(exc)  # e.g. dmesg_restrict in a container: a clear message
        return
    text = b"".join(chunks)
    assert not text or text.split(b"\n")[0].count(b",") >= 3  # raw records: pri,seq,usec,flags;


def test_summary_groups_a_burst(realdata, capsys):
    path = realdata / "kernel_logs/gpud/pkg_dmesg__dmesg.decode.iso.log.0"
    rc, out, _ = run([str(path), "--summary", "--json"], capsys)
    rows = [json.loads(x) for x in out.splitlines()]
    assert rc == 1
    assert [(r["kind"], r["code"], r["pci"], r["count"], r["severity"]) for r in rows] == [
        ("xid", 13, "0000:38:00.0", 629, "warning"), ("xid", 43, "0000:38:00.0", 7, "info")]
    assert rows[0]["first"] == "2025-01-21T02:21:33.498559+00:00"
    assert rows[0]["last"] == "2025-01-21T04:41:44.285147+00:00"
    assert rows[0]["first_line_no"] == 1
    rc, out, _ = run([str(path), "--summary"], capsys)
    assert "629" in out and "ROBUST_CHANNEL_GR_EXCEPTION" in out
