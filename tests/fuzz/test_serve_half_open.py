"""Half-open connections cannot starve a real ``minutiae serve`` (issue 16 item 6): with the
server at ``ulimit -n 256``, 300 sockets that connect and send nothing (or half a header
block) used to be held forever, and a real report then never got an answer. The header-read
deadline closes them; the connection cap keeps descriptors for the store."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from minutiae.controller.run import connection_cap

TOKEN = "half-open-token-0123456789"
REPORT = {"node": "gpu001", "status": "ok", "checks": [{"check": "gpu", "status": "ok"}]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def post_report(url: str, timeout: float) -> int:
    """The report's HTTP status, retried as the agent does while the connection is refused or
    reset (libuv resets what it cannot accept at EMFILE) until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return post_once(url, max(0.5, deadline - time.monotonic()))
        except (ConnectionError, urllib.error.URLError, TimeoutError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.25)


def post_once(url: str, timeout: float) -> int:
    req = urllib.request.Request(f"{url}/v1/reports", data=json.dumps(REPORT).encode(),
                                 headers={"Authorization": f"Bearer {TOKEN}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def start_serve(tmp_path: Path, header_timeout: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()

    def low_nofile() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - the process keeps it
    p = subprocess.Popen(
        [sys.executable, "-m", "minutiae.cli.main", "serve", "--db", str(tmp_path / "c.db"),
         "--listen", f"127.0.0.1:{port}", "--backend", "dry-run", "--interval", "1"],
        stdout=log, stderr=subprocess.STDOUT, preexec_fn=low_nofile, cwd=tmp_path,
        env={**os.environ, "MINUTIAE_TOKEN": TOKEN, "MINUTIAE_LOG_JSON": "0",
             "MINUTIAE_HEADER_TIMEOUT_S": header_timeout})
    url = f"http://127.0.0.1:{port}"
    # 90 s: in a clean-clone run at load 15 on 2 cores, 30 s passed before serve's first line
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and p.poll() is None:
        try:
            urllib.request.urlopen(f"{url}/healthz", timeout=2).close()
            return p, url
        except OSError:
            time.sleep(0.2)
    p.kill()
    raise AssertionError(f"serve exited {p.poll()} or did not answer in 90 s: "
                         + (tmp_path / "serve.log").read_text())


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    p, url = start_serve(tmp_path, "2")
    yield p, url
    p.kill()
    p.wait()


def half_open(url: str, n: int) -> list[socket.socket]:
    port = int(url.rsplit(":", 1)[1])
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if i % 2:   # half a header block, never finished (slowloris)
            s.sendall(b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nContent-Type: appl")
        socks.append(s)
    return socks


def test_300_half_open_sockets_do_not_starve_a_real_report(
        serve: tuple[subprocess.Popen[bytes], str]) -> None:
    p, url = serve
    socks = half_open(url, 300)
    try:
        t0 = time.monotonic()
        code = post_report(url, timeout=15)
        took = time.monotonic() - t0
        assert code == 202, code
        assert took < 12, took
        # the server closed the idle ones itself (EOF, not a timeout here)
        s = socks[0]
        s.settimeout(5)
        assert s.recv(1) == b""
    finally:
        for s in socks:
            s.close()
    assert p.poll() is None
    assert post_report(url, timeout=5) == 202


def test_an_oversized_header_block_is_dropped(serve: tuple[subprocess.Popen[bytes], str]) -> None:
    _, url = serve
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        try:
            for _ in range(200):
                s.sendall(b"X-Pad: " + b"a" * 1000 + b"\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        s.settimeout(5)
        with contextlib.suppress(ConnectionResetError):
            assert s.recv(1) == b""


@pytest.mark.parametrize("size", [70_000, 300_000, 900_000])
def test_headers_and_a_large_body_in_one_write_are_answered(
        serve: tuple[subprocess.Popen[bytes], str], size: int) -> None:
    """The header cap counts the header block only: a report whose headers and body arrive in
    one read (what one sendall of both gives) was dropped without a response when the read
    passed 64 KiB (the 'connection closed without a response' of the schemathesis run)."""
    _, url = serve
    port = int(url.rsplit(":", 1)[1])
    body = json.dumps({"node": "n1", "pad": "a" * size}).encode()
    head = (f"POST /v1/reports HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(head + body)
        status = s.recv(64).split(b"\r\n")[0]
    assert status.startswith(b"HTTP/1.1 "), status
    assert int(status.split()[1]) < 500, status


def test_the_connection_cap_leaves_descriptors_for_the_store() -> None:
    assert connection_cap(256) == 192
    assert connection_cap(1 << 20) == 4096
    assert connection_cap(10) == 8
