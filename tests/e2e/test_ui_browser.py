"""The web UI in a real browser: Debian's Chromium driven by Playwright (headless), against a
real ``minutiae serve`` fed by a real agent run (``minutiae agent`` on a real nvidia-smi capture
that lists 1 of 4 GPUs) and reports for the rest of the fleet. Screenshots go to
``$MINUTIAE_ARTEFACTS/ui`` (default ``build/test-artefacts/ui``, git-ignored)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from minutiae.testing.serve import ServeProcess

playwright = pytest.importorskip("playwright.sync_api")
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]
TOKEN = "ui-browser-token-0123456789abcdef"
ART = Path(os.environ.get("MINUTIAE_ARTEFACTS", "build/test-artefacts")) / "ui"
N = 200

pytestmark = [pytest.mark.slow]


@pytest.fixture(autouse=True)
def chromium() -> None:
    """Debian's Chromium: `make test` installs it (scripts/services/install.sh), so there a
    missing browser fails the test; elsewhere it skips, naming what is missing."""
    if not Path(CHROMIUM).exists():
        msg = "no /usr/bin/chromium (scripts/services/install.sh installs it)"
        if os.environ.get("MINUTIAE_REQUIRE_SERVICES") == "1":
            pytest.fail(msg)
        pytest.skip(msg)


def _report(i: int) -> dict[str, object]:
    return {"node": f"gpu{i:03d}", "status": "ok",
            "domains": {"rack": f"r{i // 20:02d}", "leaf": f"leaf{i // 50}"},
            "checks": [{"check": "gpu", "status": "ok", "findings": []}]}


@pytest.fixture
def serve(tmp_path: Path, realdata: Path) -> Iterator[ServeProcess]:
    ctl = ServeProcess(tmp_path / "ctl", TOKEN, "--backend", "dry-run", "--interval", "0.5")
    with ctl:
        with httpx.Client(timeout=10) as c:
            for i in range(1, N + 1):
                if i != 17:
                    r = c.post(f"{ctl.url}/v1/reports", json=_report(i), headers=ctl.headers)
                    assert r.status_code == 202
        tok = tmp_path / "token"
        tok.write_text(TOKEN)
        bad = realdata / "nvidia_smi/telegraf/a100-sxm4-v12.xml"   # 1 of 4 GPUs listed
        agent = subprocess.run(
            [sys.executable, "-m", "minutiae.cli.main", "agent", "--controller", ctl.url,
             "--token-file", str(tok), "--node", "gpu017", "--nvidia-smi-xml", str(bad),
             "--no-nvml", "--checks", "gpu", "--state-dir", str(tmp_path / "agent"),
             "--metrics-listen", "", "--domain", "rack=r00", "--cycles", "1"],
            capture_output=True, text=True, timeout=60)
        assert agent.returncode in (0, 2), agent.stderr
        yield ctl


def _wait_drained(ctl: ServeProcess) -> None:
    import time

    for _ in range(100):
        rows = httpx.get(f"{ctl.url}/v1/nodes", timeout=5).json()
        if any(r["node"] == "gpu017" and str(r.get("would")).startswith("drained")
               for r in rows):   # dry-run: drained in the controller's picture
            return
        time.sleep(0.2)
    raise AssertionError("gpu017 was not drained by the dry-run controller")


def test_map_node_pause_and_restart(serve: ServeProcess) -> None:
    _wait_drained(serve)
    ART.mkdir(parents=True, exist_ok=True)
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        errors: list[str] = []
        elsewhere: list[str] = []         # offline: nothing but the controller is asked
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: None if r.url.startswith(serve.url) or r.url.startswith(
            "data:") else elsewhere.append(r.url))
        page.goto(f"{serve.url}/ui")
        page.wait_for_selector("#map .t")
        assert page.locator("#map .t").count() == N
        assert "200 of 200 node(s)" in page.inner_text("#count")
        assert "200 nodes" in page.inner_text("#status")
        page.screenshot(path=str(ART / "1-map.png"), full_page=True)
        # search by hostlist, then back to the whole fleet
        page.fill("#q", "gpu[010-019]")
        page.wait_for_function("document.querySelectorAll('#map .t').length == 10")
        assert "10 of 200" in page.inner_text("#count")
        page.fill("#q", "")
        page.wait_for_function(f"document.querySelectorAll('#map .t').length == {N}")
        # clicking the drained node shows its evidence
        page.click('#map .t[data-n="gpu017"]')
        page.wait_for_selector("#node-name")
        assert page.inner_text("#node-name") == "gpu017"
        assert page.locator('#map .t.s-drained[data-n="gpu017"]').count() == 1
        assert "would be drained" in page.inner_text("#why")
        assert "gpu-fell-off-bus" in page.inner_text("#rule")
        assert "1 GPU(s) reported, but the driver says 4" in page.inner_text("#evidence")
        page.screenshot(path=str(ART / "2-node.png"), full_page=True)
        # read-only: no pause button; a forged POST without the session is refused
        assert page.locator("#pause").count() == 0
        code = page.evaluate("""async () => (await fetch('/ui/actions/pause',
            {method: 'POST', body: 'reason=x',
             headers: {'Content-Type': 'application/x-www-form-urlencoded'}})).status""")
        assert code == 401
        assert httpx.get(f"{serve.url}/v1/status").json()["paused"] is None
        # with the token: pause works
        page.fill('input[name="token"]', TOKEN)
        page.click("#login")
        page.wait_for_selector("#pause")
        # an action the server refuses says why in the page (a resolve needs a reason)
        page.click('#map .t[data-n="gpu017"]')
        page.wait_for_selector("#resolve")
        page.click("#resolve")
        page.wait_for_selector("#msg .refused")
        assert "reason is required" in page.inner_text("#msg")
        page.hover('#map .t[data-n="gpu017"]')
        assert page.inner_text("#hover") == "gpu017: unhealthy, would be drained (dry-run)"
        page.screenshot(path=str(ART / "3-refused-and-hover.png"), full_page=True)
        page.fill('#status input[name="reason"]', "browser test pause")
        page.click("#pause")
        page.wait_for_selector("#unpause")
        assert "browser test pause" in page.inner_text("#paused")
        assert "browser test pause" in httpx.get(f"{serve.url}/v1/status").json()[
            "paused"]["reason"]
        page.screenshot(path=str(ART / "4-paused.png"), full_page=True)
        # the controller restarts: the page says so, then carries on (session still valid)
        serve.stop()
        page.wait_for_selector("#offline.on", timeout=15000)
        page.screenshot(path=str(ART / "5-offline.png"), full_page=True)
        serve.start()
        page.wait_for_selector("#offline:not(.on)", state="attached", timeout=20000)
        page.wait_for_selector("#unpause", timeout=20000)    # the pause survived, session too
        page.click("#unpause")
        page.wait_for_selector("#pause")
        assert httpx.get(f"{serve.url}/v1/status").json()["paused"] is None
        assert page.locator("#map .t").count() == N
        page.screenshot(path=str(ART / "6-after-restart.png"), full_page=True)
        browser.close()
    assert not errors, errors
    assert not elsewhere, elsewhere
