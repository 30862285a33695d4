"""``minutiae logscan`` at fleet scale (issue 16 item 2): the default table aggregates repeated
findings by (kind, code, device, rule); ``--json`` streams, ``--json --aggregate`` gives one object
per group; ``--min-severity``; a site ``--rules`` file adds to the catalog; endless and device
inputs end with one line and exit 3 in bounded memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from minutiae.cli.main import main

# nvidia-peermem's benign line (NVIDIA/open-gpu-kernel-modules issues: printed on every MR
# deregistration) repeated, plus two real faults on two GPUs.
PEERMEM = ("[ {t}.000001] nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid "
           "context, skipping further processing\n")
XID79 = "[ {t}.000002] NVRM: Xid (PCI:0000:44:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
XID13 = "[ {t}.000003] NVRM: Xid (PCI:0000:9b:00): 13, pid=1, Graphics SM Warp Exception\n"


def _log(tmp_path: Path) -> Path:
    lines = []
    for t in range(1000):
        lines.append(PEERMEM.format(t=t + 10))
        if t % 100 == 0:
            lines.append(XID13.format(t=t + 10))
    lines.append(XID79.format(t=2000))
    p = tmp_path / "kern.log"
    p.write_text("".join(lines))
    return p


def run(argv: list[str], capsys) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    rc = main(["logscan", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_default_table_is_one_row_per_group(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    rc, out, _ = run([str(_log(tmp_path))], capsys)
    assert rc == 2
    rows = [line for line in out.splitlines() if "│" in line and "count" not in line]
    assert len(rows) == 3, out  # xid 79, xid 13 (10x), peermem (1000x)
    assert any("1000" in r and "peermem_error" in r for r in rows)
    assert any(r.lstrip("│ ").startswith("10 ") and "xid" in r for r in rows)
    assert "1011 findings (1000 info, 10 warning, 1 critical); the node needs: reboot" in out


def test_json_streams_events_and_aggregate_gives_groups(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    log = str(_log(tmp_path))
    rc, out, _ = run([log, "--json"], capsys)
    assert rc == 2 and len(out.splitlines()) == 1011
    rc, out, _ = run([log, "--json", "--aggregate"], capsys)
    groups = [json.loads(x) for x in out.splitlines()]
    assert [(g["kind"], g["code"], g["pci"], g["count"], g["rule"]) for g in groups] == [
        ("xid", 79, "0000:44:00.0", 1, "xid"), ("xid", 13, "0000:9b:00.0", 10, "xid"),
        ("peermem_error", None, None, 1000, "peermem-invalid-context")]
    assert groups[1]["first_line_no"] == 2 and groups[1]["last_line_no"] == 911
    assert groups[2]["example"].startswith("[ 10.000001] nvidia-peermem")


def test_min_severity_filters_output_and_exit_code(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    log = str(_log(tmp_path))
    rc, out, _ = run([log, "--json", "--min-severity", "warning"], capsys)
    rows = [json.loads(x) for x in out.splitlines()]
    assert rc == 2 and len(rows) == 11 and {r["severity"] for r in rows} == {"warning", "critical"}
    rc, out, _ = run([log, "--summary", "--min-severity", "critical"], capsys)
    assert rc == 2 and "1 findings (1 critical)" in out and "peermem" not in out


def test_site_rules_add_to_the_catalog_without_covering_every_kind(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    site = tmp_path / "site.toml"  # no require_all_kinds line: docs say a site file adds rules
    site.write_text('[[rule]]\nid = "site-ipmi"\nkind = "bmc_sel"\nkeywords = ["ipmi_si"]\n'
                    'pattern = "ipmi_si .* Could not"\nseverity = "warning"\naction = "none"\n'
                    'message = "BMC interface problem"\n'
                    'examples = ["[ 3.0] ipmi_si dmi-ipmi-si.0: Could not set up I/O space"]\n')
    log = tmp_path / "k.log"
    log.write_text("[ 3.0] ipmi_si dmi-ipmi-si.0: Could not set up I/O space\n"
                   + XID13.format(t=4))
    rc, out, _ = run([str(log), "--rules", str(site), "--json"], capsys)
    assert rc == 1 and [json.loads(x)["kind"] for x in out.splitlines()] == ["bmc_sel", "xid"]
    rc, _, err = run([str(log), "--rules", str(tmp_path)], capsys)
    assert rc == 3 and str(tmp_path) in err and "Traceback" not in err


def _cli(args: list[str], stdin: bytes | None = None, *, shell_in: str | None = None) -> subprocess.CompletedProcess[bytes]:
    exe = str(Path(sys.executable).with_name("minutiae"))
    if shell_in is not None:  # an endless producer piped in; memory capped for the scan
        return subprocess.run(["bash", "-c", f"ulimit -v 2000000; {shell_in} | {exe} logscan -"],
                              capture_output=True, timeout=120, check=False)
    return subprocess.run(["bash", "-c", f"ulimit -v 2000000; exec {exe} logscan {' '.join(args)}"],
                          input=stdin, capture_output=True, timeout=120, check=False)


def test_devices_and_endless_inputs_are_one_line_exit_3() -> None:
    for proc in (_cli(["/dev/zero"]), _cli(["-"], shell_in="cat /dev/zero"),
                 _cli(["-"], shell_in="tr '\\0' 'a' < /dev/zero")):
        err = proc.stderr.decode()
        assert proc.returncode == 3, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_nul_bytes_inside_a_log_are_read(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "kern.log"  # a kern.log after a crash: a run of NULs, then the next boot
    log.write_bytes(XID13.format(t=1).encode() + b"\0" * 100_000 + b"\n" + XID79.format(t=2).encode())
    rc, out, _ = run([str(log), "--json"], capsys)
    assert rc == 2 and [json.loads(x)["code"] for x in out.splitlines()] == [13, 79]
