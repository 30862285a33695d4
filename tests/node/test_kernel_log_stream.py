"""``check`` reads a kernel-log file as it parses it: memory stays one chunk whatever the file's
size (it held every chunk since the cursor: a 2 GB kern.log was 2 GB of RSS), nothing is lost
(a finding at the first and at the last line), and the cursor still marks the file's end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from peak_rss import CHILD_SNIPPET

XID = ("[ 1234.5678] NVRM: Xid (PCI:0000:{bus}:00): 79, pid=1234, name=python, "
       "GPU has fallen off the bus.\n")
BENIGN = "[ 1234.5678] eth0: renamed from veth{:08x} to keep this line about a hundred bytes\n"


def test_a_large_log_is_streamed_with_findings_at_both_ends(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    lines = 1_200_000  # ~100 MB
    with log.open("w") as fh:
        fh.write(XID.format(bus="1b"))
        block = "".join(BENIGN.format(i) for i in range(10_000))
        for _ in range(lines // 10_000):
            fh.write(block)
        fh.write(XID.format(bus="9a"))
    size = log.stat().st_size
    code = CHILD_SNIPPET + f"""
import json
from pathlib import Path
from minutiae.clock import SystemClock
from minutiae.node.memory import CheckMemory
from minutiae.node.sources.kernel_log.parse import parse_chunks
from minutiae.rules.log_findings import findings_from_events
list(findings_from_events(parse_chunks([b"warm-up\\n"])))
from minutiae.node.sources.kernel_log.source import check_kernel_log
mem = CheckMemory()
reset_peak()
base = peak_kib()
res = check_kernel_log(Path({str(log)!r}), None, mem, SystemClock(), "n1")
grown = peak_kib() - base
print(json.dumps({{"grown_kib": grown, "status": str(res.status), "events": mem.log_events,
                  "offset": mem.log_cursor["offset"],
                  "buses": sorted(str(f.component) for f in res.findings if f.kind == "xid")}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         timeout=900)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["events"] == lines + 2 and got["offset"] == size
    assert len(got["buses"]) == 2 and "1b" in got["buses"][0].lower() + got["buses"][1].lower()
    assert got["grown_kib"] < 40 * 1024, got  # the file is ~100 MB; a chunk is 1 MiB
