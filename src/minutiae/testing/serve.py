"""Run a real ``minutiae serve`` subprocess for tests and benchmarks (free port, temp store,
waits for /healthz; ``kill9()`` for crash tests)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServeProcess:
    def __init__(self, workdir: Path, token: str, *args: str, port: int | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.token = token
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.db = self.workdir / "controller.db"
        self.args = args
        self.env = {**os.environ, "MINUTIAE_TOKEN": token, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.workdir / "serve.log"

    def start(self, timeout_s: float = 30.0) -> ServeProcess:
        argv = [sys.executable, "-m", "minutiae.cli.main", "serve", "--listen",
                f"127.0.0.1:{self.port}", "--db", str(self.db), *self.args]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,  # noqa: S603
                                         env=self.env, cwd=self.workdir)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"minutiae serve exited {self.proc.returncode}: "
                                   f"{self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"minutiae serve did not answer on {self.url}: "
                           f"{self.log.read_text()[-2000:]}")

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill9()

    def __enter__(self) -> ServeProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}
