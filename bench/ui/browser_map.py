"""The fleet map of 20,000 nodes in Debian's Chromium (Playwright, headless): time from
navigation to all tiles on screen, beside the time to load ``/ui/fragments/map`` alone with
httpx in the same process (the baseline); median of 5, machine load while measuring.

    .venv/bin/python bench/ui/browser_map.py [--nodes 20000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

from minutiae.testing.serve import ServeProcess

TOKEN = "bench-token-0123456789abcdef"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def _post(url: str, lo: int, hi: int) -> None:
    h = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(timeout=30) as c:
        for i in range(lo, hi):
            c.post(url + "/v1/reports", headers=h, json={
                "node": f"gpu{i:05d}", "status": "ok",
                "domains": {"rack": f"r{i // 32:04d}", "nvl_domain": f"nvl{i // 72:04d}"},
                "checks": [{"check": "gpu", "status": "ok", "findings": []}]})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=20_000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d, \
            ServeProcess(Path(d), TOKEN, "--backend", "dry-run", "--interval", "2") as ctl:
        step = a.nodes // 4
        with ThreadPoolExecutor(4) as ex:
            list(ex.map(lambda k: _post(ctl.url, k * step, (k + 1) * step), range(4)))
        load0 = os.getloadavg()
        base, browser = [], []
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path="/usr/bin/chromium", args=ARGS)
            page = b.new_page(viewport={"width": 1400, "height": 900})
            for _ in range(5):
                t0 = time.perf_counter()
                httpx.get(ctl.url + "/ui/fragments/map", timeout=30)
                base.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                page.goto(ctl.url + "/ui")
                page.wait_for_function(f"document.querySelectorAll('#map .t').length == "
                                       f"{4 * step}", timeout=30000)
                page.evaluate("() => new Promise(r => requestAnimationFrame(() => r(1)))")
                browser.append(time.perf_counter() - t0)
            b.close()
        load1 = os.getloadavg()
    mb, mr = statistics.median(base), statistics.median(browser)
    print(f"{4 * step} nodes; load {load0[0]:.2f} -> {load1[0]:.2f} (cores {os.cpu_count()})")
    print(f"map fragment over HTTP (baseline): median {1e3 * mb:.0f} ms")
    print(f"/ui in Chromium, all tiles painted: median {1e3 * mr:.0f} ms "
          f"(max {1e3 * max(browser):.0f}; {mr / mb:.1f}x the fragment alone)")


if __name__ == "__main__":
    main()
