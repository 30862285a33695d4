"""Where NVML's memory goes in a process: /proc/self/smaps_rollup (Rss, Pss, shared vs private,
anonymous) and the largest mappings by Rss, after import pynvml, after nvmlInit and after one
read_nvml. Usage: PYTHONPATH=src python3 scripts/device/nvml_memory.py"""

from __future__ import annotations

import importlib.metadata
import re


def rollup() -> str:
    keep = ("Rss", "Pss", "Shared_Clean", "Shared_Dirty", "Private_Clean", "Private_Dirty", "Anonymous")
    with open("/proc/self/smaps_rollup") as f:
        lines = f.read().splitlines()
    return " ".join(f"{k}={v.split()[0]}" for k, v in (line.split(":", 1) for line in lines[1:])
                    if k in keep)


def top(n: int = 8) -> list[str]:
    maps: dict[str, int] = {}
    name = ""
    with open("/proc/self/smaps") as f:
        text = f.read()
    for line in text.splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            parts = line.split(None, 5)
            name = parts[5].strip() if len(parts) > 5 else "[anon]"
        elif line.startswith("Rss:"):
            maps[name] = maps.get(name, 0) + int(line.split()[1])
    return [f"  {kib:7d} KiB {path}" for path, kib in sorted(maps.items(), key=lambda x: -x[1])[:n]]


print("nvidia-ml-py", importlib.metadata.version("nvidia-ml-py"))
print("start        ", rollup())
import pynvml  # noqa: E402

print("import pynvml", rollup(), pynvml.__file__)
pynvml.nvmlInit()
print("nvmlInit     ", rollup())
from minutiae.node.sources.nvml import read_nvml  # noqa: E402

read_nvml(pynvml)
print("read_nvml    ", rollup())
print("\n".join(top(12)))
