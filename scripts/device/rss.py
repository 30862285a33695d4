"""Peak RSS (VmHWM via ru_maxrss) of each command below, each in its own wrapper process, so what
NVML itself costs the agent can be told from the interpreter's and minutiae's own share.

Usage: PYTHONPATH=src python3 scripts/device/rss.py [XML_CAPTURE]
"""

from __future__ import annotations

import subprocess
import sys

XML = sys.argv[1] if len(sys.argv) > 1 else "tests/data/h200/nvidia-smi-q-x.xml"
PY = sys.executable
M = [PY, "-m", "minutiae.cli.main"]
CASES = {
    "python -c pass": [PY, "-c", "pass"],
    "import pynvml": [PY, "-c", "import pynvml"],
    "pynvml.nvmlInit()": [PY, "-c", "import pynvml; pynvml.nvmlInit(); pynvml.nvmlShutdown()"],
    "check, capture, no NVML": [*M, "check", "--json", "--no-nvml", "--nvidia-smi-xml", XML, "--kmsg", ""],
    "check, live NVML": [*M, "check", "--json", "--kmsg", ""],
    "agent 3 cycles, capture": [*M, "agent", "--interval", "1", "--cycles", "3", "--no-nvml",
                                "--nvidia-smi-xml", XML, "--metrics-listen", "", "--kmsg", "",
                                "--state-dir", "/tmp/rss-agent-a"],
    "agent 3 cycles, live NVML": [*M, "agent", "--interval", "1", "--cycles", "3", "--metrics-listen", "",
                                  "--kmsg", "", "--state-dir", "/tmp/rss-agent-b"],
}
WRAP = ("import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
for name, cmd in CASES.items():
    kib = subprocess.run([PY, "-c", WRAP, *cmd], capture_output=True, text=True,  # noqa: S603 - fixed argv
                         check=True).stdout.strip()
    print(f"{name:28s} {int(kib) / 1024:6.1f} MiB")
