"""Per-node agent tokens: a token scoped to its node name posts that node's reports only (another
node's: 403), can do nothing else; rotation = two lines for a node, then drop the old one."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from minutiae.controller.http.agent_tokens import AgentTokens, parse_agent_tokens, token_hash
from minutiae.controller.http.api import make_app
from minutiae.controller.policy import load_policy
from minutiae.controller.service import Controller
from minutiae.controller.store import Store
from minutiae.errors import ConfigError
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock
from minutiae.testing.limits import memory_cap

ADMIN = "admin-token-0123456789abcdef"
T1, T1_NEW, T2 = "gpu001-token-aaaaaaaaaaaa", "gpu001-token-rotated-bbbb", "gpu002-token-cccccccccccc"


def _rep(node: str) -> dict[str, object]:
    return {"node": node, "status": "ok", "domains": {"rack": "r1"},
            "checks": [{"check": "gpu", "status": "ok", "findings": []}]}


def _h(t: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {t}"}


def test_a_nodes_token_posts_its_own_reports_only(tmp_path: Path) -> None:
    f = tmp_path / "agent-tokens"
    f.write_text(f"# node  token hash\ngpu001 sha256:{token_hash(T1)}\ngpu002 {T2}\n")
    ctl = Controller(Store(tmp_path / "c.db"), RecordingBackend(name="slurm"), load_policy(),
                     FakeClock())
    c = TestClient(make_app(ctl, ADMIN, agent_tokens=AgentTokens(f)))
    assert c.post("/v1/reports", json=_rep("gpu001"), headers=_h(T1)).status_code == 202
    assert c.post("/v1/reports", json=_rep("gpu002"), headers=_h(T2)).status_code == 202
    r = c.post("/v1/reports", json=_rep("gpu002"), headers=_h(T1))
    assert r.status_code == 403 and "scoped to node gpu001" in r.json()["detail"]
    assert c.post("/v1/reports", json=_rep("gpu003"), headers=_h(ADMIN)).status_code == 202
    assert c.post("/v1/reports", json=_rep("gpu001"), headers=_h("nope" * 5)).status_code == 401
    assert c.post("/v1/pause", json={"reason": "x"}, headers=_h(T1)).status_code == 401
    assert set(ctl.intake.reports) == {"gpu001", "gpu002", "gpu003"}
    # rotation: the new token beside the old, then the old line removed
    f.write_text(f"gpu001 sha256:{token_hash(T1)}\ngpu001 sha256:{token_hash(T1_NEW)}\n")
    os.utime(f, (time.time() + 5, time.time() + 5))
    time.sleep(1.1)
    assert c.post("/v1/reports", json=_rep("gpu001"), headers=_h(T1_NEW)).status_code == 202
    assert c.post("/v1/reports", json=_rep("gpu001"), headers=_h(T1)).status_code == 202
    f.write_text(f"gpu001 sha256:{token_hash(T1_NEW)}\n")
    os.utime(f, (time.time() + 10, time.time() + 10))
    time.sleep(1.1)
    assert c.post("/v1/reports", json=_rep("gpu001"), headers=_h(T1)).status_code == 401
    assert c.post("/v1/reports", json=_rep("gpu001"), headers=_h(T1_NEW)).status_code == 202


@pytest.mark.parametrize(("text", "why"), [
    ("gpu001\n", "expected"), ("gpu;1 sha256:" + "0" * 64 + "\n", "invalid node name"),
    ("gpu001 short\n", "under 16"),
])
def test_bad_token_files_name_the_line(text: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        parse_agent_tokens(text, "agent-tokens")


def test_an_endless_or_binary_tokens_file_is_refused_bounded(tmp_path: Path) -> None:
    """On main /dev/zero was read whole (a MemoryError traceback out of serve) and a binary
    file went to the line parser."""
    with memory_cap(), pytest.raises(  # main: a MemoryError, not the machine
            ConfigError, match="/dev/zero: cannot read agent tokens: binary data"):
        AgentTokens("/dev/zero")
    p = tmp_path / "tokens"
    p.write_bytes(b"gpu001 " + b"\0" * 40)
    with pytest.raises(ConfigError, match="binary data"):
        AgentTokens(p)
