"""A local HTTP server (stdlib http.server in a thread on 127.0.0.1) standing in for a Slack
incoming webhook or any JSON webhook in tests."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Endpoint:
    """Records POSTed bodies; answers from ``script`` (status, body, headers) then 200 "ok".
    Status 0 drops the connection without an answer."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []  # accepted (2xx) posts only
        self.attempts = 0
        self.headers: list[dict[str, str]] = []
        self.script: list[tuple[int, str, dict[str, str]]] = []
        ep = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                status, text, hdrs = ep.script.pop(0) if ep.script else (200, "ok", {})
                ep.attempts += 1
                if status == 0:
                    self.close_connection = True
                    self.connection.close()
                    return
                if status < 300:
                    ep.bodies.append(body)
                    ep.headers.append(dict(self.headers.items()))
                self.send_response(status)
                for k, v in hdrs.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text.encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/services/T000/B000/XXXX"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    @property
    def posted(self) -> list[dict[str, Any]]:
        return [json.loads(b) for b in self.bodies]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
