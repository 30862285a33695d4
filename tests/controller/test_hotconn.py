"""The ingest hot path at the connection (``minutiae.controller.http.hotconn``): agents'
``POST /v1/reports`` answered from uvicorn's httptools callbacks keep every guarantee of the
ASGI fast path — acknowledge after store (503 when the store cannot take it), token, body
limits, body deadline, hostile JSON, ``Expect: 100-continue``, HTTP/1.0, pipelined requests
answered in order — driven through the real protocol class ``minutiae serve`` uses (uvicorn's
config and server state; a transport that records what is written), and once through a real
``minutiae serve`` on a socket."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from flaky_store import FlakyStore
from uvicorn.config import Config
from uvicorn.server import ServerState

from minutiae.controller.http.api import make_app
from minutiae.controller.http.hotconn import HotProtocol
from minutiae.controller.policy import load_policy
from minutiae.controller.run import guarded_protocol
from minutiae.controller.service import Controller
from minutiae.controller.store import Store
from minutiae.schedulers.recording import RecordingBackend
from minutiae.testing import FakeClock
from minutiae.testing.serve import ServeProcess

TOKEN = "t0ken-for-hotconn-0123456789"


def report(node: str) -> bytes:
    return json.dumps({"node": node, "status": "ok", "checks": [
        {"check": "gpu", "status": "ok", "findings": []}], "agent": {"version": "t"}}).encode()


def post(body: bytes, *, token: str = TOKEN, path: str = "/v1/reports", version: str = "1.1",
         extra: str = "", length: int | None = None) -> bytes:
    return (f"POST {path} HTTP/{version}\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            f"Content-Type: application/json\r\n{extra}Content-Length: "
            f"{len(body) if length is None else length}\r\n\r\n").encode() + body


class Wire(asyncio.Transport):
    """A connection's transport: what the server wrote, and whether it closed."""

    def __init__(self) -> None:
        super().__init__()
        self.out = b""
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8470), "peername": ("127.0.0.1", 5555)}.get(
            name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.out += bytes(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        return None

    def resume_reading(self) -> None:
        return None

    def answers(self) -> list[tuple[int, dict[str, str], bytes]]:
        """Every response written so far: (status, headers, body)."""
        out, rest = [], self.out
        while rest:
            head, _, rest = rest.partition(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            hdrs = {k.lower(): v for k, v in (ln.split(": ", 1) for ln in lines[1:])}
            n = int(hdrs.get("content-length", "0"))
            out.append((int(lines[0].split()[1]), hdrs, rest[:n]))
            rest = rest[n:]
        return out


Conn = Callable[[], tuple[HotProtocol, Wire]]


def serving(ctl: Controller, test: Callable[[Conn, Any], Coroutine[Any, Any, None]]) -> None:
    """Run ``test(connect, app)`` on an event loop, inside the app's lifespan (its writer
    thread stores the reports), with ``minutiae serve``'s protocol class."""
    app = make_app(ctl, TOKEN)

    async def main() -> None:
        cfg = Config(app, http=guarded_protocol(10.0), lifespan="off", proxy_headers=False,
                     log_level="warning")
        cfg.load()
        state = ServerState()

        def connect() -> tuple[HotProtocol, Wire]:
            p = cfg.http_protocol_class(config=cfg, server_state=state, app_state={},
                                        _loop=asyncio.get_running_loop())
            w = Wire()
            p.connection_made(w)
            assert isinstance(p, HotProtocol)
            return p, w

        async with app.router.lifespan_context(app):
            await test(connect, app)

    asyncio.run(main())


async def until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.005)):
        if cond():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("timed out")


def controller(tmp_path: Path, store: Store | None = None) -> Controller:
    return Controller(store or Store(tmp_path / "c.db"), RecordingBackend(name="slurm"),
                      load_policy(), FakeClock())


def stored(path: Path) -> set[str]:
    return {n for n, _t, _r, _d in Store(path).load_reports()}


def test_a_report_is_answered_once_stored_and_the_connection_kept(tmp_path: Path) -> None:
    ctl = controller(tmp_path)

    async def go(connect: Conn, app: Any) -> None:
        p, w = connect()
        p.data_received(post(report("gpu001")))
        await until(lambda: len(w.answers()) == 1)
        assert "gpu001" in stored(tmp_path / "c.db")       # a 202 means stored
        code, hdrs, body = w.answers()[0]
        assert code == 202 and hdrs["content-type"] == "application/json"
        assert json.loads(body)["node"] == "gpu001" and len(json.loads(body)["digest"]) == 32
        p.data_received(post(report("gpu002"))[:40])        # split reads: the body timer
        p.data_received(post(report("gpu002"))[40:])
        await until(lambda: len(w.answers()) == 2)
        assert w.answers()[1][0] == 202 and not w.closed
        assert ctl.counters.reports == 2

    serving(ctl, go)


def test_the_store_down_is_a_503_and_the_report_is_kept(tmp_path: Path) -> None:
    st = FlakyStore(tmp_path / "c.db")
    ctl = controller(tmp_path, st)

    async def go(connect: Conn, app: Any) -> None:
        p, w = connect()
        st.down = True
        p.data_received(post(report("gpu001")))
        await until(lambda: len(w.answers()) == 1)
        code, _h, body = w.answers()[0]
        assert code == 503 and "not stored" in json.loads(body)["detail"]
        assert "gpu001" not in stored(tmp_path / "c.db")
        st.down = False
        p.data_received(post(report("gpu001")))
        await until(lambda: len(w.answers()) == 2)
        assert w.answers()[1][0] == 202 and "gpu001" in stored(tmp_path / "c.db")

    serving(ctl, go)


def test_refusals_token_size_hostile_json(tmp_path: Path) -> None:
    ctl = controller(tmp_path)

    async def go(connect: Conn, app: Any) -> None:
        p, w = connect()
        p.data_received(post(report("gpu001"), token="wrong-token-0123456789"))
        p.data_received(post(b'{"node": "gpu001", "status": NaN}'))
        p.data_received(post(b"[" * 100 + b"]" * 100))
        p.data_received(post(b"", length=2 << 20))            # the body never comes
        await until(lambda: len(w.answers()) == 4)
        (c1, h1, _), (c2, _, b2), (c3, _, b3), (c4, _, _) = w.answers()
        assert (c1, h1["www-authenticate"]) == (401, "Bearer")
        assert c2 == 422 and "NaN" in json.loads(b2)["detail"]
        assert c3 == 422 and "nested deeper" in json.loads(b3)["detail"]
        assert c4 == 413
        p2, w2 = connect()   # a chunked body over the limit
        p2.data_received(b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                         + TOKEN.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"a" * 65536
        for _ in range(20):
            p2.data_received(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        await until(lambda: len(w2.answers()) == 1)
        assert w2.answers()[0][0] == 413
        assert stored(tmp_path / "c.db") == set()
        assert app.fast is not None

    serving(ctl, go)


def test_a_stalled_body_is_a_408_and_closed(tmp_path: Path) -> None:
    ctl = controller(tmp_path)

    async def go(connect: Conn, app: Any) -> None:
        app.fast.body_timeout = 0.2
        p, w = connect()
        p.data_received(post(report("gpu001"))[:-10])
        await until(lambda: w.closed)
        assert [a[0] for a in w.answers()] == [408]
        assert w.answers()[0][1]["connection"] == "close"

    serving(ctl, go)


def test_pipelined_continue_http10_and_query(tmp_path: Path) -> None:
    ctl = controller(tmp_path)

    async def go(connect: Conn, app: Any) -> None:
        p, w = connect()   # three requests in one read: answered in order
        p.data_received(post(report("gpu001")) + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                        + post(report("gpu002")))
        await until(lambda: len(w.answers()) == 3)
        (c1, _, b1), (c2, _, _), (c3, _, b3) = w.answers()
        assert (c1, c2, c3) == (202, 200, 202)
        assert json.loads(b1)["node"] == "gpu001" and json.loads(b3)["node"] == "gpu002"
        p2, w2 = connect()
        p2.data_received(post(b"", extra="Expect: 100-continue\r\n",
                              length=len(report("gpu003"))))
        assert w2.out.startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        w2.out = b""
        p2.data_received(report("gpu003"))
        await until(lambda: len(w2.answers()) == 1)
        assert w2.answers()[0][0] == 202
        p3, w3 = connect()
        p3.data_received(post(report("gpu004"), version="1.0"))
        await until(lambda: w3.closed)
        assert w3.answers()[0][0] == 202 and w3.answers()[0][1]["connection"] == "close"
        p4, w4 = connect()   # not the exact target: the ASGI fast path, same answer
        p4.data_received(post(report("gpu005"), path="/v1/reports?from=test"))
        await until(lambda: len(w4.answers()) == 1)
        assert w4.answers()[0][0] == 202
        assert stored(tmp_path / "c.db") == {f"gpu00{i}" for i in range(1, 6)}

    serving(ctl, go)


def test_a_real_serve_answers_reports_on_a_kept_alive_socket(tmp_path: Path) -> None:
    with ServeProcess(tmp_path, TOKEN, "--backend", "dry-run", "--interval", "1",
                      env={"MINUTIAE_LOG_JSON": "0"}) as srv, \
            socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(post(report("gpu001")) + post(report("gpu002")))
        got = b""
        while got.count(b'"digest":') < 2:
            chunk = s.recv(65536)
            assert chunk, got
            got += chunk
        assert got.count(b"HTTP/1.1 202 Accepted") == 2
        assert b"\r\ndate: " in got   # uvicorn's default headers, as on every answer
        s.sendall(post(report("gpu003"), token="wrong-token-0123456789"))
        assert s.recv(65536).startswith(b"HTTP/1.1 401 Unauthorized")
    assert {"gpu001", "gpu002"} <= stored(tmp_path / "controller.db")
